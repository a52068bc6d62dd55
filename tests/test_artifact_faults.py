"""Served artifacts under file faults (issue 22): replaced by rename, overwritten in place, truncated, deleted,
a half-written file appearing.

The serving store (:class:`triec.integrations.vllm.batch.ArtifactStore`, which the
vLLM processors and the structured-outputs backend both use) reads each version
into private memory: a table handed to a request keeps working whatever happens
to its file, new requests get the new version or a :class:`RequestError` (HTTP
400), and nothing faults. The truncation cases run in a subprocess, to show the
process survives where a mapped ``triec.load`` dies with SIGBUS. No engine needed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import triec
from triec.errors import ArtifactChecksumError, RequestError
from triec.integrations import serving
from triec.integrations.vllm import batch as vllm_batch

OLD = ["red", "green", "blue", "yellow", "purple"]
NEW = ["circle", "square", "triangle"]
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def blobs(qwen2: triec.Vocabulary, tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    d = tmp_path_factory.mktemp("blobs")
    out = {}
    for name, values in (("old", OLD), ("new", NEW)):
        triec.compile(values, qwen2).save(d / f"{name}.triec")
        out[name] = (d / f"{name}.triec").read_bytes()
    return out


def walk_value(table, rng: np.random.Generator) -> str:
    """A random walk over the table's masks to a complete value (touches masks, transitions, value bytes)."""
    state, tokens = table.start, []
    eos = set(table.eos_token_ids)
    for _ in range(64):
        allowed = [int(t) for t in table.allowed(state)]
        content = [t for t in allowed if t not in eos]
        if table.is_accepting(state) and (not content or rng.random() < 0.5):
            return table.value(state)
        t = int(rng.choice(content))
        tokens.append(t)
        state = table.advance(state, t)
    raise AssertionError("no value within 64 tokens")


def settle(path: Path) -> None:
    """Date the file back past the store's settling window (as a file written a while ago)."""
    old = time.time() - 10 * serving.SETTLE_S
    os.utime(path, (old, old))


@pytest.fixture
def store(tmp_path: Path, blobs) -> serving.ArtifactStore:
    (tmp_path / "colors.triec").write_bytes(blobs["old"])
    settle(tmp_path / "colors.triec")
    return serving.ArtifactStore(tmp_path)


def served(store: serving.ArtifactStore, name: str = "colors") -> set[str]:
    return set(store.table(name).values)


def test_rename_replace(store, blobs, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    old = store.table("colors")
    tmp = tmp_path / ".colors.tmp"
    tmp.write_bytes(blobs["new"])
    os.replace(tmp, tmp_path / "colors.triec")
    assert served(store) == set(NEW)
    assert all(walk_value(old, rng) in OLD for _ in range(20))  # the in-flight request's table is intact


@pytest.mark.parametrize("young", [False, True], ids=["settled", "young"])
def test_overwrite_in_place(store, blobs, tmp_path: Path, young: bool) -> None:
    rng = np.random.default_rng(1)
    path = tmp_path / "colors.triec"
    old = store.table("colors")
    ino = path.stat().st_ino
    with open(path, "r+b") as fh:  # the same inode: a mapping would see the new bytes
        fh.write(blobs["new"])
        fh.truncate()
    assert path.stat().st_ino == ino
    if not young:
        settle(path)
    assert served(store) == set(NEW)
    assert all(walk_value(old, rng) in OLD for _ in range(20))


def test_truncate_then_rewrite(store, blobs, tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    path = tmp_path / "colors.triec"
    old = store.table("colors")
    for size in (0, 100, len(blobs["old"]) // 2):
        os.truncate(path, size)
        with pytest.raises(RequestError, match=r"not a valid triec artifact|is empty"):
            store.table("colors")
        assert all(walk_value(old, rng) in OLD for _ in range(10))
    path.write_bytes(blobs["new"])
    assert served(store) == set(NEW)


def test_delete_then_recreate(store, blobs, tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    old = store.table("colors")
    _sub_key, _ = store.resolve(serving.TriecRequest("colors", ("blue", "red")))
    (tmp_path / "colors.triec").unlink()
    with pytest.raises(RequestError, match="no artifact named 'colors'"):
        store.table("colors")
    assert not store._tables and not store._subsets  # dropped: nothing of a deleted file is kept
    assert all(walk_value(old, rng) in OLD for _ in range(20))
    (tmp_path / "colors.triec").write_bytes(blobs["new"])
    assert served(store) == set(NEW)


def test_half_written_file_appearing(store, blobs, tmp_path: Path) -> None:
    path = tmp_path / "fresh.triec"
    data = blobs["new"]
    with open(path, "wb") as fh:
        fh.write(data[: len(data) // 2])
        fh.flush()
        with pytest.raises(RequestError, match="'fresh' is not a valid triec artifact"):
            store.table("fresh")
        fh.write(data[len(data) // 2 :])
    assert served(store, "fresh") == set(NEW)  # a young failure is not remembered: the finished file is served
    assert served(store) == set(OLD)  # the others are untouched


def test_corrupt_settled_file_is_refused_until_it_changes(store, blobs, tmp_path: Path) -> None:
    path = tmp_path / "colors.triec"
    bad = bytearray(blobs["new"])
    bad[-10] ^= 0xFF  # a flipped byte in the last section: only its CRC-32 tells
    path.write_bytes(bytes(bad))
    settle(path)
    for _ in range(2):  # the second answer comes from the remembered failure
        with pytest.raises(RequestError, match="CRC-32 mismatch"):
            store.table("colors")
    path.write_bytes(blobs["new"])
    assert served(store) == set(NEW)


def test_subsets_of_a_replaced_version_are_dropped(store, blobs, tmp_path: Path) -> None:
    for subset in (("blue", "red"), ("green",), ("purple", "yellow")):
        store.resolve(serving.TriecRequest("colors", subset))
    assert len(store._subsets) == 3
    os.replace(_write(tmp_path / ".t", blobs["new"]), tmp_path / "colors.triec")
    key, sub = store.resolve(serving.TriecRequest("colors", ("square",)))
    assert set(sub.values) == {"square"} and list(store._subsets) == [key]


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_engine_rows_keep_their_table(store, blobs, tmp_path: Path, qwen2: triec.Vocabulary) -> None:
    """The processors' batch: a row started before a fault finishes on its table; a row started after ends at once."""
    torch = pytest.importorskip("torch")
    batch = vllm_batch.BatchState(store, torch.device("cpu"), 4, qwen2.eos_token_ids)
    batch.assign(0, serving.TriecRequest("colors"))
    os.truncate(tmp_path / "colors.triec", 64)
    batch.assign(1, serving.TriecRequest("colors"))
    assert batch.group[1] == vllm_batch.EOS_ONLY  # its artifact broke between admission and the engine: ends with EOS
    assert "colors" not in store._tables  # the broken version is not kept
    logits = torch.zeros(1, qwen2.vocab_size)
    text = b""
    for _ in range(16):
        logits.zero_()
        batch.mask(logits, np.array([0]), np.array([0]))
        allowed = torch.nonzero(logits[0] > float("-inf")).flatten().tolist()
        content = [t for t in allowed if t not in qwen2.eos_token_ids]
        if not content:
            break
        tok = max(content)
        text += qwen2.token_bytes[tok]
        batch.advance(np.array([0]), torch.tensor([tok]))
    assert text.decode() in OLD, text


TRUNCATE = textwrap.dedent(
    """
    import os, sys
    import triec
    from triec.integrations import serving
    path, mode = sys.argv[1], sys.argv[2]
    if mode == "store":
        table = serving.ArtifactStore(os.path.dirname(path)).table("colors")
    else:
        table = triec.load(path, copy=(mode == "copy"))
    os.truncate(path, 0)
    print(sorted(table.values), sum(len(table.allowed(s)) for s in range(table.num_states)))
    """
)


@pytest.mark.parametrize("mode", ["store", "copy", "mmap"])
def test_truncation_in_a_subprocess(tmp_path: Path, blobs, mode: str) -> None:
    """The store and ``triec.load(copy=True)`` survive a truncation; a mapped ``triec.load`` dies with SIGBUS."""
    path = tmp_path / "colors.triec"
    path.write_bytes(blobs["old"])
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [sys.executable, "-c", TRUNCATE, str(path), mode], capture_output=True, text=True, timeout=120, env=env
    )
    if mode == "mmap":
        assert proc.returncode == -signal.SIGBUS, (proc.returncode, proc.stderr[-2000:])
    else:
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert str(sorted(OLD)) in proc.stdout


def test_load_copy_checks_crcs(tmp_path: Path, blobs) -> None:
    bad = bytearray(blobs["old"])
    bad[-10] ^= 0xFF
    (tmp_path / "bad.triec").write_bytes(bytes(bad))
    with pytest.raises(ArtifactChecksumError):
        triec.load(tmp_path / "bad.triec", copy=True)
    assert triec.load(tmp_path / "bad.triec").num_values == len(OLD)  # mapped: the sections' CRCs are not read
