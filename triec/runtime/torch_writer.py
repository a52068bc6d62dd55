"""Bitmask rows on a torch device that touch only the words that change: the twin of the numpy mask writer.

:meth:`TorchMaskTable.fill <triec.runtime.torch.TorchMaskTable.fill>` writes whole rows: every word of B rows is
zeroed (or copied from a dense row) before a state's few words are set. At a 151,936-token vocabulary that is
19 KB a row, 78 MB for one step of 64 requests x 64 beams, while a trie state sets a handful of words. This writer
owns its buffer (like :class:`~triec.runtime.mask_writer.MaskWriter`): each ``fill`` zeroes the words it set the
step before and assigns the new states' (word, bits) pairs, read from the device table's CSR with the table's
fixed gather width (``narrow_words`` lanes a row; lanes past a state's words write a scratch word past the rows,
so there is no host synchronisation on the narrow path). States wider than the gather width (a wide row: most of
the vocabulary) get their dense row copied whole, and that row is zeroed whole the next time.
"""

from __future__ import annotations

from typing import Protocol

import torch


class DeviceRows(Protocol):
    """What the writer reads of a :class:`~triec.runtime.torch.TorchMaskTable` (its device CSR of row words)."""

    device: torch.device
    words_per_row: int
    narrow_words: int
    word_offsets: torch.Tensor
    word_index: torch.Tensor
    word_bits: torch.Tensor
    wide_states: torch.Tensor
    wide_dense: torch.Tensor
    dense_rows: torch.Tensor

    def _rows_of(self, states: torch.Tensor) -> torch.Tensor: ...


class TorchMaskWriter:
    """Fills up to ``max_batch`` int32 bitmask rows on the table's device; ``fill(states)`` returns a view of its
    own buffer, ``(len(states), words_per_row)``, equal to ``table.fill(states)``, valid until the next fill.
    Callers read it (mask logits with it, copy it) and never write to it: the writer relies on knowing every word
    it set."""

    def __init__(self, table: DeviceRows, max_batch: int) -> None:
        if int(max_batch) < 1:
            raise ValueError(f"max_batch must be >= 1, not {max_batch}")
        self.table = table
        self.max_batch = int(max_batch)
        self.width = table.words_per_row
        device = table.device
        size = self.max_batch * self.width
        self._flat = torch.zeros(size + 1, dtype=torch.int32, device=device)  # the last word is scratch
        self._buf = self._flat[:size].view(self.max_batch, self.width)
        self._scratch = size
        self._row_base = torch.arange(self.max_batch, dtype=torch.int64, device=device) * self.width
        self._lanes = torch.arange(table.narrow_words, dtype=torch.int64, device=device)
        self._last: torch.Tensor | None = None  # flat indices set by the narrow path last fill
        self._last_dense: torch.Tensor | None = None  # rows copied whole last fill

    @property
    def buffer(self) -> torch.Tensor:
        """The whole ``(max_batch, words_per_row)`` buffer (read-only use)."""
        return self._buf

    def fill(self, states: torch.Tensor) -> torch.Tensor:
        """One row per state (FINISHED, INVALID and out-of-range ids: the EOS-only row), ``buffer[:len(states)]``."""
        t = self.table
        b = states.numel()
        if b > self.max_batch:
            raise ValueError(f"{b} states exceed this writer's max_batch of {self.max_batch}")
        if self._last is not None:
            self._flat.index_fill_(0, self._last, 0)
        if self._last_dense is not None:
            self._buf.index_fill_(0, self._last_dense, 0)
            self._last_dense = None
        rows_of = t._rows_of(states)
        if t.wide_states.numel():  # rows wider than the gather: their dense rows, whole (one host sync)
            j = torch.searchsorted(t.wide_states, rows_of).clamp_(max=t.wide_states.numel() - 1)
            wide = torch.nonzero(t.wide_states[j] == rows_of).reshape(-1)
            if wide.numel():
                self._buf.index_copy_(0, wide, t.dense_rows.index_select(0, t.wide_dense[j[wide]]))
                self._last_dense = wide
        lo = t.word_offsets[rows_of].to(torch.int64)
        count = t.word_offsets[rows_of + 1].to(torch.int64) - lo
        valid = self._lanes < count.unsqueeze(1)  # (b, L)
        pos = torch.where(valid, lo.unsqueeze(1) + self._lanes, 0)
        flat = torch.where(valid, self._row_base[:b].unsqueeze(1) + t.word_index[pos], self._scratch).reshape(-1)
        self._flat.index_put_((flat,), t.word_bits[pos].reshape(-1))
        self._last = flat
        return self._buf[:b]
