"""What a beam row asks of triec's beam processors, and the write both processors make: one module for vLLM's two
logits-processor interfaces (V1's :mod:`.beam_processor`, Model Runner V2's :mod:`.beam_processor_v2`).

A beam row (a request of :func:`triec.integrations.vllm.beams.beam_search`) carries its allowed token ids in
``extra_args[ARG_ALLOWED]``; its logits become the model's full-vocabulary log-softmax on those ids and ``-inf``
elsewhere, so vLLM's top-2W (read in ``logprobs_mode="processed_logits"``) is the 2W best allowed continuations,
scored against the whole vocabulary. A row that asks for log-probabilities without a constraint gets the plain
log-softmax (a per-row shift: sampling is unchanged); rows with a repetition penalty (not shift-invariant, applied
after the processors) and rows asking for nothing are left alone. Imports neither interface.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from triec.integrations.vllm.beams import ARG_ALLOWED
from triec.runtime.torch import keep_pairs

NORMALIZE = -1
"""A row's entry for "log-softmax only" (a request asking for log-probabilities, no constraint)."""

Entry = np.ndarray | int
"""A row's entry: its allowed ids (a beam row) or :data:`NORMALIZE`."""


def row_entry(params: Any) -> Entry | None:
    """What the processors do to a request's row: mask to allowed ids, normalize only, or nothing (None)."""
    extra = getattr(params, "extra_args", None) or {}
    payload = extra.get(ARG_ALLOWED)
    if isinstance(payload, (bytes, bytearray, memoryview)):
        data = bytes(payload)
        return np.frombuffer(data[: len(data) - len(data) % 4], dtype="<i4").astype(np.int64)
    wants = getattr(params, "logprobs", None) is not None
    if wants and float(getattr(params, "repetition_penalty", 1.0) or 1.0) == 1.0:
        return NORMALIZE
    return None


def validate(sampling_params: Any) -> None:
    """Admission (both processors' ``validate_params``): a payload must be int32 ids as bytes."""
    extra = getattr(sampling_params, "extra_args", None) or {}
    payload = extra.get(ARG_ALLOWED)
    if payload is not None and (not isinstance(payload, (bytes, bytearray)) or len(payload) % 4):
        raise ValueError(f"extra_args[{ARG_ALLOWED!r}] must be int32 token ids as bytes")


def write_rows(logits: torch.Tensor, rows: Sequence[int], entries: Sequence[Entry]) -> None:
    """Logits rows ``rows`` (each once) become their log-softmax, masked to ``entries[i]``'s allowed ids where it is
    a beam row (ids off the row ignored), through the runtime's one masking path (``keep_pairs``)."""
    if not rows:
        return
    index = torch.tensor(list(rows), dtype=torch.int64, device=logits.device)
    lsm = torch.log_softmax(logits.index_select(0, index).float(), dim=-1)
    beam = [(i, e) for i, e in enumerate(entries) if not isinstance(e, int)]
    if beam:
        width = logits.shape[1]
        ids = [a[(a >= 0) & (a < width)] for a in (np.asarray(e) for _, e in beam)]  # never off the row
        counts = np.fromiter((a.size for a in ids), dtype=np.int64, count=len(ids))
        local = torch.from_numpy(np.repeat(np.fromiter((i for i, _ in beam), np.int64, len(beam)), counts))
        cols = torch.from_numpy(np.concatenate(ids) if ids else np.zeros(0, np.int64)).to(logits.device)
        at = torch.tensor([i for i, _ in beam], dtype=torch.int64, device=logits.device)
        keep_pairs(lsm, at, local.to(logits.device), cols)
    logits[index] = lsm.to(logits.dtype)


__all__ = ["NORMALIZE", "Entry", "row_entry", "validate", "write_rows"]
