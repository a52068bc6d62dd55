"""The O(allowed) mask writer writes exactly the rows of ``fill_bitmask``, whatever it wrote before."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import triec
import triec.synthetic.sets
from triec.runtime.mask_writer import batch_words, row_words
from triec.runtime.word_masks import build_state_words, pack_single, single_words, state_words

MIXED = sorted(set(triec.synthetic.sets.tool_names(300)) | {"", "a", "ab", "abc", "é", "日本語", "x y", "slack"})
ALPHABET = "ab.é_ "


def _reference(table: triec.MaskTable, states: list[int]) -> np.ndarray:
    out = np.zeros((max(len(states), 1), table.words_per_row), dtype=np.int32)
    return table.fill_bitmask(states, out)[: len(states)].copy()


@pytest.fixture(scope="module")
def tools(qwen2: triec.Vocabulary) -> triec.MaskTable:
    return triec.compile(triec.synthetic.sets.tool_names(1000), qwen2)


def test_every_state_single_and_batched(vocab: triec.Vocabulary) -> None:
    table = triec.compile(MIXED, vocab)
    writer = table.mask_writer(256)
    for s in range(table.num_states):  # single-state path, each fill after another state's
        assert np.array_equal(writer.fill([s]), _reference(table, [s])), s
    everything = np.arange(table.num_states)
    for lo in range(0, table.num_states, 256):  # batch path
        batch = everything[lo : lo + 256]
        assert np.array_equal(writer.fill(batch), _reference(table, batch.tolist()))


def test_random_schedule_keeps_the_buffer_exact(tools: triec.MaskTable) -> None:
    """Alternate single states and batches of every size: rows exact, the rest of the buffer zero."""
    rng = np.random.default_rng(1)
    writer = tools.mask_writer(128)
    for _ in range(60):
        n = int(rng.choice([1, 1, 2, 7, 128, 0]))
        states = rng.integers(0, tools.num_states, n)
        rows = writer.fill(states.tolist() if rng.random() < 0.5 else states)
        assert rows.shape == (n, tools.words_per_row) and rows.dtype == np.int32
        assert np.array_equal(rows, _reference(tools, states.tolist()))
        assert not writer.buffer[n:].any()


def test_root_and_accepting_rows_hold_eos_and_content(tools: triec.MaskTable) -> None:
    writer = tools.mask_writer(2)
    accepting = int(tools.value_state[0])
    rows = writer.fill([tools.start, accepting])
    for row, state in zip(rows, [tools.start, accepting], strict=True):
        ids = np.flatnonzero(np.unpackbits(row.view(np.uint8), bitorder="little"))
        assert np.array_equal(ids, tools.allowed(state))
    assert all(e in tools.allowed(accepting) for e in tools.eos_token_ids)


def test_errors(tools: triec.MaskTable) -> None:
    writer = tools.mask_writer(4)
    with pytest.raises(IndexError):
        writer.fill([tools.num_states])
    with pytest.raises(IndexError):
        writer.fill([-1])
    with pytest.raises(IndexError):
        writer.fill([0, -1])
    with pytest.raises(ValueError, match="max_batch"):
        writer.fill([0] * 5)
    with pytest.raises(ValueError):
        tools.mask_writer(0)
    assert writer.fill([]).shape == (0, tools.words_per_row)
    assert np.array_equal(writer.fill([3]), _reference(tools, [3]))  # still exact after the errors


def test_state_words_are_cached_and_sorted(tools: triec.MaskTable) -> None:
    sw = state_words(tools)
    assert state_words(tools) is sw
    fresh = build_state_words(tools)
    assert np.array_equal(fresh.words, sw.words) and np.array_equal(fresh.bits, sw.bits)
    for s in range(0, tools.num_states, 97):
        words = sw.words[sw.offsets[s] : sw.offsets[s + 1]]
        assert np.all(np.diff(words) > 0)  # unique and ascending, so rows can be assigned, not OR-ed


def _pairs(flat: np.ndarray, bits: np.ndarray) -> list[tuple[int, int]]:
    return sorted(zip(flat.tolist(), bits.tolist(), strict=True))


@pytest.mark.parametrize("kind", ["tools", "ids"])
def test_one_word_rows_in_one_gather_equal_the_csr(tools: triec.MaskTable, kind: str) -> None:
    """The batch path's packed rows (``pack_single``: a one-word row's word and bits in one int64) give the pairs
    of the plain CSR expansion, in batches of one-word rows only, of none, and mixed; and the writer's rows equal
    ``fill_bitmask``. The ids table's EOS (95) and code 31 set bit 31 of their word: the sign bit survives the
    packing."""
    table = tools
    if kind == "ids":
        rng = np.random.default_rng(7)
        items = rng.integers(0, 4, size=(300, 4)) * 31 + np.array([0, 31, 62, 93]) % 95
        table = triec.compile_ids(items.tolist(), vocab_size=200, eos_token_ids=[95])
    sw = state_words(table)
    single = single_words(table)
    assert single_words(table) is single and np.array_equal(single, pack_single(sw.offsets, sw.words, sw.bits))
    counts = np.diff(sw.offsets)
    assert np.array_equal(single >= 0, counts == 1)
    one, several = np.flatnonzero(counts == 1), np.flatnonzero(counts != 1)
    signed = one[sw.bits[sw.offsets[one]] < 0]
    assert one.size and several.size and (kind == "tools" or signed.size)
    rng = np.random.default_rng(3)
    batches = [rng.choice(one, 200), rng.choice(several, 200), rng.choice(np.r_[one, several], 200), signed[:50]]
    base = np.arange(200, dtype=np.int64) * table.words_per_row
    writer = table.mask_writer(200)
    for rows in batches:
        rows = rows.astype(np.int64)
        flat, bits = batch_words(single, sw.offsets, sw.words, sw.bits, rows, base[: rows.size])
        ref_flat, pos = row_words(sw.offsets, sw.words, rows, base[: rows.size])
        assert bits.dtype == np.int32 and _pairs(flat, bits) == _pairs(ref_flat, sw.bits[pos])
        assert np.array_equal(writer.fill(rows), _reference(table, rows.tolist()))
        assert not writer.buffer[rows.size :].any()


@settings(max_examples=40, deadline=None)
@given(
    values=st.lists(st.text(alphabet=ALPHABET, max_size=6), min_size=1, max_size=25),
    schedule=st.lists(st.lists(st.integers(min_value=0, max_value=10_000), max_size=9), min_size=1, max_size=12),
)
def test_hypothesis_any_schedule(
    vocabs: dict[str, triec.Vocabulary], values: list[str], schedule: list[list[int]]
) -> None:
    table = triec.compile(values, vocabs["gpt2"])
    writer = table.mask_writer(9)
    for raw in schedule:
        states = [s % table.num_states for s in raw]
        assert np.array_equal(writer.fill(states), _reference(table, states))
        assert not writer.buffer[len(states) :].any()


def test_serving_on_cpu_imports_numpy_only() -> None:
    """Writers and restricted views must not pull torch or transformers into a serving process."""
    import subprocess
    import sys

    code = (
        "import sys, triec.runtime, triec\n"
        "t = triec.compile(['ab', 'ac'], 'gpt2')\n"
        "t.mask_writer(2).fill([0, 1]); t.restrict(['ab']).compact()\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"
