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
import importlib.metadata
import importlib.util
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from triec.errors import EngineUnavailable, EngineUnsupported, TriecError

if TYPE_CHECKING:
    from triec.tokenizer.vocabulary import Vocabulary

ENGINES: tuple[str, ...] = ("llguidance", "xgrammar", "outlines-core")
_MODULES = {"llguidance": "llguidance", "xgrammar": "xgrammar", "outlines-core": "outlines_core"}
_DISTRIBUTIONS = {"llguidance": "llguidance", "xgrammar": "xgrammar", "outlines-core": "outlines_core"}


def install_hint(name: str) -> str:
    """The pip command that installs one engine (or all of them)."""
    return f"pip install {_DISTRIBUTIONS[name].replace('_', '-')}  (or pip install 'triec[verify]' for every engine)"


def is_installed(name: str) -> bool:
    """True when the engine's module can be imported (checked without importing it)."""
    return importlib.util.find_spec(_MODULES[name]) is not None


@functools.lru_cache(maxsize=None)
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
        self.words = (vocab.vocab_size + 31) // 32
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
