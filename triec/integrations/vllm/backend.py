"""vLLM's structured outputs (0.32 to 0.34) served by triec where it is exact, by xgrammar, unchanged, elsewhere.

vLLM has no registry of structured-output backends (vllm-project/vllm#50966),
so :mod:`triec.integrations.vllm.plugin` installs up to four replacements, each
checked on its own by :mod:`.internals` (docs/decisions.md D22):

* **frontend** (required) ``backend_xgrammar.validate_xgrammar_grammar`` (a module
  attribute every caller imports at call time): a constraint triec serves is
  admitted here (HTTP 400 with a one-line reason for a list over the limits, a
  bad artifact name, ...) and left as it is, so ``choice`` reaches the engine
  as CHOICE instead of xgrammar's EBNF; anything else goes to the original.
* **engine** (required) ``XgrammarBackend.compile_grammar``: CHOICE, REGEX, JSON and
  STRUCTURAL_TAG go to :class:`~triec.integrations.constraints.Constraints`,
  which returns a triec grammar or says delegate; delegated ones (and a choice
  triec unexpectedly cannot compile, as xgrammar's own EBNF) go to the original.
* **vocabulary** (an optimization) ``StructuredOutputManager.__init__``: the served
  vocabulary and its token automaton are built in a thread at engine start, not by
  the first request.
* **sparse_apply** (an optimization) the worker's host-logits bitmask application,
  where rows that set few words are gathered
  (:func:`triec.runtime.torch.apply_bitmask_sparse`, the runtime's one masking path) instead of
  unpacked: on 0.32 and 0.33 ``structured_output.utils.xgr`` (the module
  ``apply_grammar_bitmask`` calls xgrammar's kernel through), on 0.34
  ``CPUStructuredOutputsWorker.apply_grammar_bitmask`` (the torch path of CPUs
  without Triton). Device logits keep vLLM's kernel, unchanged.

What triec serves: ``choice`` lists, literal-alternation ``regex``, ``json`` string
enums, artifacts by name (``{"x-triec-artifact": NAME}``, D21), and through the
schema layer (docs/decisions.md D23) vLLM's ``tool_choice="required"`` schema, the
tool-call structural tags whose begins carry the names (hermes, strict tools, one call
or many) and JSON schemas with large enums anywhere, in xgrammar's own whitespace and
on vLLM's own ``TokenizerInfo``, so their masks equal xgrammar's. Under
``disable_any_whitespace`` vLLM spells JSON with ``","`` and ``":"``, which no triec
grammar writes: JSON beyond string enums is xgrammar's then. The frontend admits
what triec must check itself (:func:`plan_json`); the rest keeps xgrammar's frontend
check and the engine decides. vLLM's classes and functions come from
:mod:`.internals`, never from vLLM's modules directly.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
import types
from collections import OrderedDict
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from triec._compat import renamed
from triec.errors import RequestError, TriecError
from triec.integrations.constraints import (
    ARTIFACT_KEYWORD,
    Constraints,
    Delegate,
    TableGrammar,
    literal_alternation,
    string_enum,
)
from triec.integrations.limits import Limits
from triec.integrations.serving import STOPS_HINT, ServedModel, known_server, served_vocabulary, store
from triec.integrations.vllm import internals
from triec.integrations.vllm.structured import RequestGrammar, tagged_tools
from triec.runtime.bitmask import WORD_BITS
from triec.runtime.torch import SPARSE_WORDS, apply_bitmask_sparse
from triec.schema.tags import is_legacy, parse_structural_tag
from triec.schema.tools import parse_tools, tools_from_required_schema

log = logging.getLogger("triec.vllm.backend")

if TYPE_CHECKING:  # vLLM's classes, read from the installed vLLM by internals: Any to a type checker
    StructuredOutputGrammar = Any
    StructuredOutputOptions = Any
    VLLMClientError = Any
else:
    StructuredOutputGrammar = internals.grammar_base()
    StructuredOutputOptions = internals.options()
    VLLMClientError = internals.client_error()

COMPACT_ENV = "TRIEC_VLLM_COMPACT_JSON"
"""``1``: serve JSON objects and tool calls in triec's compact spelling (``", "``, ``": "``) where vLLM allows any
whitespace (its default): a narrowing, every output still valid per the schema. Off by default (exact only)."""


class RequestRefused(VLLMClientError, RequestError):
    """A constraint triec would serve but refuses (over the limits, a bad artifact): HTTP 400, one line.

    A ``VLLMClientError`` that is *not* a ``VLLMValidationError``: with backend
    ``auto``, vLLM catches ``VLLMValidationError`` from the xgrammar check and
    retries the request with guidance (sampling_params.py, ``_validate_structured_outputs``),
    which would serve what the limits refuse; this passes through and the server
    answers 400 (``VLLMClientError``, entrypoints/serve/exception_handling).
    """


def compact_ok(any_whitespace: bool) -> bool:
    """Whether triec's JSON spelling is one vLLM's xgrammar backend allows: with any whitespace and the opt-in only.

    With ``disable_any_whitespace`` vLLM spells JSON ``","`` and ``":"`` (xgrammar
    separators), triec ``", "`` and ``": "``: different languages, so delegated.
    """
    return any_whitespace and os.environ.get(COMPACT_ENV, "") == "1"


# ----------------------------------------------------------------------------- the grammar object


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


# ----------------------------------------------------------------------------- the decision


def plan_json(doc: Any, any_whitespace: bool) -> str | None:
    """What the frontend does with a ``json`` constraint: ``"artifact"``, ``"enum"``, ``"object"``, ``"tools"``
    (triec admits it), or None (xgrammar's own check admits it; the engine may still serve it through the schema
    layer, e.g. a schema with large enums anywhere, or delegate).

    ``tests/test_vllm_backend_core.py`` checks the frontend and the engine agree on the shapes admitted here.
    """
    if isinstance(doc, dict) and ARTIFACT_KEYWORD in doc:
        return "artifact"
    if string_enum(doc) is not None:
        return "enum"
    from triec.compiler.json_schema import is_object_schema, parse_schema

    if is_object_schema(doc) and compact_ok(any_whitespace):
        try:
            parse_schema(doc)
            return "object"
        except TriecError:
            pass
    if any_whitespace and tools_from_required_schema(doc) is not None:
        return "tools"  # exact with any whitespace (xgrammar's argument grammars), triec's spelling with the opt-in
    return None


def _utf8(values: list[str]) -> bool:
    try:
        for v in values:
            v.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _claim_values(values: Any, kind: str, limits: Limits) -> bool:
    """A list triec will compile: RequestRefused for bad input, False where xgrammar must serve it."""
    if not isinstance(values, list) or not values:
        raise RequestRefused(f"{kind} must be a non-empty list of strings")
    bad = next((v for v in values if not isinstance(v, str)), None)
    if bad is not None:
        raise RequestRefused(f"{kind} values must be strings, not {type(bad).__name__} {bad!r:.60}")
    try:
        limits.check(values, kind)
    except RequestError as exc:
        raise RequestRefused(str(exc)) from None
    return _utf8(values)  # lone surrogates: no UTF-8 text for triec; xgrammar decides, as without triec


_FRONTEND: dict[tuple[Any, ...], Constraints] = {}
_FRONTEND_LOCK = threading.Lock()


def _frontend_constraints(served: ServedModel) -> Constraints:
    """The frontend's Constraints for a served model: artifacts admitted against it (by the serving core)."""
    key = (served.tokenizer, served.vocab_size, served.eos_token_id, served.generation_eos_ids)
    with _FRONTEND_LOCK:
        found = _FRONTEND.get(key)
        if found is None:
            found = _FRONTEND[key] = Constraints(
                served.vocabulary(),
                tokenizer=served.tokenizer,
                served=served,
                fix_stops=STOPS_HINT,
                artifact_store=store,
            )
        return found


def claims(
    structured_outputs: Any,
    served: ServedModel | None = None,
    any_whitespace: bool = True,
    stops: Iterable[int] | None = None,
) -> bool:
    """The frontend decision for one request: True when triec serves it (admitted here), False to delegate.

    Raises :class:`RequestRefused` for a constraint triec would serve but
    cannot (the request gets HTTP 400 and the engine never sees it). An
    artifact by name is admitted by the serving core for ``served`` and the
    request's stop ids ``stops``, as the processors admit theirs.
    """
    so = structured_outputs
    limits = Limits.from_env()
    if so.choice is not None:
        return _claim_values(so.choice, "structured_outputs.choice", limits)
    if so.regex is not None:
        values = literal_alternation(so.regex)
        return values is not None and _claim_values(values, "structured_outputs.regex", limits)
    if so.json is not None:
        doc = so.json
        if isinstance(doc, str):
            try:
                doc = json.loads(doc)
            except (ValueError, RecursionError):
                return False  # xgrammar reports it as it always does
        plan = plan_json(doc, any_whitespace)
        if plan == "enum":
            return _claim_values(string_enum(doc), "structured_outputs.json enum", limits)
        if plan == "artifact":
            try:
                _frontend_constraints(known_server(served)).json_schema(doc, stops=stops)
            except RequestError as exc:
                raise RequestRefused(str(exc)) from None
            except Exception as exc:  # noqa: BLE001  the served tokenizer: decoded here for the artifact checks
                raise RequestRefused(f"triec cannot read the served tokenizer: {type(exc).__name__}: {exc}") from None
            return True
        if plan == "tools":
            registry = tools_from_required_schema(doc)
            assert registry is not None
            _claim_tools([{"name": t.name, "parameters": t.parameters} for t in registry[0]])
            return True
        if plan == "object":
            from triec.compiler.json_schema import parse_schema

            return _claim_values(parse_schema(doc)[0], "structured_outputs.json enum", limits)
        return False
    if so.structural_tag is not None:
        return _claim_tag(so.structural_tag)
    return False


def legacy_with_at_least_one(doc: Any) -> bool:
    """A legacy ``{"structures", "triggers"}`` tag that says ``at_least_one``: vLLM compiles it without (xgrammar's
    legacy call takes none), SGLang with; the schema layer reads SGLang's meaning, so vLLM's stays xgrammar's."""
    return is_legacy(doc) and "at_least_one" in doc


def _claim_tag(tag: Any) -> bool:
    """A structural tag the schema layer serves (tool calls whose begins carry the names, e.g. vLLM's strict
    hermes tags, any number of calls): its own reading of the tag and of every tool's arguments schema."""
    try:
        doc = json.loads(tag) if isinstance(tag, str) else tag
    except (ValueError, RecursionError):
        return False
    if legacy_with_at_least_one(doc):
        return False
    try:
        parse_structural_tag(doc)
    except TriecError:
        return False  # a shape triec does not serve: xgrammar's check and engine, unchanged
    calls = tagged_tools(doc)
    if calls is not None:
        _claim_tools(calls.tools)
    return True


def _claim_tools(tools: list[dict[str, Any]]) -> None:
    """A registry the schema layer will compile: its own reading of every entry (RequestRefused names the bad one)."""
    try:
        parse_tools(tools, "tools", "xgrammar")
    except TriecError as exc:
        raise RequestRefused(str(exc)) from None


# ----------------------------------------------------------------------------- the engine side


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


# ----------------------------------------------------------------------------- the replacements


def _mark(hook: Callable[..., Any], original: Callable[..., Any]) -> None:
    """Set ``hook.__wrapped__`` (functools' name for what a wrapper wraps) and ``hook.__triec__`` (installed)."""
    vars(hook).update(__wrapped__=original, __triec__=True)


def frontend_hook(original: Callable[[Any], None]) -> Callable[[Any], None]:
    """``validate_xgrammar_grammar`` that admits what triec serves and leaves it as it is."""

    def validate_xgrammar_grammar(sampling_params: Any) -> None:
        so = sampling_params.structured_outputs
        if so is None:
            return original(sampling_params)
        found = internals.frontend()
        try:
            served = None if found is None else found.served_model()
        except Exception as exc:  # noqa: BLE001  a model config triec cannot read: artifacts are refused, lists served
            log.debug("triec: the frontend's served model is unknown: %s", exc)
            served = None
        so_config = None if found is None else found.structured_outputs_config
        any_ws = not bool(getattr(so_config, "disable_any_whitespace", False))
        stops = None if served is None else served.stop_ids(sampling_params)
        if claims(so, served, any_ws, stops):
            return None  # triec's: no EBNF rewrite, no xgrammar parse in the frontend
        return original(sampling_params)

    _mark(validate_xgrammar_grammar, original)
    return validate_xgrammar_grammar


def compile_hook(
    original: Callable[..., StructuredOutputGrammar],
    tag_attr: str = "compiler",
) -> Callable[..., StructuredOutputGrammar]:
    """``XgrammarBackend.compile_grammar`` that builds a triec grammar where it is exact, xgrammar's elsewhere.

    ``tag_attr``: the backend's compiler of structural tags (:func:`.internals.tag_compiler`: 0.33's
    ``full_vocab_compiler``).
    """
    choice_as_grammar = internals.choice_as_grammar

    def compile_grammar(
        self: Any, request_type: StructuredOutputOptions, grammar_spec: str, stop_token_ids: set[int] | None = None
    ) -> StructuredOutputGrammar:
        t = time.perf_counter()
        state = backend_state(self.vllm_config.model_config, self.vocab_size)
        if request_type in (StructuredOutputOptions.JSON, StructuredOutputOptions.STRUCTURAL_TAG):
            try:
                state.use_tokenizer_info(self.compiler, getattr(self, tag_attr))
            except Exception as exc:  # noqa: BLE001  triec_grammar reports a vocabulary that failed; xgrammar serves
                log.debug("triec: vLLM's tokenizer info not taken: %s", exc)
        served = triec_grammar(state, request_type, grammar_spec, stop_token_ids, not self.disable_any_whitespace)
        if not isinstance(served, Delegate):
            log.debug(
                "triec: %s served by triec (%s) in %.1f ms",
                request_type.name,
                served.key[:16],
                (time.perf_counter() - t) * 1e3,
            )
            return served
        log.debug("triec: %s delegated to xgrammar (%s)", request_type.name, served.reason)
        if request_type == StructuredOutputOptions.CHOICE:  # what vLLM's frontend would have rewritten it to
            return original(
                self, StructuredOutputOptions.GRAMMAR, choice_as_grammar(json.loads(grammar_spec)), stop_token_ids
            )
        return original(self, request_type, grammar_spec, stop_token_ids)

    _mark(compile_grammar, original)
    return compile_grammar


def manager_init_hook(original: Callable[..., None]) -> Callable[..., None]:
    """``StructuredOutputManager.__init__`` that starts building the served vocabulary (never raises)."""

    def __init__(self: Any, vllm_config: Any) -> None:
        original(self, vllm_config)
        try:
            mc = vllm_config.model_config
            if not mc.skip_tokenizer_init:
                backend_state(mc)
        except Exception as exc:  # noqa: BLE001  the first request builds it then
            log.warning("triec: vocabulary not prepared at start-up: %s", exc)

    _mark(__init__, original)
    return __init__


class SparseXgrammar(types.ModuleType):
    """xgrammar as ``structured_output.utils`` sees it, with host bitmasks of sparse rows applied by gathering."""

    def __init__(self, real: Any) -> None:
        super().__init__("xgrammar")
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def apply_token_bitmask_inplace(
        self,
        logits: torch.Tensor,
        bitmask: torch.Tensor,
        *,
        vocab_size: int | None = None,
        indices: Any = None,
        **kw: Any,
    ) -> None:
        original = self._real.apply_token_bitmask_inplace
        if kw or not (logits.is_cpu and bitmask.is_cpu and logits.dim() == 2 and bitmask.dim() == 2):
            return original(logits, bitmask, vocab_size=vocab_size, indices=indices, **kw)
        width = min(logits.shape[1], bitmask.shape[1] * WORD_BITS) if vocab_size is None else int(vocab_size)

        def dense(rows: Any) -> None:
            original(logits, bitmask, vocab_size=vocab_size, indices=rows)

        apply_bitmask_sparse(logits, bitmask, indices, width, dense)
        return None


def cpu_worker_hook(original: Callable[..., None]) -> Callable[..., None]:
    """0.34's ``CPUStructuredOutputsWorker.apply_grammar_bitmask`` with sparse rows gathered on host logits.

    Each grammar request owns ``mask_stride`` bitmask rows, row ``p`` masking logits row ``cu_num_logits[r] + p``
    while ``p`` is below the request's logits count. Requests whose active rows are all sparse (or all -1) are
    masked here; any request with a dense row goes to the original, with its own rows, unchanged.
    """

    def apply_grammar_bitmask(
        self: Any, logits: torch.Tensor, input_batch: Any, grammar_req_ids: list[str], grammar_bitmask: np.ndarray
    ) -> None:
        if not grammar_req_ids or not logits.is_cpu or logits.dim() != 2:
            return original(self, logits, input_batch, grammar_req_ids, grammar_bitmask)
        stride = int(self.mask_stride)
        bm = np.asarray(grammar_bitmask)
        index = {r: i for i, r in enumerate(input_batch.req_ids)}
        req = np.repeat(np.fromiter((index[r] for r in grammar_req_ids), np.int64, len(grammar_req_ids)), stride)
        pos = np.tile(np.arange(stride, dtype=np.int64), len(grammar_req_ids))
        cu = input_batch.cu_num_logits.numpy().astype(np.int64)
        active = pos < cu[req + 1] - cu[req]
        nonzero = (bm != 0).sum(axis=1)
        dense_row = active & (nonzero > SPARSE_WORDS) & ~(bm == -1).all(axis=1)
        dense_req = dense_row.reshape(len(grammar_req_ids), stride).any(axis=1)
        if dense_req.all():
            return original(self, logits, input_batch, grammar_req_ids, grammar_bitmask)
        if dense_req.any():
            blocks = np.repeat(dense_req, stride)
            original(
                self,
                logits,
                input_batch,
                [r for r, d in zip(grammar_req_ids, dense_req.tolist(), strict=True) if d],
                np.ascontiguousarray(bm[blocks]),
            )
        mine = active & ~np.repeat(dense_req, stride)
        rows = cu[req[mine]] + pos[mine]
        placed = np.full((logits.shape[0], bm.shape[1]), -1, dtype=np.int32)
        placed[rows] = bm[mine]
        width = min(logits.shape[1], bm.shape[1] * WORD_BITS)
        apply_bitmask_sparse(logits, torch.from_numpy(placed), rows.tolist(), width, _no_dense)
        return None

    _mark(apply_grammar_bitmask, original)
    return apply_grammar_bitmask


def _no_dense(rows: Any) -> None:
    raise AssertionError(f"rows {rows} are dense: they were handed to vLLM's own worker")


HOOK_NAMES = tuple(h.name for h in internals.HOOKS)


def install(hooks: tuple[str, ...] = HOOK_NAMES) -> None:
    """Install the named replacements (idempotent). :mod:`.plugin` calls it with the hooks whose checks passed
    (:func:`.internals.plan`); the frontend and engine hooks are always among them."""
    if "frontend" in hooks:
        from vllm.v1.structured_output import backend_xgrammar

        if not getattr(backend_xgrammar.validate_xgrammar_grammar, "__triec__", False):
            backend_xgrammar.validate_xgrammar_grammar = frontend_hook(backend_xgrammar.validate_xgrammar_grammar)
    if "engine" in hooks:
        xb = internals.xgrammar_backend()
        if not getattr(xb.compile_grammar, "__triec__", False):
            xb.compile_grammar = compile_hook(xb.compile_grammar, internals.tag_compiler(xb) or "compiler")
    if "vocabulary" in hooks:
        manager = internals.manager_class()
        if not getattr(manager.__init__, "__triec__", False):
            manager.__init__ = manager_init_hook(manager.__init__)
    if "sparse_apply" in hooks:
        if internals.sparse_site() == "utils.xgr":
            utils = internals.structured_output_utils()
            if not isinstance(utils.xgr, SparseXgrammar):
                import xgrammar

                utils.xgr = SparseXgrammar(xgrammar)
        else:
            worker = internals.cpu_worker_class()
            if not getattr(worker.apply_grammar_bitmask, "__triec__", False):
                worker.apply_grammar_bitmask = cpu_worker_hook(worker.apply_grammar_bitmask)


__all__ = [
    "COMPACT_ENV",
    "HOOK_NAMES",
    "BackendState",
    "RequestRefused",
    "SparseXgrammar",
    "TriecStructuredOutputGrammar",
    "backend_state",
    "claims",
    "compact_ok",
    "compile_hook",
    "cpu_worker_hook",
    "frontend_hook",
    "install",
    "manager_init_hook",
    "plan_json",
    "triec_grammar",
]

__getattr__ = renamed(
    __name__,
    {
        "TriecGrammar": "triec.integrations.vllm.backend:TriecStructuredOutputGrammar",
        "admit": "triec.integrations.vllm.backend:claims",
        "EngineState": "triec.integrations.vllm.backend:BackendState",
        "engine_state": "triec.integrations.vllm.backend:backend_state",
    },
)
