"""Content checks for tables read from disk: every id and offset in range.

The layout checks in :mod:`triec.artifact` make every view safe to index;
these make the answers meaningful. They read every array once (O(file size)).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from triec.errors import ArtifactError

if TYPE_CHECKING:
    from triec.runtime import MaskTable


def validate_contents(table: MaskTable, source: str) -> None:
    def fail(field: str, message: str) -> None:
        raise ArtifactError(f"{source}: section {field}: {message}")

    s, p, k = table.num_states, table.num_allowed, table.num_values
    off = table.allowed_offsets.astype(np.int64)
    if off[0] != 0 or off[-1] != p:
        fail("allowed_offsets", f"expected to run from 0 to {p}, found {off[0]}..{off[-1]}")
    counts = np.diff(off)
    if (counts < 0).any():
        fail("allowed_offsets", f"expected non-decreasing offsets, first decrease at state {int(np.argmax(counts < 0))}")
    tokens = table.allowed_tokens
    if p:
        if int(tokens.min()) < 0 or int(tokens.max()) >= table.vocab_size:
            fail("allowed_tokens", f"expected ids in 0..{table.vocab_size - 1}")
        step = np.diff(tokens.astype(np.int64))
        boundary = np.zeros(max(p - 1, 0), dtype=bool)
        inner = off[1:-1]
        boundary[inner[(inner > 0) & (inner < p)] - 1] = True
        if ((step <= 0) & ~boundary).any():
            fail("allowed_tokens", "expected strictly ascending ids within each state")
        if np.isin(tokens, np.asarray(table.eos_token_ids, dtype=np.int32)).any():
            fail("allowed_tokens", "EOS ids must not appear among content tokens")
        owner = np.repeat(np.arange(s, dtype=np.int64), counts)
        nxt = table.allowed_next.astype(np.int64)
        if (nxt <= owner).any() or int(nxt.max()) >= s:
            fail("allowed_next", f"expected each next state to follow its state and be < {s}")
    vs = table.value_state.astype(np.int64)
    if int(vs[0]) < 0 or int(vs[-1]) != s - 1 or (k > 1 and (np.diff(vs) <= 0).any()):
        fail("value_state", f"expected strictly increasing states ending at {s - 1}")
    lcp = table.value_lcp.astype(np.int64)
    if int(lcp[0]) != 0 or (lcp < 0).any():
        fail("value_lcp", "expected 0 for the first value and non-negative lengths")
    created = np.diff(np.concatenate([[0], vs]))
    lengths = lcp + created
    if k > 1 and (lcp[1:] > lengths[:-1]).any():
        fail("value_lcp", "a value shares more bytes with its predecessor than the predecessor has")
    if int(created.sum()) != s - 1:
        fail("value_state", f"expected the values to create {s - 1} states")
    try:
        table.values  # noqa: B018 - decoding checks UTF-8
    except UnicodeDecodeError as exc:
        raise ArtifactError(f"{source}: section state_byte: values are not valid UTF-8 ({exc.reason})") from exc
    keys = table.value_bytes
    if any(a >= b for a, b in zip(keys, keys[1:], strict=False)):
        fail("state_byte", "expected values in strictly increasing byte order (the trie's preorder)")
