"""An ids table's values (semantic IDs): token-id sequences rebuilt from the rows, and the checks that make it safe.

An ids table (``build_options.tokenization == "ids"``, :mod:`triec.compiler.ids`) is the token trie of its items
written one state per token edge: every state but the start is reached by exactly one pair of ``allowed_next``, whose
token is the state's token, and ``state_byte`` is all zero. Value i is then rebuilt like a byte trie's (docs/format.md,
"Reconstructing values") with tokens for bytes: value i - 1's first ``value_lcp[i]`` tokens, then the tokens of the
states ``value_state[i-1] + 1 .. value_state[i]``. Its string (``table.values``) is its ids in decimal joined by one
space, what ``triec compile --ids`` reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

import numpy as np

from triec.errors import ArtifactContentError
from triec.runtime.arrays import TableArrays

IDS_FINGERPRINT = "none"
"""The tokenizer fingerprint of an ids table compiled from a mask width and EOS ids alone (no tokenizer)."""


def _fail(source: str, field: str, message: str) -> NoReturn:
    raise ArtifactContentError(f"{source}: section {field}: {message}")


def ids_text(ids: Sequence[int]) -> bytes:
    """A token-id sequence as an ids table spells it: decimal ids joined by one space (ASCII)."""
    return " ".join(map(str, ids)).encode("ascii")


def ids_value_bytes(values: list[list[int]]) -> list[bytes]:
    """Every value's string (:func:`ids_text`), in table order."""
    return [ids_text(v) for v in values]


def check_ids_tree(table: TableArrays, source: str) -> None:
    """At every load of an ids table (O(S), vectorized): the rows form a tree over the states, each state but the
    start entered by exactly one pair (so each state has one token and the values rebuild from in-range slices),
    ``state_byte`` is all zero, and each row's ids strictly ascend with no EOS id among them (so ``allowed`` and
    ``advance`` agree). Run after the index checks (every next state in range)."""
    s = int(table.num_states)
    nxt = np.asarray(table.allowed_next)
    if int(nxt.shape[0]) != s - 1:
        _fail(
            source, "allowed_next", f"an ids table has one pair per state but the start: {s - 1}, found {nxt.shape[0]}"
        )
    entered = np.bincount(nxt.astype(np.int64), minlength=s)
    if int(entered[0]) != 0 or (s > 1 and int(entered[1:].min()) != 1):
        bad = int(np.flatnonzero(entered != np.r_[0, np.ones(s - 1, dtype=np.int64)])[0])
        _fail(
            source,
            "allowed_next",
            f"state {bad} is entered by {entered[bad]} pairs; in an ids table each state but 0 by one",
        )
    if np.asarray(table.state_byte).any():
        _fail(source, "state_byte", "an ids table's states carry no bytes: expected all zero")
    # what allowed and advance both read (issue 49): each row's ids strictly ascending (advance binary-searches the
    # row allowed lists whole), none an EOS id; O(P) vectorized
    tokens = np.asarray(table.allowed_tokens, dtype=np.int64)
    if tokens.size > 1:
        off = np.asarray(table.allowed_offsets, dtype=np.int64)
        same_row = np.ones(tokens.size - 1, dtype=bool)
        inner = off[1:-1]
        same_row[inner[(inner > 0) & (inner < tokens.size)] - 1] = False
        if ((np.diff(tokens) <= 0) & same_row).any():
            _fail(source, "allowed_tokens", "expected strictly ascending ids within each state")
    if np.isin(tokens, np.asarray(table.eos_token_ids, dtype=np.int64)).any():
        _fail(source, "allowed_tokens", "EOS ids must not appear among an ids table's content tokens")


def state_tokens(table: TableArrays) -> np.ndarray:
    """int64 [S]: the token on the edge into each state (-1 for the start), from the pairs (a checked tree)."""
    tok = np.full(int(table.num_states), -1, dtype=np.int64)
    tok[np.asarray(table.allowed_next, dtype=np.int64)] = np.asarray(table.allowed_tokens, dtype=np.int64)
    return tok


def rebuild_ids(table: TableArrays, source: str) -> list[list[int]]:
    """Every value's token ids in table order, checked strictly increasing in token order (the token trie's
    preorder), else :class:`ArtifactContentError` naming the pair of values."""
    tokens = state_tokens(table).tolist()
    out: list[list[int]] = []
    prev: list[int] = []
    prev_end = 0
    for i, (end, lcp) in enumerate(zip(table.value_state.tolist(), table.value_lcp.tolist(), strict=True)):
        cur = prev[:lcp] + tokens[prev_end + 1 : end + 1]
        if i and not prev < cur:
            _fail(
                source,
                "allowed_next",
                f"values {i - 1} and {i} are not in strictly increasing token order (the trie's preorder); "
                "the artifact is corrupt",
            )
        out.append(cur)
        prev, prev_end = cur, end
    return out


def check_ids_parents(table: TableArrays, source: str) -> None:
    """``verify=True``: every state's row is its children in the token trie the values spell. The state entered
    from each pair's state must be the state before it on the path of the value that created it: the one before
    it for all but a value's first new state, and for that one the state at depth ``value_lcp[i]`` on value i's
    path (:func:`first_parents`)."""
    s = int(table.num_states)
    if s == 1:
        return
    off = np.asarray(table.allowed_offsets, dtype=np.int64)
    owner = np.repeat(np.arange(s, dtype=np.int64), np.diff(off))
    parent = np.empty(s, dtype=np.int64)
    parent[np.asarray(table.allowed_next, dtype=np.int64)] = owner
    vs = np.asarray(table.value_state, dtype=np.int64)
    lcp = np.asarray(table.value_lcp, dtype=np.int64)
    expected = np.arange(-1, s - 1, dtype=np.int64)
    firsts = np.r_[1, vs[:-1] + 1]
    expected[firsts] = first_parents(vs, lcp)
    wrong = np.flatnonzero(parent[1:] != expected[1:])
    if wrong.size:
        st = int(wrong[0]) + 1
        _fail(
            source,
            "allowed_next",
            f"state {st} is entered from state {parent[st]}, but the values put it below state {expected[st]}",
        )


def first_parents(value_state: np.ndarray, value_lcp: np.ndarray) -> np.ndarray:
    """int64 [K]: the parent of the first state value i creates, the state at depth c = ``value_lcp[i]`` on its
    path. That state was created by the last value j < i with ``value_lcp[j] < c`` (values j + 1 .. i all share
    at least c tokens with their predecessor), as its state at depth c: ``value_state[j-1] + c - value_lcp[j]``.
    One pass over K per distinct LCP (O(K x distinct depths), vectorized; 0 for depth 0, the start)."""
    vs = np.asarray(value_state, dtype=np.int64)
    lcp = np.asarray(value_lcp, dtype=np.int64)
    k = int(lcp.shape[0])
    before = np.r_[0, vs[:-1]]  # value_state[j - 1], 0 for j = 0
    out = np.zeros(k, dtype=np.int64)
    for c in np.unique(lcp[lcp > 0]).tolist():
        at = np.flatnonzero(lcp == c)
        shallower = np.flatnonzero(lcp < c)  # holds value 0 (lcp 0): every at > 0 finds one before it
        j = shallower[np.searchsorted(shallower, at) - 1]
        out[at] = before[j] + c - lcp[j]
    return out
