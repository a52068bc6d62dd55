"""Offline beam search in vLLM constrained by a triec table: each beam's state is one int, copied when it forks.

vLLM's own ``LLM.beam_search`` with ``structured_outputs``
(``vllm/entrypoints/generate/beam_search/offline.py``, 0.32 to 0.34) compiles a fresh
grammar for every beam at every step and replays the beam's tokens into it
(``_build_beam_sampling_params``), passes the allowed set as ``allowed_token_ids``
only up to 1,024 ids, and then filters the *raw* top-2W log-probabilities of each beam
(``_beam_search_step``): they are computed before any masking (``Sampler.forward``), so
a beam keeps only the allowed tokens that happen to rank among the raw top-2W, plus the
greedy allowed one, and above the cap a beam whose allowed tokens rank lower dies.

:func:`beam_search` runs the same loop (vLLM's ``BeamSearchSequence``,
``BeamSearchInstance``, sort key and output types) with two differences: a beam's
position is its triec state, advanced once per kept beam (no grammar, no replay), and
each beam row goes to the engine with its allowed token ids, which
:class:`~.beam_processor.TriecBeamProcessor` turns into the full-vocabulary
log-softmax on allowed tokens and ``-inf`` elsewhere *before* vLLM's top-2W. Each step
therefore keeps the W best allowed continuations, scored as vLLM scores them (the
model's log-softmax over its whole vocabulary), and no beam dies while allowed tokens
remain. The engine needs :func:`engine_args` (the processor, ``logprobs_mode``
``processed_logits``, room for 2W log-probabilities).

Constraints: a ``StructuredOutputsParams`` (or the dict of its fields) that triec's
backend serves (``choice``, a ``json`` string enum, ``{"x-triec-artifact": NAME}``, a
literal-alternation ``regex``), or any triec table with int states (``triec.compile``,
``triec.load``, a restriction).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from triec.errors import RequestError
from triec.integrations.constraints import Constraints, Delegate
from triec.integrations.serving import STOPS_HINT, served_vocabulary, store
from triec.integrations.vllm import internals
from triec.runtime.states import FINISHED

ARG_ALLOWED = "triec_beam_allowed"
"""``SamplingParams.extra_args`` key of a beam row: its allowed token ids, little-endian int32 bytes."""

PROCESSOR = "triec.integrations.vllm.beam_processor:TriecBeamProcessor"
"""The processor an engine for :func:`beam_search` loads (``LLM(logits_processors=[PROCESSOR])``): V1's interface."""

PROCESSOR_V2 = "triec.integrations.vllm.beam_processor_v2:TriecBeamProcessorV2"
"""The same processor on Model Runner V2's interface (vLLM 0.34; 0.32 and 0.33 engines running Model Runner V2)."""


def engine_args(max_beam_width: int = 64, *, model_runner_v2: bool | None = None) -> dict[str, Any]:
    """The ``LLM(...)`` keyword arguments :func:`beam_search` needs: ``LLM(model, **engine_args(16))``.

    The processor, ``logprobs_mode="processed_logits"`` (the processor writes log-probabilities into the logits, so
    the returned values are the model's full-vocabulary log-softmax of allowed tokens) and ``max_logprobs`` of twice
    the widest beam (vLLM's default, 20, stops at W = 10). ``model_runner_v2``: which interface the processor is
    written for, :data:`PROCESSOR_V2` or :data:`PROCESSOR`; default V2 exactly where vLLM has no V1 interface
    (0.34). On 0.32 and 0.33 pass True for an engine that runs Model Runner V2 (CUDA's default).
    """
    from triec.integrations.vllm import internals

    v2 = not internals.has_v1_processors() if model_runner_v2 is None else bool(model_runner_v2)
    return {
        "logits_processors": [PROCESSOR_V2 if v2 else PROCESSOR],
        "logprobs_mode": "processed_logits",
        "max_logprobs": max(20, 2 * int(max_beam_width)),
    }


def is_beam_engine(llm: Any) -> bool:
    """Whether ``llm``'s engine loads :data:`PROCESSOR` or :data:`PROCESSOR_V2` (built with :func:`engine_args`): where the plugin's
    ``beam_search`` hook sends ``llm.beam_search`` with a constraint triec serves to :func:`beam_search`."""
    mc = llm.llm_engine.model_config
    for p in getattr(mc, "logits_processors", None) or ():
        name = p if isinstance(p, str) else f"{getattr(p, '__module__', '')}:{getattr(p, '__qualname__', '')}"
        if name in (PROCESSOR, PROCESSOR_V2):
            return True
    return False


def serves(llm: Any, constraint: Any) -> bool:
    """Whether :func:`resolve` gives a table for ``constraint`` (False where triec does not serve it in beams)."""
    try:
        resolve(llm, constraint)
    except RequestError:
        return False
    return True


_CONSTRAINTS: dict[tuple[str, int], Constraints] = {}
_LOCK = threading.Lock()


def _constraints(llm: Any) -> Constraints:
    mc = llm.llm_engine.model_config
    key = (str(mc.tokenizer), int(mc.get_vocab_size()))
    with _LOCK:
        found = _CONSTRAINTS.get(key)
        if found is None:
            vocab = served_vocabulary(*key)
            found = _CONSTRAINTS[key] = Constraints(vocab, tokenizer=key[0], fix_stops=STOPS_HINT, artifact_store=store)
        return found


def resolve(llm: Any, constraint: Any) -> Any:
    """The triec table a constraint means for ``llm``'s served model (RequestError where triec does not serve it)."""
    if hasattr(constraint, "allowed") and hasattr(constraint, "advance") and hasattr(constraint, "start"):
        table = constraint
    else:
        fields = constraint if isinstance(constraint, dict) else _fields(constraint)
        c = _constraints(llm)
        served: Any
        if fields.get("choice") is not None:
            served = c.choice(list(fields["choice"]))
        elif fields.get("json") is not None:
            served = c.json_schema(fields["json"])
        elif fields.get("regex") is not None:
            served = c.regex(fields["regex"])
        else:
            raise RequestError(
                "triec's beam search takes choice, a json string enum or artifact, a literal regex, or a triec table"
            )
        if isinstance(served, Delegate):
            raise RequestError(f"triec does not serve this constraint in beam search: {served.reason}")
        table = served.table
    if not isinstance(getattr(table, "start", None), int):
        raise RequestError(f"beam search needs a table with int states, not {type(table).__name__}")
    return table


def _fields(so: Any) -> dict[str, Any]:
    return {k: getattr(so, k, None) for k in ("choice", "json", "regex", "grammar", "structural_tag")}


def _check_engine(llm: Any, beam_width: int) -> None:
    mc = llm.llm_engine.model_config
    mode = getattr(mc, "logprobs_mode", None)
    if mode != "processed_logits":
        raise RequestError(
            f"triec's beam search needs an engine built with triec.integrations.vllm.beams.engine_args() "
            f"(logprobs_mode 'processed_logits', this one has {mode!r})"
        )
    limit = int(mc.max_logprobs)
    if limit != -1 and limit < 2 * beam_width:
        raise RequestError(
            f"beam_width {beam_width} needs max_logprobs >= {2 * beam_width} (engine_args({beam_width}))"
        )


def encode_allowed(tokens: np.ndarray) -> bytes:
    """The ``extra_args`` payload of a row allowing ``tokens``."""
    return np.ascontiguousarray(tokens, dtype="<i4").tobytes()


def _step_params(template: Any, allowed: np.ndarray) -> Any:
    params = template.clone()
    params.extra_args = {ARG_ALLOWED: encode_allowed(allowed)}
    return params


def beam_search(
    llm: Any,
    prompts: Sequence[Any],
    params: Any,
    constraint: Any = None,
    *,
    lora_request: Any = None,
    concurrency_limit: int | None = None,
) -> list[Any]:
    """``llm.beam_search(prompts, params)`` constrained by triec: vLLM's ``BeamSearchOutput`` per prompt.

    ``constraint`` defaults to ``params.structured_outputs``. Every returned sequence ends with a value (then EOS,
    unless ``max_tokens`` cut it first); ``cum_logprob`` sums the model's full-vocabulary log-softmax. The engine
    must come from ``LLM(..., **engine_args(W))``.
    """
    from vllm import SamplingParams

    utils = internals.beam_search_utils()
    runner = internals.OfflineRunner(llm)
    so = constraint if constraint is not None else params.structured_outputs
    if so is None:
        raise RequestError("no constraint: pass one, or set params.structured_outputs")
    table = resolve(llm, so)
    width = int(params.beam_width)
    _check_engine(llm, width)
    tokenizer = llm.get_tokenizer()
    eos = tokenizer.eos_token_id
    sort_key = internals.sort_beams_key(eos, params.length_penalty)
    inputs = runner.inputs(prompts)
    loras = runner.loras(lora_request, len(inputs))
    extra = {"detokenize": False, "skip_clone": True}
    if "watermarking" in getattr(SamplingParams, "__struct_fields__", ()):
        extra["watermarking"] = False
    template = SamplingParams(logprobs=2 * width, max_tokens=1, temperature=0.0, **extra)
    instances = [
        utils.BeamSearchInstance(p, lora_request=lr, logprobs=None) for lr, p in zip(loras, inputs, strict=True)
    ]
    states = {id(inst): [table.start] for inst in instances}  # per instance, aligned with its beams
    limit = concurrency_limit or len(instances)

    for start in range(0, len(instances), limit):
        batch = instances[start : start + limit]
        for _ in range(int(params.max_tokens)):
            if not _step(batch, states, table, template, runner.run, eos, bool(params.ignore_eos), width, sort_key):
                break
    outputs = []
    for inst in instances:
        inst.completed.extend(inst.beams)
        best = sorted(inst.completed, key=sort_key, reverse=True)[:width]
        for b in best:
            b.text = tokenizer.decode(b.tokens, skip_special_tokens=params.skip_special_tokens)
        outputs.append(utils.BeamSearchOutput(sequences=best))
    return outputs


def _allowed(table: Any, state: int, eos: int) -> np.ndarray:
    """The state's allowed tokens with the table's EOS ids narrowed to the tokenizer's: vLLM's beam search ends a
    beam on that one only (``tokenizer.eos_token_id``), as xgrammar's grammar there allows only it."""
    allowed: np.ndarray = table.allowed(state)
    others = [int(t) for t in table.eos_token_ids if int(t) != eos]
    if others and allowed.size and int(allowed[-1]) >= min(others):
        allowed = allowed[~np.isin(allowed, others)]
    return allowed


def _step(
    batch: list[Any],
    states: dict[int, list[int]],
    table: Any,
    template: Any,
    run: Callable[[list[Any], list[Any]], list[Any]],
    eos: int,
    ignore_eos: bool,
    width: int,
    sort_key: Callable[[Any], float],
) -> bool:
    """One token for every live beam of ``batch``; False when no beam is left. vLLM's ``_beam_search_step`` with
    the candidates of a beam drawn from its allowed tokens only (the processor masks before the top-2W)."""
    sequence = internals.beam_search_utils().BeamSearchSequence
    active: list[tuple[Any, Any, int]] = []  # (instance, beam, its state)
    step_params = []
    for inst in batch:
        for beam, state in zip(inst.beams, states[id(inst)], strict=True):
            allowed = None if state == FINISHED else _allowed(table, state, eos)
            if allowed is None or allowed.size == 0:  # ended (an EOS other than the tokenizer's): complete
                inst.completed.append(beam)
                continue
            active.append((inst, beam, state))
            step_params.append(_step_params(template, allowed))
    if not active:
        for inst in batch:
            inst.beams, states[id(inst)] = [], []
        return False
    results = run([b for _, b, _ in active], step_params)
    candidates: dict[int, list[tuple[Any, int, int]]] = {id(inst): [] for inst in batch}  # new beam, parent, token
    for (inst, beam, parent), result in zip(active, results, strict=True):
        out = result.outputs[0]
        if out.logprobs is None:
            continue
        logprobs = out.logprobs[0]
        for token, lp in logprobs.items():
            if lp.logprob == -math.inf:
                continue  # padding of vLLM's top-2W where fewer tokens are allowed
            new = sequence(
                beam.orig_prompt,
                tokens=[*beam.tokens, token],
                logprobs=[*beam.logprobs, logprobs],
                lora_request=beam.lora_request,
                cum_logprob=beam.cum_logprob + lp.logprob,
            )
            if token == eos and not ignore_eos:
                inst.completed.append(new)
            else:
                candidates[id(inst)].append((new, parent, token))
    for inst in batch:
        kept = sorted(candidates[id(inst)], key=lambda c: sort_key(c[0]), reverse=True)[:width]
        inst.beams = [new for new, _, _ in kept]
        states[id(inst)] = [table.advance(parent, token) for _, parent, token in kept]  # the fork: one int a beam
    return any(inst.beams for inst in batch)


__all__ = [
    "ARG_ALLOWED",
    "PROCESSOR",
    "PROCESSOR_V2",
    "beam_search",
    "encode_allowed",
    "engine_args",
    "is_beam_engine",
    "resolve",
    "serves",
]
