"""The host masking path (runtime/numpy.py) equals the tensor one (runtime/torch.py) and the table's allowed ids."""

from __future__ import annotations

import numpy as np
import pytest

import triec
from triec.runtime.numpy import apply_bitmask, keep_tokens
from triec.synthetic.sets import tool_names


def test_keep_tokens_masks_all_but_the_ids_of_a_state(vocabs) -> None:
    table = triec.compile(tool_names(300), vocabs["qwen2"])
    rng = np.random.default_rng(0)
    for state in rng.integers(0, table.num_states, 40).tolist():
        scores = rng.standard_normal(table.vocab_size).astype(np.float32)
        ids = table.allowed(state)
        out = keep_tokens(scores, ids)
        assert np.flatnonzero(np.isfinite(out)).tolist() == ids.tolist()
        assert np.array_equal(out[ids], scores[ids]) and np.isneginf(out[np.isinf(out)]).all()


def test_keep_tokens_on_a_strided_view_and_in_place() -> None:
    rec = np.zeros(100, dtype=[("id", np.intc), ("logit", np.float32), ("p", np.float32)])
    rec["logit"] = np.arange(100, dtype=np.float32)
    view = rec["logit"]  # llama-cpp-python hands a record array's field: strided
    out = keep_tokens(view, np.array([3, 97]))
    assert np.flatnonzero(np.isfinite(out)).tolist() == [3, 97] and out[97] == 97
    keep_tokens(view, np.array([5]), out=view)
    assert np.flatnonzero(np.isfinite(rec["logit"])).tolist() == [5] and rec["logit"][5] == 5


def test_apply_bitmask_equals_the_torch_path_and_masks_past_the_width() -> None:
    torch = pytest.importorskip("torch")
    from triec.runtime.torch import apply_bitmask as apply_torch

    rng = np.random.default_rng(1)
    for width, words in ((100, 4), (100, 3), (64, 2), (70, 3)):
        bits = rng.integers(-(2**31), 2**31, words, dtype=np.int64).astype(np.int32)
        scores = rng.standard_normal(width).astype(np.float32)
        ours = apply_bitmask(scores, bits)
        theirs = apply_torch(torch.from_numpy(scores.copy()).unsqueeze(0), torch.from_numpy(bits).unsqueeze(0))[
            0
        ].numpy()
        assert np.array_equal(ours, theirs), (width, words)
        if words * 32 < width:
            assert np.isneginf(ours[words * 32 :]).all()
        same = scores.copy()
        apply_bitmask(same, bits, out=same)
        assert np.array_equal(same, ours)
