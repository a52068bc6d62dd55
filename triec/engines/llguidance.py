"""llguidance over triec's decoded vocabulary: a regex alternation of the values, or its own JSON schema."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from triec.engines.base import Engine, Matcher, import_engine, padded_tokens, regex_literal
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
