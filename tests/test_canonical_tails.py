"""Canonical tables in the tail layout (format version 4 with each value's tail tokens) answer exactly like the
full canonical table, state by state, on gpt2, phi3 and qwen2.

The full canonical table is itself checked against the tokenizers library's encoder in tests/test_canonical.py;
here every answer of the tail table (rows, EOS, advance, bitmask rows, writers, matchers, restricted views and
their compaction, the expanded arrays a device upload reads, a saved and loaded artifact) is compared with it,
and the tail table is also checked directly against the encoder's token trie (``compare_canonical``).
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import numpy as np
import pytest
from tail_tables import (
    Artifact,
    assert_restricted_same,
    assert_same,
    assert_walks_agree,
    resealed,
    section_at,
    tail_pair,
)

import triec
import triec.synthetic.sets as sets
from triec.artifact import container
from triec.compiler.entry import compile as compile_values
from triec.runtime.table import TailMaskTable
from triec.runtime.tails import CanonicalTailLayout
from triec.verify.tables import compare_canonical

NAMES = ("gpt2", "phi3", "qwen2")
PREFIXES = [  # values inside others, values sharing long prefixes, tails longer than any token
    "a",
    "ab",
    "abc",
    "abd",
    "get_weather",
    "get_weather_forecast",
    "get_weather_forecast_daily",
    "getWeather",
    "The History of the Kingdom of Ostravia (1204-1388), volume one",
    "The History of the Kingdom of Ostravia (1204-1388), volume two",
    "The History of the Kingdom of Ostravia (1204-1388)",
    "abcdefghijklmnopqrstuvwxyz" * 8,
    "日本語のテキスト",
    "😀 emoji tail",
    "  spaced  ",
    "",
]


def _sets() -> dict[str, list[str]]:
    return {
        "titles": sets.titles(400, seed=5),
        "tools": random.Random(1).sample(sets.tool_names(3000), 200),
        "prefixes": PREFIXES,
        "mixed": sorted(set(sets.titles(120, seed=13)) | set(sets.tool_names(80)) | set(PREFIXES)),
        "one": ["Only one value (film)"],
    }


SETS = _sets()


def _pair(values: list[str], vocab: triec.Vocabulary, **kw: object) -> tuple[triec.MaskTable, TailMaskTable]:
    full, tail = tail_pair(values, vocab, tokenization="canonical", **kw)
    assert isinstance(tail.tails, CanonicalTailLayout) and tail.canonical
    return full, tail


def _same_arrays(full: triec.MaskTable, tail: TailMaskTable) -> None:
    ex = tail.expanded()  # the arrays a reader of the full layout (the device upload) sees
    for field in ("allowed_offsets", "allowed_tokens", "allowed_next"):
        assert np.array_equal(getattr(ex, field), getattr(full, field)), field
    for field in ("value_state", "value_lcp", "state_byte"):
        assert np.array_equal(getattr(tail, field), getattr(full, field)), field


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("which", sorted(SETS))
def test_every_state_equals_the_full_canonical_table(
    vocabs: dict[str, triec.Vocabulary], name: str, which: str
) -> None:
    vocab = vocabs[name]
    full, tail = _pair(SETS[which], vocab)
    assert tail.num_tail_states > 0
    assert_same(full, tail)
    _same_arrays(full, tail)
    assert tail.values == full.values
    # the tail table alone against the encoder's token trie (independent of the full table)
    check = compare_canonical(tail, vocab)
    assert check.mismatches == 0, check.examples
    assert check.states_checked == tail.num_states


def test_json_spelling(vocabs: dict[str, triec.Vocabulary]) -> None:
    full, tail = _pair(SETS["mixed"], vocabs["qwen2"], encoding="json", prefix='{"name": ', suffix="}")
    assert_same(full, tail)
    _same_arrays(full, tail)


def test_a_seeded_sample_of_a_larger_set(qwen2: triec.Vocabulary) -> None:
    full, tail = _pair(sets.titles(6000, seed=21), qwen2)
    rng = np.random.default_rng(4)
    tails = tail.tails.tail_states()[0]
    states = np.unique(
        np.concatenate([rng.choice(full.num_states, 1500, replace=False), rng.choice(tails, 1500, replace=False)])
    )
    assert states.shape[0] >= 2000
    assert_same(full, tail, states)
    _same_arrays(full, tail)
    # per-state content as restricted views and the checks read it, batched
    row1, tok1, nxt1 = full.content_pairs(states)
    row2, tok2, nxt2 = tail.content_pairs(states)
    assert np.array_equal(row1, row2) and np.array_equal(tok1, tok2) and np.array_equal(nxt1, nxt2)


def test_seeded_walks_and_matchers(qwen2: triec.Vocabulary) -> None:
    full, tail = _pair(sets.titles(1500, seed=9), qwen2)
    assert_walks_agree(full, tail, 150)


@pytest.mark.parametrize("name", NAMES)
def test_restricted_views_and_compaction(vocabs: dict[str, triec.Vocabulary], name: str) -> None:
    values = SETS["mixed"]
    full, tail = _pair(values, vocabs[name])
    assert_restricted_same(full, tail, values[1::4])


@pytest.mark.parametrize("name", NAMES)
def test_artifact_round_trip(tmp_path: Path, vocabs: dict[str, triec.Vocabulary], name: str) -> None:
    full, tail = _pair(SETS["mixed"], vocabs[name], encoding="json")
    path = tmp_path / "t.triec"
    size = tail.save(path)
    data = path.read_bytes()
    assert struct.unpack_from("<I", data, 8)[0] == container.TAILS_FORMAT_VERSION == 4
    header, _, _ = container.read_header(data, str(path), verify=False)
    assert header["num_tail_tokens"] == tail.tails.num_tail_tokens
    assert [s["name"] for s in header["sections"]][-2:] == ["tail_token_offsets", "tail_tokens"]
    for kw in ({}, {"verify": True}, {"copy": True}):
        loaded = triec.load(path, **kw)
        assert isinstance(loaded, TailMaskTable) and isinstance(loaded.tails, CanonicalTailLayout)
        assert loaded.canonical and loaded.format_version == 4
        assert_same(full, loaded, np.arange(0, full.num_states, 3))
        assert loaded.values == full.values
    _same_arrays(full, triec.load(path))  # type: ignore[arg-type]
    again = tmp_path / "again.triec"
    assert triec.load(path).save(again) == size and again.read_bytes() == data  # a pure function of the table
    zst = tmp_path / "t.triec.zst"
    tail.save(zst)
    assert_same(full, triec.load(zst), np.arange(0, full.num_states, 11))


def test_auto_picks_tails_for_canonical_titles(qwen2: triec.Vocabulary) -> None:
    table = compile_values(sets.titles(60000), qwen2, tokenization="canonical")
    assert isinstance(table, TailMaskTable) and isinstance(table.tails, CanonicalTailLayout)
    assert compile_values(sets.titles(500), qwen2, tokenization="canonical").tails is None  # the index outweighs
    assert compile_values(sets.tool_names(20000), qwen2, tokenization="canonical").tails is None
    assert compile_values(sets.titles(500), qwen2, tokenization="canonical", layout="full").tails is None


# ----------------------------------------------------------------------------- the loader's checks


def _two_tokens(tail: TailMaskTable, qwen2: triec.Vocabulary, same_length: bool) -> tuple[int, int]:
    """A tail token's index and another content id of the same byte length (or of another) spelling other bytes."""
    tb = qwen2.token_bytes
    at = 5
    t = int(tail.tails.tail_tokens[at])  # type: ignore[attr-defined]
    want = len(tb[t])
    other = next(
        i
        for i in range(qwen2.vocab_size)
        if tb[i] and tb[i] != tb[t] and (len(tb[i]) == want) == same_length and i not in qwen2.eos_token_ids
    )
    return at, other


@pytest.mark.parametrize(
    ("section", "index", "value"),
    [
        ("tail_tokens", 0, 0x7FFFFFFF),  # past the mask
        ("tail_tokens", 3, 0xFFFFFFFF),  # negative
        ("tail_tokens", 2, "eos"),
        ("tail_tokens", 4, "other length"),  # spells more or fewer bytes than the tail
        ("tail_token_offsets", -1, 0),  # does not end at the count
        ("tail_token_offsets", 0, 1),  # does not start at 0
        ("tail_token_offsets", 7, 0xFFFFFFF0),  # decreasing
        ("tail_token_offsets", 9, 0),  # decreasing
    ],
)
def test_every_tail_token_index_is_checked_at_load(
    qwen2: triec.Vocabulary,
    section: str,
    index: int,
    value: object,
    canonical_tail_artifact: Artifact,
    canonical_tail_table: TailMaskTable,
) -> None:
    path, data, info = canonical_tail_artifact
    at, count, _ = section_at(info, section)
    if value == "eos":
        value = qwen2.eos_token_ids[0]
    elif value == "other length":
        index, value = _two_tokens(canonical_tail_table, qwen2, same_length=False)
    buf = bytearray(data)
    struct.pack_into("<I", buf, at + 4 * (index % count), value)  # type: ignore[arg-type]
    path.write_bytes(bytes(buf))
    with pytest.raises(triec.ArtifactContentError, match=section):
        triec.load(path)


def test_a_tail_token_that_spells_other_bytes_is_refused_by_verify(
    qwen2: triec.Vocabulary, canonical_tail_artifact: Artifact, canonical_tail_table: TailMaskTable
) -> None:
    """Same length, other bytes: in range (a plain load serves it); verify=True and triec verify refuse it."""
    from triec.verify.tables import verify

    path, data, info = canonical_tail_artifact
    index, other = _two_tokens(canonical_tail_table, qwen2, same_length=True)
    at, _, _ = section_at(info, "tail_tokens")
    buf = bytearray(data)
    struct.pack_into("<I", buf, at + 4 * index, other)
    path.write_bytes(resealed(bytes(buf), info))
    triec.load(path)
    with pytest.raises(triec.ArtifactContentError, match="tail_tokens"):
        triec.load(path, verify=True)
    assert not verify(str(path), tokenizer="qwen2", against=["reference"], walks=0).ok


def test_seeded_mutations_are_refused_or_answer_every_query(
    qwen2: triec.Vocabulary, canonical_tail_artifact: Artifact
) -> None:
    path, data, info = canonical_tail_artifact
    rng = random.Random(44)
    values = [0, 1, 2, 0x7FFFFFFF, 0xFFFFFFFF, qwen2.vocab_size, qwen2.vocab_size - 1, 3, 100]
    served = 0
    for _ in range(60):
        buf = bytearray(data)
        at, count, _ = section_at(info, rng.choice(["tail_tokens", "tail_token_offsets", "value_lcp"]))
        struct.pack_into("<I", buf, at + 4 * rng.randrange(count), rng.choice(values))
        path.write_bytes(bytes(buf))
        try:
            table = triec.load(path)
        except triec.ArtifactError:
            continue
        served += 1
        n = table.num_states
        table.fill_bitmask(np.arange(200), np.empty((200, table.words_per_row), np.int32))
        for s in range(0, n, 53):
            for t in table.allowed(s).tolist()[:3]:
                nxt = table.advance(s, t)
                assert nxt == triec.FINISHED or 0 <= nxt < n
    assert served < 60


# ----------------------------------------------------------------------------- verify, inspect, devices


def test_verify_and_inspect(tmp_path: Path, qwen2: triec.Vocabulary) -> None:
    from triec.verify import inspect as ins
    from triec.verify.tables import verify

    full, tail = _pair(SETS["titles"], qwen2)
    path = tmp_path / "c.triec"
    tail.save(path)
    report = verify(str(path), tokenizer="qwen2", against=["reference"], walks=0)
    assert report.ok, report.to_json()
    assert report.tail_states == tail.num_tail_states > 0
    assert report.checks[0].states_checked >= tail.num_states
    assert np.array_equal(ins.allowed_counts(tail), ins.allowed_counts(full))
    info = ins.summary(tail, section_sizes=ins.section_sizes(tail))
    assert info["layout"] == "tails" and info["tail_states"] == tail.num_tail_states
    assert info["tail_pairs"] + tail.num_allowed == full.num_allowed
    assert "tail_tokens" in info["sections"]
    s = int(tail.tails.tail_states()[0][5])
    assert ins.describe_state(tail, s) == ins.describe_state(full, s)


@pytest.mark.torch
def test_device_table_of_a_canonical_tail_table(qwen2: triec.Vocabulary) -> None:
    torch = pytest.importorskip("torch")
    from test_torch_table import assert_same_as_numpy

    full, tail = _pair(SETS["mixed"], qwen2)
    dev = tail.to_torch("cpu")
    assert_same_as_numpy(tail, dev)
    states = torch.arange(full.num_states)
    assert torch.equal(dev.fill(states), full.to_torch("cpu").fill(states))
