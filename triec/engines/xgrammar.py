"""xgrammar over triec's decoded vocabulary: an EBNF alternation of the values, or its JSON-schema compiler."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from triec.engines.base import Engine, Matcher, import_engine


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
        xgr = import_engine("xgrammar")
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
