"""The interface every peer engine adapter implements, and what the adapters share.

An :class:`Engine` is one peer engine bound to one decoded vocabulary; it
compiles a value set (or a JSON schema) and hands out :class:`Matcher` objects
that consume tokens, roll back and fill mask rows in triec's layout. One
module per engine implements it (:mod:`~triec.engines.llguidance`,
:mod:`~triec.engines.xgrammar`, :mod:`~triec.engines.outlines_core`), and
:func:`triec.engines.make_engine` picks one by name.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from triec.errors import EngineUnavailable, EngineUnsupported, TriecError
from triec.runtime.bitmask import last_word_mask, words_for

if TYPE_CHECKING:
    from triec.tokenizer.vocabulary import Vocabulary

ENGINES: tuple[str, ...] = ("llguidance", "xgrammar", "outlines-core")

ITEM_SEPARATOR = ", "
KEY_SEPARATOR = ": "
"""triec's compact JSON spelling (``{"a": 1, "b": 2}``): what every engine runs a schema in, and the schema
layer writes (:data:`triec.schema.shape.CONVENTION`)."""
_MODULES = {"llguidance": "llguidance", "xgrammar": "xgrammar", "outlines-core": "outlines_core"}
_DISTRIBUTIONS = {"llguidance": "llguidance", "xgrammar": "xgrammar", "outlines-core": "outlines_core"}


def install_hint(name: str) -> str:
    """The pip command that installs one engine (or all of them)."""
    return f"pip install {_DISTRIBUTIONS[name].replace('_', '-')}  (or pip install 'triec[verify]' for every engine)"


def is_installed(name: str) -> bool:
    """True when the engine's module can be imported (checked without importing it)."""
    return importlib.util.find_spec(_MODULES[name]) is not None


@functools.cache
def engine_version(name: str) -> str | None:
    """The installed distribution's version, or ``None`` (memoized: a metadata lookup costs about 10 ms)."""
    try:
        return importlib.metadata.version(_DISTRIBUTIONS[name])
    except importlib.metadata.PackageNotFoundError:
        return None


def check_name(name: str) -> None:
    """Raise :class:`TriecError` unless ``name`` is one of :data:`ENGINES`."""
    if name not in ENGINES:
        raise TriecError(f"unknown engine {name!r}; expected one of {', '.join(ENGINES)}")


def regex_literal(value: str) -> str:
    """A regex matching exactly ``value``: ASCII punctuation, space and controls as ``\\xHH``.

    Non-ASCII characters stay literal (none is a regex metacharacter), so the
    pattern's UTF-8 is the value's UTF-8. Works for Rust ``regex`` syntax
    (llguidance, outlines-core).
    """
    out = []
    for ch in value:
        if ch.isascii() and not ch.isalnum():
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join(out)


class Matcher(ABC):
    """One decoding session of an engine: consume tokens, roll back, fill a mask row."""

    @abstractmethod
    def consume(self, token: int) -> bool:
        """Advance by one token; False if the engine refuses it."""

    @abstractmethod
    def rollback(self, n: int = 1) -> None:
        """Undo the last ``n`` consumed tokens."""

    @abstractmethod
    def fill(self, row: np.ndarray) -> None:
        """Write the current state's mask into ``row`` (int32, ``ceil(vocab_size/32)`` words)."""


class Engine(ABC):
    """A peer engine bound to one decoded vocabulary.

    Constructing it builds the engine's tokenizer-level object (timed in
    :attr:`setup_seconds`); :meth:`compile` builds the grammar for a value set.
    """

    name: str = ""

    def __init__(self, vocab: Vocabulary) -> None:
        self.vocab = vocab
        self.words = words_for(vocab.vocab_size)
        t0 = time.perf_counter()
        self._setup()
        self.setup_seconds = time.perf_counter() - t0

    @property
    def version(self) -> str | None:
        return engine_version(self.name)

    @abstractmethod
    def _setup(self) -> None: ...

    @abstractmethod
    def compile(self, values: Sequence[str]) -> Any:
        """The engine's compiled grammar for the alternation of ``values``."""

    @abstractmethod
    def matcher(self, compiled: Any) -> Matcher:
        """A fresh matcher at the start state."""

    def compile_json_schema(self, schema: dict[str, Any]) -> Any:
        """The engine's own JSON-schema grammar, compact (no free whitespace; separators ``", "`` and ``": "``).

        Checks that triec's JSON spelling of values and schema instances is the
        engine's (docs/verify.md).
        """
        raise EngineUnsupported(f"{self.name}: no JSON-schema compiler adapter")

    def fill_batch(self, matchers: Sequence[Matcher], out: np.ndarray) -> None:
        """Fill ``out[i]`` for each matcher; engines with a parallel batch API override this."""
        for i, m in enumerate(matchers):
            m.fill(out[i])


def padded_tokens(vocab: Vocabulary) -> list[bytes]:
    """Bytes per id up to the mask width: ``b""`` past the tokenizer's ids (padding, never allowed)."""
    return list(vocab.token_bytes) + [b""] * (vocab.vocab_size - vocab.num_tokens)


def import_engine(module: str) -> Any:
    """Import an engine's Python module; :class:`EngineUnavailable` with the pip command when it is missing."""
    name = next(k for k, v in _MODULES.items() if v == module)
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise EngineUnavailable(f"{name} is not installed ({exc}); install it with: {install_hint(name)}") from exc


# ----------------------------------------------------------------------------- grammar drivers (the schema layer's)

GRAMMAR_CACHE = 512
"""Compiled grammars each driver keeps (least recently used out first); ``TRIEC_GRAMMAR_CACHE`` overrides.

A tool's compiled argument grammar holds 160-240 KiB of process memory with llguidance and 260-900 KiB with
xgrammar (docs/benchmarks.md, "Tool registries"): 512 bounds a driver at about 120 / 450 MiB, while a tool
pushed out costs 2-28 ms to compile again at its next call."""


@dataclass(frozen=True)
class GrammarSpec:
    """A JSON Schema (its canonical JSON text) and the literal texts one of which must follow it (none: nothing);
    or an xgrammar structural tag (``kind="structural_tag"``: the JSON text of one, which only xgrammar compiles)."""

    schema: str
    after: tuple[str, ...] = ()
    kind: str = "json"  # or "structural_tag": ``schema`` is an xgrammar structural tag (JSON text), xgrammar only
    whitespace: str = "compact"  # or "any": JSON with any whitespace between tokens (the engines' flexible mode)

    @property
    def key(self) -> str:
        parts: list[Any] = [self.schema, list(self.after)]
        if self.kind != "json" or self.whitespace != "compact":
            parts += [self.kind, self.whitespace]
        return json.dumps(parts, ensure_ascii=False)

    @property
    def sha256(self) -> str:
        return "sha256:" + hashlib.sha256(self.key.encode("utf-8")).hexdigest()


class EngineDriver(ABC):
    """One engine over one vocabulary: compile a grammar, start, feed bytes, probe, accept tokens, fill rows."""

    name: str = ""

    def __init__(self, vocab: Vocabulary) -> None:
        self.vocab = vocab
        self.words = words_for(vocab.vocab_size)
        self.byte_tokens = _byte_tokens(vocab)
        self._grammars: OrderedDict[str, Any] = OrderedDict()
        self.cache_size = int(os.environ.get("TRIEC_GRAMMAR_CACHE", GRAMMAR_CACHE))
        self.compiles = 0  # grammars compiled (cache misses), for reports
        self.compile_seconds: list[float] = []  # each compile's wall time, for reports and benchmarks

    def compile_spec(self, spec: GrammarSpec) -> Any:
        """The compiled grammar of ``spec``, from the driver's cache when it was compiled before."""
        found = self._grammars.get(spec.key)
        if found is not None:
            self._grammars.move_to_end(spec.key)
            return found
        t0 = time.perf_counter()
        found = self._compile_spec(spec)
        self.compile_seconds.append(time.perf_counter() - t0)
        self.compiles += 1
        self._grammars[spec.key] = found
        while len(self._grammars) > self.cache_size:
            self._grammars.popitem(last=False)
        return found

    def cached_grammars(self) -> int:
        return len(self._grammars)

    def compiled_grammars(self) -> list[Any]:
        """The engine's compiled grammars in the cache, oldest first (a benchmark sums their sizes)."""
        return list(self._grammars.values())

    def clear_cache(self) -> None:
        """Forget every compiled grammar: the next request for each compiles it again (cold measurements)."""
        self._grammars.clear()

    @abstractmethod
    def _compile_spec(self, spec: GrammarSpec) -> Any: ...

    @abstractmethod
    def probe(self, m: Any, data: bytes) -> bool:
        """Would ``data`` be accepted here? ``m`` is left unchanged."""

    @abstractmethod
    def forced(self, m: Any) -> bytes:
        """The bytes the grammar forces next (possibly none)."""

    @abstractmethod
    def compile(self, schema: dict[str, Any], whitespace: str = "compact") -> Any:
        """The engine on a JSON Schema: compact (``", "`` and ``": "``, nothing else) or any whitespace."""

    @abstractmethod
    def start(self, compiled: Any) -> Any: ...

    @abstractmethod
    def copy(self, m: Any) -> Any: ...

    @abstractmethod
    def feed(self, m: Any, data: bytes) -> bool:
        """Consume ``data``; False (state unspecified) when the engine refuses it."""

    @abstractmethod
    def feed_byte(self, m: Any, b: int) -> bool:
        """Consume one byte as one rollback step; False and no change when refused."""

    @abstractmethod
    def rollback(self, m: Any, n: int) -> None: ...

    @abstractmethod
    def accept(self, m: Any, token: int) -> bool:
        """Consume one token; False and no change when refused."""

    @abstractmethod
    def fill(self, m: Any, row: np.ndarray) -> None:
        """Write the whole row (int32, ``ceil(vocab_size / 32)`` words); no bit at or past ``vocab_size``."""

    @abstractmethod
    def is_terminated(self, m: Any) -> bool: ...

    def fill_many(self, handles: list[Any], buf: np.ndarray, rows: list[int]) -> None:
        """Fill ``buf[rows[i]]`` for each handle; engines with a parallel batch API override this."""
        for m, r in zip(handles, rows, strict=True):
            self.fill(m, buf[r])

    def version(self) -> str | None:
        return engine_version(self.name)

    def _clear_padding(self, row: np.ndarray) -> None:
        valid = last_word_mask(self.vocab.vocab_size)
        if valid != -1:
            row[-1] &= np.int32(valid)


def _byte_tokens(vocab: Vocabulary) -> dict[int, int]:
    out: dict[int, int] = {}
    for tid, b in enumerate(vocab.token_bytes):
        if len(b) == 1 and b[0] not in out:
            out[b[0]] = tid
    return out
