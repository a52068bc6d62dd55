"""triec.compiler.keysort against Python's own sort: order, duplicates and LCPs, on hostile byte strings."""

from __future__ import annotations

import itertools
import os

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from triec.compiler.keysort import sort_unique
from triec.trie import join_keys


def expected(values: list[bytes]) -> tuple[list[bytes], list[int], int]:
    keys = sorted(set(values))
    lcp = [0] + [len(os.path.commonprefix([a, b])) for a, b in itertools.pairwise(keys)]  # noqa: RUF071 - bytes
    return keys, lcp, len(values) - len(keys)


def check(values: list[bytes]) -> None:
    data, offsets = join_keys(values)
    got = sort_unique(data, offsets)
    keys, lcp, dups = expected(values)
    raw = got.data.tobytes()
    lengths = [b - a for a, b in zip(got.offsets.tolist(), got.offsets.tolist()[1:], strict=False)]
    assert [raw[a : a + n] for a, n in zip(got.starts.tolist(), lengths, strict=True)] == keys
    assert got.lcp.tolist() == lcp
    assert got.duplicates == dups
    assert got.data.dtype == np.uint8 and got.offsets.dtype == np.int64


def test_nul_bytes_prefixes_and_duplicates() -> None:
    check([b"a", b"a\x00", b"a\x00\x00", b"", b"", b"a", b"\x00", b"\xff" * 9, b"\xff" * 8, b"\xff" * 17 + b"\x00"])


def test_long_shared_prefixes_and_chunk_boundaries() -> None:
    base = bytes(range(256)) * 3
    values = (
        [base[:n] for n in range(0, 768, 7)] + [base[:n] + b"\x00" for n in range(0, 60)] + [base + b"z", base + b"a"]
    )
    check(values + values[::3])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=20), min_size=1, max_size=60))
def test_random_binary(values: list[bytes]) -> None:
    check(values)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(alphabet="ab\x00", max_size=30).map(str.encode), min_size=1, max_size=80))
def test_few_symbols_deep_ties(values: list[bytes]) -> None:
    check(values)


def test_prepare_buffer_equals_prepare_values_past_the_small_set_path() -> None:
    """Over SMALL_SET values (the keysort path): NULs, non-ASCII, duplicates, the empty value."""
    import random

    from triec.compiler.entry import SMALL_SET, prepare_buffer
    from triec.keys import prepare_values

    rng = random.Random(3)
    alphabet = ["a", "b", "\x00", "é", "日", "👩", " "]
    values = ["".join(rng.choices(alphabet, k=rng.randrange(0, 12))) for _ in range(3 * SMALL_SET)]
    values += [*values[:100], "", "\x00", "\x00\x00"]
    got = prepare_buffer(values)
    keys, dups = prepare_values(values)
    raw = got.data.tobytes()
    lengths = np.diff(got.offsets).tolist()
    assert [raw[a : a + n] for a, n in zip(got.starts.tolist(), lengths, strict=True)] == keys
    assert got.duplicates == dups
    assert got.lcp.tolist() == expected(keys)[1]
