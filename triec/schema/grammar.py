"""The grammar engines the schema layer hands structure to, behind one interface, and the grammars they run.

A grammar is a JSON Schema, optionally followed by one of a few literal texts
(how a tagged tool-call format closes a call: ``"}\n</tool_call>"``). Each
engine runs it in the compact convention (:data:`triec.schema.shape.CONVENTION`)
that the whole-schema oracle uses, so the composite and the oracle it is
checked against see the same language:

* llguidance: ``%llguidance {"no_forcing": true}`` + ``start: %json {schema}``
  with ``"x-guidance": {"whitespace_flexible": false, "item_separator": ", ",
  "key_separator": ": "}``. Without ``no_forcing`` llguidance allows only the
  canonical token of forced text, a mask narrower than the language.
* xgrammar: ``compile_json_schema(schema, any_whitespace=False, separators=(", ", ": "))``
  (strict mode, its default: no extra properties); a literal text after the
  schema is ``Grammar.concat`` with an EBNF rule.

Drivers are built once per (engine, vocabulary) and keep a bounded cache of the
grammars they compiled (:data:`GRAMMAR_CACHE`), so a registry's argument
grammars are compiled once each, when first needed.
"""

from __future__ import annotations

import hashlib
import json
import os
from abc import ABC, abstractmethod
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from triec.engines import LLGuidanceEngine, XGrammarEngine, make_engine
from triec.engines.xgrammar import ebnf_literal
from triec.errors import TriecError
from triec.schema.shape import ITEM_SEPARATOR, KEY_SEPARATOR
from triec.tokenizer.vocabulary import Vocabulary

GRAMMAR_CACHE = 512
"""Compiled grammars each driver keeps (least recently used out first); ``TRIEC_GRAMMAR_CACHE`` overrides.

A tool's compiled argument grammar holds 160-240 KiB of process memory with llguidance and 260-900 KiB with
xgrammar (docs/benchmarks.md, "Tool registries"): 512 bounds a driver at about 120 / 450 MiB, while a tool
pushed out costs 2-28 ms to compile again at its next call."""

def _llg_options(whitespace: str) -> dict[str, Any]:
    if whitespace == "any":
        return {"whitespace_flexible": True}
    return {"whitespace_flexible": False, "item_separator": ITEM_SEPARATOR, "key_separator": KEY_SEPARATOR}


_ENGINE_MEMO: dict[tuple[str, str, int, tuple[int, ...]], Any] = {}


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
        self.words = (vocab.vocab_size + 31) // 32
        self.byte_tokens = _byte_tokens(vocab)
        self._grammars: OrderedDict[str, Any] = OrderedDict()
        self.cache_size = int(os.environ.get("TRIEC_GRAMMAR_CACHE", GRAMMAR_CACHE))
        self.compiles = 0  # grammars compiled (cache misses), for reports

    def compile_spec(self, spec: GrammarSpec) -> Any:
        """The compiled grammar of ``spec``, from the driver's cache when it was compiled before."""
        found = self._grammars.get(spec.key)
        if found is not None:
            self._grammars.move_to_end(spec.key)
            return found
        found = self._compile_spec(spec)
        self.compiles += 1
        self._grammars[spec.key] = found
        while len(self._grammars) > self.cache_size:
            self._grammars.popitem(last=False)
        return found

    def cached_grammars(self) -> int:
        return len(self._grammars)

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

    def grammar(self, schema: dict[str, Any], whitespace: str = "compact") -> str:
        doc = {**schema, "x-guidance": _llg_options(whitespace)}
        return self.llg.LLMatcher.grammar_from_lark(
            '%llguidance {"no_forcing": true}\nstart: %json ' + json.dumps(doc, ensure_ascii=False)
        )

    def compile(self, schema: dict[str, Any], whitespace: str = "compact") -> Any:
        return self._matcher(self.grammar(schema, whitespace), "schema")

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
        lark = ('%llguidance {"no_forcing": true}\nstart: j (' + alts + ")\nj: %json "
                + json.dumps(doc, ensure_ascii=False))
        return self._matcher(self.llg.LLMatcher.grammar_from_lark(lark), "grammar")

    def probe(self, m: Any, data: bytes) -> bool:
        ids = self._spell(data)
        n = m.try_consume_tokens(ids)
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
        self.tag_compiler = self.engine.compiler  # structural tags' (:meth:`use_tokenizer_info`)
        self._batch: Any = None

    def compile(self, schema: dict[str, Any], whitespace: str = "compact") -> Any:
        text = json.dumps(schema, ensure_ascii=False)
        if whitespace == "any":
            return self.engine.compiler.compile_json_schema(text, any_whitespace=True)
        return self.engine.compiler.compile_json_schema(text, any_whitespace=False,
                                                        separators=(ITEM_SEPARATOR, KEY_SEPARATOR))

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
        self.tag_compiler = (self.engine.compiler if tag_info is None or tag_info is info
                             else self.xgr.GrammarCompiler(tag_info, cache_enabled=False))  # fmt: skip
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
                g = xgr.Grammar.from_json_schema(spec.schema, any_whitespace=False,
                                                 separators=(ITEM_SEPARATOR, KEY_SEPARATOR))
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

