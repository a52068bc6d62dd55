"""Hostile and broken artifacts: the loader raises ArtifactError and nothing else, whatever the bytes.

Two halves: a corpus of hand-made files in fixtures/hostile/ (one broken rule
each, made by tools/make_hostile.py) with one test each, and a seeded fuzz
run over real artifacts (byte flips, truncations, extensions, header rewrites).
"""

from __future__ import annotations

import random
import struct
import zlib
from pathlib import Path

import msgpack
import numpy as np
import pytest

import triec
import triec.synthetic.sets
from triec.artifact.container import PREAMBLE
from triec.artifact.masks import encode_artifact
from triec.errors import ArtifactChecksumError, ArtifactContentError, ArtifactError, ArtifactVersionError

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = ROOT / "fixtures" / "hostile"

# file -> (error class, text the message must contain, when it is caught):
# "plain" by every triec.load, "lazy" by a plain load's first use of the values, "verify" only by verify=True.
CORPUS: dict[str, tuple[type[ArtifactError], str, str]] = {
    "huge_header_length": (ArtifactError, "header length", "plain"),
    "header_not_msgpack": (ArtifactError, "not valid msgpack", "plain"),
    "header_crc_mismatch": (ArtifactChecksumError, "header CRC-32", "plain"),
    "newer_version": (ArtifactVersionError, "format version 99 is newer", "plain"),
    "wrong_magic": (ArtifactError, "magic", "plain"),
    "reserved_nonzero": (ArtifactError, "reserved field", "plain"),
    "truncated_in_section": (ArtifactError, "past the end of the file", "plain"),
    "trailing_bytes": (ArtifactError, "file size", "plain"),
    "overlapping_sections": (ArtifactError, "section allowed_tokens: offset expected", "plain"),
    "offset_past_end": (ArtifactError, "section state_byte: offset expected", "plain"),
    "misaligned_section": (ArtifactError, "64-byte aligned", "plain"),
    "count_mismatch": (ArtifactError, "count expected", "plain"),
    "count_overflow": (ArtifactError, "section allowed_next: field 'count'", "plain"),
    "eos_out_of_range": (ArtifactError, "eos_token_ids", "plain"),
    "bool_count": (ArtifactError, "num_values", "plain"),
    "missing_section": (ArtifactError, "expected 6 sections", "plain"),
    "wrong_dtype": (ArtifactError, "dtype expected <i4", "plain"),
    "vocab_size_zero": (ArtifactError, "header field 'vocab_size': a mask is at least 1 token wide", "plain"),
    "token_id_out_of_range": (ArtifactContentError, "section allowed_tokens: expected ids in 0..50256", "plain"),
    "token_id_negative": (
        ArtifactContentError,
        "section allowed_tokens: expected ids in 0..50256 (the mask width), found -1",
        "plain",
    ),
    "next_state_out_of_range": (
        ArtifactContentError,
        "section allowed_next: expected states in 0..24, found 30",
        "plain",
    ),
    "offsets_not_monotone": (ArtifactContentError, "section allowed_offsets: expected non-decreasing", "plain"),
    "offsets_wrong_end": (ArtifactContentError, "section allowed_offsets: expected to run from 0 to 53", "plain"),
    "value_state_not_increasing": (ArtifactContentError, "section value_state: expected strictly increasing", "plain"),
    "value_state_past_end": (ArtifactContentError, "section value_state: expected states from 0 up to 24", "plain"),
    "value_lcp_too_long": (ArtifactContentError, "section value_lcp: value 4 shares 1000 bytes", "plain"),
    "value_lcp_negative": (ArtifactContentError, "section value_lcp: expected 0 for the first value", "plain"),
    "values_not_utf8": (ArtifactContentError, "section state_byte: value 4 is not valid UTF-8", "lazy"),
    "values_out_of_order": (
        ArtifactContentError,
        "section state_byte: values 2 and 3 are not in strictly increasing",
        "lazy",
    ),
    "section_crc_mismatch": (ArtifactChecksumError, "section allowed_next: CRC-32 mismatch", "verify"),
    # schema tables, version 3 (from fixtures/golden/extraction-gpt2.triec) and the first layout (d19_*)
    "schema_no_slots": (ArtifactError, "'num_slots': a schema table holds at least one slot", "plain"),
    "schema_two_starts": (ArtifactError, "exactly one of 'start_slot' and 'start_grammar' is -1", "plain"),
    "schema_unknown_engine": (
        ArtifactError,
        "'engine': expected llguidance or xgrammar, found 'outlines-core'",
        "plain",
    ),
    "schema_version_3_masks": (ArtifactError, "format version 3 holds 'triec-schema' only", "plain"),
    "schema_entry_leaf_out_of_range": (
        ArtifactContentError,
        "section entry_leaf: slot 0: values must lie in 0..10",
        "plain",
    ),
    "schema_group_token_eos": (
        ArtifactContentError,
        "section group_tokens: slot 0 exits: ids must be content tokens",
        "plain",
    ),
    "schema_trie_target_out_of_range": (
        ArtifactContentError,
        "section group_target: slot 0 enters: a trie target",
        "plain",
    ),
    "schema_held_slot_out_of_range": (ArtifactContentError, "section grammar_slots: slots must lie in 0..1", "plain"),
    "schema_info_not_msgpack": (ArtifactContentError, "section info: not valid msgpack", "plain"),
    "schema_counts_disagree": (ArtifactContentError, "section slot_table: the slots' counts add up to 52", "plain"),
    "schema_group_tokens_not_ascending": (
        ArtifactContentError,
        "section group_tokens: slot 0 exits: ids must be strictly ascending",
        "verify",
    ),
    "schema_section_crc_mismatch": (ArtifactChecksumError, "section grammar_text: CRC-32 mismatch", "verify"),
    "d19_entry_row_out_of_range": (ArtifactContentError, "section entry_row: rows must lie in 15..22", "plain"),
    "d19_continuation_sha256_mismatch": (ArtifactError, "'continuation_sha256' does not match", "plain"),
}


def test_corpus_is_complete() -> None:
    on_disk = {p.stem for p in HOSTILE.glob("*.triec")}
    assert on_disk == set(CORPUS), "regenerate with tools/make_hostile.py and list every file here"


def _check_message(exc: BaseException, text: str, path: Path) -> None:
    message = str(exc)
    assert text in message
    assert str(path) in message, "the message names the file"
    assert "\n" not in message, "one line"


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_hostile_file(name: str) -> None:
    error, text, when = CORPUS[name]
    path = HOSTILE / f"{name}.triec"
    with pytest.raises(error) as info:
        triec.load(path, verify=True)
    _check_message(info.value, text, path)
    if when == "plain":
        with pytest.raises(error) as info:
            triec.load(path)
        _check_message(info.value, text, path)
        return
    table = triec.load(path)  # every index is in range: the plain load accepts it and can serve it
    if table.kind is triec.TableKind.TOOL_SCHEMA:
        table.vocabulary()  # binds the slots (a tail's rows are derived from the vocabulary)
        for slot in table.slots:  # each slot's trie answers, and its rows were built
            exercise(slot.trie)
            assert slot.words.offsets[-1] == slot.words.words.shape[0]
        return
    exercise(table, values_ok=when != "lazy")
    if when == "lazy":
        with pytest.raises(error) as info:
            table.values  # noqa: B018
        _check_message(info.value, text, path)


def test_hostile_files_fail_verify_cli(tmp_path: Path) -> None:
    """Through the CLI, a broken artifact is bad input: exit 2 and the one-line reason."""
    from typer.testing import CliRunner

    from triec.cli import app

    result = CliRunner().invoke(app, ["inspect", str(HOSTILE / "token_id_out_of_range.triec")])
    assert result.exit_code == 2
    assert "allowed_tokens" in result.output
    assert "Traceback" not in result.output


# ---------------------------------------------------------------- fuzzing


def exercise(table: triec.MaskTable, *, values_ok: bool = True) -> None:
    """Every runtime answer of a loaded table must work (the value bytes only when they are valid)."""
    out = np.zeros((min(table.num_states, 16), table.words_per_row), dtype=np.int32)
    table.fill_bitmask(np.arange(out.shape[0]), out)
    for s in range(table.num_states):
        ids = table.allowed(s)
        for t in ids[:3]:
            table.advance(s, int(t))
        table.is_accepting(s)
        if values_ok:
            table.prefix(s)
    if values_ok:
        assert len(table.values) == table.num_values


def mutations(data: bytes, rng: random.Random) -> bytes:
    kind = rng.randrange(6)
    buf = bytearray(data)
    if kind == 0:  # flip bits anywhere
        for _ in range(rng.randint(1, 4)):
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
    elif kind == 1:  # truncate
        del buf[rng.randrange(len(buf)) :]
    elif kind == 2:  # extend
        buf += bytes(rng.randrange(256) for _ in range(rng.randint(1, 100)))
    elif kind == 3:  # overwrite a run with random bytes
        at = rng.randrange(len(buf))
        for i in range(at, min(len(buf), at + rng.randint(1, 16))):
            buf[i] = rng.randrange(256)
    else:  # rewrite a header field with a hostile value and fix the header CRC
        head_len = struct.unpack_from("<I", data, 12)[0]
        header = msgpack.unpackb(data[PREAMBLE.size : PREAMBLE.size + head_len], raw=False)
        key = rng.choice(sorted(header))
        choices = [-1, 0, 1, 2**31, 2**63 - 1, "x", None, [], {}, True, 1.5, [2**40], {"a": 1}]
        if key == "sections" and rng.random() < 0.7:
            sec = rng.choice(header["sections"])
            sec[rng.choice(sorted(sec))] = rng.choice(choices)
        else:
            header[key] = rng.choice(choices)
        head = msgpack.packb(header, use_bin_type=True)
        data_start = (PREAMBLE.size + head_len + 63) // 64 * 64
        pre = struct.pack("<8sIIII", data[:8], 1, len(head), zlib.crc32(head), 0)
        body = pre + head
        body += bytes((len(body) + 63) // 64 * 64 - len(body))
        return bytes(body) + data[data_start:]
    return bytes(buf)


def test_fuzz_loader(vocabs: dict[str, triec.Vocabulary], tmp_path: Path) -> None:
    """Thousands of seeded mutations: each loads to a valid table or raises ArtifactError."""
    seeds = [
        encode_artifact(triec.compile(["get", "get_user", "héllo", "日本", ""], vocabs["gpt2"])),
        encode_artifact(triec.compile(triec.synthetic.sets.tool_names(50), vocabs["phi3"])),
        encode_artifact(triec.compile_ids([[5, 17, 300], [5, 17], [5, 18, 2], [9], [600, 1]], vocabs["gpt2"])),
    ]
    rng = random.Random(20261130)
    path = tmp_path / "fuzz.triec"
    outcomes = {"loaded": 0, "rejected": 0}
    for i in range(3000):
        data = mutations(seeds[i % len(seeds)], rng)
        path.write_bytes(data)
        for verify in (False, True):
            try:
                table = triec.load(path, verify=verify)
            except ArtifactError:
                outcomes["rejected"] += 1
                continue
            if verify:
                exercise(table)
            outcomes["loaded"] += 1
            del table
    assert outcomes["rejected"] > 1000 and outcomes["loaded"] > 100, outcomes
    # (3,000 mutations over three seeds: a byte trie, a larger one, and an ids table)


@pytest.mark.parametrize(
    "groups",
    [
        5,
        [],
        {"separator": 5, "count": 1},
        {"separator": "", "count": 1},
        {"separator": " > ", "count": -1},
        {"separator": "#", "count": 1},
        {"separator": " > ", "count": True},
    ],
)
def test_a_hostile_groups_field_loads_and_is_refused_where_read(tmp_path: Path, groups: object) -> None:
    """``build_options.groups`` (issue 52): the loader requires only that build_options is a map (docs/format.md),
    so a grouped table with a rewritten groups field loads; reading its groups raises ArtifactContentError, and
    ``triec inspect`` says so in one line, exit 2."""
    from artifact_mutations import Seed, repack
    from typer.testing import CliRunner

    from triec.cli import app
    from triec.compiler.groups import compile_grouped
    from triec.runtime.groups import group_labels

    table = compile_grouped(["a.x", "a.y", "b.z"], {"a.x": "a", "a.y": "a", "b.z": "b"}, "gpt2")
    seed = Seed(encode_artifact(table))
    header = seed.fresh_header()
    header["build_options"]["groups"] = groups
    path = tmp_path / "g.triec"
    path.write_bytes(repack(seed, header, seed.data[seed.data_start :]))
    loaded = triec.load(path, verify=True)
    with pytest.raises(ArtifactContentError):
        group_labels(loaded)
    res = CliRunner().invoke(app, ["inspect", str(path)])
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
