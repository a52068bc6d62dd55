"""xgrammar over triec's decoded vocabulary: an EBNF alternation of the values, or its JSON-schema compiler."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from triec.engines.base import ITEM_SEPARATOR, KEY_SEPARATOR, Engine, EngineDriver, GrammarSpec, Matcher, import_engine
from triec.errors import TriecError

if TYPE_CHECKING:
    from triec.tokenizer.vocabulary import Vocabulary


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

    def compile_pattern(self, regex: str) -> Any:
        """``compile_regex(regex)``: the whole output matching ``regex`` in xgrammar's own reading of it."""
        return self.compiler.compile_regex(regex)

    def compile_regex(self, values: Sequence[str]) -> Any:
        """``compile_regex`` of the alternation of the escaped literals (the EBNF of :meth:`compile` says the same)."""
        return self.compiler.compile_regex("(" + "|".join(xgrammar_regex_literal(v) for v in values) + ")")

    def fill_batch(self, matchers: Sequence[Matcher], out: np.ndarray) -> None:
        if self._batch is None:
            self._batch = self._xgr.BatchGrammarMatcher()
        own = cast("Sequence[_XGMatcher]", matchers)  # this engine's own: what its matcher() made
        self._batch.batch_fill_next_token_bitmask([m.m for m in own], out)


class XGrammarDriver(EngineDriver):
    name = "xgrammar"

    def __init__(self, vocab: Vocabulary) -> None:
        super().__init__(vocab)
        self.engine = XGrammarEngine(vocab)
        self.xgr = self.engine._xgr
        self.tag_compiler = self.engine.compiler  # structural tags' (:meth:`use_tokenizer_info`)
        self._batch: Any = None

    def compile(self, schema: dict[str, Any], whitespace: str = "compact") -> Any:
        text = json.dumps(schema, ensure_ascii=False)
        if whitespace == "any":
            return self.engine.compiler.compile_json_schema(text, any_whitespace=True)
        return self.engine.compiler.compile_json_schema(
            text, any_whitespace=False, separators=(ITEM_SEPARATOR, KEY_SEPARATOR)
        )

    def use_tokenizer_info(self, info: Any, tag_info: Any = None) -> None:
        """Compile with a serving engine's own ``xgrammar.TokenizerInfo`` (SGLang's or vLLM's xgrammar backend's).

        Its engine rows then equal that backend's exactly, special tokens included: built from a Hugging Face
        tokenizer, xgrammar may take an added token such as ``<|im_start|>`` as its text inside a free string,
        where triec's decoded vocabulary never allows it. ``tag_info`` (default ``info``) is the one structural
        tags are compiled with: vLLM 0.33 compiles JSON on a vocabulary without special tokens and structural
        tags on the full one. The tries do not change (no such token crosses into a value), and the compiled
        grammars made before are dropped.
        """
        self.engine.info = info
        self.engine.compiler = self.xgr.GrammarCompiler(info, cache_enabled=False)
        self.tag_compiler = (
            self.engine.compiler
            if tag_info is None or tag_info is info
            else self.xgr.GrammarCompiler(tag_info, cache_enabled=False)
        )
        self._grammars.clear()

    def _compile_spec(self, spec: GrammarSpec) -> Any:
        try:
            if spec.kind == "structural_tag":
                return self.tag_compiler.compile_structural_tag(spec.schema)
            if not spec.after:
                return self.compile(json.loads(spec.schema), spec.whitespace)
            xgr = self.xgr
            if spec.whitespace == "any":
                g = xgr.Grammar.from_json_schema(spec.schema, any_whitespace=True)
            else:
                g = xgr.Grammar.from_json_schema(
                    spec.schema, any_whitespace=False, separators=(ITEM_SEPARATOR, KEY_SEPARATOR)
                )
            tail = xgr.Grammar.from_ebnf("root ::= " + " | ".join(ebnf_literal(a) for a in spec.after))
            return self.engine.compiler.compile_grammar(xgr.Grammar.concat(g, tail))
        except (RuntimeError, ValueError) as exc:
            raise TriecError(f"xgrammar rejected the schema: {exc}") from None

    def probe(self, m: Any, data: bytes) -> bool:
        if m.accept_string(data):  # a refused string leaves the matcher as it was
            m.rollback(1)
            return True
        return False

    def forced(self, m: Any) -> bytes:
        s = m.find_jump_forward_string()
        return s.encode("utf-8") if isinstance(s, str) else bytes(s)

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
