"""Adapters that make the peer engines answer the same question triec does.

``triec verify`` and ``triec bench`` compare triec with llguidance, xgrammar and
outlines-core. A comparison means something only if every engine sees the same
problem, so each adapter builds its matcher from:

* the same decoded vocabulary: triec's :attr:`Vocabulary.token_bytes`, passed to
  the engine as raw bytes per id (no engine re-decodes the tokenizer). Ids with
  ``b""`` bytes (special tokens, EOS, control pieces) are special / never
  content, and ids from ``num_tokens`` to ``vocab_size`` are padding;
* the same EOS ids, allowed exactly where the prefix is a value;
* the same language: an alternation of the exact values, escaped so that every
  value matches byte for byte (values may hold any Unicode, newlines included,
  and may be prefixes of each other or empty);
* the same mask layout: int32 rows of ``ceil(vocab_size / 32)`` words, token j
  in bit ``j & 31`` of word ``j >> 5``.

docs/verify.md lists the conventions each engine needed. Engines are imported
lazily; a missing one raises :class:`EngineUnavailable` with the pip command.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import json
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np

from triec.errors import EngineUnavailable, EngineUnsupported, TriecError
from triec.vocabulary import Vocabulary

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


def _check_name(name: str) -> None:
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


def xgrammar_regex_literal(value: str) -> str:
    """A regex for xgrammar's ``compile_regex`` matching exactly ``value``: ASCII punctuation, space and controls as ``\\u00HH``.

    xgrammar reads ``\\x`` as many hex digits as follow (``\\x22a`` is U+022A),
    so the fixed-width ``\\u`` form is used instead.
    """
    return "".join(f"\\u{ord(ch):04x}" if ch.isascii() and not ch.isalnum() else ch for ch in value)


def ebnf_literal(value: str) -> str:
    """An xgrammar EBNF expression matching exactly ``value``.

    Quotes and backslash are escaped; an ASCII control character becomes its
    own ``"\\xHH"`` literal in a sequence, because xgrammar's ``\\x`` reads as
    many hex digits as follow (``"\\x0ab"`` would be U+00AB, not newline + b).
    """
    parts: list[str] = []
    cur: list[str] = []
    for ch in value:
        o = ord(ch)
        if o < 0x20 or o == 0x7F:
            if cur:
                parts.append('"' + "".join(cur) + '"')
                cur = []
            parts.append(f'"\\x{o:02x}"')
        else:
            cur.append("\\" + ch if ch in '"\\' else ch)
    if cur or not parts:
        parts.append('"' + "".join(cur) + '"')
    return parts[0] if len(parts) == 1 else "(" + " ".join(parts) + ")"


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


def _padded_tokens(vocab: Vocabulary) -> list[bytes]:
    return list(vocab.token_bytes) + [b""] * (vocab.vocab_size - vocab.num_tokens)


# ---------------------------------------------------------------- llguidance


class _LLTokenizerSource:
    """What ``llguidance.TokenizerWrapper`` reads: bytes per id, EOS, specials, an encoder.

    llguidance calls the encoder on short texts while computing masks (with an
    encoder that returns nothing every mask after the first token is empty), so
    it gets a greedy longest-match tokenizer over the same bytes: any token
    sequence that spells the text is acceptable to it.
    """

    def __init__(self, vocab: Vocabulary) -> None:
        self.tokens = _padded_tokens(vocab)
        self.eos_token_id = vocab.eos_token_ids[0]
        self.bos_token_id = None
        self.special_token_ids = [i for i, b in enumerate(self.tokens) if not b]
        self._ids: dict[bytes, int] = {}
        for tid, b in enumerate(vocab.token_bytes):
            if b and b not in self._ids:
                self._ids[b] = tid
        self._longest = max(map(len, self._ids), default=1)

    def __call__(self, text: bytes | str) -> list[int]:
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        out, i = [], 0
        while i < len(data):
            for n in range(min(self._longest, len(data) - i), 0, -1):
                tid = self._ids.get(data[i : i + n])
                if tid is not None:
                    out.append(tid)
                    i += n
                    break
            else:
                i += 1  # a byte no token spells: skip it (never part of a value's mask)
        return out


class _LLMatcher(Matcher):
    def __init__(self, m: Any) -> None:
        self.m = m

    def consume(self, token: int) -> bool:
        return bool(self.m.consume_token(int(token)))

    def rollback(self, n: int = 1) -> None:
        self.m.rollback(n)

    def fill(self, row: np.ndarray) -> None:
        self.m.unsafe_compute_mask_ptr(row.ctypes.data, row.size * 4)
        if self.m.is_error():
            raise TriecError(f"llguidance: {self.m.get_error()}")


class LLGuidanceEngine(Engine):
    """llguidance: ``LLTokenizer`` over our bytes, grammar = one regex alternation.

    The vocabulary is padded with ``b""`` ids up to ``vocab_size`` (llguidance
    ignores ``n_vocab`` larger than its token list) and every ``b""`` id is
    declared special; all EOS ids are passed, so all are allowed at accepting states.
    """

    name = "llguidance"

    def _setup(self) -> None:
        llg = _import("llguidance")
        self._llg = llg
        self.tokenizer = llg.LLTokenizer(
            llg.TokenizerWrapper(_LLTokenizerSource(self.vocab)), eos_token=list(self.vocab.eos_token_ids)
        )
        if self.tokenizer.vocab_size != self.vocab.vocab_size:
            raise TriecError(f"llguidance sees {self.tokenizer.vocab_size} tokens, expected {self.vocab.vocab_size}")
        self._executor: Any = None

    def grammar(self, values: Sequence[str]) -> str:
        alternation = "|".join(regex_literal(v) for v in values)
        # no_forcing: where the values force the next bytes, llguidance would otherwise
        # allow only the canonical tokenization of those bytes (after "a" in {"abc"}
        # only "bc", not "b"): a narrower mask than the language's.
        return self._llg.LLMatcher.grammar_from_lark(f'%llguidance {{"no_forcing": true}}\nstart: /({alternation})/')

    def compile(self, values: Sequence[str]) -> Any:
        return self._compile_grammar(self.grammar(values))

    def matcher(self, compiled: Any) -> Matcher:
        _grammar, _limits, template = compiled
        return _LLMatcher(template.deep_copy())

    def compile_json_schema(self, schema: dict[str, Any]) -> Any:
        """``%json`` in a lark grammar, so that ``no_forcing`` applies; compact separators as xgrammar's.

        An object schema without ``additionalProperties`` gets ``false``: that is
        xgrammar's default (strict mode) and triec's reading; llguidance would
        otherwise allow further properties.
        """
        schema = dict(schema)
        if (schema.get("type") == "object" or "properties" in schema) and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
        schema["x-guidance"] = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
        grammar = '%llguidance {"no_forcing": true}\nstart: %json ' + json.dumps(schema)
        return self._compile_grammar(grammar)

    def _compile_grammar(self, grammar: str) -> Any:
        limits = self._llg.LLParserLimits(max_grammar_size=1 << 62, max_lexer_states=1 << 62, step_lexer_fuel=1 << 62, initial_lexer_fuel=1 << 62)
        m = self._llg.LLMatcher(self.tokenizer, grammar, log_level=0, limits=limits)
        if m.is_error():
            raise TriecError(f"llguidance rejected the grammar: {m.get_error()}")
        return (grammar, limits, m)

    def fill_batch(self, matchers: Sequence[Matcher], out: np.ndarray) -> None:
        if self._executor is None:
            self._executor = self._llg.LLExecutor()
        pairs = [(m.m, i) for i, m in enumerate(matchers)]  # type: ignore[attr-defined]
        self._executor.unsafe_compute_mask_ptr(pairs, out.ctypes.data, out.shape[1] * 4, out.shape[0])


# ---------------------------------------------------------------- xgrammar


class _XGMatcher(Matcher):
    def __init__(self, m: Any) -> None:
        self.m = m

    def consume(self, token: int) -> bool:
        return bool(self.m.accept_token(int(token)))

    def rollback(self, n: int = 1) -> None:
        self.m.rollback(n)

    def fill(self, row: np.ndarray) -> None:
        self.m.fill_next_token_bitmask(row.reshape(1, -1))


class XGrammarEngine(Engine):
    """xgrammar: ``TokenizerInfo(RAW bytes, vocab_size, stop_token_ids)``, grammar = EBNF alternation.

    RAW vocabulary type: our bytes are used as they are. xgrammar treats ``b""``
    ids and ids past the token list as special (never allowed); ``stop_token_ids``
    = all EOS ids. The compiler's cache is disabled so every compile is real.
    """

    name = "xgrammar"

    def _setup(self) -> None:
        xgr = _import("xgrammar")
        self._xgr = xgr
        self.info = xgr.TokenizerInfo(
            list(self.vocab.token_bytes),
            xgr.VocabType.RAW,
            vocab_size=self.vocab.vocab_size,
            stop_token_ids=list(self.vocab.eos_token_ids),
        )
        self.compiler = xgr.GrammarCompiler(self.info, cache_enabled=False)
        self._batch: Any = None

    @staticmethod
    def grammar(values: Sequence[str]) -> str:
        return "root ::= " + " | ".join(ebnf_literal(v) for v in values)

    def compile(self, values: Sequence[str]) -> Any:
        return self.compiler.compile_grammar(self.grammar(values))

    def matcher(self, compiled: Any) -> Matcher:
        return _XGMatcher(self._xgr.GrammarMatcher(compiled))

    def compile_json_schema(self, schema: dict[str, Any]) -> Any:
        """``compile_json_schema(..., any_whitespace=False)``: xgrammar's compact form, strict mode."""
        return self.compiler.compile_json_schema(json.dumps(schema), any_whitespace=False)

    def compile_regex(self, values: Sequence[str]) -> Any:
        """``compile_regex`` of the alternation of the escaped literals (the EBNF of :meth:`compile` says the same)."""
        return self.compiler.compile_regex("(" + "|".join(xgrammar_regex_literal(v) for v in values) + ")")

    def fill_batch(self, matchers: Sequence[Matcher], out: np.ndarray) -> None:
        if self._batch is None:
            self._batch = self._xgr.BatchGrammarMatcher()
        self._batch.batch_fill_next_token_bitmask([m.m for m in matchers], out)  # type: ignore[attr-defined]


# ---------------------------------------------------------------- outlines-core


class _OCMatcher(Matcher):
    def __init__(self, guide: Any, eos: tuple[int, ...]) -> None:
        self.g = guide
        self.eos = eos

    def consume(self, token: int) -> bool:
        try:
            self.g.advance(int(token), return_tokens=False)
        except ValueError:
            return False
        return True

    def rollback(self, n: int = 1) -> None:
        self.g.rollback_state(n)

    def fill(self, row: np.ndarray) -> None:
        row.fill(0)
        self.g.write_mask_into(row.ctypes.data, row.size, 4)
        first = self.eos[0]
        if len(self.eos) > 1 and (int(row[first >> 5]) >> (first & 31)) & 1:
            for e in self.eos[1:]:  # outlines-core knows one EOS id; the others mirror it
                row[e >> 5] |= np.int32(np.uint32(1 << (e & 31)).view(np.int32))


class OutlinesCoreEngine(Engine):
    """outlines-core: ``Vocabulary(eos, {bytes: ids})``, ``Index`` of an anchored regex alternation.

    * One EOS id only: the first is given to outlines-core and the mask row
      copies its bit to the other EOS ids.
    * ``b""`` ids and padding are left out of the vocabulary (never allowed).
    * The pattern is ``(?:v1|v2|...)$`` with the values in reverse byte order.
      regex-automata reports matches one byte late and uses leftmost-first
      priority; without the ``$`` anchor outlines-core drops every token that
      ends one byte past a value (``"_"`` after ``"get"`` in {get, get_user}),
      and without the order a value cuts off its own extensions.
    * The empty value cannot be expressed: a nullable anchored pattern has no
      universal start state, and an unanchored empty branch drops one-byte
      tokens at the start. Such sets raise :class:`EngineUnsupported`.
    """

    name = "outlines-core"

    def _setup(self) -> None:
        oc = _import("outlines_core")
        self._oc = oc
        by_bytes: dict[bytes, list[int]] = {}
        for tid, b in enumerate(self.vocab.token_bytes):
            if b:
                by_bytes.setdefault(b, []).append(tid)
        self.vocabulary = oc.Vocabulary(self.vocab.eos_token_ids[0], by_bytes)

    @staticmethod
    def grammar(values: Sequence[str]) -> str:
        if any(v == "" for v in values):
            raise EngineUnsupported(
                "outlines-core cannot express a set holding the empty value exactly "
                "(regex-automata's delayed matches drop one-byte tokens at a nullable start)"
            )
        ordered = sorted(values, key=lambda v: v.encode("utf-8"), reverse=True)
        return "(?:" + "|".join(regex_literal(v) for v in ordered) + ")$"

    def compile(self, values: Sequence[str]) -> Any:
        index = self._oc.Index(self.grammar(values), self.vocabulary)
        return (index, max(len(v.encode("utf-8")) for v in values) + 2)

    def matcher(self, compiled: Any) -> Matcher:
        index, depth = compiled
        return _OCMatcher(self._oc.Guide(index, max_rollback=depth), self.vocab.eos_token_ids)


_CLASSES: dict[str, type[Engine]] = {
    "llguidance": LLGuidanceEngine,
    "xgrammar": XGrammarEngine,
    "outlines-core": OutlinesCoreEngine,
}


def _import(module: str) -> Any:
    name = next(k for k, v in _MODULES.items() if v == module)
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise EngineUnavailable(f"{name} is not installed ({exc}); install it with: {install_hint(name)}") from exc


def make_engine(name: str, vocab: Vocabulary) -> Engine:
    """Build engine ``name`` over ``vocab``; raises :class:`EngineUnavailable` when it is missing."""
    _check_name(name)
    if not is_installed(name):
        raise EngineUnavailable(f"{name} is not installed; install it with: {install_hint(name)}")
    return _CLASSES[name](vocab)


def row_ids(row: np.ndarray) -> np.ndarray:
    """The token ids whose bits are set in one int32 mask row (ascending)."""
    bits = np.unpackbits(np.ascontiguousarray(row).view(np.uint8), bitorder="little")
    return np.flatnonzero(bits).astype(np.int64)
