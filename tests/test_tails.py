"""The tail layout (format version 4) answers exactly like the full layout, state by state, on real tokenizers.

Tail states' rows are computed from the value's bytes and the token index at serve time; every answer a table
gives (rows, EOS, advance, bitmask rows, writers, matchers, restricted views and their compaction, the device
upload through the expanded arrays) is compared with the same set compiled in the full layout (itself checked
against the reference elsewhere), and with the reference directly on small sets.
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
from triec.runtime.tails import TailIndex, token_bits

EDGE = sorted(
    {
        "",
        "a",
        "ab",
        "abc",
        "abcdefghijklmnopqrstuvwxyz" * 12,  # a tail longer than any token
        "é",
        "日本語のテキスト",
        "x y",
        "  spaced  ",
        "1234567890" * 3,
        "slack",
        "slacker",
        "Hello, world!",
        "😀 emoji tail",
    }
)


def _sets() -> dict[str, list[str]]:
    return {
        "titles": sets.titles(700, seed=3),
        "edge": EDGE,
        "mixed": sorted(set(sets.titles(150, seed=11)) | set(sets.tool_names(150)) | set(EDGE)),
        "one": ["Only one value (film)"],
    }


SETS = _sets()


@pytest.mark.parametrize("name", sorted(SETS))
def test_every_state_equals_the_full_layout(vocab: triec.Vocabulary, name: str) -> None:
    full, tail = tail_pair(SETS[name], vocab)
    assert tail.num_tail_states > 0
    assert_same(full, tail)
    ex = tail.expanded()  # the arrays a reader of the full layout sees
    for field in ("allowed_offsets", "allowed_tokens", "allowed_next"):
        assert np.array_equal(getattr(ex, field), getattr(full, field)), field
    assert tail.values == full.values


def test_far_targets_are_exercised(qwen2: triec.Vocabulary) -> None:
    """Deltas that do not fit beside qwen2's 18-bit ids go to the far table; the rows stay exact."""
    full, tail = tail_pair(sets.titles(2000, seed=4), qwen2)
    assert token_bits(qwen2.vocab_size) == 18
    assert tail.tails.far_pairs.size > 0
    assert_same(full, tail, np.arange(0, full.num_states, 5))


@pytest.mark.parametrize("enc", [{"encoding": "json"}, {"encoding": "json", "prefix": '{"title": ', "suffix": "}"}])
def test_encodings(qwen2: triec.Vocabulary, enc: dict[str, str]) -> None:
    full, tail = tail_pair(SETS["mixed"], qwen2, **enc)
    assert_same(full, tail)
    assert tail.values == full.values == SETS["mixed"] or sorted(tail.values) == sorted(SETS["mixed"])


def test_reference_implementation_agrees(vocab: triec.Vocabulary) -> None:
    values = SETS["edge"] + ["Mid Title (river)", "Mid Title (film)"]
    ref = compile_values(values, vocab, implementation="reference")
    tail = compile_values(values, vocab, layout="tails")
    assert_same(ref, tail)


def test_seeded_walks_to_every_value(qwen2: triec.Vocabulary) -> None:
    """Random token walks (random allowed token at each step) reach EOS with the same state sequence."""
    full, tail = tail_pair(sets.titles(3000, seed=9), qwen2)
    assert_walks_agree(full, tail, 300)


def test_restricted_views_and_compaction(vocab: triec.Vocabulary) -> None:
    values = SETS["mixed"]
    full, tail = tail_pair(values, vocab)
    assert_restricted_same(full, tail, values[1::4])


def test_artifact_round_trip(tmp_path: Path, vocab: triec.Vocabulary) -> None:
    full, tail = tail_pair(SETS["mixed"], vocab, encoding="json")
    path = tmp_path / "t.triec"
    size = tail.save(path)
    data = path.read_bytes()
    assert struct.unpack_from("<I", data, 8)[0] == container.TAILS_FORMAT_VERSION == 4
    for kw in ({}, {"verify": True}, {"copy": True}):
        loaded = triec.load(path, **kw)
        assert isinstance(loaded, TailMaskTable) and loaded.format_version == 4
        assert_same(full, loaded, np.arange(0, full.num_states, 3))
        assert loaded.values == full.values
    again = tmp_path / "again.triec"
    assert triec.load(path).save(again) == size and again.read_bytes() == data  # a pure function of the table
    zst = tmp_path / "t.triec.zst"
    tail.save(zst)
    assert_same(full, triec.load(zst), np.arange(0, full.num_states, 11))
    # the full layout still writes version 1 or 2, byte for byte as before this layout existed
    full.save(tmp_path / "f.triec")
    assert struct.unpack_from("<I", (tmp_path / "f.triec").read_bytes(), 8)[0] == 2


def test_auto_layout_keeps_tool_names_and_small_sets_full(qwen2: triec.Vocabulary) -> None:
    assert compile_values(sets.tool_names(20000), qwen2).tails is None
    assert (
        compile_values(sets.tool_names(200000), qwen2).tails is None
    )  # 83% tails but 0.13 states a byte: rows stay sliced
    assert compile_values(sets.titles(500), qwen2).tails is None  # the index would cost more than the tails save
    assert compile_values(sets.titles(60000), qwen2).tails is not None
    assert compile_values(sets.titles(500), qwen2, tokenization="canonical").tails is None
    # canonical tables take the tail layout too (tests/test_canonical_tails.py)
    assert compile_values(sets.titles(5), qwen2, tokenization="canonical", layout="tails").tails is not None
    with pytest.raises(ValueError, match="layout"):
        compile_values(sets.titles(5), qwen2, layout="packed")


def test_token_index_matches_the_vocabulary(vocab: triec.Vocabulary) -> None:
    ix = TailIndex.of(vocab.token_bytes, vocab.eos_token_ids)
    keys = ix.keys()
    assert keys == sorted(set(keys)) and all(keys)
    spelled = {i for i, b in enumerate(vocab.token_bytes) if b and i not in vocab.eos_token_ids}
    assert set(ix.ids.tolist()) == spelled
    look = ix.lookup()
    for i in list(spelled)[:2000]:
        assert i in look[vocab.token_bytes[i]]
    text = "Hello world, ünïcode".encode()
    ids, lengths = ix.match(text)
    want = sorted((i, len(b)) for i, b in enumerate(vocab.token_bytes) if i in spelled and text.startswith(b))
    assert list(zip(ids.tolist(), lengths.tolist(), strict=True)) == want


def test_prefix_rows_match_every_token_that_starts_a_text(qwen2: triec.Vocabulary) -> None:
    """The stored prefix rows (what a tail row reads) against the definition, on texts made of two tokens cut
    anywhere: every content token that is a prefix of the text, ascending, with its length."""
    ix = TailIndex.of(qwen2.token_bytes, qwen2.eos_token_ids)
    eos = set(qwen2.eos_token_ids)
    spelled = [(i, b) for i, b in enumerate(qwen2.token_bytes) if b and i not in eos]
    rng = random.Random(3)
    for _ in range(60):
        text = spelled[rng.randrange(len(spelled))][1] + spelled[rng.randrange(len(spelled))][1]
        text = text[: rng.randrange(1, len(text) + 1)]
        ids, lengths = ix.match(text)
        want = sorted((i, len(b)) for i, b in spelled if text.startswith(b))
        assert list(zip(ids.tolist(), lengths.tolist(), strict=True)) == want, text
    assert ix.match(b"")[0].shape == (0,)


# ----------------------------------------------------------------------------- the loader's checks


@pytest.mark.parametrize(
    ("section", "index", "value", "message"),
    [
        ("allowed_pairs", 0, 0xFFFFFFFF, "allowed_pairs"),  # a token past the mask
        ("allowed_pairs", -1, (0x3FFF << 18) | 5, "allowed_pairs"),  # the last row's target past the last state
        ("far_next", 0, 0x7FFFFFFF, "far_next"),
        ("far_pairs", 0, 0xFFFFFFF0, "far_pairs"),
        ("allowed_offsets", 1, 0xFFFFFFF0, "allowed_offsets"),
        ("token_ids", 3, 0x7FFFFFFF, "token_ids"),
        ("token_key_offsets", 2, 0, "token_key_offsets"),
        ("token_id_offsets", -1, 0, "token_id_offsets"),
    ],
)
def test_every_new_index_is_checked_at_load(
    section: str, index: int, value: int, message: str, tail_artifact: Artifact
) -> None:
    path, data, info = tail_artifact
    at, count, _ = section_at(info, section)
    buf = bytearray(data)
    struct.pack_into("<I", buf, at + 4 * (index % count), value)
    path.write_bytes(bytes(buf))
    with pytest.raises(triec.ArtifactContentError, match=message):
        triec.load(path)


def test_a_delta_of_zero_without_its_far_entry_is_refused_at_load(
    qwen2: triec.Vocabulary, tail_artifact: Artifact
) -> None:
    """A pair whose delta is 0 without a far entry would have ``advance`` read another pair's: a plain load refuses
    it (issue 49: what loads is served consistently), as verify=True always did."""
    path, data, info = tail_artifact
    at, count, _ = section_at(info, "allowed_pairs")
    buf = bytearray(data)
    pair = struct.unpack_from("<I", buf, at + 4 * 7)[0]
    struct.pack_into("<I", buf, at + 4 * 7, pair & ((1 << token_bits(qwen2.vocab_size)) - 1))  # its token, delta 0
    path.write_bytes(resealed(bytes(buf), info))
    for verify in (False, True):
        with pytest.raises(triec.ArtifactContentError, match="far_pairs: expected one entry per pair"):
            triec.load(path, verify=verify)


@pytest.mark.parametrize("verify", [False, True])
def test_a_zeroed_run_of_token_ids_is_refused_at_load(verify: bool, tail_artifact: Artifact) -> None:
    """Issue 49: 4 KB of ``token_ids`` zeroed (CRCs recomputed) loaded, then ``allowed`` listed token 0 where
    ``advance`` refused it. Each id must spell one key: the load refuses it, with or without verify."""
    path, data, info = tail_artifact
    at, count, _ = section_at(info, "token_ids")
    buf = bytearray(data)
    buf[at + 4 * (count // 2) : at + 4 * (count // 2) + 4096] = bytes(4096)
    path.write_bytes(resealed(bytes(buf), info))
    with pytest.raises(triec.ArtifactContentError, match="section token_ids: expected every id once"):
        triec.load(path, verify=verify)


@pytest.mark.parametrize(
    ("section", "word", "match"),
    [
        ("allowed_pairs", 0, "allowed_pairs: expected strictly ascending token ids within each row"),
        ("token_key_bytes", 0, "token_key_bytes: expected distinct token bytes in strictly increasing order"),
    ],
)
def test_what_advance_relies_on_is_checked_at_load(
    qwen2: triec.Vocabulary, section: str, word: int, match: str, tail_artifact: Artifact
) -> None:
    """A stored row out of order (advance binary-searches it) and token keys out of order (the prefix rows are
    built from sorted keys) are refused by a plain load: ``allowed`` and ``advance`` could disagree."""
    path, data, info = tail_artifact
    at, count, _ = section_at(info, section)
    buf = bytearray(data)
    if section == "allowed_pairs":  # the first row's second token below its first
        first = struct.unpack_from("<I", buf, at)[0]
        struct.pack_into("<I", buf, at + 4, first & ~((1 << token_bits(qwen2.vocab_size)) - 1))
    else:  # the first key's first byte raised above the second key's
        buf[at] = 0xFF
    path.write_bytes(resealed(bytes(buf), info))
    with pytest.raises(triec.ArtifactContentError, match=match):
        triec.load(path)


def test_seeded_mutations_are_refused_or_answer_every_query(qwen2: triec.Vocabulary, tail_artifact: Artifact) -> None:
    """Words overwritten in the array sections (CRCs left stale: a plain load reads them): each mutated file is
    refused with an ArtifactError, or serves every state without anything but the documented errors."""
    path, data, info = tail_artifact
    names = ["allowed_offsets", "allowed_pairs", "far_pairs", "far_next", "value_state", "value_lcp"]
    names += ["token_key_offsets", "token_id_offsets", "token_ids"]
    rng = random.Random(43)
    values = [0, 1, 0x7FFFFFFF, 0xFFFFFFFF, qwen2.vocab_size, qwen2.vocab_size - 1, 2**18, 3]
    served = 0
    for _ in range(120):
        buf = bytearray(data)
        name = rng.choice(names)
        at, count, dtype = section_at(info, name)
        if count == 0:
            continue
        struct.pack_into("<I", buf, at + 4 * rng.randrange(count), rng.choice(values))
        path.write_bytes(bytes(buf))
        try:
            table = triec.load(path)
        except triec.ArtifactError:
            continue
        served += 1
        n = table.num_states
        states = np.arange(n)
        table.fill_bitmask(states[:200], np.empty((200, table.words_per_row), np.int32))
        for s in range(0, n, 97):
            for t in table.allowed(s).tolist()[:3]:
                nxt = table.advance(s, t)
                assert nxt == triec.FINISHED or 0 <= nxt < n
    assert served < 120


def test_a_canonical_header_needs_the_tail_token_sections(tail_artifact: Artifact) -> None:
    """A version-4 artifact whose header says canonical must hold each value's tail tokens: refused without them."""
    path, data, info = tail_artifact
    header = dict(info["header"])
    header["build_options"] = {**header["build_options"], "tokenization": "canonical"}
    path.write_bytes(resealed(data, info, header))
    with pytest.raises(triec.ArtifactError, match="num_tail_tokens|13 sections"):
        triec.load(path)
    header = {**info["header"], "num_tail_tokens": 0}  # and an any-tokenization one must not claim them
    path.write_bytes(resealed(data, info, header))
    with pytest.raises(triec.ArtifactError, match="num_tail_tokens"):
        triec.load(path)


# ----------------------------------------------------------------------------- devices


@pytest.mark.torch
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_device_table_of_a_tail_table(qwen2: triec.Vocabulary, device: str) -> None:
    """The device upload reads the expanded arrays (tail rows built on the host once): equal to numpy and to the
    full layout's device table, row by row and transition by transition."""
    torch = pytest.importorskip("torch")
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from test_torch_table import assert_same_as_numpy

    full, tail = tail_pair(SETS["mixed"], qwen2)
    dev = tail.to_torch(device)
    assert_same_as_numpy(tail, dev)
    states = torch.arange(full.num_states, device=device)
    assert torch.equal(dev.fill(states), full.to_torch(device).fill(states))


# ----------------------------------------------------------------------------- verify and inspect


def test_verify_checks_tail_states_against_the_reference_and_llguidance(
    tmp_path: Path, qwen2: triec.Vocabulary
) -> None:
    from triec.verify.tables import verify

    path = tmp_path / "t.triec"
    compile_values(sets.titles(400, seed=8), qwen2, layout="tails").save(path)
    report = verify(str(path), tokenizer="qwen2", against=["reference", "llguidance"], walks=5, states=20000)
    assert report.ok, report.to_json()
    assert report.tail_states > 0 and not report.sampled
    assert [c.against for c in report.checks if c.status == "ok"][0] == "reference"
    sampled = verify(str(path), tokenizer="qwen2", against=["reference"], walks=0, states=500)
    assert sampled.ok and sampled.sampled and sampled.states_selected >= 500


def test_verify_refuses_a_token_index_that_is_not_the_tokenizers(tail_artifact: Artifact) -> None:
    """Two ids swapped inside the index keep every index in range (the loader passes it): verify names it."""
    from triec.verify.tables import verify

    path, data, info = tail_artifact
    at, count, _ = section_at(info, "token_ids")
    buf = bytearray(data)
    a, b = struct.unpack_from("<ii", buf, at)
    struct.pack_into("<ii", buf, at, b, a)
    path.write_bytes(resealed(bytes(buf), info))
    triec.load(path)  # in range: served, but wrong for this tokenizer
    report = verify(str(path), tokenizer="qwen2", against=["reference"], walks=0)
    assert not report.ok and "token index" in " ".join(report.integrity_problems)


def test_inspect_reports_tails_and_counts_rows_as_served(qwen2: triec.Vocabulary) -> None:
    from triec.verify import inspect as ins

    full, tail = tail_pair(SETS["titles"], qwen2)
    assert np.array_equal(ins.allowed_counts(tail), ins.allowed_counts(full))
    info = ins.summary(tail, section_sizes=ins.section_sizes(tail))
    assert info["layout"] == "tails" and info["tail_states"] == tail.num_tail_states
    assert info["tail_pairs"] + tail.num_allowed == full.num_allowed
    assert info["token_index_bytes"] == tail.token_index.nbytes
    assert "allowed_pairs" in info["sections"] and "token_ids" in info["sections"]
    assert ins.summary(full)["layout"] == "full"
    s = int(tail.tails.tail_states()[0][5])
    assert ins.describe_state(tail, s) == ins.describe_state(full, s)


@pytest.mark.parametrize("piece", [1, 29, 1 << 20])
def test_compiled_in_pieces_equals_one_piece(
    monkeypatch: pytest.MonkeyPatch, qwen2: triec.Vocabulary, piece: int
) -> None:
    """The tail layout compiles piece by piece (runs of values with distinct first bytes): any piece size gives
    the same arrays as the full layout, every row expanded."""
    import triec.compiler.tails as pieces

    monkeypatch.setattr(pieces, "PIECE", piece)
    values = SETS["mixed"] + ["zz" * 150, "Zebra (film)", "Zebra (album)"]
    full, tail = tail_pair(values, qwen2)
    for field in ("value_state", "value_lcp", "state_byte"):
        assert np.array_equal(getattr(full, field), getattr(tail, field)), field
    ex = tail.expanded()
    for field in ("allowed_offsets", "allowed_tokens", "allowed_next"):
        assert np.array_equal(getattr(ex, field), getattr(full, field)), field
    assert len(pieces.pieces(tail.value_lcp.astype(np.int64), piece)) > (1 if piece < 100 else 0)


@pytest.mark.parametrize("seed", range(12))
def test_random_sets_every_state(vocabs: dict[str, triec.Vocabulary], seed: int) -> None:
    """Seeded random sets over small alphabets (shared prefixes, values inside others, empty values, multi-byte
    characters, long runs): every state's row, acceptance and transitions equal the full layout's."""
    rng = random.Random(seed)
    vocab = vocabs[sorted(vocabs)[seed % len(vocabs)]]
    alphabet = rng.choice(["ab", "abc ", "xyz01", "aé日 ", "the quick", "0123456789"])
    values = sorted(
        {
            "".join(rng.choice(alphabet) for _ in range(rng.choice([0, 1, 2, 5, 12, 40, 90])))
            for _ in range(rng.randint(1, 80))
        }
    )
    full, tail = tail_pair(values, vocab)
    assert_same(full, tail)
    ex = tail.expanded()
    for field in ("allowed_offsets", "allowed_tokens", "allowed_next"):
        assert np.array_equal(getattr(ex, field), getattr(full, field)), field


def test_request_rows_of_many_tail_matchers(qwen2: triec.Vocabulary) -> None:
    """The serving core's batched rows (integrations/matchers.fill_rows, a batch past its gather threshold): a
    tail table's matchers write their rows themselves, equal to the full layout's at the same states."""
    from triec.integrations.matchers import fill_rows
    from triec.runtime.matcher import TableMatcher

    full, tail = tail_pair(SETS["titles"], qwen2)
    rng = random.Random(3)
    ours, theirs = [], []
    for _ in range(100):
        a, b = TableMatcher(full), TableMatcher(tail)
        for _step in range(rng.randint(0, 8)):
            ids = a.allowed()
            if ids.size == 0 or a.is_terminated():
                break
            t = int(rng.choice(ids.tolist()))
            assert a.accept_token(t) and b.accept_token(t)
        ours.append(b)
        theirs.append(a)
    width = full.words_per_row
    out_a = np.full((100, width), -1, dtype=np.int32)
    out_b = np.full((100, width), -1, dtype=np.int32)
    fill_rows(theirs, list(range(100)), out_a)
    fill_rows(ours, list(range(100)), out_b)
    assert np.array_equal(out_a, out_b)


def test_verify_samples_values_at_large_k(
    tmp_path: Path, qwen2: triec.Vocabulary, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past REFERENCE_VALUES, the reference runs on a seeded sample of values (every state of their trie, rows as
    served, tail rows whole) and says so; a wrong next state in a stored row is found."""
    import triec.verify.masks as vm
    import triec.verify.tables as vt

    monkeypatch.setattr(vm, "REFERENCE_VALUES", 100)
    monkeypatch.setattr(vm, "SAMPLED_VALUES", 120)
    path = tmp_path / "t.triec"
    compile_values(sets.titles(400, seed=8), qwen2, layout="tails").save(path)
    report = vt.verify(str(path), tokenizer="qwen2", against=["reference"], walks=0)
    assert report.ok, report.to_json()
    assert report.values_sampled == 120 and report.sampled and report.checks[0].states_checked > 1000

    monkeypatch.setattr(vm, "SAMPLED_VALUES", 400)  # every value: the mutated row is in the sample
    data = path.read_bytes()
    header, data_start, _ = container.read_header(data, str(path))
    info = {"header": header, "data_start": data_start}
    at, count, _ = section_at(info, "allowed_pairs")
    buf = bytearray(data)
    (word,) = struct.unpack_from("<I", buf, at)  # the root's first pair: its next state one further
    assert word >> 18 > 0
    struct.pack_into("<I", buf, at, word + (1 << 18))
    path.write_bytes(resealed(bytes(buf), info))
    bad = vt.verify(str(path), tokenizer="qwen2", against=["reference"], walks=0)
    assert bad.integrity_ok and not bad.ok and bad.checks[0].mismatches >= 1
