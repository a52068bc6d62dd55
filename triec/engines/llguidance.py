"""llguidance over triec's decoded vocabulary: a regex alternation of the values, or its own JSON schema."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from triec.engines.base import (
    ITEM_SEPARATOR,
    KEY_SEPARATOR,
    Engine,
    EngineDriver,
    GrammarSpec,
    Matcher,
    import_engine,
    padded_tokens,
    regex_literal,
)
from triec.errors import TriecError

if TYPE_CHECKING:
    from triec.tokenizer.vocabulary import Vocabulary


class _LLTokenizerSource:
    """What ``llguidance.TokenizerWrapper`` reads: bytes per id, EOS, specials, an encoder.

    llguidance calls the encoder on short texts while computing masks (with an
    encoder that returns nothing every mask after the first token is empty), so
    it gets a greedy longest-match tokenizer over the same bytes: any token
    sequence that spells the text is acceptable to it.
    """

    def __init__(self, vocab: Vocabulary) -> None:
        self.tokens = padded_tokens(vocab)
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
        llg = import_engine("llguidance")
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
        grammar: str = self._llg.LLMatcher.grammar_from_lark(
            f'%llguidance {{"no_forcing": true}}\nstart: /({alternation})/'
        )
        return grammar

    def compile(self, values: Sequence[str]) -> Any:
        return self._compile_grammar(self.grammar(values))

    def compile_pattern(self, regex: str) -> Any:
        """The whole output matching ``regex`` (Rust ``regex`` syntax, as llguidance reads it), without forcing."""
        rx = regex.replace("/", "\\/")
        return self._compile_grammar(
            self._llg.LLMatcher.grammar_from_lark('%llguidance {"no_forcing": true}\nstart: /' + rx + "/")
        )

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
        limits = parser_limits(self._llg)
        m = self._llg.LLMatcher(self.tokenizer, grammar, log_level=0, limits=limits)
        if m.is_error():
            raise TriecError(f"llguidance rejected the grammar: {m.get_error()}")
        return (grammar, limits, m)

    def fill_batch(self, matchers: Sequence[Matcher], out: np.ndarray) -> None:
        if self._executor is None:
            self._executor = self._llg.LLExecutor()
        own = cast("Sequence[_LLMatcher]", matchers)  # this engine's own: what its matcher() made
        pairs = [(m.m, i) for i, m in enumerate(own)]
        self._executor.unsafe_compute_mask_ptr(pairs, out.ctypes.data, out.shape[1] * 4, out.shape[0])


def _llg_options(whitespace: str) -> dict[str, Any]:
    if whitespace == "any":
        return {"whitespace_flexible": True}
    return {"whitespace_flexible": False, "item_separator": ITEM_SEPARATOR, "key_separator": KEY_SEPARATOR}


PARSER_LIMITS = {
    "max_grammar_size": 1 << 62,
    "max_lexer_states": 1 << 62,
    "step_lexer_fuel": 1 << 62,
    "initial_lexer_fuel": 1 << 62,
    "max_items_in_row": 1 << 30,
    "step_max_items": 1 << 30,
}
"""llguidance's parser limits for every matcher triec builds (engines, grammar drivers, benchmarks): raised past
any schema or value set triec compiles, so a limit never stands in for a refusal."""


def parser_limits(llg: Any) -> Any:
    """``llguidance.LLParserLimits`` of :data:`PARSER_LIMITS`."""
    return llg.LLParserLimits(**PARSER_LIMITS)


class LLGuidanceDriver(EngineDriver):
    name = "llguidance"

    def __init__(self, vocab: Vocabulary) -> None:
        super().__init__(vocab)
        self.engine = LLGuidanceEngine(vocab)
        self.llg = self.engine._llg
        self._executor: Any = None
        self.limits = parser_limits(self.llg)

    def grammar(self, schema: dict[str, Any], whitespace: str = "compact") -> str:
        doc = {**schema, "x-guidance": _llg_options(whitespace)}
        grammar: str = self.llg.LLMatcher.grammar_from_lark(
            '%llguidance {"no_forcing": true}\nstart: %json ' + json.dumps(doc, ensure_ascii=False)
        )
        return grammar

    def compile(self, schema: dict[str, Any], whitespace: str = "compact") -> Any:
        return self._matcher(self.grammar(schema, whitespace), "schema")

    def compile_lark(self, lark: str, what: str = "grammar") -> Any:
        """llguidance on a Lark grammar of its own (the benchmarks' whole-schema and tool-call grammars); ``what``
        names it in the error llguidance's refusal raises."""
        return self._matcher(self.llg.LLMatcher.grammar_from_lark(lark), what)

    def _matcher(self, grammar: Any, what: str) -> Any:
        m = self.llg.LLMatcher(self.engine.tokenizer, grammar, log_level=0, limits=self.limits)
        if m.is_error():
            raise TriecError(f"llguidance rejected the {what}: {m.get_error()}")
        return m

    def _compile_spec(self, spec: GrammarSpec) -> Any:
        if spec.kind != "json":
            raise TriecError(f"llguidance cannot run a {spec.kind.replace('_', ' ')} grammar; use engine xgrammar")
        if not spec.after:
            return self.compile(json.loads(spec.schema), spec.whitespace)
        doc = {**json.loads(spec.schema), "x-guidance": _llg_options(spec.whitespace)}
        alts = " | ".join(json.dumps(a, ensure_ascii=False) for a in spec.after)
        lark = (
            '%llguidance {"no_forcing": true}\nstart: j (' + alts + ")\nj: %json " + json.dumps(doc, ensure_ascii=False)
        )
        return self._matcher(self.llg.LLMatcher.grammar_from_lark(lark), "grammar")

    def probe(self, m: Any, data: bytes) -> bool:
        ids = self._spell(data)
        n: int = m.try_consume_tokens(ids)
        if n:
            m.rollback(n)
        return n == len(ids)

    def forced(self, m: Any) -> bytes:
        return bytes(m.compute_ff_bytes())

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
        n: int = m.try_consume_tokens(ids)
        return n == len(ids)

    def feed_byte(self, m: Any, b: int) -> bool:
        tid = self.byte_tokens.get(b)
        if tid is None:
            raise TriecError(f"llguidance: the vocabulary has no single-byte token for byte 0x{b:02x}")
        n: int = m.try_consume_tokens([tid])
        return n == 1

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
        self._executor.unsafe_compute_mask_ptr(
            list(zip(handles, rows, strict=True)), buf.ctypes.data, buf.shape[1] * 4, buf.shape[0]
        )
        for m, r in zip(handles, rows, strict=True):
            if m.is_error():
                raise TriecError(f"llguidance: {m.get_error()}")
            self._clear_padding(buf[r])
