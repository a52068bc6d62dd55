"""TableMatcher: one sequence over a MaskTable, checked against the table's own queries and the definition."""

from __future__ import annotations

import random

import numpy as np
import pytest

import triec
from triec.runtime.bitmask import ids_of as row_ids
from triec.runtime.matcher import TableMatcher, whole_chars

VALUES = ["get_user", "get_users", "get_user_by_id", "list_items", "list", "café.ouvert", "naïve-é", "x"]


@pytest.fixture(scope="module")
def tables(vocabs):
    return {name: triec.compile(VALUES, v) for name, v in vocabs.items()}


def _forced(values: list[bytes], prefix: bytes) -> bytes:
    """Brute force: the longest common continuation of every value with ``prefix`` (nothing if one ends here)."""
    below = [v[len(prefix) :] for v in values if v.startswith(prefix)]
    if not below or b"" in below:
        return b""
    k = 0
    while all(len(b) > k and b[k] == below[0][k] for b in below):
        k += 1
    return whole_chars(below[0][:k])


@pytest.mark.parametrize("name", ["gpt2", "qwen2", "phi3"])
def test_random_walks_match_the_table(tables, vocabs, name):
    table, vocab = tables[name], vocabs[name]
    rng = random.Random(7)
    row = np.zeros(table.words_per_row, dtype=np.int32)
    values = [v.encode() for v in VALUES]
    for _ in range(40):
        m = TableMatcher(table)
        state, text = 0, b""
        while True:
            m.fill_bitmask(row)
            assert row_ids(row).tolist() == table.allowed(state).tolist()
            assert m.allowed().tolist() == table.allowed(state).tolist()
            assert m.jump_forward() == _forced(values, text)
            allowed = table.allowed(state).tolist()
            t = rng.choice(allowed)
            refused = next(i for i in range(table.vocab_size) if i not in set(allowed))
            assert not m.accept_token(refused) and m.state == state
            assert m.accept_token(t)
            if t in table.eos_token_ids:
                assert m.is_terminated() and text in values
                m.fill_bitmask(row)
                assert not row.any()
                break
            state = table.advance(state, t)
            text += vocab.token_bytes[t]
            assert m.state == state


def test_rollback_fork_and_validate(tables, vocabs):
    table, vocab = tables["qwen2"], vocabs["qwen2"]
    path, state, rest = [], 0, b"get_user_by_id"  # spelled greedily with the table's own transitions
    while rest:
        fits = [t for t in table.allowed(state).tolist() if rest.startswith(vocab.token_bytes[t] or b"\xff")]
        t = max(fits, key=lambda t: len(vocab.token_bytes[t]))
        path.append(t)
        rest = rest[len(vocab.token_bytes[t]) :]
        state = table.advance(state, t)
    eos = table.eos_token_ids[0]
    m = TableMatcher(table)
    assert m.validate_tokens([*path, eos, path[0]]) == len(path) + 1
    assert m.state == 0 and m.num_accepted == 0
    assert m.accept_tokens([*path, eos]) == len(path) + 1 and m.is_terminated()
    twin = m.fork()
    m.rollback(1)  # undo EOS
    assert not m.is_terminated() and m.is_accepting() and m.value == "get_user_by_id"
    assert twin.is_terminated()
    m.rollback(len(path))
    assert m.state == 0
    with pytest.raises(ValueError):
        m.rollback(1)
    twin.reset()
    assert twin.state == 0 and not twin.is_terminated()


def test_whole_chars():
    assert whole_chars("aé".encode()) == "aé".encode()
    assert whole_chars("aé".encode()[:-1]) == b"a"
    assert whole_chars("€".encode()[:2]) == b""
    assert whole_chars(b"") == b""


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64])
def test_find_sorted_is_searchsorted_for_any_int(dtype):
    """The one-value lookup every matcher step makes: numpy's answer for every int, including those outside the
    array's dtype (a token id from a caller can be anything)."""
    from triec._arrays import find_sorted

    a = np.array([0, 3, 3, 7, 2**31 - 1], dtype=dtype)
    for x in [-(2**40), -1, 0, 1, 3, 4, 7, 8, 2**31 - 1, 2**31, 2**32, 2**40]:
        for side in ("left", "right"):
            expect = int(np.searchsorted(a.astype(object), x, side=side))
            assert find_sorted(a, x, side) == expect, (dtype, x, side)
    assert find_sorted(a[:0], 5) == 0


def test_a_token_id_outside_the_vocabulary_is_refused(tables):
    m = TableMatcher(tables["gpt2"])
    for t in (-1, -(2**40), 2**31, 2**40):
        assert not m.accept_token(t)
    assert m.num_accepted == 0
