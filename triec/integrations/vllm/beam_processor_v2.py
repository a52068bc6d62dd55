"""triec's beam processor on Model Runner V2's logits-processor interface: vLLM 0.34 (where the V1 interface is
gone), and 0.32/0.33 engines running Model Runner V2 (CUDA by default).

The same rows as the V1 :class:`~triec.integrations.vllm.beam_processor.TriecBeamProcessor`
(:mod:`.beam_rows`): a beam row's full-vocabulary log-softmax on its allowed ids and ``-inf`` elsewhere; a row
asking for log-probabilities without a constraint, its plain log-softmax. Model Runner V2 has no batch update: a
request enters a recycled slot through ``add_request`` (which answers whether this processor changes its logits),
and ``apply(logits, ctx)`` gets the step's rows with ``ctx.idx_mapping_np`` (batch position -> slot). The sampler
runs custom processors after bias (``allowed_token_ids``), penalties, bad words and the grammar bitmask, and before
temperature (skipped at 0, as beam rows are), min-p and top-k/top-p; in ``logprobs_mode="processed_logits"`` the
top-2W log-probabilities are read from its output (``Sampler.__call__``), as in V1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from triec.integrations.vllm import internals
from triec.integrations.vllm.beam_rows import Entry, row_entry, validate, write_rows

if TYPE_CHECKING:  # vLLM's class, read from the installed vLLM: Any to a type checker
    _V2LogitsProcessor = Any
else:
    _V2LogitsProcessor = internals.v2_processor_base()


class TriecBeamProcessorV2(_V2LogitsProcessor):
    """Beam rows on Model Runner V2 (see the module docstring); :func:`triec.integrations.vllm.beams.engine_args`
    loads it where vLLM has no V1 interface."""

    @classmethod
    def validate_params(cls, sampling_params: Any) -> None:
        validate(sampling_params)

    def __init__(self, vllm_config: Any, req_states: Any) -> None:
        self.rows: dict[int, Entry] = {}  # slot -> allowed ids (a beam row) or NORMALIZE

    def add_request(self, req_idx: int, sampling_params: Any) -> bool:
        found = row_entry(sampling_params)
        if found is None:  # the slot's previous occupant's entry must not stay
            self.rows.pop(req_idx, None)
            return False
        self.rows[req_idx] = found
        return True

    def apply(self, logits: torch.Tensor, ctx: Any) -> torch.Tensor:
        if not self.rows:
            return logits
        slots = np.asarray(ctx.idx_mapping_np, dtype=np.int64)
        if logits.shape[0] != slots.shape[0]:  # speculative rows (one per draft): a beam row asks one token, so
            # it never has drafts; a log-probability row's drafts each get the same shift
            slots = ctx.expanded_idx_mapping.cpu().numpy().astype(np.int64)
        rows = [i for i, s in enumerate(slots.tolist()) if s in self.rows]
        write_rows(logits, rows, [self.rows[int(slots[i])] for i in rows])
        return logits


__all__ = ["TriecBeamProcessorV2"]
