"""A mask table resident on a torch device: fill, advance and mask a batch of states per step.

Serving engines sample on the GPU; copying masks from the host every step and
reading sampled tokens back costs a synchronisation per step. This module keeps
the table on the device and does each step as a fixed sequence of batched
kernels over a state tensor: no Python loop over the batch, no ``.item()``, no
data-dependent shapes, hence no host synchronisation.

Representation (docs/decisions.md D9):

* bitmask rows as the per-state (word, bits) pairs of :mod:`triec.runtime.word_masks`
  in CSR form; a step gathers ``narrow_words`` pairs per state (masked by each
  state's count) and scatter-adds them into zeroed rows (adding distinct bits
  equals OR-ing them);
* the few states with more pairs than that ("wide") get a dense int32 row each,
  and their rows start as a gather from those dense rows instead of zeros;
* transitions as one sorted int64 key ``state * (vocab_size + 2) + token + 1``
  per allowed pair plus the next state: ``advance`` is one ``searchsorted``
  (the stride leaves room for tokens clamped from outside the vocabulary).

Negative states are terminal: ``FINISHED`` (-1, after EOS at an accepting
state) and ``INVALID`` (-2, after a token the mask did not allow). They stay
where they are under ``advance`` and their mask row allows exactly the EOS ids,
so a finished row in a batch never turns into an all ``-inf`` row.

Out-of-range state ids (anything but ``0 .. num_states - 1``, FINISHED and
INVALID) are a caller error reported in band, not raised: ``fill`` gives them
the terminal row and ``advance`` turns them into ``INVALID``. Raising would
need the state values on the host, a synchronisation per step; an index past
a table on a CUDA device would instead be a device-side assert that kills
every request of the process. ``check_states`` raises ``ValueError`` for
callers that want the loud form and can afford the synchronisation
(docs/decisions.md D12). Every tensor is indexed only with ids made safe by
``torch.where``; the uploaded arrays themselves passed
:func:`triec.runtime.validate.check_indices` (at load, or here for a table built by
hand).

Only this module (and the integrations) import torch; ``table.to_torch()`` imports it on use.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from triec._arrays import concat_ranges
from triec.runtime.arrays import TableArrays
from triec.runtime.bitmask import BYTE_BITS, ids_in_words
from triec.runtime.kinds import SetTable
from triec.runtime.states import FINISHED
from triec.runtime.word_masks import state_words, words_from_pairs

if TYPE_CHECKING:
    from triec.runtime.torch_writer import TorchMaskWriter

INVALID = -2
"""What :meth:`TorchMaskTable.advance` returns for a token the state does not allow."""

DEFAULT_NARROW_WORDS = 256
"""Pairs gathered per state and step; states with more words get a dense row."""

DEFAULT_MAX_GATHER = {"cpu": 4096}
"""Per device type: rows allowing at most this many tokens are masked by gathering their
logits (:meth:`TorchMaskTable.mask_rows`); other devices and wider rows use the bitmask.
Measured in docs/benchmarks.md ("Masking logits rows")."""

_NO_KEY = np.iinfo(np.int64).max  # sentinel pair key past every real one, so no array is empty


# ----------------------------------------------------------------------------- the one masking path
# Every bitmask-to-logits application of the integrations and the eval loop is one of these three (issue 34):
# dense rows (:func:`apply_bitmask`), host rows that set few words (:func:`apply_bitmask_sparse`), rows that keep
# a known list of tokens (:func:`keep_tokens`: EOS-only rows, a schema slot's precomputed row). Fused device
# kernels plug in here.

_BYTE_BITS: dict[torch.device, torch.Tensor] = {}


def use_kernels(device: torch.device) -> bool:
    """The fused Triton kernels (:mod:`triec.runtime.kernels`) serve this device: CUDA with triton installed,
    or any device under Triton's interpreter; ``TRIEC_KERNELS=0`` keeps the torch path everywhere."""
    found = _KERNELS.get(device.type)
    if found is None:
        import importlib.util

        found = importlib.util.find_spec("triton") is not None
        if found:
            from triec.runtime.kernels import available

            found = available(device)
        _KERNELS[device.type] = found
    return found


_KERNELS: dict[str, bool] = {}


def _byte_bits(device: torch.device) -> torch.Tensor:
    found = _BYTE_BITS.get(device)
    if found is None:
        found = _BYTE_BITS[device] = torch.tensor(BYTE_BITS, dtype=torch.uint8, device=device)
    return found


def apply_bitmask(logits: torch.Tensor, bitmask: torch.Tensor, *, inplace: bool = True) -> torch.Tensor:
    """Set ``logits`` to -inf where the bitmask bit is 0 (in place unless ``inplace=False``); returns the result.

    ``logits`` (B, V) and an int32 ``bitmask`` (B, W) on the same device, in the layout of
    :mod:`triec.runtime.bitmask`. Logit columns past ``32 * W`` are masked too: xgrammar's ``apply_token_bitmask_inplace``
    over the full width. torch only, no synchronisation.
    """
    if logits.ndim != 2 or bitmask.ndim != 2 or bitmask.shape[0] != logits.shape[0] or bitmask.dtype != torch.int32:
        raise ValueError(
            f"expected logits (B, V) and an int32 bitmask (B, W), got {tuple(logits.shape)} and "
            f"{bitmask.dtype} {tuple(bitmask.shape)}"
        )
    b, width = logits.shape
    if use_kernels(logits.device) and logits.stride(1) == 1:
        from triec.runtime import kernels

        out = logits if inplace else logits.clone()
        return kernels.apply(out, bitmask.contiguous())
    # The row's bytes, least significant bit first (bitmask.BYTE_BITS), unpacked: a B x V uint8 temporary.
    octets = bitmask.contiguous().view(torch.uint8)
    blocked = ((octets.unsqueeze(-1) & _byte_bits(octets.device)) == 0).reshape(b, -1)  # (B, 32 * W)
    if blocked.shape[1] >= width:
        blocked = blocked[:, :width]
    else:
        pad = torch.ones((b, width - blocked.shape[1]), dtype=torch.bool, device=blocked.device)
        blocked = torch.cat([blocked, pad], dim=1)
    if inplace:
        return logits.masked_fill_(blocked, float("-inf"))
    return logits.masked_fill(blocked, float("-inf"))


def apply_bitmask_rows(logits: torch.Tensor, rows: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
    """:func:`apply_bitmask` on ``logits[rows]`` (``bitmask`` aligned with ``rows``), in place; returns ``logits``."""
    if use_kernels(logits.device) and logits.stride(1) == 1 and bitmask.dtype == torch.int32:
        from triec.runtime import kernels

        return kernels.apply(logits, bitmask.contiguous(), rows)
    sub = logits.index_select(0, rows)
    apply_bitmask(sub, bitmask)
    return logits.index_copy_(0, rows, sub)


def keep_tokens(logits: torch.Tensor, rows: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """In place: every row in ``rows`` keeps only the logits of ``ids`` (-inf elsewhere); returns ``logits``.

    O(rows x ids) reads and writes plus the row fills: for EOS-only rows and a row that allows a known few
    tokens. ``ids`` must lie below the logits' width (callers filter on the host: a boolean filter of a
    device tensor here would synchronise with the device every step).
    """
    if rows.numel() == 0:
        return logits
    kept = logits[:, ids].index_select(0, rows) if ids.numel() else None
    logits.index_fill_(0, rows, float("-inf"))
    if kept is not None:
        logits[rows.unsqueeze(1), ids.unsqueeze(0)] = kept
    return logits


def keep_pairs(
    logits: torch.Tensor, rows: torch.Tensor, pair_rows: torch.Tensor, pair_ids: torch.Tensor
) -> torch.Tensor:
    """In place: every row in ``rows`` keeps only its own listed logits, ``logits[pair_rows[i], pair_ids[i]]``
    (-inf elsewhere); returns ``logits``. :func:`keep_tokens` with a different id list per row (a beam's allowed
    ids, each row its own): O(pairs) reads and writes plus the row fills. Ids must lie below the width."""
    if rows.numel() == 0:
        return logits
    kept = logits[pair_rows, pair_ids]
    logits.index_fill_(0, rows, float("-inf"))
    logits[pair_rows, pair_ids] = kept
    return logits


SPARSE_WORDS = 512
"""Host rows setting at most this many words (16,384 tokens at most) are gathered by :func:`apply_bitmask_sparse`."""


def apply_bitmask_sparse(
    logits: torch.Tensor,
    bitmask: torch.Tensor,
    indices: Sequence[int] | None,
    width: int,
    dense: Callable[[Sequence[int]], None],
) -> None:
    """Mask host ``logits[i, :width]`` to -inf where bit ``t`` of ``bitmask[i]`` is 0, for ``i`` in ``indices``.

    xgrammar's ``apply_token_bitmask_inplace`` semantics on host tensors (``indices=None``: every row): rows of
    -1 are left alone, logits past ``width`` are never masked. Rows setting at most :data:`SPARSE_WORDS` words
    (a trie state allows a few dozen tokens) are gathered in a few batched numpy and torch operations: the
    logits they keep are read, the rows filled with -inf and the kept ones written back. ``dense(rows)`` masks
    the others (the engine's own kernel, or :func:`apply_bitmask`).
    """
    bm = bitmask.numpy()
    rows = np.arange(bm.shape[0], dtype=np.int64) if indices is None else np.asarray(list(indices), dtype=np.int64)
    if rows.size == 0:
        return
    sub = bm[rows]
    full = (sub == -1).all(axis=1)
    sparse = ((sub != 0).sum(axis=1) <= SPARSE_WORDS) & ~full
    if (~sparse & ~full).any():
        dense(rows[~sparse & ~full].tolist())
    if not sparse.any():
        return
    srows = rows[sparse]
    s = sub[sparse]
    r, w = np.nonzero(s)
    m, ids = ids_in_words(w, s[r, w])
    owner = srows[r[m]]
    keep = ids < width
    it, rt = torch.from_numpy(ids[keep]), torch.from_numpy(owner[keep])
    kept = logits[rt, it]
    logits[torch.from_numpy(srows), :width] = float("-inf")
    logits[rt, it] = kept


class TorchMaskTable:
    """A :class:`~triec.runtime.table.MaskTable` on a torch device (built by ``table.to_torch(device)``).

    State tensors are int64 (int32 accepted) of shape ``(B,)``; the same ids as
    the numpy table, plus the negative terminal states above.
    """

    def __init__(
        self,
        table: SetTable,
        device: str | torch.device | None = None,
        *,
        narrow_words: int = DEFAULT_NARROW_WORDS,
        kernels: bool | None = None,
    ) -> None:
        if narrow_words < 1:
            raise ValueError(f"narrow_words must be >= 1, not {narrow_words}")
        table.check_indices()  # a table built by hand is checked before anything is uploaded
        self.device = torch.device(device if device is not None else "cpu")
        self.num_states = table.num_states
        self.vocab_size = table.vocab_size
        self.words_per_row = table.words_per_row
        self.eos_token_ids = table.eos_token_ids
        self.start = table.start
        self.narrow_words, arrays = _device_arrays(table, narrow_words)
        put = {name: torch.from_numpy(np.ascontiguousarray(a)).to(self.device) for name, a in arrays.items()}
        self.word_offsets: torch.Tensor = put["word_offsets"]  # int32 [S + 2]; state S is the terminal row
        self.word_index: torch.Tensor = put["word_index"]  # int32 [N + 1]
        self.word_bits: torch.Tensor = put["word_bits"]  # int32 [N + 1]
        self.wide_states: torch.Tensor = put["wide_states"]  # int64 [D], ascending
        self.wide_dense: torch.Tensor = put["wide_dense"]  # int64 [D]: each wide state's row of dense_rows
        self.dense_rows: torch.Tensor = put["dense_rows"]  # int32 [D + 1, W]; row 0 is all zero
        self.pair_keys: torch.Tensor = put[
            "pair_keys"
        ]  # int64 [P + 1]: state * (V + 2) + token + 1, ascending, then a sentinel
        self.pair_next: torch.Tensor = put["pair_next"]  # int32 [P + 1]
        self.token_class: torch.Tensor | None = put.get("token_class")  # int32 [V]: pairs hold classes, not tokens
        self.accepting: torch.Tensor = put["accepting"]  # bool [S + 1]
        self.eos: torch.Tensor = put["eos"]  # int64 [E]
        self._lanes = torch.arange(self.narrow_words, device=self.device)
        self.table = table
        """The host table it was uploaded from."""
        self._source = table  # integrations/vllm/batch.py reads it until it reads .table (serving branch)
        self._token_rows: tuple[torch.Tensor, torch.Tensor] | None = None  # built on first mask_rows gather
        if kernels and not use_kernels(self.device):
            raise RuntimeError(
                f"kernels=True: triton cannot run for {self.device} here (CUDA with triton installed, "
                "or TRITON_INTERPRET=1 set before triton is imported)"
            )
        self.packed: Any = None
        """The fused kernels' arrays (:mod:`triec.runtime.kernels`), when they serve this device; else None."""
        if kernels or (kernels is None and use_kernels(self.device)):
            from triec.runtime import kernels as k

            self.packed = k.pack([arrays], [self.num_states], self.vocab_size, self.words_per_row, self.device)

    @property
    def nbytes(self) -> int:
        """Device bytes held by the table's tensors (the fused kernels' packed copy included)."""
        tensors = (
            self.word_offsets,
            self.word_index,
            self.word_bits,
            self.wide_states,
            self.wide_dense,
            self.dense_rows,
            self.pair_keys,
            self.pair_next,
            self.accepting,
            self.eos,
        )
        packed = self.packed.nbytes if self.packed is not None else 0
        return int(sum(t.numel() * t.element_size() for t in tensors)) + packed

    def __repr__(self) -> str:
        return (
            f"TorchMaskTable(states={self.num_states}, device={self.device}, wide={self.wide_states.numel()}, "
            f"narrow_words={self.narrow_words}, kernels={self.packed is not None}, bytes={self.nbytes:,})"
        )

    def start_states(self, batch_size: int) -> torch.Tensor:
        """A ``(batch_size,)`` int64 tensor of start states on the device."""
        if int(batch_size) < 0:
            raise ValueError(f"batch_size must be >= 0, not {batch_size}")
        return torch.full((int(batch_size),), self.start, dtype=torch.int64, device=self.device)

    def _live(self, s: torch.Tensor) -> torch.Tensor:
        return (s >= 0) & (s < self.num_states)

    def _rows_of(self, states: torch.Tensor) -> torch.Tensor:
        """Row per state: itself when live, else the terminal row ``num_states`` (never out of range).

        Two kernels: clamping to ``-1 .. S`` keeps live ids and sends every other id to -1 or S,
        and ``% (S + 1)`` turns -1 into S.
        """
        s = states.reshape(-1).to(device=self.device, dtype=torch.int64)
        return s.clamp(-1, self.num_states).remainder_(self.num_states + 1)

    def check_states(self, states: torch.Tensor) -> None:
        """Raise ``ValueError`` unless every state is a state, FINISHED or INVALID.

        A debugging aid: it reads the states on the host (one synchronisation).
        ``fill`` and ``advance`` never need it; they treat such ids as INVALID.
        """
        s = states.reshape(-1).to(device=self.device, dtype=torch.int64)
        bad = ~(self._live(s) | (s == FINISHED) | (s == INVALID))
        if bool(bad.any()):
            first = int(s[bad][0])
            raise ValueError(
                f"state {first} out of range: states lie in 0..{self.num_states - 1}, or are FINISHED (-1) or INVALID (-2)"
            )

    def is_accepting(self, states: torch.Tensor) -> torch.Tensor:
        """Bool ``(B,)``: the state's prefix is a value (terminal and out-of-range states are not accepting)."""
        return self.accepting[self._rows_of(states)]

    def fill(self, states: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """The ``(B, ceil(vocab_size / 32))`` int32 bitmask rows of ``states`` (xgrammar's layout).

        FINISHED, INVALID and out-of-range ids get the terminal row: the EOS ids only.
        """
        b = states.numel()
        if out is None:
            out = torch.empty((b, self.words_per_row), dtype=torch.int32, device=self.device)
        elif (
            out.shape != (b, self.words_per_row)
            or out.dtype != torch.int32
            or not _same_device(out.device, self.device)
        ):
            raise ValueError(
                f"out must be an int32 tensor of shape ({b}, {self.words_per_row}) on {self.device}, "
                f"got {out.dtype} {tuple(out.shape)} on {out.device}"
            )
        if self.packed is not None:
            from triec.runtime import kernels

            return kernels.fill(self.packed, states.reshape(-1).to(self.device), out=out)
        rows_of = self._rows_of(states)
        if self.wide_states.numel():
            j = torch.searchsorted(self.wide_states, rows_of).clamp_(max=self.wide_states.numel() - 1)
            dense = torch.where(self.wide_states[j] == rows_of, self.wide_dense[j], 0)
            torch.index_select(self.dense_rows, 0, dense, out=out)
        else:
            out.zero_()
        lo = self.word_offsets[rows_of].to(torch.int64)
        count = self.word_offsets[rows_of + 1].to(torch.int64) - lo
        valid = self._lanes < count.unsqueeze(1)  # (B, L)
        pos = torch.where(valid, lo.unsqueeze(1) + self._lanes, 0)
        words = self.word_index[pos].to(torch.int64)
        bits = torch.where(valid, self.word_bits[pos], 0)
        if self.words_per_row:  # a 0-wide row has nowhere to put even the padding lane
            out.scatter_add_(1, words, bits)  # words are unique per state, so the sums are ORs
        return out

    def mask_writer(self, max_batch: int = 1) -> TorchMaskWriter:
        """A writer of up to ``max_batch`` rows on this device that, step after step, zeroes only the words it set
        and writes only the new states' words (:mod:`triec.runtime.torch_writer`); :meth:`fill` writes whole rows."""
        from triec.runtime.torch_writer import TorchMaskWriter

        return TorchMaskWriter(self, max_batch)

    def apply_bitmask(self, logits: torch.Tensor, bitmask: torch.Tensor, *, inplace: bool = True) -> torch.Tensor:
        """Set ``logits`` to -inf where the bitmask bit is 0 (in place unless ``inplace=False``): :func:`apply_bitmask`.

        Logit columns past ``32 * words`` are masked too. Same result as
        xgrammar's ``apply_token_bitmask_inplace`` over the full width; torch only.
        """
        return apply_bitmask(logits, bitmask, inplace=inplace)

    def mask_logits(self, logits: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
        """Fill the rows of ``states`` and apply them to ``logits`` (in place); returns ``logits``."""
        if logits.ndim != 2 or logits.shape[0] != states.numel():
            raise ValueError(f"logits must be (B, V) with B = {states.numel()} states, got {tuple(logits.shape)}")
        if self.packed is not None and logits.stride(1) == 1:
            from triec.runtime import kernels

            return kernels.fill_apply(self.packed, logits, states.reshape(-1).to(self.device))
        return self.apply_bitmask(logits, self.fill(states))

    def token_rows(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(offsets int64 [S + 2], tokens int64 [N + 1]): each state's allowed ids, EOS included.

        Row ``S`` is the terminal states' row (the EOS ids). Built on first use
        from the numpy table (O(allowed pairs)); the gather path of
        :meth:`mask_rows` reads it.
        """
        if self._token_rows is None:
            offsets, tokens = _token_rows(self.table)
            self._token_rows = (torch.from_numpy(offsets).to(self.device), torch.from_numpy(tokens).to(self.device))
        return self._token_rows

    def mask_rows(
        self, logits: torch.Tensor, rows: torch.Tensor | None, states: torch.Tensor, *, max_gather: int | None = None
    ) -> torch.Tensor:
        """Set ``logits[rows[i]]`` to -inf outside the allowed tokens of ``states[i]`` (in place).

        Two exact methods, one result. *Gather*: read the few allowed logits of
        each row, fill the rows with -inf, write the read values back; it costs
        the row fills plus O(allowed), and needs the largest allowed count on
        the host (a synchronisation). *Bitmask*: :meth:`fill` then
        :meth:`apply_bitmask` over the rows; no synchronisation, O(width) per row
        with a B x V temporary. Rows whose state allows at most ``max_gather``
        tokens take the gather path (default :data:`DEFAULT_MAX_GATHER` for the
        device type, 0 = always the bitmask). ``rows=None`` means every row, in
        order (``states`` then has one state per row). ``logits`` must be contiguous.
        """
        states = states.reshape(-1)
        if self.packed is not None and logits.stride(1) == 1:  # one launch: fill each row's words, then mask it
            from triec.runtime import kernels

            r = None if rows is None else rows.reshape(-1).to(device=logits.device, dtype=torch.int64)
            return kernels.fill_apply(self.packed, logits, states.to(self.device), rows=r)
        limit = DEFAULT_MAX_GATHER.get(logits.device.type, 0) if max_gather is None else int(max_gather)
        if self.token_class is not None:  # a class layout's rows are wide or shared: the bitmask serves them
            limit = 0
        every = rows is None
        if every:
            if limit <= 0:
                return self.apply_bitmask(logits, self.fill(states))
            rows = torch.arange(states.numel(), device=logits.device)
        assert rows is not None
        rows = rows.reshape(-1).to(device=logits.device, dtype=torch.int64)
        if rows.numel() == 0:
            return logits
        if limit <= 0:
            return self._mask_rows_bitmask(logits, rows, states)
        offsets, tokens = self.token_rows()
        r = self._rows_of(states)
        lo = offsets[r]
        count = offsets[r + 1] - lo
        narrow = count <= limit
        if not bool(narrow.all()):
            every = False
            wide = ~narrow
            self._mask_rows_bitmask(logits, rows[wide], states[wide])
            rows, lo, count = rows[narrow], lo[narrow], count[narrow]
            if rows.numel() == 0:
                return logits
        lanes = torch.arange(int(count.max()), device=logits.device)
        # Lanes past a row's count repeat its first token: writing the same value twice is harmless.
        pos = torch.where(lanes < count.unsqueeze(1), lo.unsqueeze(1) + lanes, lo.unsqueeze(1))
        flat = (rows * logits.shape[1]).unsqueeze(1) + tokens[pos]
        view = logits.view(-1)
        kept = view[flat]
        if every:  # a contiguous fill is several times faster than index_fill_ over the same rows
            logits.fill_(float("-inf"))
        else:
            logits.index_fill_(0, rows, float("-inf"))
        view[flat] = kept
        return logits

    def _mask_rows_bitmask(self, logits: torch.Tensor, rows: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
        return apply_bitmask_rows(logits, rows, self.fill(states))

    def advance(self, states: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """Next states (int64) after one token per row; see the module docstring for the terminals.

        FINISHED and INVALID stay as they are; any other id outside the table becomes INVALID.
        """
        if tokens.numel() != states.numel():
            raise ValueError(f"advance needs one token per state: {states.numel()} states, {tokens.numel()} tokens")
        s = states.reshape(-1).to(device=self.device, dtype=torch.int64)
        t = tokens.reshape(-1).to(device=self.device, dtype=torch.int64)
        if self.packed is not None:
            from triec.runtime import kernels

            return kernels.advance(self.packed, s, t)
        row = self._rows_of(s)  # the terminal row S has no pairs and is not accepting
        # Keys have a stride of vocab_size + 2 and hold token + 1: a token clamped from outside the
        # vocabulary becomes 0 or vocab_size + 1, which no pair has, and cannot reach another row.
        item = t.clamp(-1, self.vocab_size)
        if self.token_class is not None:  # a class layout: a token's pairs are its class's (-1: in none)
            inside = (t >= 0) & (t < self.vocab_size)
            item = torch.where(inside, self.token_class[t.clamp(0, self.vocab_size - 1)].to(torch.int64), item)
        key = row * (self.vocab_size + 2) + item.add_(1)
        i = torch.searchsorted(self.pair_keys, key).clamp_(max=self.pair_keys.numel() - 1)
        otherwise = torch.where(s == FINISHED, FINISHED, INVALID)  # FINISHED stays; every other miss is INVALID
        nxt = torch.where(self.pair_keys[i] == key, self.pair_next[i].to(torch.int64), otherwise)
        eos = (t.unsqueeze(1) == self.eos).any(1) & self.accepting[row]
        return torch.where(eos, FINISHED, nxt)


def _same_device(a: torch.device, b: torch.device) -> bool:
    """``cuda`` and ``cuda:0`` are the same device when one of them names no index."""
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)


def _device_arrays(table: TableArrays, narrow_words: int) -> tuple[int, dict[str, np.ndarray]]:
    """The gather width and the numpy arrays of the device representation (see the module docstring).

    States that share a row (a pattern table's token classes) share its dense row too: a wide row is uploaded
    once, however many states set it."""
    sw = state_words(table)
    n_states = table.num_states
    row_of = sw.rows(np.arange(n_states, dtype=np.int64))
    row_lo = sw.offsets[:-1].astype(np.int64)
    row_counts = np.diff(sw.offsets).astype(np.int64)
    counts = row_counts[row_of]
    width = int(min(narrow_words, max(int(counts.max(initial=0)), len(table.eos_token_ids), 1)))
    wide_rows = np.flatnonzero(row_counts > width)
    dense = np.zeros((wide_rows.size + 1, table.words_per_row), dtype=np.int32)
    for d, r in enumerate(wide_rows.tolist(), start=1):
        lo, hi = int(sw.offsets[r]), int(sw.offsets[r + 1])
        dense[d, sw.words[lo:hi]] = sw.bits[lo:hi]
    dense_of_row = np.zeros(row_counts.size, dtype=np.int64)
    dense_of_row[wide_rows] = np.arange(1, wide_rows.size + 1, dtype=np.int64)
    wide = np.flatnonzero(counts > width).astype(np.int64)
    # Wide states keep an empty CSR segment: their dense row is already complete.
    kept_counts = np.where(counts > width, 0, counts)
    kept = concat_ranges(row_lo[row_of], kept_counts)
    eos = np.asarray(table.eos_token_ids, dtype=np.int64)
    eos_row = words_from_pairs(1, np.zeros(eos.size, dtype=np.int64), eos, table.words_per_row)
    eos_words, eos_bits = eos_row.words, eos_row.bits
    offsets = np.zeros(n_states + 2, dtype=np.int64)
    np.cumsum(kept_counts, out=offsets[1 : n_states + 1])
    offsets[n_states + 1] = offsets[n_states] + eos_words.size
    pad = np.zeros(1, dtype=np.int64)  # one spare pair so every gather index is in range
    word_index = np.concatenate([sw.words[kept], eos_words, pad])
    word_bits = np.concatenate([sw.bits[kept], eos_bits, pad.astype(np.int32)])
    if offsets[-1] >= 2**31:
        raise ValueError("too many mask words for int32 offsets")
    pairs = _pair_arrays(table)
    accepting = np.zeros(n_states + 1, dtype=bool)
    accepting[np.asarray(table.value_state, dtype=np.int64)] = True
    return width, {
        "word_offsets": offsets.astype(np.int32),
        "word_index": word_index.astype(np.int32),
        "word_bits": word_bits.astype(np.int32),
        "wide_states": wide,
        "wide_dense": dense_of_row[row_of[wide]],
        "dense_rows": dense,
        **pairs,
        "accepting": accepting,
        "eos": eos,
    }


def _pair_arrays(table: TableArrays) -> dict[str, np.ndarray]:
    """``pair_keys`` (state * (V + 2) + item + 1, ascending, then a sentinel) and ``pair_next``: the items are
    token ids, or a pattern table's class ids with ``token_class`` [V] (class of each token, -1 for none) to
    turn a token into its class before the lookup."""
    classes = table.classes
    if classes is None:
        offsets, items, nxt = table.allowed_offsets, table.allowed_tokens, table.allowed_next
        extra: dict[str, np.ndarray] = {}
    else:
        offsets, items, nxt = classes.class_offsets, classes.class_ids, classes.class_next
        extra = {"token_class": np.asarray(classes.token_class, dtype=np.int32)}
    offsets = np.asarray(offsets, dtype=np.int64)
    pair_state = np.repeat(np.arange(offsets.size - 1, dtype=np.int64), np.diff(offsets))
    pair_keys = pair_state * (table.vocab_size + 2) + np.asarray(items, dtype=np.int64) + 1
    return {
        "pair_keys": np.concatenate([pair_keys, [_NO_KEY]]),
        "pair_next": np.concatenate([np.asarray(nxt, dtype=np.int32), [0]]).astype(np.int32),
        **extra,
    }


def _token_rows(table: TableArrays) -> tuple[np.ndarray, np.ndarray]:
    """Allowed ids per state with EOS appended at accepting states, plus the terminal row (EOS)."""
    n = table.num_states
    content_offsets = np.asarray(table.allowed_offsets, dtype=np.int64)
    content = np.diff(content_offsets)
    eos = np.asarray(table.eos_token_ids, dtype=np.int64)
    accepting = np.zeros(n, dtype=bool)
    accepting[np.asarray(table.value_state, dtype=np.int64)] = True
    counts = np.concatenate([content + accepting * eos.size, [eos.size]])
    offsets = np.zeros(n + 2, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    tokens = np.zeros(int(offsets[-1]) + 1, dtype=np.int64)  # one spare slot keeps every gather in range
    tokens[concat_ranges(offsets[:n], content)] = np.asarray(table.allowed_tokens, dtype=np.int64)
    ends = np.concatenate([np.flatnonzero(accepting), [n]])  # states whose row ends in the EOS ids
    if eos.size:
        at = (offsets[ends] + np.concatenate([content, [0]])[ends]).repeat(eos.size) + np.tile(
            np.arange(eos.size), ends.size
        )
        tokens[at] = np.tile(eos, ends.size)
    return offsets, tokens


class TorchTableSet:
    """Several mask tables of one width on a device, each row of a batch naming its table.

    With the fused kernels (:mod:`triec.runtime.kernels`: CUDA with triton, or Triton's interpreter) every
    operation is one launch over all rows, whatever the number of tables: the tables' arrays are
    concatenated and a row finds its own through per-table offsets (restricted subsets compacted, canonical
    tables: any :class:`MaskTable`). Without them each table's :class:`TorchMaskTable` serves its rows, one
    after another, and ``tables`` is read on the host.
    """

    def __init__(
        self,
        tables: Sequence[SetTable],
        device: str | torch.device | None = None,
        *,
        narrow_words: int = DEFAULT_NARROW_WORDS,
        kernels: bool | None = None,
    ) -> None:
        if not tables:
            raise ValueError("a table set needs at least one table")
        widths = {t.vocab_size for t in tables}
        if len(widths) != 1:
            raise ValueError(f"tables of one set share a mask width; found {sorted(widths)}")
        self.device = torch.device(device if device is not None else "cpu")
        self.vocab_size = tables[0].vocab_size
        self.words_per_row = tables[0].words_per_row
        if kernels and not use_kernels(self.device):
            raise RuntimeError(f"kernels=True: triton cannot run for {self.device} here")
        self.packed: Any = None
        self.tables: list[TorchMaskTable] = []
        if kernels or (kernels is None and use_kernels(self.device)):
            from triec.runtime import kernels as k

            for t in tables:
                t.check_indices()
            arrays = [_device_arrays(t, narrow_words)[1] for t in tables]
            self.packed = k.pack(
                arrays, [t.num_states for t in tables], self.vocab_size, self.words_per_row, self.device
            )
        else:
            self.tables = [TorchMaskTable(t, self.device, narrow_words=narrow_words, kernels=False) for t in tables]
        self.starts = tuple(t.start for t in tables)

    def __len__(self) -> int:
        return len(self.starts)

    def _groups(self, tables: torch.Tensor | Sequence[int]) -> list[tuple[int, torch.Tensor]]:
        ids = torch.as_tensor(tables).reshape(-1).cpu()
        return [(int(g), torch.nonzero(ids == g).reshape(-1).to(self.device)) for g in torch.unique(ids).tolist()]

    def fill(
        self, tables: torch.Tensor | Sequence[int], states: torch.Tensor, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The ``(B, W)`` int32 bitmask rows of ``states[i]`` in table ``tables[i]``."""
        s = states.reshape(-1).to(device=self.device, dtype=torch.int64)
        if self.packed is not None:
            from triec.runtime import kernels

            return kernels.fill(self.packed, s, torch.as_tensor(tables, device=self.device), out=out)
        if out is None:
            out = torch.empty((s.numel(), self.words_per_row), dtype=torch.int32, device=self.device)
        for g, at in self._groups(tables):
            out[at] = self.tables[g].fill(s[at])
        return out

    def mask_logits(
        self,
        logits: torch.Tensor,
        tables: torch.Tensor | Sequence[int],
        states: torch.Tensor,
        rows: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Mask ``logits`` row ``rows[i]`` (else row i) to the allowed tokens of ``states[i]`` in ``tables[i]``."""
        s = states.reshape(-1).to(device=self.device, dtype=torch.int64)
        r = None if rows is None else rows.reshape(-1).to(device=logits.device, dtype=torch.int64)
        if self.packed is not None and logits.stride(1) == 1:
            from triec.runtime import kernels

            return kernels.fill_apply(self.packed, logits, s, torch.as_tensor(tables, device=self.device), rows=r)
        r = torch.arange(s.numel(), device=logits.device) if r is None else r
        return apply_bitmask_rows(logits, r, self.fill(tables, s))

    def advance(self, tables: torch.Tensor | Sequence[int], states: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """Next states after one token per row (FINISHED at EOS where accepting, INVALID for a refused token)."""
        s = states.reshape(-1).to(device=self.device, dtype=torch.int64)
        t = tokens.reshape(-1).to(device=self.device, dtype=torch.int64)
        if self.packed is not None:
            from triec.runtime import kernels

            return kernels.advance(self.packed, s, t, torch.as_tensor(tables, device=self.device))
        out = torch.empty_like(s)
        for g, at in self._groups(tables):
            out[at] = self.tables[g].advance(s[at], t[at])
        return out
