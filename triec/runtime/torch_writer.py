"""Bitmask rows on a torch device that touch only the words that change: the twin of the numpy mask writer.

:meth:`TorchMaskTable.fill <triec.runtime.torch.TorchMaskTable.fill>` writes whole rows: every word of B rows is
zeroed (or copied from a dense row) before a state's few words are set. At a 151,936-token vocabulary that is
19 KB a row, 78 MB for one step of 64 requests x 64 beams, while a trie state sets a handful of words. This writer
owns its buffer (like :class:`~triec.runtime.mask_writer.MaskWriter`): each ``fill`` zeroes the words it set the
step before and assigns the new states' (word, bits) pairs, read from the device table's CSR with the table's
fixed gather width (``narrow_words`` lanes a row; lanes past a state's words write a scratch word past the rows,
so there is no host synchronisation on the narrow path). States wider than the gather width (a wide row: most of
the vocabulary) get their dense row copied whole, and that row is zeroed whole the next time. On the CPU the same
reads and writes go through numpy views of the same memory (:class:`_HostRows`): a torch call's dispatch and
intra-op threads cost more than these microsecond operations.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch

from triec.runtime.mask_writer import batch_words
from triec.runtime.word_masks import pack_single


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

    def __init__(self, table: DeviceRows, max_batch: int, *, host: bool | None = None) -> None:
        """``host``: write through numpy views (:class:`_HostRows`); default on a CPU device, never on another."""
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
        if host and device.type != "cpu":
            raise ValueError(f"host=True: the numpy path writes CPU memory, not {device}")
        on_host = device.type == "cpu" if host is None else host
        self._host: _HostRows | None = _HostRows(table, self._flat) if on_host else None

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
        if self._host is not None:
            self._host.fill(states, self.width)
            return self._buf[:b]
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


class _HostRows:
    """The CPU writer's path: the same CSR read and the same words written through numpy views of the device
    table's tensors and of the writer's buffer (shared memory, no copy). A torch call costs microseconds of dispatch
    and, past a grain size, wakes intra-op threads; a step of 4,096 rows is a dozen such calls, so on the CPU numpy
    (one thread, no dispatch) writes the same rows several times faster."""

    def __init__(self, table: DeviceRows, flat: torch.Tensor) -> None:
        self.num_states = int(table.word_offsets.shape[0]) - 2  # row S is the terminal row (the EOS ids)
        self.offsets = table.word_offsets.numpy().astype(np.int64)
        self.words = table.word_index.numpy().astype(np.int64)
        self.bits = table.word_bits.numpy()
        self.single = pack_single(self.offsets, self.words, self.bits)  # the one-word rows in one gather
        self.wide_states = table.wide_states.numpy()
        self.wide_dense = table.wide_dense.numpy()
        self.dense_rows = table.dense_rows.numpy()
        self.flat = flat.numpy()
        self.row_base = (
            np.arange(self.flat.shape[0] // max(table.words_per_row, 1), dtype=np.int64) * table.words_per_row
        )
        self.last = np.zeros(0, dtype=np.int64)
        self.last_dense: np.ndarray | None = None

    def fill(self, states: torch.Tensor, width: int) -> None:
        self.flat[self.last] = 0
        if self.last_dense is not None:
            rows = self.flat[: self.flat.shape[0] - 1].reshape(-1, width)
            rows[self.last_dense] = 0
            self.last_dense = None
        st = states.reshape(-1).numpy().astype(np.int64, copy=False)
        rows_of = np.clip(st, -1, self.num_states) % (self.num_states + 1)
        if self.wide_states.size:
            j = np.minimum(np.searchsorted(self.wide_states, rows_of), self.wide_states.size - 1)
            wide = np.flatnonzero(self.wide_states[j] == rows_of)
            if wide.size:
                rows = self.flat[: self.flat.shape[0] - 1].reshape(-1, width)
                rows[wide] = self.dense_rows[self.wide_dense[j[wide]]]
                self.last_dense = wide
        flat, values = batch_words(
            self.single, self.offsets, self.words, self.bits, rows_of, self.row_base[: st.shape[0]]
        )
        self.flat[flat] = values
        self.last = flat
