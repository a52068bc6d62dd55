"""The engine side of triec's vLLM structured-outputs backend: its per-process state and the engine's decision.

vLLM's ``XgrammarBackend.compile_grammar`` (replaced by :mod:`.patches`) hands every compiled constraint to
:func:`triec_grammar`: CHOICE, REGEX, JSON and STRUCTURAL_TAG go to
:class:`~triec.integrations.constraints.Constraints` over the served vocabulary (:class:`BackendState`, built in a
thread at engine start), which returns a triec grammar (:class:`TriecStructuredOutputGrammar`, ``XgrammarGrammar``'s
semantics) or says delegate (xgrammar compiles it). The frontend's decision is :mod:`.routing`'s (its names are
re-exported here); how vLLM's functions are replaced is :mod:`.patches`' (docs/decisions.md D22, D23).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import torch

from triec._compat import renamed
from triec.errors import RequestError
from triec.integrations.constraints import ARTIFACT_KEYWORD, Constraints, Delegate, TableGrammar
from triec.integrations.serving import STOPS_HINT, served_vocabulary, store
from triec.integrations.vllm import internals
from triec.integrations.vllm.routing import (
    COMPACT_ENV,
    RequestRefused,
    claims,
    compact_ok,
    legacy_with_at_least_one,
    plan_json,
)
from triec.integrations.vllm.structured import RequestGrammar

log = logging.getLogger("triec.vllm.backend")

if TYPE_CHECKING:  # vLLM's classes, read from the installed vLLM by internals: Any to a type checker
    StructuredOutputGrammar = Any
    StructuredOutputOptions = Any
else:
    StructuredOutputGrammar = internals.grammar_base()
    StructuredOutputOptions = internals.options()


class TriecStructuredOutputGrammar(StructuredOutputGrammar):
    """One request on a triec grammar, with ``XgrammarGrammar``'s semantics (:class:`RequestGrammar`)."""

    def __init__(self, grammar: RequestGrammar, key: str) -> None:
        self.grammar = grammar
        self.key = key

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        ok = self.grammar.accept_tokens(tokens)
        if not ok:  # 0.34 feeds the first refused draft on purpose (trim_spec_tokens): not an error by itself
            log.debug("triec: request %s: tokens %s refused by its grammar (%s)", request_id, tokens, self.key[:40])
        return ok

    def validate_tokens(self, tokens: list[int]) -> list[int]:
        return self.grammar.validate_tokens(tokens)

    def rollback(self, num_tokens: int) -> None:
        self.grammar.rollback(num_tokens)

    def fill_bitmask(self, bitmask: torch.Tensor, batch_index: int) -> None:
        self.grammar.fill_bitmask(bitmask[batch_index].numpy())  # the manager's host int32 tensor: a view

    def is_terminated(self) -> bool:
        return self.grammar.is_terminated()

    def reset(self) -> None:
        self.grammar.reset()


class BackendState:
    """The backend's side of vLLM's engine process: the served vocabulary (built in a thread at start) and the
    :class:`Constraints` over it, one per JSON whitespace setting."""

    def __init__(self, tokenizer: str, vocab_size: int) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self._future: Future[Any] = Future()
        self._constraints: dict[tuple[bool, bool], Constraints] = {}
        self._info_set = False
        self._lock = threading.Lock()
        self._by_spec: OrderedDict[tuple[str, bool, bytes], TableGrammar | str] = OrderedDict()
        threading.Thread(target=self._load, name="triec-vocabulary", daemon=True).start()

    MAX_SPECS = 4096

    def remembered(self, key: tuple[str, bool, bytes], constraints: Constraints) -> TableGrammar | None:
        """The grammar served for this exact constraint text before, while the Constraints' cache still holds it.

        A repeated list then costs a digest of its text, not a parse, a sort and a
        sha256 of its values (8 ms at 10,000 values on 2 cores). Compiled grammars are
        remembered by cache key only: one the bounded cache let go is not kept alive here.
        """
        with self._lock:
            found = self._by_spec.get(key)
            if found is not None:
                self._by_spec.move_to_end(key)
        if found is None:
            return None
        grammar = constraints.cache.peek(found) if isinstance(found, str) else found
        if grammar is None or not constraints.is_live(grammar):
            with self._lock:
                self._by_spec.pop(key, None)
            return None
        return grammar

    def remember(self, key: tuple[str, bool, bytes], grammar: TableGrammar) -> None:
        with self._lock:
            # an artifact's grammar holds the store's table (no memory of its own); any other only its cache key
            self._by_spec[key] = grammar if grammar.artifact is not None else grammar.key
            while len(self._by_spec) > self.MAX_SPECS:
                self._by_spec.popitem(last=False)

    def vocabulary(self) -> Any:
        """The served vocabulary (waits for the start-up thread; raises what it raised)."""
        return self._future.result()

    def _load(self) -> None:
        try:
            t = time.perf_counter()
            vocab = served_vocabulary(self.tokenizer, self.vocab_size)
            _ = vocab.automaton
            log.info("triec: vocabulary of %s ready in %.2f s", self.tokenizer, time.perf_counter() - t)
            self._future.set_result(vocab)
        except BaseException as exc:  # noqa: BLE001  reported to every request that needs it
            self._future.set_exception(exc)

    def use_tokenizer_info(self, compiler: Any, tag_compiler: Any = None) -> None:
        """Run the schema layer's xgrammar on vLLM's own ``TokenizerInfo``: JSON on that of ``compiler``, structural
        tags on that of ``tag_compiler`` (vLLM 0.33's ``full_vocab_compiler``; default the same).

        Its engine rows (a tool's arguments, the JSON around an enum) then equal
        vLLM's xgrammar backend's, special tokens included; once per engine.
        """
        if self._info_set:
            return
        with self._lock:
            if self._info_set:
                return
            from triec.schema.grammar import driver

            info = compiler.compile_regex("a").tokenizer_info  # the compiler keeps it; a compiled grammar shows it
            tag_info = info if tag_compiler in (None, compiler) else tag_compiler.compile_regex("a").tokenizer_info
            driver("xgrammar", self.vocabulary()).use_tokenizer_info(info, tag_info)
            self._info_set = True

    def constraints(self, any_whitespace: bool) -> Constraints:
        """The Constraints for vLLM's JSON setting: with any whitespace (vLLM's default) the schema layer serves
        schemas and tool registries with xgrammar's own whitespace, exactly, or with triec's compact spelling
        under the opt-in; under ``disable_any_whitespace`` (vLLM's ``","`` and ``":"``) JSON beyond string
        enums is delegated. Structural tags do not depend on the setting."""
        vocab = self.vocabulary()
        compact = compact_ok(any_whitespace)
        key = (any_whitespace, compact)
        with self._lock:
            found = self._constraints.get(key)
            if found is None:
                found = Constraints(
                    vocab,
                    any_whitespace=not compact,
                    tokenizer=self.tokenizer,
                    fix_stops=STOPS_HINT,
                    artifact_store=store,
                )
                if not any_whitespace:
                    found.schema_hook = None  # no triec spelling is ("," ":"): xgrammar serves them
                self._constraints[key] = found
            return found


_STATES: dict[tuple[str, int], BackendState] = {}


_STATES_LOCK = threading.Lock()


def backend_state(model_config: Any, vocab_size: int | None = None) -> BackendState:
    """The engine process's :class:`BackendState` for a served model (one per tokenizer and width)."""
    key = (str(model_config.tokenizer), int(vocab_size if vocab_size is not None else model_config.get_vocab_size()))
    with _STATES_LOCK:
        found = _STATES.get(key)
        if found is None:
            found = _STATES[key] = BackendState(*key)
        return found


def triec_grammar(
    state: BackendState,
    request_type: StructuredOutputOptions,
    spec: str,
    stop_token_ids: Any,
    any_whitespace: bool,
) -> TriecStructuredOutputGrammar | Delegate:
    """The engine decision for one compiled constraint: a triec grammar, or Delegate (xgrammar compiles it).

    A refusal here (RequestError) was not expected after admission; it is
    raised for artifacts (xgrammar would serve something else) and delegates
    for value lists (xgrammar's grammar of the same list is the same language).
    """
    opt = StructuredOutputOptions
    if request_type not in (opt.CHOICE, opt.REGEX, opt.JSON, opt.STRUCTURAL_TAG):
        return Delegate(request_type.name)
    try:
        c = state.constraints(any_whitespace)
    except Exception as exc:  # noqa: BLE001  a tokenizer triec cannot decode: xgrammar serves the same language
        if request_type == opt.JSON and ARTIFACT_KEYWORD in spec:
            raise RequestError(f"triec cannot read the served tokenizer: {exc}") from None
        log.warning("triec: no vocabulary for the served tokenizer (%s); delegated to xgrammar", exc)
        return Delegate(f"no triec vocabulary: {exc}")
    memo = (
        request_type.name,
        any_whitespace,
        hashlib.blake2b(spec.encode("utf-8", "surrogatepass"), digest_size=16).digest(),
    )
    remembered = state.remembered(memo, c)
    if remembered is not None:
        return _grammar(remembered, stop_token_ids)
    served: TableGrammar | Delegate
    try:
        if request_type == opt.CHOICE:
            served = c.choice(json.loads(spec))
        elif request_type == opt.REGEX:
            served = c.regex(spec)
        elif request_type == opt.JSON:
            served = c.json_schema(spec, stops=stop_token_ids)
        else:
            legacy = '"structures"' in spec and legacy_with_at_least_one(_json_or_none(spec))  # parsed only then
            served = Delegate("a legacy tag's at_least_one") if legacy else c.structural_tag(spec)
    except RequestError as exc:
        if request_type == opt.JSON and ARTIFACT_KEYWORD in spec:
            raise
        log.warning("triec: %s delegated to xgrammar: %s", request_type.name, exc)
        return Delegate(str(exc))
    if isinstance(served, Delegate):
        return served
    state.remember(memo, served)
    return _grammar(served, stop_token_ids)


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _grammar(served: TableGrammar, stop_token_ids: Any) -> TriecStructuredOutputGrammar:
    grammar = RequestGrammar(served.matcher(), served.table.eos_token_ids, stop_token_ids)
    return TriecStructuredOutputGrammar(grammar, served.key)


__all__ = [  # the engine side's names, and the frontend's (routing) that callers have imported from here
    "COMPACT_ENV",
    "BackendState",
    "RequestRefused",
    "TriecStructuredOutputGrammar",
    "backend_state",
    "claims",
    "compact_ok",
    "legacy_with_at_least_one",
    "plan_json",
    "triec_grammar",
]

__getattr__ = renamed(
    __name__,
    {
        "TriecGrammar": "triec.integrations.vllm.backend:TriecStructuredOutputGrammar",
        "admit": "triec.integrations.vllm.routing:claims",
        "EngineState": "triec.integrations.vllm.backend:BackendState",
        "engine_state": "triec.integrations.vllm.backend:backend_state",
        # the patches of vLLM's internals, in their own module since issue 50
        "HOOK_NAMES": "triec.integrations.vllm.patches:HOOK_NAMES",
        "SparseXgrammar": "triec.integrations.vllm.patches:SparseXgrammar",
        "compile_hook": "triec.integrations.vllm.patches:compile_hook",
        "cpu_worker_hook": "triec.integrations.vllm.patches:cpu_worker_hook",
        "frontend_hook": "triec.integrations.vllm.patches:frontend_hook",
        "install": "triec.integrations.vllm.patches:install",
        "manager_init_hook": "triec.integrations.vllm.patches:manager_init_hook",
    },
)
