"""Every name, signature and call site of vLLM's own code that triec relies on, read in one room.

vLLM has no public interface for a structured-outputs backend or for a logits
processor that survives its releases: triec replaces private attributes and
subclasses private classes. Each of those is read here, from vLLM's code as it
is installed, never from its version, so a release's differences are found
(:func:`plan`) and mended in this module; :mod:`.backend`, :mod:`.routing`,
:mod:`.patches`, :mod:`.plugin`, :mod:`.v1` and :mod:`.v2` ask it, never vLLM's internals directly.

The backend's replacements are :data:`HOOKS`. Two are required (without them
nothing triec serves is exact): the frontend's admission and the engine's
``compile_grammar``. Two are optimizations: the start-up vocabulary build and
the worker's sparse application of host bitmasks. One is a route: ``LLM.beam_search``
sent to triec's beam search in engines built for it. A release where an
optional hook's call site moved keeps the backend on without that one hook and
says so in one line. :func:`plan` never raises: whatever moved becomes its
one-line reason. Nothing here imports vLLM until a function is called.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from triec.integrations.serving import ServedModel

WINDOW = ("0.32", "0.33", "0.34")
"""vLLM release lines the backend's replacements were written and row-tested against (docs/decisions.md D22).

Adding one: append it, run ``TRIEC_VLLM_RELEASES=X.Y nox -s vllm_classes`` (that release alone) and mend
here whatever :func:`plan` names; ``python tools/vllm_release.py check X.Y.Z`` prints it for any release."""


def version() -> str:
    import vllm

    return str(getattr(vllm, "__version__", "?"))


def in_window(release: str) -> bool:
    """Whether ``release`` (a version string) is of a line in :data:`WINDOW`."""
    return any(release == line or release.startswith(line + ".") for line in WINDOW)


def _params(fn: Callable[..., Any]) -> list[str]:
    return list(inspect.signature(fn).parameters)


def _source(fn: Callable[..., Any]) -> str:
    return inspect.getsource(fn)


def _first(checks: list[tuple[Callable[[], bool], str]]) -> str | None:
    """The first check that fails, as ``"<what> differs"``; a check that raises fails with what it raised."""
    for ok, what in checks:
        try:
            if not ok():
                return f"{what} differs"
        except Exception as exc:  # noqa: BLE001  a name or a module that moved
            return f"{what}: {_one_line(exc)}"
    return None


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


# ----------------------------------------------------------------------------- the classes triec uses
# vLLM's classes are typed Any: their attributes are read, replaced and checked here at run time, and the lint
# environment has no vLLM (a type checker would read them as Any there all the same).


def grammar_base() -> Any:
    """``StructuredOutputGrammar``: the class a triec grammar subclasses."""
    from vllm.v1.structured_output.backend_types import StructuredOutputGrammar

    return StructuredOutputGrammar


def options() -> Any:
    """``StructuredOutputOptions``: the request kinds (CHOICE, REGEX, JSON, STRUCTURAL_TAG, GRAMMAR, ...)."""
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    return StructuredOutputOptions


def client_error() -> Any:
    """``VLLMClientError``: raised from the frontend, answered with HTTP 400 (and not retried by ``auto``)."""
    from vllm.exceptions import VLLMClientError

    return VLLMClientError


def choice_as_grammar(values: list[str]) -> str:
    """The EBNF vLLM's frontend rewrites a ``choice`` into for xgrammar (what a delegated choice compiles)."""
    from vllm.v1.structured_output.utils import choice_as_grammar as rewrite

    return str(rewrite(values))


def xgrammar_backend() -> Any:
    from vllm.v1.structured_output.backend_xgrammar import XgrammarBackend

    return XgrammarBackend


def manager_class() -> Any:
    from vllm.v1.structured_output import StructuredOutputManager

    return StructuredOutputManager


def tag_compiler(backend_class: Any = None) -> str | None:
    """The ``XgrammarBackend`` attribute holding the compiler structural tags are compiled with, read from its code.

    vLLM 0.32 has one compiler (``compiler``); 0.33 and 0.34 compile JSON on a vocabulary without special tokens
    (``compiler``) and structural tags on the full one (``full_vocab_compiler``). triec's tag rows must come
    from the same tokenizer info as vLLM's. None: neither spelling is there.
    """
    source = _source((backend_class or xgrammar_backend()).compile_grammar)
    for name in ("full_vocab_compiler", "compiler"):
        if f"self.{name}.compile_structural_tag(" in source:
            return name
    return None


def draft_trimmer(manager: Any) -> Callable[[Any, list[int]], list[int]]:
    """The manager's method that cuts a request's draft tokens before scheduling.

    0.32 and 0.33: ``validate_tokens`` (the grammar-valid prefix); 0.34: ``trim_spec_tokens`` (that prefix plus
    the first refused token, nothing once the grammar terminated). Both ask the grammar's ``validate_tokens``.
    """
    trimmer: Callable[[Any, list[int]], list[int]] = (
        getattr(manager, "trim_spec_tokens", None) or manager.validate_tokens
    )
    return trimmer


# ----------------------------------------------------------------------------- offline beam search


def beam_search_utils() -> Any:
    """vLLM's beam-search types (``BeamSearchSequence``, ``BeamSearchInstance``, ``BeamSearchOutput``,
    ``create_sort_beams_key_function``): ``vllm/entrypoints/generate/beam_search/utils.py`` on 0.32 to 0.34."""
    return importlib.import_module("vllm.entrypoints.generate.beam_search.utils")


class OfflineRunner:
    """The three steps of ``LLM.beam_search`` (``beam_search/offline.py``) that triec's loop shares with vLLM's:
    prompts to engine inputs (``_preprocess_cmpl``), LoRA requests per prompt (``_lora_request_to_seq``) and one
    batch of one-token requests (``_render_and_run_requests``), all private methods of ``LLM`` (0.32 to 0.34)."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm

    def inputs(self, prompts: Any) -> list[Any]:
        return list(self.llm._preprocess_cmpl(prompts))

    def loras(self, lora_request: Any, n: int) -> list[Any]:
        return list(self.llm._lora_request_to_seq(lora_request, n))

    def run(self, beams: list[Any], params: list[Any]) -> list[Any]:
        from vllm import RequestOutput

        return list(
            self.llm._render_and_run_requests(
                prompts=(b.get_prompt() for b in beams),
                params=params,
                output_type=RequestOutput,
                lora_requests=[b.lora_request for b in beams],
                use_tqdm=False,
            )
        )


def offline_llm_class() -> Any:
    """``vllm.LLM``: the class whose ``beam_search`` the ``beam_search`` hook routes (:func:`.patches.beam_search_hook`)."""
    from vllm.entrypoints.llm import LLM

    return LLM


def _check_beam_search() -> str | None:
    """What triec's loop (:func:`triec.integrations.vllm.beams.beam_search`) and its processors read: ``LLM.beam_search``'s
    arguments, :class:`OfflineRunner`'s three private methods, the sort key (:func:`sort_beams_key`: either form) and
    a logits-processor interface (V1's, or Model Runner V2's on 0.34)."""
    llm = offline_llm_class()
    utils = beam_search_utils()
    return _first(
        [
            (
                lambda: (
                    _params(llm.beam_search)[:6]
                    == ["self", "prompts", "params", "lora_request", "use_tqdm", "concurrency_limit"]
                ),
                "LLM.beam_search(self, prompts, params, lora_request, use_tqdm, concurrency_limit)",
            ),
            (
                lambda: all(
                    callable(getattr(llm, m, None))
                    for m in ("_preprocess_cmpl", "_lora_request_to_seq", "_render_and_run_requests")
                ),
                "LLM._preprocess_cmpl / _lora_request_to_seq / _render_and_run_requests",
            ),
            (
                lambda: (
                    _params(utils.create_sort_beams_key_function)
                    in (["eos_token_id", "length_penalty"], ["length_penalty"])
                ),
                "create_sort_beams_key_function(eos_token_id, length_penalty) or (length_penalty)",
            ),
            (
                lambda: has_v1_processors() or callable(v2_processor_base()),
                "a logits-processor interface (V1's vllm.v1.sample.logits_processor or Model Runner V2's)",
            ),
        ]
    )


def sort_beams_key(eos_token_id: int | None, length_penalty: float) -> Callable[[Any], float]:
    """vLLM's beam sort key: ``create_sort_beams_key_function(eos_token_id, length_penalty)`` on 0.32 and 0.33,
    ``(length_penalty)`` on 0.34 (which counts a final EOS in the length, read from the beam's ``logprobs``)."""
    make = beam_search_utils().create_sort_beams_key_function
    key: Callable[[Any], float] = (
        make(length_penalty) if _params(make) == ["length_penalty"] else make(eos_token_id, length_penalty)
    )
    return key


def has_v1_processors() -> bool:
    """Whether this vLLM has the V1 logits-processor interface (0.32, 0.33; 0.34 removed it)."""
    return importlib.util.find_spec("vllm.v1.sample.logits_processor") is not None


# ----------------------------------------------------------------------------- the processors' interfaces


def v1_processor_interface() -> Any:
    """vLLM's V1 logits-processor module (``LogitsProcessor``, ``BatchUpdate``, ``MoveDirectionality``).

    0.34 removed it with the legacy model runner: the ImportError then says so in one line and names what serves.
    """
    try:
        return importlib.import_module("vllm.v1.sample.logits_processor")
    except ImportError:
        raise ImportError(
            f"vLLM {version()} has no V1 logits-processor interface (vllm.v1.sample.logits_processor, removed in "
            "0.34 with the legacy model runner): use triec.integrations.vllm.TriecLogitsProcessorV2 on CUDA (Model "
            "Runner V2), or the structured-outputs backend (TRIEC_VLLM_BACKEND=1: choice lists and "
            '{"x-triec-artifact": NAME} schemas) on every platform'
        ) from None


def v2_processor_base() -> Any:
    """Model Runner V2's ``LogitsProcessor`` (``add_request``, ``apply_staged_writes``, ``apply(logits, ctx)``)."""
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcessor

    return LogitsProcessor


# ----------------------------------------------------------------------------- the frontend's objects


@dataclass(frozen=True)
class Frontend:
    """What vLLM's frontend holds for the request it admits: the model's configuration, the structured-outputs
    configuration (None where it was not found) and the tokenizer's EOS id (None where there is none)."""

    model_config: Any
    structured_outputs_config: Any
    eos_token_id: int | None

    def served_model(self) -> ServedModel:
        """The served model as this frontend sees it (:func:`~triec.integrations.serving.served_model_from_config`),
        built once per model configuration and EOS id (reading the generation config costs a file read)."""
        key = (id(self.model_config), self.eos_token_id)
        with _SERVED_LOCK:
            found = _SERVED.get(key)
            if found is None or found[0] is not self.model_config:
                from triec.integrations.serving import served_model_from_config

                served = served_model_from_config(self.model_config, self.eos_token_id)
                found = _SERVED[key] = (self.model_config, served)
                while len(_SERVED) > 16:
                    _SERVED.popitem(last=False)
            return found[1]


_SERVED: OrderedDict[tuple[int, int | None], tuple[Any, ServedModel]] = OrderedDict()  # the config kept: ids stay its
_SERVED_LOCK = threading.Lock()

_PROCESSOR_ATTRS = ("model_config", "renderer", "generation_config_fields")


def frontend(max_depth: int = 16) -> Frontend | None:
    """The frontend admitting the current request, read from the calling frames; None where none is found.

    The one stack walker for vLLM's frontend. vLLM calls triec's admission (a logits processor's
    ``validate_params``, the backend's ``validate_xgrammar_grammar``) with the request's parameters alone; a
    caller up the stack holds the rest: ``SamplingParams._validate_structured_outputs(self, model_config,
    structured_outputs_config, tokenizer)`` as locals, or the ``InputProcessor`` itself (``self`` with
    ``model_config``, ``renderer`` and ``generation_config_fields``), whichever comes first.
    """
    frame: Any = sys._getframe(1)
    for _ in range(max_depth):
        if frame is None:
            return None
        local = frame.f_locals
        if "model_config" in local and "structured_outputs_config" in local:
            eos = getattr(local.get("tokenizer"), "eos_token_id", None)
            eos = eos if isinstance(eos, int) else None
            return Frontend(local["model_config"], local["structured_outputs_config"], eos)
        owner = local.get("self")
        if owner is not None and all(hasattr(owner, a) for a in _PROCESSOR_ATTRS):
            try:
                eos = owner.renderer.get_eos_token_id()
            except Exception:  # noqa: BLE001  a renderer without a tokenizer
                eos = None
            return Frontend(
                owner.model_config,
                getattr(owner, "structured_outputs_config", None),
                eos if isinstance(eos, int) else None,
            )
        frame = frame.f_back
    return None


# ----------------------------------------------------------------------------- the backend's hooks


def _check_frontend() -> str | None:
    from vllm import exceptions
    from vllm.sampling_params import SamplingParams
    from vllm.v1.structured_output import backend_xgrammar, request

    def validate() -> str:
        return _source(SamplingParams._validate_structured_outputs)

    return _first(
        [
            (
                lambda: _params(backend_xgrammar.validate_xgrammar_grammar) == ["sampling_params"],
                "validate_xgrammar_grammar(sampling_params)",
            ),
            (
                lambda: (
                    _params(SamplingParams._validate_structured_outputs)
                    == ["self", "model_config", "structured_outputs_config", "tokenizer"]
                ),
                "SamplingParams._validate_structured_outputs(self, model_config, structured_outputs_config, tokenizer)",
            ),
            (
                lambda: "import validate_xgrammar_grammar" in validate() and "except VLLMValidationError" in validate(),
                "the frontend's call of validate_xgrammar_grammar",
            ),
            (
                lambda: issubclass(exceptions.VLLMValidationError, exceptions.VLLMClientError),
                "VLLMClientError / VLLMValidationError",
            ),
            (
                lambda: "StructuredOutputOptions.CHOICE, json_str" in _source(request.get_structured_output_key),
                "CHOICE keys as a JSON list",
            ),
        ]
    )


def _check_engine() -> str | None:
    from vllm.v1.structured_output import backend_types, backend_xgrammar

    xb = backend_xgrammar.XgrammarBackend
    manager = manager_class()

    def reasoning_ends() -> bool:  # 0.33+: asks the grammar about single implicit reasoning-end tokens
        found = getattr(manager, "_masked_reasoning_ends", None)
        return found is None or "grammar.validate_tokens([token_id])" in _source(found)

    def drafts() -> bool:  # whichever method trims drafts asks the grammar's validate_tokens
        trim = getattr(manager, "trim_spec_tokens", None) or getattr(manager, "validate_tokens", None)
        return trim is not None and "grammar.validate_tokens(" in _source(trim)

    return _first(
        [
            (
                lambda: _params(xb.compile_grammar) == ["self", "request_type", "grammar_spec", "stop_token_ids"],
                "XgrammarBackend.compile_grammar(self, request_type, grammar_spec, stop_token_ids)",
            ),
            (lambda: tag_compiler(xb) is not None, "XgrammarBackend.compile_grammar's structural-tag compiler"),
            (
                lambda: "self.disable_any_whitespace" in _source(xb.__post_init__),
                "XgrammarBackend.disable_any_whitespace",
            ),
            (
                lambda: (
                    set(backend_types.StructuredOutputGrammar.__abstractmethods__)
                    == {"accept_tokens", "validate_tokens", "rollback", "fill_bitmask", "is_terminated", "reset"}
                ),
                "StructuredOutputGrammar's abstract methods",
            ),
            (
                lambda: all(
                    hasattr(backend_types.StructuredOutputOptions, n)
                    for n in ("CHOICE", "REGEX", "JSON", "STRUCTURAL_TAG", "GRAMMAR")
                ),
                "StructuredOutputOptions members",
            ),
            (
                lambda: callable(importlib.import_module("vllm.v1.structured_output.utils").choice_as_grammar),
                "utils.choice_as_grammar",
            ),
            (reasoning_ends, "StructuredOutputManager._masked_reasoning_ends's call of validate_tokens"),
            (drafts, "StructuredOutputManager's draft trimming (validate_tokens / trim_spec_tokens)"),
        ]
    )


def _check_vocabulary() -> str | None:
    return _first(
        [
            (
                lambda: _params(manager_class().__init__) == ["self", "vllm_config"],
                "StructuredOutputManager.__init__(self, vllm_config)",
            ),
        ]
    )


CPU_WORKER = "vllm.v1.worker.cpu.structured_outputs"
"""0.34: the module of ``CPUStructuredOutputsWorker``, the host-logits ``apply_grammar_bitmask`` (torch, no Triton)."""


def sparse_site() -> str:
    """Where host bitmasks are applied, as the sparse hook must wrap it: ``"utils.xgr"`` (0.32, 0.33: the module
    ``apply_grammar_bitmask`` calls xgrammar's kernel through) or ``"cpu_worker"`` (0.34:
    ``CPUStructuredOutputsWorker.apply_grammar_bitmask``). Raises LookupError naming what it looked for."""
    utils = structured_output_utils()
    apply = getattr(utils, "apply_grammar_bitmask", None)
    if apply is not None:
        if hasattr(utils, "xgr") and "xgr.apply_token_bitmask_inplace(logits" in _source(apply):
            return "utils.xgr"
        raise LookupError("apply_grammar_bitmask's call of xgr.apply_token_bitmask_inplace differs")
    try:
        worker = cpu_worker_class()
    except (ImportError, AttributeError):
        raise LookupError(
            "no host bitmask path: neither structured_output.utils.apply_grammar_bitmask (0.32, "
            "0.33) nor CPUStructuredOutputsWorker.apply_grammar_bitmask (0.34)"
        ) from None
    source = _source(worker.apply_grammar_bitmask)
    ok = _params(worker.apply_grammar_bitmask) == [
        "self",
        "logits",
        "input_batch",
        "grammar_req_ids",
        "grammar_bitmask",
    ] and all(s in source for s in ("self.mask_stride", "input_batch.cu_num_logits", "input_batch.req_ids"))
    if not ok:
        raise LookupError(
            "CPUStructuredOutputsWorker.apply_grammar_bitmask(self, logits, input_batch, "
            "grammar_req_ids, grammar_bitmask) and its rows (mask_stride, cu_num_logits) differ"
        )
    return "cpu_worker"


def _check_sparse() -> str | None:
    try:
        sparse_site()
    except LookupError as exc:
        return str(exc)
    return None


def cpu_worker_class() -> Any:
    return importlib.import_module(CPU_WORKER).CPUStructuredOutputsWorker


def structured_output_utils() -> Any:
    return importlib.import_module("vllm.v1.structured_output.utils")


@dataclass(frozen=True)
class Hook:
    """One of the backend's replacements: what it replaces, whether the backend can be on without it, its check."""

    name: str
    required: bool
    replaces: str
    check: Callable[[], str | None] = field(repr=False)

    def mismatch(self) -> str | None:
        """None when this vLLM has what the hook relies on, else what differs (one line; never raises)."""
        try:
            return self.check()
        except Exception as exc:  # noqa: BLE001  an import or a signature that moved
            return _one_line(exc)


HOOKS: tuple[Hook, ...] = (
    Hook("frontend", True, "backend_xgrammar.validate_xgrammar_grammar (admission)", _check_frontend),
    Hook("engine", True, "XgrammarBackend.compile_grammar (grammars)", _check_engine),
    Hook("vocabulary", False, "StructuredOutputManager.__init__ (the vocabulary built at start-up)", _check_vocabulary),
    Hook("sparse_apply", False, "the worker's host bitmask application (sparse rows gathered)", _check_sparse),
    Hook(
        "beam_search",
        False,
        "LLM.beam_search (triec's beam search in engines built with beams.engine_args)",
        _check_beam_search,
    ),
)
"""The backend's replacements, in the order they are checked."""


@dataclass(frozen=True)
class Plan:
    """What the backend does on this vLLM: off (and why), or on with the hooks that passed."""

    version: str
    off: str | None
    hooks: tuple[str, ...] = ()
    without: dict[str, str] = field(default_factory=dict)

    def lines(self) -> list[str]:
        """One line per hook left out (what it is, why), for the log."""
        by_name = {h.name: h for h in HOOKS}
        return [f"without {name} ({by_name[name].replaces}): {why}" for name, why in self.without.items()]


def plan(allow_untested: bool = False) -> Plan:
    """The backend's plan on the installed vLLM; never raises (an import failure is its one-line reason)."""
    try:
        release = version()
    except Exception as exc:  # noqa: BLE001
        return Plan("?", f"vLLM cannot be imported: {_one_line(exc)}")
    if not in_window(release) and not allow_untested:
        window = ", ".join(line + ".x" for line in WINDOW)
        return Plan(
            release,
            f"vLLM {release} is outside the versions it was tested on ({window}): install one of "
            "those, or set TRIEC_VLLM_ALLOW_UNTESTED=1 to run it on this one where every other "
            "check passes",
        )
    on, without = [], {}
    for hook in HOOKS:
        why = hook.mismatch()
        if why is None:
            on.append(hook.name)
        elif hook.required:
            return Plan(release, why)
        else:
            without[hook.name] = why
    return Plan(release, None, tuple(on), without)


def mismatch(allow_untested: bool = False) -> str | None:
    """None when the backend can be on with this vLLM, else why not (one line; never raises)."""
    return plan(allow_untested).off


__all__ = [
    "CPU_WORKER",
    "HOOKS",
    "WINDOW",
    "Frontend",
    "Hook",
    "Plan",
    "choice_as_grammar",
    "client_error",
    "cpu_worker_class",
    "draft_trimmer",
    "frontend",
    "grammar_base",
    "has_v1_processors",
    "in_window",
    "manager_class",
    "mismatch",
    "offline_llm_class",
    "options",
    "plan",
    "sort_beams_key",
    "sparse_site",
    "structured_output_utils",
    "tag_compiler",
    "v1_processor_interface",
    "v2_processor_base",
    "version",
    "xgrammar_backend",
]
