"""The processor for vLLM's V1 logits-processor interface (0.32 and 0.33: CPU runners; CUDA with
``VLLM_USE_V2_MODEL_RUNNER=0``). vLLM 0.34 removed the interface: importing this module then fails with one line
naming what serves instead (:func:`.internals.v1_processor_interface`).

vLLM tells it about the persistent batch through ``update_state`` (removed,
added, moved in that order) and hands over, for each added request, a live
reference to its output token list. New tokens are read in ``apply``, where
the async-scheduling placeholder (-1) has been replaced by the sampled token
(a trailing -1 is left for the next step). Each row's state lives in one
int64 tensor on the logits' device; advancing and masking are batched per
table (:class:`~triec.integrations.vllm.batch.BatchState`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from triec._compat import renamed
from triec.integrations import serving
from triec.integrations.vllm import batch, internals

_interface = internals.v1_processor_interface()  # 0.34 and later: ImportError, one line naming what serves instead
MoveDirectionality = _interface.MoveDirectionality
if TYPE_CHECKING:  # vLLM's classes, read from the installed vLLM: Any to a type checker
    BatchUpdate = Any
    V1LogitsProcessor = Any
else:
    BatchUpdate = _interface.BatchUpdate
    V1LogitsProcessor = _interface.LogitsProcessor


class TriecLogitsProcessorV1(V1LogitsProcessor):
    """Constrains requests with ``extra_args={"triec": NAME}`` to one value of ``$TRIEC_ARTIFACT_DIR/NAME.triec``.

    Users name it ``triec.integrations.vllm:TriecLogitsProcessor`` (the package's name for it, docs/serving/vllm.md) or
    ``triec.integrations.vllm:TriecLogitsProcessorV1``; vLLM reads only the class, never its name.
    """

    @classmethod
    def validate_params(cls, sampling_params: Any) -> None:
        batch.validate(sampling_params)

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        capacity = int(getattr(vllm_config.scheduler_config, "max_num_seqs", 256) or 256)
        self.core = batch.BatchState(
            serving.store(),
            device,
            capacity,
            batch.model_eos_ids(vllm_config),
            batch.config_served_model(vllm_config),
        )
        batch.warm_up(vllm_config, self.core)
        self.outputs: dict[int, list[int]] = {}  # slot -> the request's live output list (constrained slots)
        self.consumed: dict[int, int] = {}  # slot -> output tokens folded into its state

    def is_argmax_invariant(self) -> bool:
        return False  # a mask changes the argmax: greedy rows must be masked too

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None:
            return
        for slot in batch_update.removed:
            self._drop(slot)
        for slot, params, _prompt, output in batch_update.added:
            self._drop(slot)
            request = batch.safe_parse(params)
            self.core.assign(slot, request)
            if request is not None:
                self.outputs[slot] = output
                self.consumed[slot] = 0  # tokens already there (a resumed request) are folded in at apply
        for a, b, direction in batch_update.moved:
            swap = direction == MoveDirectionality.SWAP
            self.core.move(a, b, swap)
            out_a, out_b = self.outputs.pop(a, None), self.outputs.pop(b, None)
            c_a, c_b = self.consumed.pop(a, None), self.consumed.pop(b, None)
            if out_a is not None:
                assert c_a is not None  # outputs and consumed hold the same slots
                self.outputs[b], self.consumed[b] = out_a, c_a
            if swap and out_b is not None:
                assert c_b is not None
                self.outputs[a], self.consumed[a] = out_b, c_b

    def _drop(self, slot: int) -> None:
        self.core.clear(slot)
        self.outputs.pop(slot, None)
        self.consumed.pop(slot, None)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self.outputs:
            return logits
        slots = np.fromiter((s for s in self.outputs if s < logits.shape[0]), dtype=np.int64)
        slots.sort()
        try:
            self._catch_up(slots, logits.device)
            self.core.mask(logits, slots, slots)
        except Exception:  # noqa: BLE001 - never let the engine die: end the constrained rows instead
            batch.log.exception("triec: internal error in the step; constrained rows end now")
            batch.end_everything(logits, slots, self.core.eos)
        return logits

    def _catch_up(self, slots: np.ndarray, device: torch.device) -> None:
        """Fold each slot's new output tokens into its state: one batched advance per token position."""
        outputs, consumed = self.outputs, self.consumed
        lengths = np.fromiter((_known(outputs[s]) for s in slots.tolist()), dtype=np.int64, count=slots.size)
        done = np.fromiter((consumed[s] for s in slots.tolist()), dtype=np.int64, count=slots.size)
        pending = lengths - done
        while True:
            at = np.flatnonzero(pending > 0)
            if at.size == 0:
                return
            tokens = [outputs[s][c] for s, c in zip(slots[at].tolist(), done[at].tolist(), strict=True)]
            self.core.advance(slots[at], torch.tensor(tokens, dtype=torch.int64, device=device))
            done[at] += 1
            pending[at] -= 1
            for s, c in zip(slots[at].tolist(), done[at].tolist(), strict=True):
                consumed[s] = c


def _known(output: list[int]) -> int:
    """Tokens of an output list that are sampled already (a trailing -1 is async scheduling's placeholder)."""
    n = len(output)
    while n and output[n - 1] == -1:
        n -= 1
    return n


__getattr__ = renamed(__name__, {"TriecLogitsProcessor": "triec.integrations.vllm.v1:TriecLogitsProcessorV1"})
