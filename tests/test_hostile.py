"""Hostile and broken artifacts: the loader raises ArtifactError and nothing else, whatever the bytes.

Two halves: a corpus of hand-made files in fixtures/hostile/ (one broken rule
each, made by scripts/make_hostile.py) with one test each, and a seeded fuzz
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
import triec.synthetic
from triec.artifact import PREAMBLE, encode_artifact
from triec.errors import ArtifactChecksumError, ArtifactError, ArtifactVersionError

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = ROOT / "fixtures" / "hostile"

# file -> (error class, text the message must contain, caught already by a plain load?)
CORPUS: dict[str, tuple[type[ArtifactError], str, bool]] = {
    "huge_header_length": (ArtifactError, "header length", True),
    "header_not_msgpack": (ArtifactError, "not valid msgpack", True),
    "header_crc_mismatch": (ArtifactChecksumError, "header CRC-32", True),
    "newer_version": (ArtifactVersionError, "format version 99 is newer", True),
    "wrong_magic": (ArtifactError, "magic", True),
    "reserved_nonzero": (ArtifactError, "reserved field", True),
    "truncated_in_section": (ArtifactError, "past the end of the file", True),
    "trailing_bytes": (ArtifactError, "file size", True),
    "overlapping_sections": (ArtifactError, "section allowed_tokens: offset expected", True),
    "offset_past_end": (ArtifactError, "section state_byte: offset expected", True),
    "misaligned_section": (ArtifactError, "64-byte aligned", True),
    "count_mismatch": (ArtifactError, "count expected", True),
    "count_overflow": (ArtifactError, "section allowed_next: field 'count'", True),
    "eos_out_of_range": (ArtifactError, "eos_token_ids", True),
    "bool_count": (ArtifactError, "num_values", True),
    "missing_section": (ArtifactError, "expected 6 sections", True),
    "wrong_dtype": (ArtifactError, "dtype expected <i4", True),
    "token_id_out_of_range": (ArtifactError, "section allowed_tokens: expected ids in 0..50256", False),
    "next_state_out_of_range": (ArtifactError, "section allowed_next", False),
    "offsets_not_monotone": (ArtifactError, "section allowed_offsets: expected non-decreasing", False),
    "values_not_utf8": (ArtifactError, "not valid UTF-8", False),
    "section_crc_mismatch": (ArtifactChecksumError, "section allowed_next: CRC-32 mismatch", False),
}


def test_corpus_is_complete() -> None:
    on_disk = {p.stem for p in HOSTILE.glob("*.triec")}
    assert on_disk == set(CORPUS), "regenerate with scripts/make_hostile.py and list every file here"


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_hostile_file(name: str) -> None:
    error, text, plain_catches = CORPUS[name]
    path = HOSTILE / f"{name}.triec"
    with pytest.raises(error) as info:
        triec.load(path, verify=True)
    message = str(info.value)
    assert text in message
    assert str(path) in message, "the message names the file"
    assert "\n" not in message, "one line"
    if plain_catches:
        with pytest.raises(error, match=text.replace("(", r"\(").split("'")[0][:20]):
            triec.load(path)
    else:
        triec.load(path)  # layout is intact: the plain (O(1)) load accepts it, verify=True does not


def test_hostile_files_fail_verify_cli(tmp_path: Path) -> None:
    """Through the CLI, a broken artifact is bad input: exit 2 and the one-line reason."""
    from typer.testing import CliRunner

    from triec.cli import app

    result = CliRunner().invoke(app, ["inspect", str(HOSTILE / "token_id_out_of_range.triec")])
    assert result.exit_code == 2
    assert "allowed_tokens" in result.output
    assert "Traceback" not in result.output


# ---------------------------------------------------------------- fuzzing


def exercise(table: triec.MaskTable) -> None:
    """Every runtime answer of a table that passed validation must work."""
    out = np.zeros((min(table.num_states, 16), table.words_per_row), dtype=np.int32)
    table.fill_bitmask(np.arange(out.shape[0]), out)
    for s in range(table.num_states):
        ids = table.allowed(s)
        for t in ids[:3]:
            table.advance(s, int(t))
        table.prefix(s)
        table.is_accepting(s)
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
        encode_artifact(triec.compile(triec.synthetic.tool_names(50), vocabs["phi3"])),
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
