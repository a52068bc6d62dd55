"""Content checks of a mask table's arrays: for tables read from disk, or built by hand.

Two levels (docs/format.md, "What the loader checks"; docs/decisions.md D3):

* :func:`check_indices` runs at every ``triec.load``: every value the runtime
  uses as an index (offsets, token ids, next states, value states, the value
  prefix lengths that rebuild the values) lies in range, and each state's
  tokens ascend without EOS (so ``allowed`` and ``advance`` agree). A table that passes
  can answer every query without reading out of bounds or raising anything
  but triec's documented errors; its masks may still be wrong if the file was
  corrupted in range. Vectorized min/max/compare passes over the arrays:
  about 0.6 ms at K = 100,000 (5.5 MB).
* :func:`validate_contents` (``verify=True``) adds what only makes the
  answers *right*: transitions
  leading forward, values rebuilt, valid UTF-8 and in order.

A table built by ``triec.compile`` is correct by construction and skips both;
one built by hand runs :func:`check_indices` before its first device upload
(:meth:`MaskTable.check_indices <triec.runtime.table.MaskTable.check_indices>`).
"""

from __future__ import annotations

from typing import NoReturn

import numpy as np

from triec.errors import ArtifactContentError
from triec.runtime.arrays import TableArrays
from triec.runtime.kinds import SetTable
from triec.runtime.tail_checks import check_tail_indices, validate_tail_contents


def _fail(source: str, field: str, message: str) -> NoReturn:
    raise ArtifactContentError(f"{source}: section {field}: {message}")


def _outside(a: np.ndarray, hi: int) -> bool:
    """Whether any element of integer array ``a`` lies outside ``0 .. hi - 1`` (one pass)."""
    if a.size == 0:
        return False
    if a.dtype.kind == "i":  # negatives read as unsigned are huge: one max covers both bounds
        return int(a.view(a.dtype.str.replace("i", "u")).max()) >= hi
    if a.dtype.kind == "u":
        return int(a.max()) >= hi
    return True  # not an integer array at all


def _first_outside(a: np.ndarray, hi: int) -> tuple[int, int]:
    """(index, value) of the first element outside ``0 .. hi - 1`` (only called on failure)."""
    if a.dtype.kind not in "iu":
        return 0, a[0]
    wide = a.astype(np.int64)
    i = int(np.flatnonzero((wide < 0) | (wide >= hi))[0])
    return i, int(wide[i])


def check_indices(table: TableArrays, source: str) -> None:
    """Raise :class:`ArtifactContentError` unless every index the runtime follows is in range.

    Checks: array lengths agree with S, P and K; EOS ids lie in the mask;
    ``allowed_offsets`` starts at 0, ends at P and never decreases;
    ``allowed_tokens`` in ``0 .. vocab_size - 1``; ``allowed_next`` in
    ``0 .. S - 1``; ``value_state`` strictly increasing from >= 0 to S - 1;
    ``value_lcp[0] == 0`` and every ``value_lcp[i]`` between 0 and the length
    of value i - 1 (so the rebuilt values and every state's prefix and depth
    come from in-range slices).
    """
    s, v = table.num_states, table.vocab_size
    vs, lcp = table.value_state, table.value_lcp
    k = int(vs.shape[0])
    if s < 1 or k < 1:
        _fail(source, "value_state", f"a table holds at least one state and one value, found {s} states, {k} values")
    if not 1 <= v < 2**31:
        _fail(source, "allowed_tokens", f"mask width {v} out of range 1..{2**31 - 1}")
    bad_eos = [e for e in table.eos_token_ids if not 0 <= e < v]
    if bad_eos:
        _fail(source, "eos_token_ids", f"EOS ids {bad_eos} lie outside the mask 0..{v - 1}")
    tails = table.tails
    if tails is not None:  # the tail layout: which rows exist follows from the values, checked first
        if lcp.shape != (k,) or table.state_byte.shape != (s,):
            _fail(source, "value_lcp", f"array lengths disagree: value_lcp {lcp.shape}, {k} values, {s} states")
        _check_values(source, vs, lcp, s, k)
        check_tail_indices(tails, source, table.eos_token_ids)
        return
    off, tokens, nxt = table.allowed_offsets, table.allowed_tokens, table.allowed_next
    p = int(tokens.shape[0])
    if off.shape != (s + 1,) or nxt.shape != (p,) or lcp.shape != (k,) or tokens.ndim != 1:
        _fail(
            source,
            "allowed_offsets",
            f"array lengths disagree: offsets {off.shape}, tokens {tokens.shape}, next {nxt.shape}, "
            f"value_state {vs.shape}, value_lcp {lcp.shape}, {s} states",
        )
    if _outside(off[:1], 1) or int(off[-1]) != p:
        _fail(source, "allowed_offsets", f"expected to run from 0 to {p} (the pair count), found {off[0]}..{off[-1]}")
    decreasing = off[1:] < off[:-1]
    if decreasing.any():
        i = int(np.argmax(decreasing))
        _fail(
            source, "allowed_offsets", f"expected non-decreasing offsets, found {off[i]} then {off[i + 1]} at state {i}"
        )
    if _outside(tokens, v):
        i, t = _first_outside(tokens, v)
        state = int(np.searchsorted(off, i, side="right")) - 1
        _fail(
            source,
            "allowed_tokens",
            f"expected ids in 0..{v - 1} (the mask width), found {t} at pair {i} (state {state})",
        )
    if _outside(nxt, s):
        i, n = _first_outside(nxt, s)
        _fail(source, "allowed_next", f"expected states in 0..{s - 1}, found {n} at pair {i}")
    _check_rows(source, off, tokens, table.eos_token_ids)
    _check_values(source, vs, lcp, s, k)


def _check_rows(source: str, off: np.ndarray, tokens: np.ndarray, eos_token_ids: tuple[int, ...]) -> None:
    """Each state's tokens strictly ascending, none of them EOS: what makes ``advance`` (a binary search in the
    state's row) find every token ``allowed`` lists, and EOS mean the end only. Checked at every load since a
    fuzzed file that skipped it loaded and disagreed with itself; the tail layout's far pairs were already checked
    so. One comparison of shifted views, masked by the row starts."""
    p = int(tokens.shape[0])
    if p > 1:
        start = np.zeros(p + 1, dtype=bool)  # pairs that begin a state's row (offsets are in 0..p: checked before)
        start[off[1:-1]] = True
        bad = (tokens[1:] <= tokens[:-1]) & ~start[1:p]
        if bad.any():
            i = int(np.argmax(bad)) + 1
            state = int(np.searchsorted(off, i, side="right")) - 1
            _fail(
                source,
                "allowed_tokens",
                f"expected strictly ascending ids within each state, not at pair {i} (state {state})",
            )
    for e in eos_token_ids:
        if p and bool((tokens == e).any()):
            _fail(source, "allowed_tokens", f"EOS id {e} must not appear among content tokens")


def _check_values(source: str, vs: np.ndarray, lcp: np.ndarray, s: int, k: int) -> None:
    """Rules 9 and 10: value states strictly increasing up to the last state, LCPs within the previous value."""
    if _outside(vs[:1], s) or int(vs[-1]) != s - 1:
        _fail(source, "value_state", f"expected states from 0 up to {s - 1} (the last state), found {vs[0]}..{vs[-1]}")
    not_increasing = vs[1:] <= vs[:-1]
    if not_increasing.any():
        i = int(np.argmax(not_increasing)) + 1
        _fail(
            source, "value_state", f"expected strictly increasing states, found {vs[i - 1]} then {vs[i]} at value {i}"
        )
    if lcp.dtype.kind not in "iu" or int(lcp[0]) != 0 or int(lcp.min()) < 0:
        _fail(
            source,
            "value_lcp",
            f"expected 0 for the first value and no negative length, found {lcp[0]} first, {lcp.min()} least",
        )
    if k > 1:
        # Value i creates the states value_state[i-1] + 1 .. value_state[i] after sharing lcp[i] bytes.
        ends = vs.astype(np.int64)
        lengths = lcp[:-1].astype(np.int64) + np.diff(ends, prepend=0)[:-1]
        longer = lcp[1:] > lengths
        if longer.any():
            i = int(np.argmax(longer)) + 1
            _fail(
                source,
                "value_lcp",
                f"value {i} shares {lcp[i]} bytes with value {i - 1}, which is only {lengths[i - 1]} bytes long",
            )


def validate_contents(table: SetTable, source: str) -> None:
    """Everything :func:`check_indices` checks, plus what makes the masks right (reads every value)."""

    def fail(field: str, message: str) -> None:
        _fail(source, field, message)

    check_indices(table, source)
    s, p = table.num_states, table.num_allowed
    tails = table.tails
    if tails is not None:  # the stored rows are the branching states' (in state order); then the token index
        off = tails.offsets.astype(np.int64)
        tokens = tails.tokens
        nxt = tails.next
        states = tails.branch_states()
        validate_tail_contents(tails, table.eos_token_ids, source)
    else:
        off = table.allowed_offsets.astype(np.int64)
        tokens = table.allowed_tokens
        nxt = table.allowed_next
        states = np.arange(s, dtype=np.int64)
    counts = np.diff(off)
    if p:
        if tails is not None:  # the full layout's rows were checked by check_indices
            _check_rows(source, off, tokens, table.eos_token_ids)
        owner = np.repeat(states, counts)
        if (nxt.astype(np.int64) <= owner).any():
            fail("allowed_next", "expected each next state to follow its state")
    table.values  # noqa: B018 - rebuilding checks the byte order, decoding UTF-8, undoing the encoding (ArtifactContentError)
