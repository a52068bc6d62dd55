"""What the checks share: a token path to every state of a table, and bytes printed for people."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from triec.runtime.table import MaskTable


def escape_bytes(b: bytes) -> str:
    """Printable form of a prefix or token: valid UTF-8 shown as text, escapes for the rest."""
    text = b.decode("utf-8", errors="backslashreplace")
    return text.encode("unicode_escape").decode("ascii").replace("\\\\x", "\\x")


def token_paths(table: MaskTable) -> tuple[np.ndarray, np.ndarray]:
    """One shortest token path per state, from the artifact's own transitions.

    Returns ``(parent, via)``: state s is reached from ``parent[s]`` by token
    ``via[s]``; -1 for the start and for states no token sequence reaches.
    Transitions always lead to later states, so one pass in state order that
    keeps the shallowest parent gives a breadth-first tree.
    """
    n = table.num_states
    off = table.allowed_offsets.astype(np.int64)
    tokens = table.allowed_tokens.astype(np.int64)
    nxt = table.allowed_next.astype(np.int64)
    src = np.repeat(np.arange(n, dtype=np.int64), np.diff(off))
    if bool((nxt <= src).any()):  # a DFA's transitions may lead back (a pattern table): breadth first instead
        return _breadth_first(n, off.tolist(), tokens.tolist(), nxt.tolist())
    parent = np.full(n, -1, dtype=np.int64)
    via = np.full(n, -1, dtype=np.int64)
    steps = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    steps[0] = 0
    # Process sources in increasing state order: every parent precedes its children.
    order = np.argsort(src, kind="stable")
    src_l, tok_l, nxt_l = src[order].tolist(), tokens[order].tolist(), nxt[order].tolist()
    steps_l, parent_l, via_l = steps.tolist(), parent.tolist(), via.tolist()
    big = np.iinfo(np.int64).max
    for s, t, d in zip(src_l, tok_l, nxt_l, strict=True):
        if steps_l[s] == big:
            continue
        if steps_l[s] + 1 < steps_l[d]:
            steps_l[d] = steps_l[s] + 1
            parent_l[d], via_l[d] = s, t
    return np.array(parent_l, dtype=np.int64), np.array(via_l, dtype=np.int64)


def _breadth_first(n: int, off: list[int], tokens: list[int], nxt: list[int]) -> tuple[np.ndarray, np.ndarray]:
    parent, via = [-1] * n, [-1] * n
    seen = [False] * n
    seen[0] = True
    queue = [0]
    for s in queue:
        for k in range(off[s], off[s + 1]):
            d = nxt[k]
            if 0 <= d < n and not seen[d]:
                seen[d] = True
                parent[d], via[d] = s, tokens[k]
                queue.append(d)
    return np.array(parent, dtype=np.int64), np.array(via, dtype=np.int64)
