"""The engine side of triec's vLLM beam search: a V1 logits processor that writes each beam row's full-vocabulary
log-softmax into its allowed tokens and ``-inf`` elsewhere.

vLLM's beam search (``LLM.beam_search``) sends every live beam as a one-token
request with ``logprobs=2W`` and ranks the returned log-probabilities. With the
default ``logprobs_mode="raw_logprobs"`` those are the top-2W of the *raw*
distribution (``vllm/v1/sample/sampler.py``, ``Sampler.forward``: computed before
``allowed_token_ids`` and every logits processor), so a constraint can only filter
them afterwards and a beam whose allowed tokens all rank below 2W loses them. In an
engine with ``logprobs_mode="processed_logits"`` the returned values are the logits
after the processors (``Sampler.sample``, greedy rows: before temperature). This
processor makes them the model's own log-probabilities restricted to the allowed
set: ``log_softmax`` of the whole row (the score stays the full-vocabulary one),
then ``-inf`` on every token the row's triec state refuses. vLLM's top-2W is then
the 2W best *allowed* continuations, and the greedy token the best allowed one.

A beam row carries its allowed token ids in ``extra_args[ARG_ALLOWED]`` (int32
bytes, written by :mod:`.beams` from the beam's triec state: one int per beam,
copied when a beam forks, so the engine holds no grammar and replays nothing).
Rows without it that ask for log-probabilities get the plain ``log_softmax`` (a
per-row shift: sampling is unchanged), so vLLM's own unconstrained beam search and
``logprobs`` requests read the same numbers as in a stock engine; rows with a
repetition penalty (not shift-invariant, applied after this processor) are left alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from triec.integrations.vllm.beams import ARG_ALLOWED
from triec.integrations.vllm.v1 import (  # vLLM's V1 interface, read once
    BatchUpdate,
    MoveDirectionality,
    V1LogitsProcessor,
)
from triec.runtime.torch import keep_pairs

_NORMALIZE = -1
"""A row's entry for "log-softmax only" (a request asking for log-probabilities, no constraint)."""


def _row(params: Any) -> np.ndarray | int | None:
    """What apply does to a request's row: mask to allowed ids, normalize only, or nothing."""
    extra = getattr(params, "extra_args", None) or {}
    payload = extra.get(ARG_ALLOWED)
    if isinstance(payload, (bytes, bytearray, memoryview)):
        data = bytes(payload)
        return np.frombuffer(data[: len(data) - len(data) % 4], dtype="<i4").astype(np.int64)
    wants = getattr(params, "logprobs", None) is not None
    if wants and float(getattr(params, "repetition_penalty", 1.0) or 1.0) == 1.0:
        return _NORMALIZE
    return None


class TriecBeamProcessor(V1LogitsProcessor):
    """Beam rows: full-vocabulary log-softmax on allowed tokens, ``-inf`` elsewhere (see the module docstring).

    Pass it with ``LLM(logits_processors=[TriecBeamProcessor], logprobs_mode="processed_logits", ...)``:
    :func:`triec.integrations.vllm.beams.engine_args` gives the three arguments.
    """

    @classmethod
    def validate_params(cls, sampling_params: Any) -> None:
        extra = getattr(sampling_params, "extra_args", None) or {}
        payload = extra.get(ARG_ALLOWED)
        if payload is not None and (not isinstance(payload, (bytes, bytearray)) or len(payload) % 4):
            raise ValueError(f"extra_args[{ARG_ALLOWED!r}] must be int32 token ids as bytes")

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        self.rows: dict[int, np.ndarray | int] = {}  # slot -> allowed ids (a beam row) or _NORMALIZE

    def is_argmax_invariant(self) -> bool:
        return False  # the mask changes the argmax: greedy rows must see it

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None:
            return
        for slot in batch_update.removed:
            self.rows.pop(slot, None)
        for slot, params, _prompt, _output in batch_update.added:
            found = _row(params)
            if found is None:
                self.rows.pop(slot, None)
            else:
                self.rows[slot] = found
        for a, b, direction in batch_update.moved:
            row_a, row_b = self.rows.pop(a, None), self.rows.pop(b, None)
            if row_a is not None:
                self.rows[b] = row_a
            if direction == MoveDirectionality.SWAP and row_b is not None:
                self.rows[a] = row_b

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self.rows:
            return logits
        n = logits.shape[0]
        slots = sorted(s for s in self.rows if s < n)
        if not slots:
            return logits
        index = torch.tensor(slots, dtype=torch.int64, device=logits.device)
        lsm = torch.log_softmax(logits.index_select(0, index).float(), dim=-1)
        beam = [(i, s) for i, s in enumerate(slots) if not isinstance(self.rows[s], int)]
        if beam:
            width = logits.shape[1]
            ids = [a[(a >= 0) & (a < width)] for a in (np.asarray(self.rows[s]) for _, s in beam)]  # never off the row
            counts = np.fromiter((a.size for a in ids), dtype=np.int64, count=len(ids))
            local = torch.from_numpy(np.repeat(np.fromiter((i for i, _ in beam), np.int64, len(beam)), counts))
            cols = torch.from_numpy(np.concatenate(ids) if ids else np.zeros(0, np.int64)).to(logits.device)
            local = local.to(logits.device)
            rows = torch.tensor([i for i, _ in beam], dtype=torch.int64, device=logits.device)
            keep_pairs(lsm, rows, local, cols)
        logits[index] = lsm.to(logits.dtype)
        return logits


__all__ = ["TriecBeamProcessor"]
