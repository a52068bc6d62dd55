"""A transformers ``LogitsProcessor`` that constrains ``model.generate`` to the table's values.

Each batch row starts at the table's start state and follows its own state
from the tokens it emits; the state tensor lives on the logits' device and is
advanced with batched kernels (:mod:`triec.torch_table`), so a step costs no
host synchronisation. EOS is allowed exactly where a row's text is a complete
value; after EOS the row allows only EOS, so finished rows in a batch never
produce an all ``-inf`` row.

Greedy and sampled decoding are supported; beam search (which reorders rows
between steps) and assisted or speculative decoding (several tokens per call)
are not: a call whose input is not exactly one token longer than the previous
one restarts every row from the start state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from transformers import LogitsProcessor

from triec.torch_table import TorchMaskTable

if TYPE_CHECKING:
    from triec.restrict import RestrictedTable
    from triec.runtime import MaskTable


class TriecLogitsProcessor(LogitsProcessor):
    """Masks every disallowed token to ``-inf``; one instance per ``generate`` call (or call :meth:`reset`).

    ``table`` is a :class:`~triec.runtime.MaskTable`, a restricted view
    (compacted here), or an already uploaded :class:`TorchMaskTable`. The mask
    width must cover the model's logits; extra logit columns are masked.
    """

    # Keeps per-row decoding state between calls, which continuous batching
    # (rows joining and leaving the batch) would scramble.
    supports_continuous_batching = False

    def __init__(self, table: MaskTable | RestrictedTable | TorchMaskTable) -> None:
        self._source = table
        self._tables: dict[torch.device, TorchMaskTable] = {}
        if isinstance(table, TorchMaskTable):
            self._tables[table.device] = table
        self.states: torch.Tensor | None = None  # (B,) int64 on the logits' device
        self._length = 0

    def reset(self) -> None:
        """Forget the rows' states: the next call starts every row afresh."""
        self.states = None
        self._length = 0

    def device_table(self, device: torch.device) -> TorchMaskTable:
        """The table on ``device``, uploaded on first use."""
        table = self._tables.get(device)
        if table is None:
            source = self._source
            if isinstance(source, TorchMaskTable):
                raise ValueError(f"the table lives on {source.device}, but the logits are on {device}")
            compact = getattr(source, "compact", None)  # a restricted view: renumber into its own table
            table = (compact() if compact is not None else source).to_torch(device)
            self._tables[device] = table
        return table

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        table = self.device_table(scores.device)
        batch, length = input_ids.shape
        if self.states is None or self.states.shape[0] != batch or length != self._length + 1:
            self.states = table.start_states(batch)  # first step of a generate call: the prompt
        else:
            self.states = table.advance(self.states, input_ids[:, -1].to(scores.device))
        self._length = length
        return table.apply_bitmask(scores, table.fill(self.states), inplace=False)
