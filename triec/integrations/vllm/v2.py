"""The processor for vLLM's Model Runner V2 (the default wherever Triton runs: every CUDA machine).

There is no batch update: requests arrive in recycled slots through
``add_request``, and their committed tokens live on the device in
``req_states.all_token_ids[slot, prompt_len:total_len]``. Each step folds the
tokens committed since the last step into every constrained request's state
(at most 1 + the speculative tokens: a fixed number of batched advances, no
host synchronisation) and masks the rows; a request resumed with outputs
already generated is caught up in ``apply_staged_writes``.

Speculative decoding: a request owns one logits row per draft plus the bonus
row; the row at local position p is masked at the state after the committed
tokens and the first p drafts (the input tokens of the rows before it). That
layout is on the device only, so such steps copy the rows' slots, positions and
input tokens to the host once (a synchronisation, only when a speculative
config is set and a constrained request is in the batch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from triec.integrations import serving
from triec.integrations.vllm import batch, internals

if TYPE_CHECKING:  # vLLM's class, read from the installed vLLM: Any to a type checker
    _V2LogitsProcessor = Any
else:
    _V2LogitsProcessor = internals.v2_processor_base()


class TriecLogitsProcessorV2(_V2LogitsProcessor):
    """Model Runner V2 twin of :class:`~triec.integrations.vllm.TriecLogitsProcessor` (same requests, same checks)."""

    @classmethod
    def validate_params(cls, sampling_params: Any) -> None:
        batch.validate(sampling_params)

    def __init__(self, vllm_config: Any, req_states: Any) -> None:
        self.req_states = req_states
        self.device = torch.device(req_states.device)
        capacity = int(req_states.max_num_reqs)
        self.core = batch.BatchState(
            serving.store(),
            self.device,
            capacity,
            batch.model_eos_ids(vllm_config),
            batch.config_served_model(vllm_config),
        )
        batch.warm_up(vllm_config, self.core)
        self.consumed = torch.zeros(capacity, dtype=torch.int64, device=self.device)  # output tokens folded in
        self._added: list[int] = []
        spec = getattr(vllm_config, "speculative_config", None)
        self.num_spec = int(getattr(spec, "num_speculative_tokens", 0) or 0) if spec is not None else 0

    def add_request(self, req_idx: int, sampling_params: Any) -> bool:
        request = batch.safe_parse(sampling_params)
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
            slots = batch.to_device(slots_np, self.device)
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
        except Exception:  # noqa: BLE001 - never let the engine die: the resumed rows end instead
            batch.log.exception("triec: cannot catch up resumed requests; they end now")
            for s in slots_np.tolist():
                self.core.group[s] = batch.EOS_ONLY

    def _fold_committed(self, sl_np: np.ndarray) -> None:
        """Fold the tokens committed since the last step (at most 1 + the speculative tokens) into the states."""
        sl = batch.to_device(sl_np, self.device)
        out_len, total = self._lengths(sl)
        prompt = total - out_len
        done = self.consumed[sl]
        width = self.req_states.all_token_ids.gpu.shape[1]
        for j in range(1 + self.num_spec):
            where = done + j < out_len
            pos = (prompt + done + j).clamp(max=width - 1)
            tokens = self.req_states.all_token_ids.gpu[sl, pos].to(torch.int64)
            self.core.advance(sl_np, tokens, where=where)
        self.consumed[sl] = torch.minimum(out_len, done + 1 + self.num_spec)

    def apply(self, logits: torch.Tensor, ctx: Any) -> torch.Tensor:
        slots_np = np.asarray(ctx.idx_mapping_np, dtype=np.int64)
        reqs = self.core.constrained(slots_np)
        if reqs.size == 0:
            return logits
        rows = reqs
        try:
            self._fold_committed(slots_np[reqs])
            if self.num_spec == 0 or logits.shape[0] == slots_np.shape[0]:
                self.core.mask(logits, reqs, slots_np[reqs])  # one row per request: rows are batch positions
                return logits
            row_slot = ctx.expanded_idx_mapping.cpu().numpy().astype(np.int64)  # the one synchronisation
            local = ctx.expanded_local_pos.cpu().numpy().astype(np.int64)
            tokens = ctx.input_ids.cpu().numpy().astype(np.int64)
            valid = row_slot >= 0
            rows = np.flatnonzero(valid)
            rows = rows[self.core.group[row_slot[rows]] != batch.UNCONSTRAINED]
            if rows.size == 0:
                return logits
            states, matchers = self.core.draft_positions(row_slot[rows], local[rows], tokens[rows])
            self.core.mask(logits, rows, row_slot[rows], states=states, matchers=matchers)
        except Exception:  # noqa: BLE001 - never let the engine die: end the constrained rows instead
            batch.log.exception("triec: internal error in the step; constrained rows end now")
            batch.end_everything(logits, rows, self.core.eos)
        return logits
