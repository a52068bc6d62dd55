"""The ``vllm.general_plugins`` entry point: triec's structured-outputs backend, switched on by ``TRIEC_VLLM_BACKEND=1``.

vLLM calls :func:`register` in each of its processes (frontend, engine core,
workers) when it starts. Installing triec does nothing by itself: without the
variable :func:`register` returns at once. With it, the plugin checks that this
vLLM is one its replacements were written against (a release line of
:data:`TESTED`, the signatures and the call sites it relies on, :func:`mismatch`);
if anything differs it logs one line saying what and stays off, so nothing is
ever served unchecked. A release outside the window stays off too unless the
operator sets ``TRIEC_VLLM_ALLOW_UNTESTED=1``, which skips the version test only.
The differences between the releases of the window are read from vLLM's own
code, not from its version (:func:`tag_compiler`). docs/decisions.md D22 says
what is replaced, how a release joins the window and how to retire it. This
module imports nothing heavy until it is switched on.
"""

from __future__ import annotations

import inspect
import logging
import os

ENV = "TRIEC_VLLM_BACKEND"
"""Environment variable: ``1`` switches the backend on (in every vLLM process; set it where the server starts)."""

TESTED = ("0.32", "0.33")
"""vLLM release lines the replacements were written against (checked with :func:`mismatch` on top).

Adding one: append it here, run ``nox -s vllm033``'s tests against it (a session like it per release) and
mend whatever :func:`mismatch` names; the engine tests run on the newest CPU wheel (``nox -s vllm``)."""

ALLOW_UNTESTED_ENV = "TRIEC_VLLM_ALLOW_UNTESTED"
"""Environment variable: ``1`` lets the backend run on a vLLM outside :data:`TESTED` when every other check passes."""

log = logging.getLogger("triec.vllm.plugin")
# vLLM configures its own "vllm" logger in the frontend only after the plugins are loaded: this logger has its own
# handler, so the line saying whether the backend is on is never lost.
if not log.handlers:
    _handler = logging.StreamHandler()
    _handler.setFormatter(logging.Formatter("%(levelname)s %(asctime)s [triec pid %(process)d] %(message)s", "%m-%d %H:%M:%S"))
    log.addHandler(_handler)
    log.propagate = False
log.setLevel(logging.INFO)
_backend_log = logging.getLogger("triec.vllm.backend")
if not _backend_log.handlers:
    _backend_log.addHandler(log.handlers[0])
    _backend_log.propagate = False
_backend_log.setLevel(os.environ.get("TRIEC_VLLM_LOG", "INFO").upper())

_state = {"on": False}


def _params(fn: object) -> list[str]:
    return list(inspect.signature(fn).parameters)  # type: ignore[arg-type]


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def tested(version: str) -> bool:
    """Whether ``version`` is of a release line in :data:`TESTED`."""
    return any(version == t or version.startswith(t + ".") for t in TESTED)


def tag_compiler(backend_class: type) -> str | None:
    """The ``XgrammarBackend`` attribute holding the compiler structural tags are compiled with, read from its code.

    vLLM 0.32 has one compiler (``compiler``); 0.33 compiles JSON on a vocabulary without special
    tokens (``compiler``) and structural tags on the full one (``full_vocab_compiler``). triec's tag
    rows must come from the same tokenizer info as vLLM's. None: neither spelling is there.
    """
    source = inspect.getsource(backend_class.compile_grammar)
    for name in ("full_vocab_compiler", "compiler"):
        if f"self.{name}.compile_structural_tag(" in source:
            return name
    return None


def mismatch() -> str | None:
    """None when this vLLM has everything the replacements rely on, else what differs (one line)."""
    import vllm
    from vllm import exceptions
    from vllm.sampling_params import SamplingParams
    from vllm.v1.structured_output import StructuredOutputManager, backend_types, backend_xgrammar, request, utils

    version = str(getattr(vllm, "__version__", "?"))
    if not tested(version) and not _truthy(ALLOW_UNTESTED_ENV):
        window = ", ".join(t + ".x" for t in TESTED)
        return (f"vLLM {version} is outside the versions it was tested on ({window}): install one of those, or set "
                f"{ALLOW_UNTESTED_ENV}=1 to run it on this one where every other check passes")  # fmt: skip
    xb = backend_xgrammar.XgrammarBackend
    manager = StructuredOutputManager
    reasoning_ends = getattr(manager, "_masked_reasoning_ends", None)  # 0.33: asks the grammar about single tokens
    checks: list[tuple[bool, str]] = [
        (tag_compiler(xb) is not None, "XgrammarBackend.compile_grammar's structural-tag compiler"),
        (reasoning_ends is None or "grammar.validate_tokens([token_id])" in inspect.getsource(reasoning_ends),
         "StructuredOutputManager._masked_reasoning_ends's call of validate_tokens"),
        (_params(xb.compile_grammar) == ["self", "request_type", "grammar_spec", "stop_token_ids"],
         "XgrammarBackend.compile_grammar(self, request_type, grammar_spec, stop_token_ids)"),
        ("self.disable_any_whitespace" in inspect.getsource(xb.__post_init__), "XgrammarBackend.disable_any_whitespace"),
        (_params(backend_xgrammar.validate_xgrammar_grammar) == ["sampling_params"],
         "validate_xgrammar_grammar(sampling_params)"),
        (_params(StructuredOutputManager.__init__) == ["self", "vllm_config"], "StructuredOutputManager.__init__(self, vllm_config)"),
        (set(backend_types.StructuredOutputGrammar.__abstractmethods__)
         == {"accept_tokens", "validate_tokens", "rollback", "fill_bitmask", "is_terminated", "reset"},
         "StructuredOutputGrammar's abstract methods"),
        (all(hasattr(backend_types.StructuredOutputOptions, n) for n in ("CHOICE", "REGEX", "JSON", "STRUCTURAL_TAG", "GRAMMAR")),
         "StructuredOutputOptions members"),
        (callable(getattr(utils, "choice_as_grammar", None)), "utils.choice_as_grammar"),
        (issubclass(exceptions.VLLMValidationError, exceptions.VLLMClientError), "VLLMClientError / VLLMValidationError"),
    ]  # fmt: skip
    apply = inspect.getsource(utils.apply_grammar_bitmask)
    checks += [
        (hasattr(utils, "xgr") and "xgr.apply_token_bitmask_inplace(logits" in apply,
         "apply_grammar_bitmask's call of xgr.apply_token_bitmask_inplace"),
    ]  # fmt: skip
    validate = inspect.getsource(SamplingParams._validate_structured_outputs)
    checks += [
        (_params(SamplingParams._validate_structured_outputs) == ["self", "model_config", "structured_outputs_config", "tokenizer"],
         "SamplingParams._validate_structured_outputs(self, model_config, structured_outputs_config, tokenizer)"),
        ("import validate_xgrammar_grammar" in validate and "except VLLMValidationError" in validate,
         "the frontend's call of validate_xgrammar_grammar"),
        ("StructuredOutputOptions.CHOICE, json_str" in inspect.getsource(request.get_structured_output_key),
         "CHOICE keys as a JSON list"),
    ]  # fmt: skip
    for ok, what in checks:
        if not ok:
            return f"{what} differs"
    return None


def register() -> None:
    """The entry point: switch the backend on where ``TRIEC_VLLM_BACKEND=1`` and this vLLM matches; never raises."""
    if not _truthy(ENV) or _state["on"]:
        return
    try:
        why = mismatch()
    except Exception as exc:  # noqa: BLE001  an import or a signature that moved
        why = f"{type(exc).__name__}: {exc}"
    if why is not None:
        log.warning("triec vLLM backend stays off: %s; structured outputs are vLLM's own", why)
        return
    try:
        from vllm.v1.structured_output.backend_xgrammar import XgrammarBackend

        from triec.integrations.vllm import backend

        backend.install(tag_compiler(XgrammarBackend) or "compiler")  # mismatch() checked it is one of the two
    except Exception as exc:  # noqa: BLE001
        log.warning("triec vLLM backend stays off: %s: %s", type(exc).__name__, exc)
        return
    _state["on"] = True
    import vllm

    version = str(getattr(vllm, "__version__", "?"))
    if not tested(version):
        log.warning("triec vLLM backend on an untested vLLM %s (%s=1): every check passed", version, ALLOW_UNTESTED_ENV)
    log.info("triec vLLM backend on (vLLM %s): choice, literal regex, enum and artifact JSON, tool calls by triec; "
             "the rest by xgrammar", version)  # fmt: skip


def is_on() -> bool:
    """Whether :func:`register` switched the backend on in this process."""
    return _state["on"]


__all__ = ["ALLOW_UNTESTED_ENV", "ENV", "TESTED", "is_on", "mismatch", "register", "tag_compiler", "tested"]
