"""The decoded-vocabulary cache: keyed by the tokenizer file's content; a damaged, foreign or stale entry never changes a result."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import zstandard

import triec
from triec.tokenizer import cache as vc
from triec.tokenizer.source import locate
from triec.tokenizer.token_bytes import decode_token_bytes


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("TRIEC_CACHE_DIR", str(d))
    return d


def decoded_directly(spec: str) -> list[bytes]:
    """The decode the cache stands for, done from the parsed JSON with nothing cached."""
    return decode_token_bytes(locate(spec).tokenizer_json, spec, [])[0]


def entries(cache: Path) -> list[Path]:
    return sorted((cache / "vocabularies").glob("*.npz"))


def test_first_load_writes_the_cache_atomically_and_the_second_reads_it(cache: Path) -> None:
    first = triec.Vocabulary.load("gpt2")
    (path,) = entries(cache)
    assert path.stat().st_size > 0
    assert not list((cache / "vocabularies").glob("*.tmp")), "temporary files must be renamed or removed"
    key = vc.cache_key(locate("gpt2"))
    hit = vc.load_cached(key)
    assert hit is not None and hit.token_bytes == decoded_directly("gpt2") and hit.family == "byte_level"
    second = triec.Vocabulary.load("gpt2")
    assert second.token_bytes == first.token_bytes and second.fingerprint == first.fingerprint
    assert second.eos_token_ids == (50256,) and second.family == "byte_level"


def test_eos_and_width_are_not_cached(cache: Path) -> None:
    """One entry serves every EOS choice and mask width: those come from the caller and the configs."""
    plain = triec.Vocabulary.load("gpt2")
    other = triec.Vocabulary.load("gpt2", eos_token_ids=[0], vocab_size=50304)
    assert len(entries(cache)) == 1
    assert other.eos_token_ids == (0,) and other.vocab_size == 50304
    assert other.token_bytes[0] == b"" and other.token_bytes[50256] == b""  # '!' is EOS; <|endoftext|> stays special
    assert other.token_bytes[1:50256] == plain.token_bytes[1:50256]


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_damaged_cache_is_rebuilt(cache: Path, damage: str) -> None:
    triec.Vocabulary.load("gpt2")
    (path,) = entries(cache)
    raw = bytearray(path.read_bytes())
    if damage == "truncate":
        raw = raw[: len(raw) // 2]
    elif damage == "flip":
        raw[len(raw) // 2] ^= 0x40  # inside the token bytes, past the zip headers
    elif damage == "garbage":
        raw = bytearray(os.urandom(4096))
    else:
        raw = bytearray()
    path.write_bytes(bytes(raw))
    key = vc.cache_key(locate("gpt2"))
    assert vc.load_cached(key) is None, "a damaged cache must not load"
    vocab = triec.Vocabulary.load("gpt2")
    assert list(vocab.token_bytes[:50256]) == decoded_directly("gpt2")[:50256]
    assert vc.load_cached(key) is not None, "the rebuild rewrites the cache"


def test_entry_of_another_tokenizer_is_not_used(cache: Path) -> None:
    """A file copied into another key's slot carries its own key and is refused."""
    triec.Vocabulary.load("gpt2")
    (src,) = entries(cache)
    qwen_key = vc.cache_key(locate("qwen2"))
    dst = vc._cache_path(qwen_key)
    dst.write_bytes(src.read_bytes())
    assert vc.load_cached(qwen_key) is None
    assert triec.Vocabulary.load("qwen2").num_tokens == 151646


def test_changed_file_at_the_same_path_is_decoded_afresh(cache: Path, tmp_path: Path) -> None:
    """Same path, same size, same modification time, one token renamed: the new bytes are served."""
    raw = zstandard.ZstdDecompressor().decompress(locate("gpt2").raw, max_output_size=1 << 30)
    path = tmp_path / "tok" / "tokenizer.json"
    path.parent.mkdir()
    path.write_bytes(raw)
    before = triec.Vocabulary.load(str(path))
    tid = json.loads(raw)["model"]["vocab"]["hello"]
    assert before.token_bytes[tid] == b"hello"
    stat = path.stat()
    changed = raw.replace(b'"hello":', b'"jello":', 1)
    assert len(changed) == len(raw) and changed != raw
    path.write_bytes(changed)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    after = triec.Vocabulary.load(str(path))
    assert after.token_bytes[tid] == b"jello"
    assert after.fingerprint != before.fingerprint
    assert len(entries(cache)) == 2


def test_decoder_change_invalidates_entries(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = locate("gpt2")
    key = vc.cache_key(src)
    triec.Vocabulary.load("gpt2")
    assert vc.load_cached(key) is not None
    monkeypatch.setattr(vc, "_decoder_digest", lambda: "another-decoder")
    assert vc.cache_key(src) != key and vc.load_cached(vc.cache_key(src)) is None


def test_leftover_temporary_file_is_ignored(cache: Path) -> None:
    """A writer killed mid-write leaves only a *.tmp file, which readers never open."""
    key = vc.cache_key(locate("gpt2"))
    path = vc._cache_path(key)
    path.parent.mkdir(parents=True)
    (path.parent / (path.name + ".12345.tmp")).write_bytes(b"partial")
    assert vc.load_cached(key) is None
    assert list(triec.Vocabulary.load("gpt2").token_bytes[:50256]) == decoded_directly("gpt2")[:50256]


def test_unwritable_cache_dir_still_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    monkeypatch.setenv("TRIEC_CACHE_DIR", str(blocker))
    assert list(triec.Vocabulary.load("gpt2").token_bytes[:50256]) == decoded_directly("gpt2")[:50256]


def test_eos_name_outside_the_added_tokens_falls_back_to_the_json(cache: Path, tmp_path: Path) -> None:
    """tokenizer_config.json may name an EOS that is an ordinary vocabulary piece: the cached lookup defers to the JSON."""
    raw = zstandard.ZstdDecompressor().decompress(locate("gpt2").raw, max_output_size=1 << 30)
    d = tmp_path / "tok"
    d.mkdir()
    (d / "tokenizer.json").write_bytes(raw)
    (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": "hello"}))
    tid = json.loads(raw)["model"]["vocab"]["hello"]
    for _ in range(2):  # decoded, then cached
        vocab = triec.Vocabulary.load(str(d))
        assert vocab.eos_token_ids == (tid,) and vocab.token_bytes[tid] == b""


@pytest.mark.parametrize("eos", [None, [0], [5, 7, 100, 30000], [3, 160000]])
def test_packed_vocabulary_equals_the_list_one(eos: list[int] | None) -> None:
    """Vocabulary.load keeps the bytes packed until asked; its fingerprint and bytes are those of the list form."""
    from triec.tokenizer.vocabulary import fingerprint_token_bytes

    for spec in ("gpt2", "qwen2"):
        packed = triec.Vocabulary.load(spec, eos_token_ids=eos, vocab_size=170_000 if eos and 160000 in eos else None)
        fp = packed.fingerprint  # computed before any bytes object exists
        listed = triec.Vocabulary(packed.token_bytes, eos_token_ids=packed.eos_token_ids, vocab_size=packed.vocab_size)
        assert fp == listed.fingerprint == fingerprint_token_bytes(listed.token_bytes)
        assert packed.num_tokens == len(listed.token_bytes) and all(
            packed.token_bytes[e] == b"" for e in packed.eos_token_ids if e < packed.num_tokens
        )
