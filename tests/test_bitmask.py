"""The bit layout (triec/runtime/bitmask.py) against xgrammar's and llguidance's own rows for the same ids."""

from __future__ import annotations

import numpy as np
import pytest

from triec.runtime import bitmask


@pytest.mark.parametrize("width", [1, 31, 32, 33, 100, 151_936])
def test_set_unpack_and_ids_round_trip(width: int) -> None:
    rng = np.random.default_rng(width)
    ids = np.unique(rng.integers(0, width, min(width, 500)))
    row = np.zeros(bitmask.words_for(width), dtype=np.int32)
    bitmask.set_bits(row, np.concatenate([ids, ids]))  # repeated ids OR once
    assert np.array_equal(bitmask.ids_of(row, width), ids)
    assert bitmask.are_set(row, ids).all()
    assert all(bitmask.is_set(row, int(t)) for t in ids[:20])
    assert not bitmask.is_set(row, width + 64) and not bitmask.is_set(row, -1)
    bitmask.clear_bits(row, ids[::2])
    assert np.array_equal(bitmask.ids_of(row, width), ids[1::2])


def test_the_layout_is_little_endian_words_of_32() -> None:
    row = np.zeros(2, dtype=np.int32)
    bitmask.set_bits(row, [0, 31, 33])
    assert row.view(np.uint32).tolist() == [1 | (1 << 31), 1 << 1]
    assert bitmask.words_for(32) == 1 and bitmask.words_for(33) == 2
    assert bitmask.last_word_mask(33) == 1 and bitmask.last_word_mask(64) == -1


def test_scatter_bits_writes_each_pair_into_its_row() -> None:
    rows = np.zeros((3, 2), dtype=np.int32)
    bitmask.scatter_bits(rows, np.array([0, 2, 2]), np.array([5, 40, 40]))
    assert [bitmask.ids_of(r).tolist() for r in rows] == [[5], [], [40]]


def test_the_layout_is_xgrammars() -> None:
    torch = pytest.importorskip("torch")
    xgr = pytest.importorskip("xgrammar")
    width = 1000
    ids = np.array([0, 1, 31, 32, 500, 999])
    ours = np.zeros(bitmask.words_for(width), dtype=np.int32)
    bitmask.set_bits(ours, ids)
    logits = torch.zeros(1, width)
    xgr.apply_token_bitmask_inplace(logits, torch.from_numpy(ours[None]))
    assert np.flatnonzero(torch.isfinite(logits)[0].numpy()).tolist() == ids.tolist()
