"""The patches of vLLM's internals that put triec's structured outputs (vLLM 0.32 to 0.34) in front of xgrammar.

vLLM has no registry of structured-output backends (vllm-project/vllm#50966),
so :mod:`triec.integrations.vllm.plugin` installs up to five replacements, each
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
* **beam_search** (a route) ``LLM.beam_search``: in an engine built with
  ``beams.engine_args(W)`` (it loads triec's beam processor), a ``structured_outputs``
  constraint triec serves runs :func:`triec.integrations.vllm.beams.beam_search`; the rest
  is vLLM's own search.

What triec serves: ``choice`` lists, literal-alternation ``regex``, ``json`` string
enums, artifacts by name (``{"x-triec-artifact": NAME}``, D21), and through the
schema layer (docs/decisions.md D23) vLLM's ``tool_choice="required"`` schema, the
tool-call structural tags whose begins carry the names (hermes, strict tools, one call
or many) and JSON schemas with large enums anywhere, in xgrammar's own whitespace and
on vLLM's own ``TokenizerInfo``, so their masks equal xgrammar's. Under
``disable_any_whitespace`` vLLM spells JSON with ``","`` and ``":"``, which no triec
grammar writes: JSON beyond string enums is xgrammar's then. The frontend admits
what triec must check itself (:func:`.routing.plan_json`); the rest keeps xgrammar's frontend
check and the engine decides. The frontend's decision is :mod:`.routing`'s, the engine's :mod:`.backend`'s; this
module only wraps vLLM's functions around them (:func:`install`). vLLM's classes and functions come from
:mod:`.internals`, never from vLLM's modules directly.
"""

from __future__ import annotations

import json
import logging
import time
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from triec.integrations.constraints import Delegate
from triec.integrations.vllm import internals
from triec.integrations.vllm.backend import (  # vLLM's classes, as the backend reads them
    StructuredOutputGrammar,
    StructuredOutputOptions,
    backend_state,
    triec_grammar,
)
from triec.integrations.vllm.routing import claims
from triec.runtime.bitmask import WORD_BITS
from triec.runtime.torch import SPARSE_WORDS, apply_bitmask_sparse

log = logging.getLogger("triec.vllm.backend")


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

    def __init__(self: Any, vllm_config: Any) -> None:  # noqa: N807 - it replaces the manager's __init__, named so
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
            original(logits, bitmask, vocab_size=vocab_size, indices=indices, **kw)  # in place: it returns nothing
            return
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


def beam_search_hook(original: Callable[..., Any]) -> Callable[..., Any]:
    """``LLM.beam_search`` that runs triec's beam search (:func:`triec.integrations.vllm.beams.beam_search`) where
    the engine was built with ``beams.engine_args(W)`` and ``params.structured_outputs`` is a constraint triec
    serves in beams; everything else (no constraint, another engine, a grammar) is vLLM's own search, unchanged.

    vLLM's loop cannot reach a logits processor with a beam's constraint: it chooses a structured-outputs backend
    by name among four, and sends each beam row with ``allowed_token_ids`` alone (no ``extra_args``), which the
    sampler applies before every logits processor (docs/python.md, "vLLM beam search")."""

    def beam_search(
        self: Any,
        prompts: Any,
        params: Any,
        lora_request: Any = None,
        use_tqdm: Any = False,
        concurrency_limit: int | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        from triec.integrations.vllm import beams

        so = getattr(params, "structured_outputs", None)
        # arguments triec's loop does not take (0.34's priority) go to vLLM's search, as given
        if args or kwargs or so is None or not beams.is_beam_engine(self) or not beams.serves(self, so):
            return original(self, prompts, params, lora_request, use_tqdm, concurrency_limit, *args, **kwargs)
        return beams.beam_search(self, prompts, params, lora_request=lora_request, concurrency_limit=concurrency_limit)

    _mark(beam_search, original)
    return beam_search


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
    if "beam_search" in hooks:
        llm = internals.offline_llm_class()
        if not getattr(llm.beam_search, "__triec__", False):
            llm.beam_search = beam_search_hook(llm.beam_search)


__all__ = [
    "HOOK_NAMES",
    "SparseXgrammar",
    "beam_search_hook",
    "compile_hook",
    "cpu_worker_hook",
    "frontend_hook",
    "install",
    "manager_init_hook",
]
