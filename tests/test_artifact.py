"""The artifact file: determinism, atomic writes, layout, load-time checks, and a golden file."""

from __future__ import annotations

import hashlib
import os
import random
import struct
import zlib
from pathlib import Path

import msgpack
import numpy as np
import pytest

import triec
from triec.artifact.container import ALIGN, FORMAT_VERSION, MAGIC, PLAIN_FORMAT_VERSION, PREAMBLE, ZSTD_MAGIC
from triec.artifact.masks import SECTIONS, encode_artifact

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "fixtures" / "golden" / "tiny-gpt2.triec"
GOLDEN_README = ROOT / "fixtures" / "golden" / "README.md"
# Keep in step with VALUES in tools/make_golden.py.
GOLDEN_VALUES = ["get", "get_user", "list_files", "h\u00e9llo", ""]

VALUES = ["get", "get_user", "get_users", "list_files", "h\u00e9llo", "\u65e5\u672c", "a b", ""]


@pytest.fixture(scope="module")
def gpt2(vocabs: dict[str, triec.Vocabulary]) -> triec.Vocabulary:
    return vocabs["gpt2"]


@pytest.fixture(scope="module")
def table(gpt2: triec.Vocabulary) -> triec.MaskTable:
    return triec.compile(VALUES, gpt2)


@pytest.fixture
def saved(tmp_path: Path, table: triec.MaskTable) -> Path:
    path = tmp_path / "t.triec"
    table.save(path)
    return path


def parse_header(data: bytes) -> tuple[dict, int]:
    _magic, _version, head_len, _head_crc, _reserved = PREAMBLE.unpack_from(data, 0)
    head = data[PREAMBLE.size : PREAMBLE.size + head_len]
    return msgpack.unpackb(head, raw=False), (PREAMBLE.size + head_len + ALIGN - 1) // ALIGN * ALIGN


def section_span(data: bytes, name: str) -> tuple[int, int]:
    header, data_start = parse_header(data)
    (sec,) = [s for s in header["sections"] if s["name"] == name]
    start = data_start + sec["offset"]
    return start, start + sec["length"]


def same_answers(a: triec.MaskTable, b: triec.MaskTable) -> None:
    assert a.num_states == b.num_states
    assert a.values == b.values
    for s in range(a.num_states):
        allowed = a.allowed(s)
        assert allowed.tolist() == b.allowed(s).tolist(), s
        for t in allowed.tolist():
            assert a.advance(s, t) == b.advance(s, t), (s, t)


# ----------------------------------------------------------------- determinism


def test_same_values_same_bytes(gpt2: triec.Vocabulary, tmp_path: Path) -> None:
    first = triec.compile(VALUES, gpt2)
    second = triec.compile(list(VALUES), triec.Vocabulary.load("gpt2"))
    assert encode_artifact(first) == encode_artifact(second)
    first.save(tmp_path / "1.triec")
    second.save(tmp_path / "2.triec")
    assert (tmp_path / "1.triec").read_bytes() == (tmp_path / "2.triec").read_bytes()


def test_order_and_duplicates_do_not_change_bytes(gpt2: triec.Vocabulary, table: triec.MaskTable) -> None:
    shuffled = VALUES * 3
    random.Random(7).shuffle(shuffled)
    assert encode_artifact(triec.compile(shuffled, gpt2)) == encode_artifact(table)
    assert encode_artifact(triec.compile(reversed(VALUES), gpt2)) == encode_artifact(table)


def test_different_values_different_bytes(gpt2: triec.Vocabulary, table: triec.MaskTable) -> None:
    assert encode_artifact(triec.compile([*VALUES, "x"], gpt2)) != encode_artifact(table)


def test_saved_file_is_the_encoding(saved: Path, table: triec.MaskTable) -> None:
    data = saved.read_bytes()
    assert data == encode_artifact(table)
    assert table.save(saved.with_name("again.triec")) == len(data)


# ----------------------------------------------------------------- atomic writes


def test_failed_save_into_missing_directory_leaves_nothing(tmp_path: Path, table: triec.MaskTable) -> None:
    with pytest.raises(triec.OutputError, match="missing does not exist"):
        table.save(tmp_path / "missing" / "t.triec")
    assert list(tmp_path.iterdir()) == []


def test_save_refuses_directories_and_special_files(tmp_path: Path, table: triec.MaskTable) -> None:
    target = tmp_path / "t.triec"
    target.mkdir()
    (target / "keep").write_text("x")
    with pytest.raises(triec.OutputError, match="is a directory"):
        table.save(target)
    assert [p.name for p in target.iterdir()] == ["keep"]
    fifo = tmp_path / "fifo.triec"
    os.mkfifo(fifo)  # stands in for /dev/null: renaming over a device as root would replace it
    with pytest.raises(triec.OutputError, match="not a regular file; refusing to replace it"):
        table.save(fifo)
    assert fifo.is_fifo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo.triec", "t.triec"]


def test_failed_rename_removes_the_temporary_file(
    tmp_path: Path, table: triec.MaskTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rename fails after the temporary file is written (as on a full disk): nothing is left."""

    def refuse(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(triec.OutputError, match="cannot write \\(No space left on device\\)"):
        table.save(tmp_path / "t.triec")
    assert list(tmp_path.iterdir()) == []


def test_target_is_replaced_whole(saved: Path, table: triec.MaskTable, gpt2: triec.Vocabulary) -> None:
    # A larger old file: an in-place rewrite would leave its tail behind.
    saved.write_bytes(b"\xaa" * 50_000)
    with saved.open("rb") as old:
        old_inode = os.fstat(old.fileno()).st_ino
        size = table.save(saved)
        # The open handle still reads the old file: the new one was renamed into place.
        assert old.read() == b"\xaa" * 50_000
    data = saved.read_bytes()
    assert len(data) == size < 50_000
    assert data == encode_artifact(table)
    assert saved.stat().st_ino != old_inode
    assert sorted(p.name for p in saved.parent.iterdir()) == [saved.name]
    assert saved.stat().st_mode & 0o777 == 0o644


# ----------------------------------------------------------------- no pickles


def test_no_pickle_anywhere(saved: Path) -> None:
    data = saved.read_bytes()
    assert data[:1] != b"\x80"  # pickle protocol 2+ opcode PROTO
    assert not data.startswith(b"\x93NUMPY")  # .npy (whose object arrays pickle)
    assert not data.startswith(b"PK")  # .npz
    head_len = PREAMBLE.unpack_from(data, 0)[2]

    def no_ext(code: int, payload: bytes) -> None:
        raise AssertionError(f"msgpack extension type {code} in the header")

    header = msgpack.unpackb(data[PREAMBLE.size : PREAMBLE.size + head_len], raw=False, ext_hook=no_ext)
    assert isinstance(header, dict)
    table = triec.load(saved, verify=True)
    assert all(getattr(table, name).dtype != object for name, _ in SECTIONS)


# ----------------------------------------------------------------- layout


def test_layout(saved: Path, table: triec.MaskTable) -> None:
    data = saved.read_bytes()
    assert data[:8] == MAGIC == b"\x89TRIEC\r\n"
    assert struct.unpack_from("<I", data, 8)[0] == PLAIN_FORMAT_VERSION == 1  # raw values: unchanged since version 1
    head_len, head_crc, reserved = struct.unpack_from("<III", data, 12)
    assert reserved == 0
    head = data[24 : 24 + head_len]
    assert zlib.crc32(head) == head_crc
    header, data_start = parse_header(data)
    assert data_start % 64 == 0
    assert data[24 + head_len : data_start] == bytes(data_start - 24 - head_len)

    assert header["format"] == "triec-masks"
    assert header["triec_version"] == triec.__version__
    assert header["tokenizer"] == {"name": "gpt2", "fingerprint": table.tokenizer_fingerprint}
    assert header["vocab_size"] == 50257
    assert header["eos_token_ids"] == [50256]
    assert header["num_values"] == len(VALUES)
    assert header["num_states"] == table.num_states
    assert header["num_allowed"] == table.num_allowed

    sections = header["sections"]
    assert [s["name"] for s in sections] == [name for name, _ in SECTIONS]
    end = data_start
    for sec, (name, dtype) in zip(sections, SECTIONS, strict=False):
        assert sec["offset"] % 64 == 0, name
        start = data_start + sec["offset"]
        assert start % 64 == 0
        assert start >= end
        assert data[end:start] == bytes(start - end)  # zero padding between sections
        raw = data[start : start + sec["length"]]
        array = getattr(table, name)
        assert sec["dtype"] == dtype
        assert sec["count"] == array.shape[0]
        assert raw == np.ascontiguousarray(array, dtype=np.dtype(dtype)).tobytes()
        assert sec["crc32"] == zlib.crc32(raw)
        end = start + sec["length"]
    assert end == len(data)  # the file ends where the last section ends


def test_load_answers_like_the_compiled_table(saved: Path, table: triec.MaskTable) -> None:
    loaded = triec.load(saved, verify=True)
    assert loaded.values == VALUES_SORTED
    assert loaded.eos_token_ids == (50256,)
    assert loaded.tokenizer_fingerprint == table.tokenizer_fingerprint
    assert loaded.tokenizer_name == "gpt2"
    assert loaded.source == str(saved)
    same_answers(loaded, table)


VALUES_SORTED = sorted(VALUES, key=lambda v: v.encode("utf-8"))


def test_zstd_round_trip(tmp_path: Path, table: triec.MaskTable) -> None:
    path = tmp_path / "t.triec.zst"
    size = table.save(path)
    data = path.read_bytes()
    assert data.startswith(ZSTD_MAGIC) and len(data) == size
    same_answers(triec.load(path, verify=True), table)


# ----------------------------------------------------------------- load errors


def rewrite(path: Path, data: bytes | bytearray) -> Path:
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("keep", [0, 10, 23, 24, 100, -64, -1])
def test_truncated_file(saved: Path, keep: int) -> None:
    data = saved.read_bytes()
    rewrite(saved, data[:keep])
    with pytest.raises(triec.ArtifactError, match=str(saved)):
        triec.load(saved)


def test_every_truncation_is_an_artifact_error(saved: Path) -> None:
    data = saved.read_bytes()
    for keep in range(0, len(data), 7):
        rewrite(saved, data[:keep])
        with pytest.raises(triec.ArtifactError):
            triec.load(saved)


def test_trailing_bytes(saved: Path) -> None:
    rewrite(saved, saved.read_bytes() + b"\x00")
    with pytest.raises(triec.ArtifactError, match="file size"):
        triec.load(saved)


def test_wrong_magic(saved: Path) -> None:
    data = bytearray(saved.read_bytes())
    data[1:6] = b"TRIEX"
    rewrite(saved, data)
    with pytest.raises(triec.ArtifactError, match="not a triec artifact") as info:
        triec.load(saved)
    assert not isinstance(info.value, triec.ArtifactVersionError)


def test_not_an_artifact(tmp_path: Path) -> None:
    with pytest.raises(triec.ArtifactError, match="magic"):
        triec.load(rewrite(tmp_path / "x.triec", b'{"json": "not an artifact"}'))
    with pytest.raises(triec.ArtifactError, match="cannot read"):
        triec.load(tmp_path / "missing.triec")


def test_newer_version(saved: Path) -> None:
    data = bytearray(saved.read_bytes())
    struct.pack_into("<I", data, 8, FORMAT_VERSION + 1)
    rewrite(saved, data)
    with pytest.raises(triec.ArtifactVersionError, match=rf"version {FORMAT_VERSION + 1} is newer"):
        triec.load(saved)


def test_older_unknown_version_is_not_a_version_error(saved: Path) -> None:
    data = bytearray(saved.read_bytes())
    struct.pack_into("<I", data, 8, 0)
    rewrite(saved, data)
    with pytest.raises(triec.ArtifactError) as info:
        triec.load(saved)
    assert not isinstance(info.value, triec.ArtifactVersionError)


@pytest.mark.parametrize("name", [name for name, _ in SECTIONS])
def test_flipped_section_byte_detected_by_verify(saved: Path, name: str) -> None:
    data = bytearray(saved.read_bytes())
    start, end = section_span(bytes(data), name)
    assert end > start
    data[(start + end) // 2] ^= 0x01
    rewrite(saved, data)
    with pytest.raises(triec.ArtifactChecksumError, match=f"section {name}: CRC-32 mismatch"):
        triec.load(saved, verify=True)


def test_flipped_header_byte(saved: Path) -> None:
    data = bytearray(saved.read_bytes())
    data[PREAMBLE.size + 5] ^= 0x20
    rewrite(saved, data)
    with pytest.raises(triec.ArtifactChecksumError, match="header CRC-32 mismatch"):
        triec.load(saved)  # checked on every load, not only with verify=True


def test_header_crc_field_mismatch(saved: Path) -> None:
    data = bytearray(saved.read_bytes())
    crc = struct.unpack_from("<I", data, 16)[0]
    struct.pack_into("<I", data, 16, crc ^ 0xDEADBEEF)
    rewrite(saved, data)
    with pytest.raises(triec.ArtifactChecksumError, match="header CRC-32 mismatch"):
        triec.load(saved)


def test_consistent_but_wrong_header_is_rejected(saved: Path) -> None:
    """A header with a valid CRC but a wrong count is a layout error, not a crash."""
    data = saved.read_bytes()
    header, _ = parse_header(data)
    header["num_states"] += 1
    head = msgpack.packb(header, use_bin_type=True)
    old_len = PREAMBLE.unpack_from(data, 0)[2]
    assert len(head) == old_len
    forged = PREAMBLE.pack(MAGIC, PLAIN_FORMAT_VERSION, len(head), zlib.crc32(head), 0) + head + data[24 + old_len :]
    rewrite(saved, forged)
    with pytest.raises(triec.ArtifactError, match="allowed_offsets"):
        triec.load(saved)


# ----------------------------------------------------------------- tokenizer identity


def test_expect_fingerprint(saved: Path, table: triec.MaskTable, vocabs: dict[str, triec.Vocabulary]) -> None:
    assert triec.load(saved, expect_fingerprint=table.tokenizer_fingerprint).num_values == len(VALUES)
    with pytest.raises(triec.TokenizerMismatch) as info:
        triec.load(saved, expect_fingerprint=vocabs["qwen2"].fingerprint)
    assert table.tokenizer_fingerprint in str(info.value)
    assert vocabs["qwen2"].fingerprint in str(info.value)
    assert isinstance(info.value, triec.ArtifactError)


def test_check_tokenizer(saved: Path, vocabs: dict[str, triec.Vocabulary]) -> None:
    loaded = triec.load(saved)
    loaded.check_tokenizer(vocabs["gpt2"])
    loaded.check_tokenizer(vocabs["gpt2"].fingerprint)
    for other in ("qwen2", "phi3"):
        with pytest.raises(triec.TokenizerMismatch, match="compiled for tokenizer"):
            loaded.check_tokenizer(vocabs[other])
    with pytest.raises(triec.TokenizerMismatch):
        loaded.check_tokenizer(triec.Vocabulary.load("gpt2", eos_token_ids=[50256, 13]))


# ----------------------------------------------------------------- golden file


def test_golden_file_bytes(tmp_path: Path, gpt2: triec.Vocabulary) -> None:
    """The writer's output for a fixed input is pinned; see fixtures/golden/README.md."""
    fresh = triec.compile(GOLDEN_VALUES, gpt2)
    path = tmp_path / "tiny-gpt2.triec"
    fresh.save(path)
    golden = GOLDEN.read_bytes()
    assert path.read_bytes() == golden, "artifact bytes changed: see fixtures/golden/README.md"


def test_golden_file_answers(gpt2: triec.Vocabulary) -> None:
    fresh = triec.compile(GOLDEN_VALUES, gpt2)
    golden = triec.load(GOLDEN, verify=True, expect_fingerprint=gpt2.fingerprint)
    assert golden.values == ["", "get", "get_user", "h\u00e9llo", "list_files"]
    assert golden.is_accepting(golden.start)
    assert golden.num_states == fresh.num_states == 1 + 3 + 5 + 6 + 10
    same_answers(golden, fresh)


def test_golden_readme_matches_the_file() -> None:
    text = GOLDEN_README.read_text(encoding="utf-8")
    assert hashlib.sha256(GOLDEN.read_bytes()).hexdigest() in text
    assert "tools/make_golden.py" in text
