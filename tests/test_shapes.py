"""Stress suite of adversarial set shapes (issue 9), state by state against the reference.

The walk once assumed a level's frontier never outgrew the trie's node count;
wide, shallow sets (codes, digit runs) broke that and no test had such a set.
Every shape here is compiled by the fast path and compared, state by state,
with :mod:`triec.compiler.reference` (pyahocorasick matching over its own prefix
numbering) on the three real tokenizers: gpt2 and qwen2 (multi-digit number
tokens, byte-level BPE) and phi3 (single-digit numbers, byte fallback).
"""

from __future__ import annotations

import itertools
import string

import numpy as np
import pytest
import shapes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import triec
from triec.compiler.reference import prefix_states, reference_transitions

NAMES = ("gpt2", "phi3", "qwen2")


def assert_equals_reference(table: triec.MaskTable, values: list[str], vocab: triec.Vocabulary) -> None:
    """Every state: same prefix (its byte and place in preorder), acceptance, tokens and next states.

    The reference numbers prefixes itself and finds matches with pyahocorasick,
    so equal CSR arrays mean every state's row and every transition agree.
    """
    keys = sorted({v.encode("utf-8") for v in values})
    states = prefix_states(keys)
    assert table.num_states == len(states)
    assert table.value_bytes == keys
    prefixes = sorted(states, key=states.__getitem__)
    assert table.state_byte.tolist() == [p[-1] if p else 0 for p in prefixes]
    assert table.value_state.tolist() == [states[k] for k in keys]
    accepting = set(table.value_state.tolist())
    assert all(table.is_accepting(s) == (s in accepting) for s in (0, len(states) - 1))
    off, tok, nxt = reference_transitions(keys, vocab.token_bytes, len(states))
    got_off = table.allowed_offsets.astype(np.int64)
    if not np.array_equal(got_off, off):
        s = int(np.nonzero(got_off != off)[0][0]) - 1
        want = tok[off[s] : off[s + 1]].tolist()
        got = table.allowed_tokens[got_off[s] : got_off[s + 1]].tolist()
        raise AssertionError(
            f"state {s} ({prefixes[s]!r}): {len(got)} tokens, reference {len(want)}; "
            f"extra {sorted(set(got) - set(want))[:8]}, missing {sorted(set(want) - set(got))[:8]}"
        )
    assert np.array_equal(table.allowed_tokens, tok), "token ids differ"
    assert np.array_equal(table.allowed_next, nxt), "next states differ"


@pytest.mark.parametrize("shape", sorted(shapes.SHAPES))
@pytest.mark.parametrize("name", NAMES)
def test_shape_equals_reference(vocabs: dict[str, triec.Vocabulary], name: str, shape: str) -> None:
    vocab = vocabs[name]
    values = shapes.SHAPES[shape]()
    assert_equals_reference(triec.compile(values, vocab), values, vocab)


@pytest.mark.parametrize("name", NAMES)
def test_values_that_are_one_token_equal_reference(vocabs: dict[str, triec.Vocabulary], name: str) -> None:
    """Sets where one token spans a whole value, including the tokenizer's longest tokens."""
    vocab = vocabs[name]
    values = shapes.whole_tokens(vocab.token_bytes)
    table = triec.compile(values, vocab)
    assert_equals_reference(table, values, vocab)
    # and every such value can be written as its one token from the start state
    ids = {b: t for t, b in enumerate(vocab.token_bytes) if b}
    for v in values[:200]:
        t = ids[v.encode()]
        assert table.is_accepting(table.advance(0, t)), v


def test_six_digit_numbers_step7_gpt2(vocabs: dict[str, triec.Vocabulary]) -> None:
    """The issue's second failing set, whole: all 6-digit numbers in steps of 7 on gpt2 (142,858 values)."""
    values = shapes.six_digit_step7()
    assert len(values) == 142_858 and values[1] == "000007"
    vocab = vocabs["gpt2"]
    assert_equals_reference(triec.compile(values, vocab), values, vocab)


# ---------------------------------------------------------------- hypothesis

WIDE = st.characters(min_codepoint=0x20, max_codepoint=0x1F6FF, exclude_categories=("Cs",))
CODE_ALPHABET = string.digits + string.ascii_uppercase[:6] + ".-:"

wide_short = st.lists(st.text(alphabet=WIDE, min_size=0, max_size=3), min_size=1, max_size=300)
code_like = st.lists(st.text(alphabet=CODE_ALPHABET, min_size=1, max_size=7), min_size=30, max_size=400)
numbers = st.lists(st.integers(min_value=0, max_value=10**7).map(str), min_size=30, max_size=400)


@st.composite
def dense(draw: st.DrawFn) -> list[str]:
    """Every word of length ``n`` over a small alphabet, optionally framed: the widest, shallowest tries."""
    alphabet = draw(st.lists(st.sampled_from(string.digits + "abcXYZ.-é日"), min_size=2, max_size=10, unique=True))
    n = draw(st.integers(min_value=1, max_value=4 if len(alphabet) <= 8 else 3))
    head = draw(st.sampled_from(["", "A", "x-", " "]))
    tail = draw(st.sampled_from(["", ".", "Z"]))
    return [head + "".join(w) + tail for w in itertools.product(alphabet, repeat=n)]


mixed = st.lists(
    st.one_of(st.text(alphabet=WIDE, max_size=2), st.text(alphabet=CODE_ALPHABET, min_size=1, max_size=6)),
    min_size=1,
    max_size=200,
)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(values=st.one_of(wide_short, code_like, numbers, mixed, dense()))
def test_generated_wide_sets_equal_reference(name: str, vocabs: dict[str, triec.Vocabulary], values: list[str]) -> None:
    vocab = vocabs[name]
    assert_equals_reference(triec.compile(values, vocab), values, vocab)


@pytest.mark.parametrize("shape", ["issue_reproducer", "long_prefix_wide_end", "whitespace_runs", "nested_prefixes"])
def test_tiny_chunks_give_the_same_tables(qwen2: triec.Vocabulary, shape: str) -> None:
    """Levels and tails cut into passes of a few entries (even a single node's entries split) change nothing."""
    from triec.compiler.entry import prepare_buffer
    from triec.compiler.walk import walk
    from triec.trie import build_trie_from_buffer

    sk = prepare_buffer(shapes.SHAPES[shape]())
    trie = build_trie_from_buffer(sk.data, sk.offsets, sk.lcp, sk.starts)
    whole = walk(trie, qwen2.automaton, qwen2.vocab_size)
    for chunk in (1, 5, 1000):
        cut = walk(trie, qwen2.automaton, qwen2.vocab_size, chunk=chunk)
        for name in ("offsets", "tokens", "next_state"):
            assert np.array_equal(getattr(whole, name), getattr(cut, name)), (chunk, name)


@pytest.mark.parametrize("shape", ["issue_reproducer", "nested_prefixes"])
def test_index_sort_fallback_gives_the_same_tables(
    qwen2: triec.Vocabulary, shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pairs sort as one packed int64 while (state, token, next state) fit in 63 bits; past that (about 2**22
    states) they sort as (key, index) and are gathered: forced here, both give the same CSR."""
    import triec.compiler.walk
    from triec.compiler.entry import prepare_buffer
    from triec.trie import build_trie_from_buffer

    sk = prepare_buffer(shapes.SHAPES[shape]())
    trie = build_trie_from_buffer(sk.data, sk.offsets, sk.lcp, sk.starts)
    packed = triec.compiler.walk.walk(trie, qwen2.automaton, qwen2.vocab_size)
    monkeypatch.setattr(triec.compiler.walk, "_PACKED_BITS", 0)
    gathered = triec.compiler.walk.walk(trie, qwen2.automaton, qwen2.vocab_size)
    assert packed.tokens.shape[0] > 1000
    for name in ("offsets", "tokens", "next_state"):
        assert np.array_equal(getattr(packed, name), getattr(gathered, name)), name


def test_200k_wide_codes_equal_reference(qwen2: triec.Vocabulary) -> None:
    """Issue 9's large case: 200,000 ICD-10 style codes (a million would take the reference past 30 s)."""
    from triec.synthetic.sets import wide_codes

    values = wide_codes(200_000)
    assert len(set(values)) == 200_000
    assert_equals_reference(triec.compile(values, qwen2), values, qwen2)


def test_titles_are_seeded_distinct_and_share_little() -> None:
    """The entity-title generator (issue 43): the same set for a seed, distinct, about 25 bytes a title."""
    from triec.synthetic.sets import titles

    a = titles(20_000)
    assert a == titles(20_000) and a != titles(20_000, seed=8)
    assert len(set(a)) == 20_000 and a[:100] == titles(100)
    assert 15 < sum(len(t.encode()) for t in a) / len(a) < 35
