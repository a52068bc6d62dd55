"""State-by-state exactness of compiled mask tables against independent oracles.

The oracle below is written from the contract alone and shares no code with
triec (neither the numpy walk nor ``triec.compiler.reference``):

* states are the distinct byte prefixes of the values, numbered in preorder,
  which for a byte trie with children in byte order is plain sorted order of
  the prefixes;
* content token t is allowed at prefix p iff ``token_bytes[t]`` is non-empty and
  ``p + token_bytes[t]`` is a prefix of some value, and it leads to that prefix;
* EOS ids are allowed exactly at prefixes that are values.

Every test runs with the real tokenizers of the session fixtures (gpt2 and
qwen2 byte-level BPE, phi3 SentencePiece with byte fallback).
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass

import numpy as np
import pytest
from cases import CASES, LONG
from hypothesis import given, settings
from hypothesis import strategies as st

import triec
import triec.synthetic.sets

NAMES = ("gpt2", "phi3", "qwen2")

# ---------------------------------------------------------------- value sets

TOOL_NAMES_10K = triec.synthetic.sets.tool_names(10_000)
ALL_CASES = [*CASES, "tool_names_10k"]


def case_values(case: str) -> list[str]:
    return TOOL_NAMES_10K if case == "tool_names_10k" else CASES[case]


def test_long_value_is_at_least_2kb() -> None:
    assert len(LONG.encode("utf-8")) >= 2048
    assert len(LONG.encode("utf-8")) > len(LONG)  # really holds multi-byte characters


# ---------------------------------------------------------------- the oracle


@dataclass
class Expected:
    keys: list[bytes]  # sorted unique value bytes
    prefixes: list[bytes]  # state s has prefix prefixes[s]
    accepting: list[bool]
    transitions: list[dict[int, int]]  # state -> {content token: next state}


class Oracle:
    """Brute force over the prefix set, restricted to tokens that can fit.

    Every pair (p, t) with p + bytes(t) = q in the prefix set is found by
    splitting each prefix q at every point within the longest token length of
    its end, so the enumeration is the definition, not an approximation.
    """

    def __init__(self, vocab: triec.Vocabulary) -> None:
        ids: dict[bytes, list[int]] = {}
        for t, b in enumerate(vocab.token_bytes):
            if b:
                ids.setdefault(b, []).append(t)
        self.ids_by_bytes = ids
        self.max_len = max(map(len, ids))
        self.eos = sorted(set(vocab.eos_token_ids))

    def expected(self, values: list[str]) -> Expected:
        keys = sorted({v.encode("utf-8") for v in values})
        prefixes = sorted({k[:i] for k in keys for i in range(len(k) + 1)})
        index = {p: i for i, p in enumerate(prefixes)}
        keyset = set(keys)
        transitions: list[dict[int, int]] = [{} for _ in prefixes]
        for q, qs in index.items():
            for i in range(max(0, len(q) - self.max_len), len(q)):
                ids = self.ids_by_bytes.get(q[i:])
                if ids:
                    src = transitions[index[q[:i]]]
                    for t in ids:
                        src[t] = qs
        return Expected(keys, prefixes, [p in keyset for p in prefixes], transitions)


_ORACLES: dict[str, Oracle] = {}
_TABLES: dict[tuple[str, int, str], triec.MaskTable] = {}


def oracle_for(vocab: triec.Vocabulary) -> Oracle:
    if vocab.fingerprint not in _ORACLES:
        _ORACLES[vocab.fingerprint] = Oracle(vocab)
    return _ORACLES[vocab.fingerprint]


def table_for(vocab: triec.Vocabulary, case: str) -> triec.MaskTable:
    key = (vocab.fingerprint, vocab.vocab_size, case)
    if key not in _TABLES:
        _TABLES[key] = triec.compile(case_values(case), vocab)
    return _TABLES[key]


def assert_matches_oracle(table: triec.MaskTable, values: list[str], vocab: triec.Vocabulary) -> None:
    """Compare every state of ``table`` with the oracle: prefix, acceptance, mask, transitions."""
    exp = oracle_for(vocab).expected(values)
    eos = oracle_for(vocab).eos
    assert table.num_states == len(exp.prefixes)
    assert table.num_values == len(exp.keys)
    assert table.value_bytes == exp.keys
    assert table.values == [k.decode("utf-8") for k in exp.keys]
    assert table.num_allowed == sum(len(t) for t in exp.transitions)
    assert table.start == 0 and exp.prefixes[0] == b""

    problems: list[str] = []
    for s, p in enumerate(exp.prefixes):
        if table.prefix(s) != p:
            problems.append(f"state {s}: prefix {table.prefix(s)!r}, expected {p!r}")
        if table.state_for_prefix(p) != s:
            problems.append(f"state {s}: state_for_prefix({p!r}) = {table.state_for_prefix(p)}")
        accepting = exp.accepting[s]
        if table.is_accepting(s) != accepting:
            problems.append(f"state {s} ({p!r}): is_accepting {table.is_accepting(s)}, expected {accepting}")
        want_value = p.decode("utf-8") if accepting else None
        if table.value(s) != want_value:
            problems.append(f"state {s} ({p!r}): value {table.value(s)!r}, expected {want_value!r}")
        content = exp.transitions[s]
        want = sorted(set(content) | set(eos)) if accepting else sorted(content)
        got = table.allowed(s)
        if got.dtype != np.int32 or got.tolist() != want:
            extra = sorted(set(got.tolist()) - set(want))[:5]
            missing = sorted(set(want) - set(got.tolist()))[:5]
            problems.append(f"state {s} ({p!r}): allowed differs; extra {extra}, missing {missing}, dtype {got.dtype}")
        for t, nxt in content.items():
            got_next = table.advance(s, t)
            if got_next != nxt:
                problems.append(f"state {s} ({p!r}): advance({t}) = {got_next}, expected {nxt}")
        for e in eos:
            try:
                r = table.advance(s, e)
            except triec.TokenNotAllowed:
                r = None
            if r != (triec.FINISHED if accepting else None):
                problems.append(f"state {s} ({p!r}): advance(EOS {e}) = {r}, accepting={accepting}")
        if len(problems) > 20:
            break
    assert not problems, "\n".join(problems[:20])


# ---------------------------------------------------------------- 1. exactness vs oracle


def test_oracle_matches_literal_definition(vocab: triec.Vocabulary) -> None:
    """The restricted enumeration equals the literal O(states x vocabulary) definition on a small set."""
    values = CASES["empty_plus"] + ["日本", "👩\u200d👧"]
    exp = oracle_for(vocab).expected(values)
    prefixes = set(exp.prefixes)
    for s, p in enumerate(exp.prefixes):
        literal = {t for t, b in enumerate(vocab.token_bytes) if b and p + b in prefixes}
        assert literal == set(exp.transitions[s]), p
    assert exp.accepting == [p in {v.encode() for v in values} for p in exp.prefixes]


@pytest.mark.parametrize("case", ALL_CASES)
def test_every_state_matches_oracle(vocab: triec.Vocabulary, case: str) -> None:
    assert_matches_oracle(table_for(vocab, case), case_values(case), vocab)


def test_prefix_values_are_accepting_inside_the_trie(vocab: triec.Vocabulary) -> None:
    """Targeted: at "get" EOS and continuations are both allowed; at "get_" EOS is not."""
    table = table_for(vocab, "prefix_chain")
    eos = set(vocab.eos_token_ids)
    get = table.state_for_prefix("get")
    get_ = table.state_for_prefix("get_")
    assert get is not None and get_ is not None
    allowed_get = set(table.allowed(get).tolist())
    assert eos <= allowed_get and allowed_get - eos, "EOS and a continuation must both be allowed at 'get'"
    assert not eos & set(table.allowed(get_).tolist())
    assert table.value(table.state_for_prefix("get_user_by_id")) == "get_user_by_id"


def test_unicode_tokens_split_characters(vocab: triec.Vocabulary) -> None:
    """Some allowed token must end inside a multi-byte character (a state that is not valid UTF-8)."""
    table = table_for(vocab, "unicode")
    split_states = []
    for s in range(table.num_states):
        try:
            table.prefix(s).decode("utf-8")
        except UnicodeDecodeError:
            split_states.append(s)
    assert split_states
    # and those mid-character states are reachable by some token from an earlier state
    reachable = set(table.allowed_next.tolist())
    assert reachable & set(split_states)


def test_empty_value_alone_allows_only_eos(vocab: triec.Vocabulary) -> None:
    table = table_for(vocab, "empty_alone")
    assert table.num_states == 1 and table.num_allowed == 0
    assert table.allowed(0).tolist() == sorted(set(vocab.eos_token_ids))
    assert table.value(0) == ""
    with pytest.raises(triec.TokenNotAllowed):
        table.advance(0, next(t for t, b in enumerate(vocab.token_bytes) if b))


# ---------------------------------------------------------------- 2. fast vs reference

ARRAYS = ("allowed_offsets", "allowed_tokens", "allowed_next", "value_state", "value_lcp", "state_byte")


@pytest.mark.parametrize("case", ALL_CASES)
def test_fast_equals_reference(vocab: triec.Vocabulary, case: str) -> None:
    fast = table_for(vocab, case)
    ref = triec.compile(case_values(case), vocab, implementation="reference")
    for name in ARRAYS:
        a, b = getattr(fast, name), getattr(ref, name)
        assert np.array_equal(a, b), f"{name} differs"
    assert fast.eos_token_ids == ref.eos_token_ids and fast.vocab_size == ref.vocab_size


# ---------------------------------------------------------------- 3. hypothesis

ALPHABET = string.ascii_letters + "_. é日👩\u200d"
random_value = st.one_of(st.text(alphabet=ALPHABET, min_size=1, max_size=12), st.just(""))
random_sets = st.lists(random_value, min_size=1, max_size=30)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=60, deadline=None)
@given(values=random_sets)
def test_random_sets_match_oracle(name: str, vocabs: dict[str, triec.Vocabulary], values: list[str]) -> None:
    vocab = vocabs[name]
    table = triec.compile(values, vocab)
    assert_matches_oracle(table, values, vocab)


# ---------------------------------------------------------------- 4. save -> load

MIXED = sorted(
    set(triec.synthetic.sets.tool_names(500))
    | set(CASES["unicode"])
    | set(CASES["whitespace"])
    | set(CASES["prefix_chain"])
    | {""}
)


def _rows(table: triec.MaskTable, states: list[int]) -> np.ndarray:
    out = np.zeros((len(states), table.words_per_row), dtype=np.int32)
    return table.fill_bitmask(states, out).copy()


def assert_same_answers(a: triec.MaskTable, b: triec.MaskTable) -> None:
    assert (a.num_states, a.num_values, a.num_allowed) == (b.num_states, b.num_values, b.num_allowed)
    assert a.vocab_size == b.vocab_size and a.eos_token_ids == b.eos_token_ids
    assert a.tokenizer_fingerprint == b.tokenizer_fingerprint
    assert a.values == b.values
    for name in ARRAYS:
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    probe = next(t for t in range(a.vocab_size) if t not in a.eos_token_ids)
    for s in range(a.num_states):
        allowed = a.allowed(s)
        assert np.array_equal(allowed, b.allowed(s)), s
        assert a.is_accepting(s) == b.is_accepting(s)
        assert a.value(s) == b.value(s)
        assert a.prefix(s) == b.prefix(s)
        for t in allowed.tolist():
            assert a.advance(s, t) == b.advance(s, t)
        if probe not in allowed:
            for table in (a, b):
                with pytest.raises(triec.TokenNotAllowed):
                    table.advance(s, probe)
    for lo in range(0, a.num_states, 256):
        states = list(range(lo, min(lo + 256, a.num_states)))
        assert np.array_equal(_rows(a, states), _rows(b, states))


def test_save_load_round_trip(vocab: triec.Vocabulary, tmp_path) -> None:
    table = triec.compile(MIXED, vocab)
    plain = tmp_path / "mixed.triec"
    written = table.save(plain)
    assert written == plain.stat().st_size
    assert plain.read_bytes()[:8] == b"\x89TRIEC\r\n"
    for loaded in (triec.load(plain), triec.load(plain, verify=True)):
        assert_same_answers(table, loaded)
    # and the loaded table is still exact, not merely equal to a possibly wrong original
    assert_matches_oracle(triec.load(plain, verify=True), MIXED, vocab)


def test_save_load_round_trip_zst(vocab: triec.Vocabulary, tmp_path) -> None:
    """A ``.zst`` path writes a zstd-wrapped artifact that loads back to the same answers."""
    for name, values in (("mixed", MIXED), ("empty_alone", CASES["empty_alone"]), ("long_2kb", CASES["long_2kb"])):
        table = triec.compile(values, vocab)
        plain, packed = tmp_path / f"{name}.triec", tmp_path / f"{name}.triec.zst"
        table.save(plain)
        table.save(packed)
        raw = packed.read_bytes()
        assert raw[:4] == b"\x28\xb5\x2f\xfd"  # really zstd-compressed
        import zstandard

        assert zstandard.ZstdDecompressor().decompress(raw) == plain.read_bytes()  # same artifact inside
        for loaded in (triec.load(packed), triec.load(packed, verify=True)):
            assert_same_answers(table, loaded)


@pytest.mark.parametrize("case", ["empty_alone", "empty_plus", "long_2kb", "single"])
def test_save_load_edge_cases(vocab: triec.Vocabulary, tmp_path, case: str) -> None:
    table = table_for(vocab, case)
    path = tmp_path / f"{case}.triec"
    table.save(path)
    for loaded in (triec.load(path), triec.load(path, verify=True)):
        assert_same_answers(table, loaded)


# ---------------------------------------------------------------- 7. fill_bitmask


def bits_of(row: np.ndarray) -> list[int]:
    return np.flatnonzero(np.unpackbits(row.view(np.uint8), bitorder="little")).tolist()


def assert_bitmask_matches_allowed(table: triec.MaskTable, states: list[int], limit: int) -> None:
    """Rows equal allowed(); no bit at or past ``limit`` (the ids the tokenizer defines) is ever set."""
    out = np.full((len(states) + 2, table.words_per_row), -1, dtype=np.int32)
    rows = table.fill_bitmask(states, out)
    assert rows.shape == (len(states), table.words_per_row)
    assert np.shares_memory(rows, out)
    assert (out[len(states) :] == -1).all(), "rows past len(states) must be left alone"
    for i, s in enumerate(states):
        bits = bits_of(rows[i])
        assert bits == table.allowed(s).tolist(), f"state {s}"
        assert not bits or bits[-1] < limit
        assert np.array_equal(table.bitmask(s), rows[i])


def _batch(table: triec.MaskTable, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    sample = rng.sample(range(table.num_states), min(200, table.num_states))
    accepting = [int(s) for s in table.value_state[:20]]
    return sample + accepting + [0, 0, table.num_states - 1]  # duplicates on purpose


@pytest.mark.parametrize("case", ["unicode", "tool_names_10k", "empty_plus"])
def test_fill_bitmask_equals_allowed(vocab: triec.Vocabulary, case: str) -> None:
    table = table_for(vocab, case)
    assert table.words_per_row == (vocab.vocab_size + 31) // 32
    assert_bitmask_matches_allowed(table, _batch(table), vocab.num_tokens)


def test_padded_vocabulary(qwen2: triec.Vocabulary) -> None:
    padded = triec.Vocabulary.load("qwen2", vocab_size=151936)
    assert padded.num_tokens == qwen2.num_tokens < padded.vocab_size == 151936
    for case in ("tool_names_10k", "unicode", "empty_plus"):
        plain, wide = table_for(qwen2, case), table_for(padded, case)
        assert wide.vocab_size == 151936 and wide.words_per_row == 151936 // 32
        for name in ARRAYS:
            assert np.array_equal(getattr(plain, name), getattr(wide, name)), name
        for s in range(wide.num_states):
            assert np.array_equal(plain.allowed(s), wide.allowed(s))
        assert_bitmask_matches_allowed(wide, _batch(wide), qwen2.num_tokens)
        for t in (qwen2.num_tokens, 151935):
            with pytest.raises(triec.TokenNotAllowed):
                wide.advance(0, t)
    # all states at once: the padded words of every row stay zero
    table = table_for(padded, "unicode")
    rows = _rows(table, list(range(table.num_states)))
    first_pad_word = qwen2.num_tokens // 32
    assert not rows[:, first_pad_word + 1 :].any()
    tail = rows[:, first_pad_word].view(np.uint32) >> np.uint32(qwen2.num_tokens % 32)
    assert not tail.any()


@pytest.mark.parametrize("layout", ["every_other_row", "column_slice_of_wider_buffer"])
def test_fill_bitmask_into_non_contiguous_out(qwen2: triec.Vocabulary, layout: str) -> None:
    """``out`` may be a non-contiguous int32 view of the right shape.

    Realistic: a serving engine's bitmask buffer sized for a wider logits row,
    sliced to ``[:, :table.words_per_row]``; or every other row of a buffer.
    fill_bitmask must either refuse such an ``out`` (ValueError) or fill it
    correctly; silently returning all-zero rows (every token, EOS included,
    disallowed) is a wrong mask.
    """
    table = table_for(qwen2, "prefix_chain")  # the layout bug, if any, is tokenizer-independent
    states = [0, 1, table.state_for_prefix("get")]
    w = table.words_per_row
    if layout == "every_other_row":
        buf = np.zeros((2 * len(states), w), dtype=np.int32)
        out, written = buf[::2], lambda i: buf[2 * i]
    else:
        buf = np.zeros((len(states), w + 8), dtype=np.int32)
        out, written = buf[:, :w], lambda i: buf[i, :w]
    assert out.shape == (len(states), w) and not out.flags.c_contiguous
    try:
        rows = table.fill_bitmask(states, out)
    except ValueError:
        return
    for i, s in enumerate(states):
        want = table.allowed(s).tolist()
        assert bits_of(np.ascontiguousarray(rows[i])) == want, f"returned row {i} (state {s})"
        assert bits_of(np.ascontiguousarray(written(i))) == want, f"buffer row {i} (state {s})"
