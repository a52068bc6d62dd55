"""The grammar engine that runs a schema's continuation, and the same engine on the whole schema.

Both come from one compile function per engine, in the compact convention
(:data:`triec.schema.shape.CONVENTION`), so the composite and the oracle it is
checked against see the same language:

* llguidance: ``%llguidance {"no_forcing": true}`` + ``start: %json {schema}``
  with ``"x-guidance": {"whitespace_flexible": false, "item_separator": ", ",
  "key_separator": ": "}``. Without ``no_forcing`` llguidance allows only the
  canonical token of forced text, a mask narrower than the language.
* xgrammar: ``compile_json_schema(schema, any_whitespace=False, separators=(", ", ": "))``
  (strict mode, its default: no extra properties).

The continuation is the whole schema with the enum reduced to one placeholder
name (``""``), driven through the placeholder's literal text once (the
*template*); a handover copies the template. The engine's state after
``PREFIX + json(v) + TAIL`` does not depend on v (nothing in the accepted shape
refers to the name), so the copy is the state the whole-schema engine would be in.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from triec.engines import LLGuidanceEngine, XGrammarEngine, make_engine
from triec.errors import TriecError
from triec.schema.shape import ITEM_SEPARATOR, KEY_SEPARATOR
from triec.tokenizer.vocabulary import Vocabulary

PLACEHOLDER = ""

_ENGINE_MEMO: dict[tuple[str, str, int, tuple[int, ...]], Any] = {}


class EngineDriver(ABC):
    """One engine over one vocabulary: compile a schema, start, feed bytes, accept tokens, fill rows."""

    name: str = ""

    def __init__(self, vocab: Vocabulary) -> None:
        self.vocab = vocab
        self.words = (vocab.vocab_size + 31) // 32
        self.byte_tokens = _byte_tokens(vocab)

    @abstractmethod
    def compile(self, schema: dict[str, Any]) -> Any: ...

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
        from triec.engines import engine_version

        return engine_version(self.name)

    def _clear_padding(self, row: np.ndarray) -> None:
        extra = self.words * 32 - self.vocab.vocab_size
        if extra:
            row[-1] &= np.int32(np.uint32((1 << (32 - extra)) - 1).view(np.int32))


def _byte_tokens(vocab: Vocabulary) -> dict[int, int]:
    out: dict[int, int] = {}
    for tid, b in enumerate(vocab.token_bytes):
        if len(b) == 1 and b[0] not in out:
            out[b[0]] = tid
    return out


class LLGuidanceDriver(EngineDriver):
    name = "llguidance"

    def __init__(self, vocab: Vocabulary) -> None:
        super().__init__(vocab)
        self.engine: LLGuidanceEngine = make_engine("llguidance", vocab)  # type: ignore[assignment]
        self.llg = self.engine._llg
        self._executor: Any = None
        self.limits = self.llg.LLParserLimits(
            max_grammar_size=1 << 62, max_lexer_states=1 << 62, step_lexer_fuel=1 << 62, initial_lexer_fuel=1 << 62
        )

    def grammar(self, schema: dict[str, Any]) -> str:
        options = {"whitespace_flexible": False, "item_separator": ITEM_SEPARATOR, "key_separator": KEY_SEPARATOR}
        doc = {**schema, "x-guidance": options}
        return self.llg.LLMatcher.grammar_from_lark(
            '%llguidance {"no_forcing": true}\nstart: %json ' + json.dumps(doc, ensure_ascii=False)
        )

    def compile(self, schema: dict[str, Any]) -> Any:
        m = self.llg.LLMatcher(self.engine.tokenizer, self.grammar(schema), log_level=0, limits=self.limits)
        if m.is_error():
            raise TriecError(f"llguidance rejected the schema: {m.get_error()}")
        return m

    def start(self, compiled: Any) -> Any:
        return compiled.deep_copy()

    def copy(self, m: Any) -> Any:
        return m.deep_copy()

    def _spell(self, data: bytes) -> list[int]:
        try:
            return [self.byte_tokens[b] for b in data]
        except KeyError:
            ids = self.engine.tokenizer.greedy_tokenize(data.decode("utf-8", errors="surrogateescape"))
            if b"".join(self.vocab.token_bytes[i] for i in ids) != data:
                raise TriecError(f"llguidance: no token sequence of this vocabulary spells {data!r}") from None
            return list(ids)

    def feed(self, m: Any, data: bytes) -> bool:
        ids = self._spell(data)
        return m.try_consume_tokens(ids) == len(ids)

    def feed_byte(self, m: Any, b: int) -> bool:
        tid = self.byte_tokens.get(b)
        if tid is None:
            raise TriecError(f"llguidance: the vocabulary has no single-byte token for byte 0x{b:02x}")
        return m.try_consume_tokens([tid]) == 1

    def rollback(self, m: Any, n: int) -> None:
        m.rollback(n)

    def accept(self, m: Any, token: int) -> bool:
        t = int(token)
        if t in self.vocab.eos_token_ids:  # EOS ends the output where the grammar is complete
            return bool(m.is_accepting()) and bool(m.consume_token(t))
        if not 0 <= t < self.vocab.vocab_size or m.validate_tokens([t]) != 1:
            return False
        return bool(m.consume_token(t))

    def fill(self, m: Any, row: np.ndarray) -> None:
        m.unsafe_compute_mask_ptr(row.ctypes.data, row.size * 4)
        if m.is_error():
            raise TriecError(f"llguidance: {m.get_error()}")
        self._clear_padding(row)

    def is_terminated(self, m: Any) -> bool:
        return bool(m.is_stopped())

    def fill_many(self, handles: list[Any], buf: np.ndarray, rows: list[int]) -> None:
        if len(handles) < 2:
            return super().fill_many(handles, buf, rows)
        if self._executor is None:
            self._executor = self.llg.LLExecutor()
        self._executor.unsafe_compute_mask_ptr(list(zip(handles, rows, strict=True)), buf.ctypes.data, buf.shape[1] * 4, buf.shape[0])
        for m, r in zip(handles, rows, strict=True):
            if m.is_error():
                raise TriecError(f"llguidance: {m.get_error()}")
            self._clear_padding(buf[r])


class XGrammarDriver(EngineDriver):
    name = "xgrammar"

    def __init__(self, vocab: Vocabulary) -> None:
        super().__init__(vocab)
        self.engine: XGrammarEngine = make_engine("xgrammar", vocab)  # type: ignore[assignment]
        self.xgr = self.engine._xgr
        self._batch: Any = None

    def compile(self, schema: dict[str, Any]) -> Any:
        return self.engine.compiler.compile_json_schema(
            json.dumps(schema, ensure_ascii=False), any_whitespace=False, separators=(ITEM_SEPARATOR, KEY_SEPARATOR)
        )

    def start(self, compiled: Any) -> Any:
        return self.xgr.GrammarMatcher(compiled)

    def copy(self, m: Any) -> Any:
        return m.fork()

    def feed(self, m: Any, data: bytes) -> bool:
        return bool(m.accept_string(data))

    def feed_byte(self, m: Any, b: int) -> bool:
        return bool(m.accept_string(bytes([b])))

    def rollback(self, m: Any, n: int) -> None:
        m.rollback(n)

    def accept(self, m: Any, token: int) -> bool:
        t = int(token)
        if not 0 <= t < self.vocab.vocab_size:
            return False
        return bool(m.accept_token(t))

    def fill(self, m: Any, row: np.ndarray) -> None:
        m.fill_next_token_bitmask(row.reshape(1, -1))
        self._clear_padding(row)

    def is_terminated(self, m: Any) -> bool:
        return bool(m.is_terminated())

    def fill_many(self, handles: list[Any], buf: np.ndarray, rows: list[int]) -> None:
        if len(handles) < 2:
            return super().fill_many(handles, buf, rows)
        if self._batch is None:
            self._batch = self.xgr.BatchGrammarMatcher()
        self._batch.batch_fill_next_token_bitmask(handles, buf, rows)
        for r in rows:
            self._clear_padding(buf[r])


_DRIVERS: dict[str, type[EngineDriver]] = {"llguidance": LLGuidanceDriver, "xgrammar": XGrammarDriver}


def driver(name: str, vocab: Vocabulary) -> EngineDriver:
    """The engine bound to ``vocab``, built once per process (its tokenizer setup costs up to a second)."""
    if name not in _DRIVERS:
        raise TriecError(f"unknown continuation engine {name!r}; expected one of {', '.join(_DRIVERS)}")
    key = (name, vocab.fingerprint, vocab.vocab_size, vocab.eos_token_ids)
    found = _ENGINE_MEMO.get(key)
    if found is None:
        found = _DRIVERS[name](vocab)
        _ENGINE_MEMO[key] = found
    return found


class Continuation:
    """The engine's state at the handover point, ready to be copied for each sequence."""

    def __init__(self, drv: EngineDriver, continuation_schema: dict[str, Any], name_property: str, handover_text: bytes) -> None:
        from triec.schema.shape import with_enum

        self.driver = drv
        self.compiled = drv.compile(with_enum(continuation_schema, name_property, [PLACEHOLDER]))
        self.template = drv.start(self.compiled)
        if not drv.feed(self.template, handover_text):
            raise TriecError(f"{drv.name} refuses the literal text {handover_text!r} of its own continuation schema")
        self._after: dict[bytes, Any] = {b"": self.template}

    def new(self, rest: bytes = b"") -> Any:
        """A matcher at the handover, having read ``rest`` (the bytes a straddling token carried past the tail).

        The state after each distinct ``rest`` is made once and copied afterwards: a copy costs about a
        microsecond, feeding bytes to the engine tens.
        """
        found = self._after.get(rest)
        if found is None:
            found = self.driver.copy(self.template)
            if not self.driver.feed(found, rest):
                raise TriecError(f"{self.driver.name} refused {rest!r} at the handover; the straddle table does not match it")
            self._after[rest] = found
        return self.driver.copy(found)
