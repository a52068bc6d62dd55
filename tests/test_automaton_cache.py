"""The per-tokenizer automaton cache: a damaged or foreign cache never changes a result."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import triec
from triec.synthetic.sets import tool_names
from triec.tokenizer import automaton as am


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TRIEC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(am, "_MEMORY", {})
    return tmp_path


def fresh_vocab() -> triec.Vocabulary:
    return triec.Vocabulary.load("gpt2")  # a new object: no automaton attached yet


def arrays(table: triec.MaskTable) -> tuple[np.ndarray, ...]:
    return (table.allowed_offsets, table.allowed_tokens, table.allowed_next)


VALUES = tool_names(300)


def expected() -> tuple[np.ndarray, ...]:
    return arrays(triec.compile(VALUES, fresh_vocab(), implementation="reference"))


def cache_file(cache: Path) -> Path:
    (path,) = (cache / "automata").glob("*.npz")
    return path


def test_first_compile_writes_the_cache_atomically(cache: Path) -> None:
    table = triec.compile(VALUES, fresh_vocab())
    path = cache_file(cache)
    assert path.stat().st_size > 0
    assert not list((cache / "automata").glob("*.tmp")), "temporary files must be renamed or removed"
    assert am.load_cached(fresh_vocab().fingerprint) is not None
    for a, b in zip(arrays(table), expected(), strict=False):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_damaged_cache_is_rebuilt(cache: Path, damage: str) -> None:
    triec.compile(VALUES, fresh_vocab())
    path = cache_file(cache)
    raw = bytearray(path.read_bytes())
    if damage == "truncate":
        raw = raw[: len(raw) // 2]
    elif damage == "flip":
        raw[len(raw) * 3 // 4] ^= 0x40  # inside the array data, past the zip headers
    elif damage == "garbage":
        raw = bytearray(os.urandom(4096))
    else:
        raw = bytearray()
    path.write_bytes(bytes(raw))
    fp = fresh_vocab().fingerprint
    assert am.load_cached(fp) is None, "a damaged cache must not load"
    am._MEMORY.clear()
    table = triec.compile(VALUES, fresh_vocab())
    for a, b in zip(arrays(table), expected(), strict=False):
        assert np.array_equal(a, b)
    assert am.load_cached(fp) is not None, "the rebuild rewrites the cache"


def test_cache_of_another_vocabulary_is_not_used(cache: Path) -> None:
    """A file renamed into another fingerprint's slot carries its own fingerprint and is refused."""
    gpt2 = fresh_vocab()
    triec.compile(VALUES, gpt2)
    other = triec.Vocabulary.load("gpt2", eos_token_ids=[0])  # '!' becomes EOS: another vocabulary
    assert other.fingerprint != gpt2.fingerprint
    src = cache_file(cache)
    dst = am._cache_path(other.fingerprint)
    dst.write_bytes(src.read_bytes())
    assert am.load_cached(other.fingerprint) is None
    table = triec.compile(["!x", "x!"], other)
    ref = triec.compile(["!x", "x!"], other, implementation="reference")
    for a, b in zip(arrays(table), arrays(ref), strict=False):
        assert np.array_equal(a, b)


def test_leftover_temporary_file_is_ignored(cache: Path) -> None:
    """A writer killed mid-write leaves only a *.tmp file, which readers never open."""
    fp = fresh_vocab().fingerprint
    path = am._cache_path(fp)
    path.parent.mkdir(parents=True)
    (path.parent / (path.name + ".12345.tmp")).write_bytes(b"partial")
    assert am.load_cached(fp) is None
    table = triec.compile(VALUES, fresh_vocab())
    for a, b in zip(arrays(table), expected(), strict=False):
        assert np.array_equal(a, b)


def test_unwritable_cache_dir_still_compiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    monkeypatch.setenv("TRIEC_CACHE_DIR", str(blocker))
    monkeypatch.setattr(am, "_MEMORY", {})
    table = triec.compile(VALUES, fresh_vocab())
    for a, b in zip(arrays(table), expected(), strict=False):
        assert np.array_equal(a, b)
