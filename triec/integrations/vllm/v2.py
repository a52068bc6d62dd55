"""The processor for vLLM's Model Runner V2 (the default wherever Triton runs: every CUDA machine).

There is no batch update: requests arrive in recycled slots through
``add_request``, and their committed tokens live on the device in
``req_states.all_token_ids[slot, prompt_len:total_len]``. Each step reads the
newest token of every constrained row from there (no host synchronisation),
advances the states and masks the rows; a request resumed with outputs
already generated is caught up in ``apply_staged_writes``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcessor as _V2LogitsProcessor

from triec.integrations.vllm import _core


class TriecLogitsProcessorV2(_V2LogitsProcessor):
    """Model Runner V2 twin of :class:`~triec.integrations.vllm.TriecLogitsProcessor` (same requests, same checks)."""

    @classmethod
    def validate_params(cls, sampling_params: Any) -> None:
        _core.validate(sampling_params)

    def __init__(self, vllm_config: Any, req_states: Any) -> None:
        self.req_states = req_states
        self.device = torch.device(req_states.device)
        capacity = int(req_states.max_num_reqs)
        self.core = _core.BatchState(
            _core.store(), self.device, capacity, _core.engine_eos_ids(vllm_config), _core.engine_served(vllm_config)
        )
        _core.engine_start(vllm_config, self.core)
        self.consumed = torch.zeros(capacity, dtype=torch.int64, device=self.device)  # output tokens folded in
        self._added: list[int] = []

    def add_request(self, req_idx: int, sampling_params: Any) -> bool:
        request = _core.safe_parse(sampling_params)
        self.core.assign(req_idx, request)
        if request is None:
            return False
        self._added.append(req_idx)
        return True

    def _lengths(self, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(committed output tokens, total tokens) of ``slots``, on the device."""
        rs = self.req_states
        total = rs.total_len.gpu[slots].to(torch.int64)
        return total - rs.prompt_len.gpu[slots].to(torch.int64), total

    def apply_staged_writes(self) -> None:
        if not self._added:
            return
        slots_np = np.array(sorted(set(self._added)), dtype=np.int64)
        self._added.clear()
        try:
            slots = _core.to_device(slots_np, self.device)
            self.consumed[slots] = 0
            out_len, total = self._lengths(slots)
            prompt = total - out_len
            n = out_len.cpu().numpy()  # a synchronisation, only when requests join
            for j in range(int(n.max(initial=0))):
                at = np.flatnonzero(n > j)
                pos = (prompt[at] + j).to(torch.int64)
                tokens = self.req_states.all_token_ids.gpu[slots[at], pos]
                self.core.advance(slots_np[at], tokens)
            self.consumed[slots] = out_len
        except Exception:
            _core.log.exception("triec: cannot catch up resumed requests; they end now")
            for s in slots_np.tolist():
                self.core.group[s] = _core.EOS_ONLY

    def apply(self, logits: torch.Tensor, ctx: Any) -> torch.Tensor:
        slots_np = np.asarray(ctx.idx_mapping_np, dtype=np.int64)
        rows = self.core.constrained(slots_np)
        if rows.size == 0:
            return logits
        try:
            sl_np = slots_np[rows]
            sl = _core.to_device(sl_np, self.device)
            out_len, total = self._lengths(sl)
            fresh = out_len > self.consumed[sl]  # the token sampled last step, now committed
            last = self.req_states.all_token_ids.gpu[sl, (total - 1).clamp(min=0)].to(torch.int64)
            self.core.advance(sl_np, last, where=fresh)
            self.consumed[sl] = torch.where(fresh, out_len, self.consumed[sl])
            self.core.mask(logits, rows, sl_np)
        except Exception:
            _core.log.exception("triec: internal error in the step; constrained rows end now")
            _core.end_everything(logits, rows, self.core._eos)
        return logits
