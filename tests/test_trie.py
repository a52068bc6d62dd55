"""The vectorized trie builder against a plain dict-based trie."""

from __future__ import annotations

import os
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from triec.trie import build_trie


def naive_trie(keys: list[bytes]) -> tuple[dict[bytes, int], list[int], list[int], list[int]]:
    """Insert sorted keys byte by byte; creation order is preorder."""
    ids = {b"": 0}
    parent, byte, depth = [-1], [0], [0]
    for key in keys:
        for i in range(1, len(key) + 1):
            if key[:i] not in ids:
                ids[key[:i]] = len(parent)
                parent.append(ids[key[: i - 1]])
                byte.append(key[i - 1])
                depth.append(i)
    return ids, parent, byte, depth


def check(keys: list[bytes]) -> None:
    keys = sorted(set(keys))
    t = build_trie(keys)
    ids, parent, byte, depth = naive_trie(keys)
    assert t.parent.tolist() == parent
    assert t.byte.tolist() == byte
    assert t.depth.tolist() == depth
    assert t.terminal.tolist() == [ids[k] for k in keys]
    assert t.lcp.tolist() == [0] + [len(os.path.commonprefix([keys[i - 1], keys[i]])) for i in range(1, len(keys))]  # noqa: RUF071


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=40), min_size=1, max_size=30))
def test_random_binary_keys(keys: list[bytes]) -> None:
    check(keys)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet="ab\x00", max_size=60), min_size=1, max_size=25))
def test_long_shared_prefixes(keys: list[str]) -> None:
    """Small alphabets force LCPs past the 16-byte comparison block."""
    check([k.encode() for k in keys])


def test_shared_prefix_longer_than_many_blocks() -> None:
    rng = random.Random(3)
    base = bytes(rng.choice(b"xy") for _ in range(200))
    check([base, base[:100], base[:100] + b"z", base + b"\x00", base[:17], base[:16], base[:15] + b"\xff", b""])


def test_empty_key_is_the_root() -> None:
    t = build_trie([b"", b"a"])
    assert t.terminal.tolist() == [0, 1]
    assert t.num_nodes == 2


@settings(max_examples=150, deadline=None)
@given(st.lists(st.binary(max_size=12), min_size=1, max_size=30), st.integers(1, 7))
def test_node_blocks_cut_anywhere(keys: list[bytes], block: int) -> None:
    """Depth and byte are filled block by block: blocks of a few nodes cut key runs at every place."""
    import triec.trie

    saved = triec.trie._NODE_BLOCK
    triec.trie._NODE_BLOCK = block
    try:
        check(keys)
    finally:
        triec.trie._NODE_BLOCK = saved
