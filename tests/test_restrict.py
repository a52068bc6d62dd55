"""A restricted view answers exactly like compiling the subset alone, at the parent's state ids."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import triec
import triec.synthetic.sets
from triec.errors import ValueNotInTable
from triec.runtime.restrict import RestrictedTable, path_index

ARRAYS = ("allowed_offsets", "allowed_tokens", "allowed_next", "value_state", "value_lcp", "state_byte")
ALPHABET = "ab.é_ "


def _rows(table: triec.MaskTable | RestrictedTable, states: list[int]) -> np.ndarray:
    out = np.zeros((len(states), table.words_per_row), dtype=np.int32)
    return table.fill_bitmask(states, out)


def assert_view_equals_fresh(view: RestrictedTable, subset: list[str], vocab: triec.Vocabulary) -> None:
    """State by state: subset state k of the fresh compile is ``view.states[k]``."""
    fresh = triec.compile(subset, vocab)
    compact = view.compact()
    for name in ARRAYS:
        assert np.array_equal(getattr(compact, name), getattr(fresh, name)), name
    assert view.values == fresh.values and view.num_states == fresh.num_states
    assert np.all(np.diff(view.states) > 0) and view.states[0] == 0
    assert np.array_equal(_rows(view, view.states.tolist()), _rows(fresh, list(range(fresh.num_states))))
    probe = next(t for t in range(vocab.vocab_size) if vocab.token_bytes[t])
    for k, s in enumerate(view.states.tolist()):
        assert view.subset_state(s) == k
        assert np.array_equal(view.allowed(s), fresh.allowed(k))
        assert view.is_accepting(s) == fresh.is_accepting(k) and view.value(s) == fresh.value(k)
        assert view.prefix(s) == fresh.prefix(k) and view.state_for_prefix(view.prefix(s)) == s
        for t in fresh.allowed(k).tolist():
            nxt = view.advance(s, t)
            assert nxt == fresh.advance(k, t) if nxt < 0 else view.subset_state(nxt) == fresh.advance(k, t)
        if probe not in fresh.allowed(k):
            with pytest.raises(triec.TokenNotAllowed):
                view.advance(s, probe)


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.text(alphabet=ALPHABET, max_size=7), min_size=1, max_size=30, unique=True),
    data=st.data(),
)
def test_hypothesis_subsets_equal_fresh_compiles(
    vocabs: dict[str, triec.Vocabulary], values: list[str], data: st.DataObject
) -> None:
    name = data.draw(st.sampled_from(["gpt2", "phi3", "qwen2"]))
    subset = data.draw(st.lists(st.sampled_from(values), min_size=1, max_size=len(values)))
    table = triec.compile(values, vocabs[name])
    assert_view_equals_fresh(table.restrict(subset), subset, vocabs[name])


def test_tool_names_subset_of_a_loaded_artifact(qwen2: triec.Vocabulary, tmp_path: Path) -> None:
    """A memory-mapped table, a 40-value subset with shared prefixes, and the empty value."""
    values = [*triec.synthetic.sets.tool_names(3000), "", "slack"]
    path = tmp_path / "tools.triec"
    triec.compile(values, qwen2).save(path)
    table = triec.load(path)
    subset = [*random.Random(3).sample(values, 40), "", "slack", "slack.get_user"]
    assert_view_equals_fresh(table.restrict(subset), subset, qwen2)


def test_states_outside_the_subset_and_parent_only_eos(qwen2: triec.Vocabulary) -> None:
    table = triec.compile(["ab", "abc", "abd", "x"], qwen2)
    view = table.restrict(["abc", "x"])
    ab = table.state_for_prefix("ab")
    assert table.is_accepting(ab) and not view.is_accepting(ab)
    with pytest.raises(triec.TokenNotAllowed):  # EOS after "ab": a value of the parent only
        view.advance(ab, table.eos_token_ids[0])
    abd = table.state_for_prefix("abd")
    with pytest.raises(IndexError):
        view.allowed(abd)
    with pytest.raises(IndexError):
        view.fill_bitmask([abd], np.zeros((1, view.words_per_row), dtype=np.int32))
    assert view.state_for_prefix("abd") is None and view.state_for_prefix("ab") == ab
    d = qwen2.token_bytes.index(b"d")
    assert d in table.allowed(ab) and d not in view.allowed(ab)


def test_unknown_values_and_empty_subsets(qwen2: triec.Vocabulary) -> None:
    table = triec.compile(["red", "green", "blue"], qwen2)
    with pytest.raises(ValueNotInTable, match="'gree'"):
        table.restrict(["red", "gree"])
    with pytest.raises(triec.ValuesError):
        table.restrict([])
    assert issubclass(ValueNotInTable, triec.TriecError)


def test_restricting_a_view_narrows_it(qwen2: triec.Vocabulary) -> None:
    table = triec.compile(triec.synthetic.sets.tool_names(500), qwen2)
    subset = table.values[100:160]
    view = table.restrict(subset)
    narrower = view.restrict(subset[:5])
    assert narrower.parent is table
    assert_view_equals_fresh(narrower, subset[:5], qwen2)
    with pytest.raises(ValueNotInTable):
        view.restrict([table.values[0]])


def test_compacted_views_serve_writers_and_devices(qwen2: triec.Vocabulary) -> None:
    table = triec.compile(triec.synthetic.sets.tool_names(500), qwen2)
    view = table.restrict(table.values[:30])
    compact = view.compact()
    writer = compact.mask_writer(4)
    rows = writer.fill([0, 1, 2])
    assert np.array_equal(rows, _rows(view, view.states[:3].tolist()))


def test_path_index_creators(qwen2: triec.Vocabulary) -> None:
    """``creator[m]`` is the first value sharing value m's first ``lcp[m]`` bytes."""
    values = sorted({"", "a", "ab", "abc", "abd", "b", "ba", "bab", "babc"} | set(triec.synthetic.sets.tool_names(200)))
    table = triec.compile(values, qwen2)
    index = path_index(table)
    keys = table.value_bytes
    for m, lcp in enumerate(table.value_lcp.tolist()):
        if lcp:
            first = next(i for i, k in enumerate(keys) if k[:lcp] == keys[m][:lcp])
            assert index.creator[m] == first
            assert index.hang[m] == table.state_for_prefix(keys[m][:lcp])
        assert index.run_start[m] == index.ends[m] - (len(keys[m]) - lcp) + 1
