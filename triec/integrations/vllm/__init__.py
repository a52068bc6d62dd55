"""vLLM logits processors that constrain a request to one value of a named triec artifact.

Two classes, one per vLLM model runner (each runner refuses the other's):

* :class:`TriecLogitsProcessor` (the class :class:`~.v1.TriecLogitsProcessorV1`,
  under either name): the V1 interface, used on CPU and on CUDA
  with ``VLLM_USE_V2_MODEL_RUNNER=0`` (vLLM 0.32 and 0.33; 0.34 removed the
  interface, and importing the class there fails with one line saying what serves);
* :class:`TriecLogitsProcessorV2`: Model Runner V2, vLLM's default wherever
  Triton runs (every CUDA machine; the only CUDA runner from 0.34).

A request opts in with ``SamplingParams(extra_args={"triec": "tools"})`` (over
HTTP: ``"vllm_xargs": {"triec": "tools"}``), optionally narrowed with
``"restrict": [values...]``; ``tools`` is ``$TRIEC_ARTIFACT_DIR/tools.triec``.
Requests without ``"triec"`` are left alone. See docs/serving/vllm.md.

Offline beam search over a triec constraint: :func:`~.beams.beam_search` in an engine built with
:func:`~.beams.engine_args` (its processor, :class:`~.beam_processor.TriecBeamProcessor`, V1 interface).

The structured-outputs backend (``choice``, JSON schemas, speculative decoding,
reasoning) is :mod:`.backend` (the engine side) and :mod:`.routing` (the
frontend's admission), put in front of xgrammar by :mod:`.patches` and switched on
by :mod:`.plugin` (``TRIEC_VLLM_BACKEND=1``). Nothing here is imported until asked for: vLLM
loads the plugin module in every one of its processes.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from triec.errors import RequestError
    from triec.integrations.serving import ARG_NAME, ARG_RESTRICT, ENV_DIR
    from triec.integrations.vllm.beam_processor import TriecBeamProcessor
    from triec.integrations.vllm.beam_processor_v2 import TriecBeamProcessorV2
    from triec.integrations.vllm.beams import beam_search, engine_args
    from triec.integrations.vllm.v1 import TriecLogitsProcessorV1
    from triec.integrations.vllm.v1 import TriecLogitsProcessorV1 as TriecLogitsProcessor
    from triec.integrations.vllm.v2 import TriecLogitsProcessorV2


def __getattr__(name: str) -> Any:
    """The processor classes import vLLM, the core torch: each only when asked for."""
    if name in ("ARG_NAME", "ARG_RESTRICT", "ENV_DIR"):
        from triec.integrations import serving

        return getattr(serving, name)
    if name == "RequestError":
        from triec.errors import RequestError

        return RequestError
    if name in ("TriecLogitsProcessor", "TriecLogitsProcessorV1"):  # one class: the docs' name and its own
        from triec.integrations.vllm.v1 import TriecLogitsProcessorV1

        return TriecLogitsProcessorV1
    if name in ("beam_search", "engine_args"):  # offline beam search (docs/serving/vllm.md)
        from triec.integrations.vllm import beams

        return getattr(beams, name)
    if name == "TriecBeamProcessor":
        from triec.integrations.vllm.beam_processor import TriecBeamProcessor

        return TriecBeamProcessor
    if name == "TriecBeamProcessorV2":
        from triec.integrations.vllm.beam_processor_v2 import TriecBeamProcessorV2

        return TriecBeamProcessorV2
    if name == "TriecLogitsProcessorV2":
        from triec.integrations.vllm.v2 import TriecLogitsProcessorV2

        return TriecLogitsProcessorV2
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ARG_NAME",
    "ARG_RESTRICT",
    "ENV_DIR",
    "RequestError",
    "TriecBeamProcessor",
    "TriecBeamProcessorV2",
    "TriecLogitsProcessor",
    "TriecLogitsProcessorV1",
    "TriecLogitsProcessorV2",
    "beam_search",
    "engine_args",
]
