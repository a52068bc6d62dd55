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

import torch

from triec.integrations.vllm.beam_rows import Entry, row_entry, validate, write_rows
from triec.integrations.vllm.v1 import (  # vLLM's V1 interface, read once
    BatchUpdate,
    MoveDirectionality,
    V1LogitsProcessor,
)


class TriecBeamProcessor(V1LogitsProcessor):
    """Beam rows: full-vocabulary log-softmax on allowed tokens, ``-inf`` elsewhere (see the module docstring).

    Pass it with ``LLM(logits_processors=[TriecBeamProcessor], logprobs_mode="processed_logits", ...)``:
    :func:`triec.integrations.vllm.beams.engine_args` gives the three arguments.
    """

    @classmethod
    def validate_params(cls, sampling_params: Any) -> None:
        validate(sampling_params)

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        self.rows: dict[int, Entry] = {}  # slot -> allowed ids (a beam row) or NORMALIZE

    def is_argmax_invariant(self) -> bool:
        return False  # the mask changes the argmax: greedy rows must see it

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None:
            return
        for slot in batch_update.removed:
            self.rows.pop(slot, None)
        for slot, params, _prompt, _output in batch_update.added:
            found = row_entry(params)
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
        n = logits.shape[0]
        slots = sorted(s for s in self.rows if s < n)  # V1: a row is its persistent batch slot
        write_rows(logits, slots, [self.rows[s] for s in slots])
        return logits


__all__ = ["TriecBeamProcessor"]
