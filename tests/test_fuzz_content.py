"""Content fuzzing: corrupt the ARRAY SECTIONS, then either the load refuses or every query answers.

tests/test_hostile.py mutates whole files (mostly the header and the layout).
This module aims at what a plain load used to trust: one to three aligned int32
words of the sections overwritten with hostile values (0x7FFFFFFF, 0xFFFFFFFF,
the mask width, the state and pair counts and their neighbours, ...) or one bit
flipped anywhere past the header. Half the mutations leave the section CRCs
stale, half recompute them, so that the content checks, not the checksum, are
what must catch a bad index.

The property, for every mutation: ``triec.load(path)`` raises
``triec.ArtifactError``, or the table answers every public query on every
state in range (allowed, advance, is_accepting, value, values, prefix,
fill_bitmask, the mask writer, restrict and its view, and on a subsample
``to_torch`` with the device table's fill / advance / mask_logits on CPU
tensors, FINISHED / INVALID / out-of-range rows included) raising nothing but
the documented errors: ``TokenNotAllowed`` for a token the state does not
allow, and ``ArtifactContentError`` from the value bytes, which are checked
lazily (order and UTF-8). Every answer is in range: token ids below the mask
width, states below the state count.
"""

from __future__ import annotations

import collections
import contextlib
import os
import random
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from artifact_mutations import Seed, flip_bit, overwrite_words, with_section_crcs

import triec
import triec.synthetic.sets
from triec.artifact.masks import encode_artifact
from triec.errors import ArtifactContentError, ArtifactError

MUTATIONS = int(os.environ.get("TRIEC_FUZZ_MUTATIONS", 10_000))
TORCH_EVERY = 20  # the device table is built for every 20th table that loads (a few ms each)


def seed_of(table: triec.MaskTable) -> Seed:
    """A mask table's artifact, its hostile words the counts of this format (S, P, K, the width, and neighbours)."""
    seed = Seed(encode_artifact(table))
    h = seed.header
    s, p, k, v = h["num_states"], h["num_allowed"], h["num_values"], h["vocab_size"]
    seed.hostile = sorted(
        {0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFE, 0xFFFF, 0x10000}
        | {x & 0xFFFFFFFF for n in (s, p, k, v, 32 * ((v + 31) // 32)) for x in (n - 1, n, n + 1)}
    )
    return seed


def mutate(seed: Seed, rng: random.Random) -> tuple[bytes, str, bool]:
    """(bytes, description, CRCs recomputed?)."""
    buf = bytearray(seed.data)
    what = overwrite_words(seed, buf, rng) if rng.random() < 0.6 else flip_bit(seed, buf, rng)
    recompute = rng.random() < 0.5
    if not recompute:
        return bytes(buf), what + ", CRCs stale", False
    return with_section_crcs(seed, buf), what + ", CRCs recomputed", True


def target(what: str) -> str:
    """'words allowed_next' / 'bit state_byte' / 'bit padding': what a mutation hit."""
    if what.startswith("words "):
        return "words " + what[len("words ") :].split("[")[0]
    return "bit " + what.split("(")[1].split(")")[0]


# ---------------------------------------------------------------- the property


def lazily(fn: Any, *args: Any) -> Any:
    """Call a query that may read the value bytes: their lazy check may raise ArtifactContentError."""
    try:
        return fn(*args)
    except ArtifactContentError as exc:
        assert "section state_byte" in str(exc)
        return None


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def exercise(table: triec.MaskTable, rng: random.Random, *, device: str | None) -> None:
    n, width = table.num_states, table.vocab_size
    every = np.arange(n)
    for s in range(n):
        ids = table.allowed(s)
        assert ids.dtype == np.int32 and (ids.size == 0 or (int(ids.min()) >= 0 and int(ids.max()) < width))
        accepting = table.is_accepting(s)
        if ids.size:
            try:
                nxt = table.advance(s, int(ids[0]))
                assert nxt == triec.FINISHED if nxt < 0 else nxt < n
                assert nxt != triec.FINISHED or accepting
            except triec.TokenNotAllowed:  # content tokens out of order: the binary search can miss
                pass
        with contextlib.suppress(triec.TokenNotAllowed):
            table.advance(s, rng.randrange(width))
        lazily(table.value, s)
        lazily(table.prefix, s)
    rows = table.fill_bitmask(every, np.zeros((n, table.words_per_row), dtype=np.int32))
    writer = table.mask_writer(n)
    assert np.array_equal(writer.fill(every), rows)
    s = rng.randrange(n)
    assert np.array_equal(writer.fill([s])[0], rows[s])
    keys = lazily(lambda: table.value_bytes)  # rebuilt values, in strictly increasing order
    values = lazily(lambda: table.values)  # and valid UTF-8
    if keys is None:
        with pytest.raises(ArtifactContentError):
            table.restrict(["x"])
    else:
        assert len(keys) == table.num_values and (values is None or len(values) == len(keys))
        valid = [k for k in keys if _is_utf8(k)]
    if keys is not None and valid:
        view = table.restrict(rng.sample(valid, max(1, len(valid) // 2)))
        view_rows = view.fill_bitmask(view.states, np.zeros((view.num_states, view.words_per_row), dtype=np.int32))
        assert not (view_rows & ~rows[view.states]).any(), "a view allows only what its parent allows"
        for s in view.states.tolist():
            ids = view.allowed(s)
            if ids.size:
                try:
                    nxt = view.advance(s, int(ids[0]))
                    assert nxt == triec.FINISHED or 0 <= nxt < n
                except triec.TokenNotAllowed:
                    pass
        view.compact()
    if device is not None:
        exercise_device(table, rows, rng, device)


def exercise_device(table: triec.MaskTable, rows: np.ndarray, rng: random.Random, device: str) -> None:
    import torch

    from triec.runtime.torch import INVALID

    n = table.num_states
    dev = table.to_torch(device)
    odd = [triec.FINISHED, INVALID, n, n + 1, -3, 2**31, -(2**40)]
    states = torch.tensor([*range(n), *odd], device=device)
    got = dev.fill(states).cpu().numpy()
    assert np.array_equal(got[:n], rows), "device rows equal the numpy rows"
    eos = np.zeros(table.words_per_row, dtype=np.uint32)
    for e in table.eos_token_ids:
        eos[e >> 5] |= np.uint32(1 << (e & 31))
    assert (got[n:].view(np.uint32) == eos).all(), "terminal and out-of-range rows allow EOS only"
    tokens = torch.tensor([rng.randrange(table.vocab_size) for _ in range(states.numel())], device=device)
    for toks in (tokens, torch.full_like(tokens, table.eos_token_ids[0]), torch.full_like(tokens, -1)):
        nxt = dev.advance(states, toks)
        assert bool(((nxt >= -2) & (nxt < n)).all())
        assert nxt[n:].tolist() == [triec.FINISHED] + [INVALID] * (len(odd) - 1)
    pick = [rng.randrange(n), rng.choice(odd)]  # full-width logits are costly: one live row, one odd one
    logits = torch.zeros(2, table.vocab_size, device=device)
    dev.mask_logits(logits, torch.tensor(pick, device=device))
    kept = np.isfinite(logits.cpu().numpy()).sum(1).tolist()
    assert kept == [int(np.unpackbits(rows[pick[0]].view(np.uint8)).sum()), len(table.eos_token_ids)]


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """A directory in memory when there is one: 15,000 file writes cost ~2 ms each on some disks."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    path = Path(tempfile.mkdtemp(prefix="triec-fuzz-", dir=shm))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def one_torch_thread() -> Iterator[bool]:
    """Whether torch is there; tiny CPU ops run far faster on one thread on a busy machine."""
    try:
        import torch
    except ImportError:  # pragma: no cover - the test extra installs torch
        yield False
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield True
    finally:
        torch.set_num_threads(threads)


def test_content_fuzz(vocabs: dict[str, triec.Vocabulary], scratch: Path, one_torch_thread: bool) -> None:
    """10,000 seeded mutations of the array sections: refused by the load, or every query answers."""
    counts = run_fuzz(vocabs, scratch, MUTATIONS, "cpu" if one_torch_thread else None, TORCH_EVERY)
    plain = {k: v for k, v in counts.items() if k.startswith("plain")}
    assert sum(plain.values()) == MUTATIONS
    assert counts["plain: loaded"] > MUTATIONS // 10, counts  # the property was exercised on many corrupt tables
    assert counts["plain: ArtifactContentError"] > MUTATIONS // 10, counts  # and the content checks caught many
    assert counts["verify: ArtifactContentError"] > 0 and counts["plain: ArtifactChecksumError"] == 0, counts


@pytest.mark.cuda
def test_content_fuzz_cuda(vocabs: dict[str, triec.Vocabulary], scratch: Path) -> None:
    """On CUDA, every loaded table goes to the device: an index out of range would be a device-side assert."""
    counts = run_fuzz(vocabs, scratch, 2_000, "cuda", 1)
    assert counts["plain: loaded"] > 200, counts


def run_fuzz(
    vocabs: dict[str, triec.Vocabulary], scratch: Path, mutations: int, device: str | None, torch_every: int
) -> collections.Counter[str]:
    """Mutate, load (plainly, and with verify=True when the CRCs were recomputed), exercise; count outcomes."""
    qwen2 = vocabs["qwen2"]
    padded = triec.Vocabulary(qwen2.token_bytes, eos_token_ids=qwen2.eos_token_ids, vocab_size=151_936, name="qwen2")
    seeds = [  # small tables (8 to 14 states): every state of every loaded mutation is queried
        seed_of(triec.compile(["", "get", "get_user", "é", "日"], vocabs["gpt2"])),
        seed_of(triec.compile(["ab", "slack.get", "é"], padded)),
        seed_of(triec.compile(["ab", "abc", "abd", "b", "ü"], vocabs["phi3"])),
    ]
    rng = random.Random(20261130)
    path = scratch / "fuzz.triec"
    staging = scratch / "fuzz.triec.tmp"
    counts: collections.Counter[str] = collections.Counter()
    by_target: collections.Counter[str] = collections.Counter()
    loaded_tables = 0
    for i in range(mutations):
        seed = seeds[i % len(seeds)]
        data, what, recomputed = mutate(seed, rng)
        staging.write_bytes(data)
        os.replace(staging, path)  # a new inode: mappings of earlier tables stay valid
        for verify in (False, True) if recomputed else (False,):
            mode = "verify" if verify else "plain"
            try:
                table = triec.load(path, verify=verify)
            except ArtifactError as exc:
                assert str(path) in str(exc) and "\n" not in str(exc), (what, exc)
                counts[f"{mode}: {type(exc).__name__}"] += 1
                field = str(exc).split(": ")[1] if ": section " in str(exc) or ": padding" in str(exc) else "other"
                by_target[f"{mode} {target(what)}: {type(exc).__name__} ({field})"] += 1
                continue
            counts[f"{mode}: loaded"] += 1
            by_target[f"{mode} {target(what)}: loaded"] += 1
            if verify:  # the same bytes already loaded plainly and answered every query
                continue
            loaded_tables += 1
            on_device = device if device is not None and loaded_tables % torch_every == 0 else None
            try:
                exercise(table, rng, device=on_device)
            except Exception as exc:
                raise AssertionError(f"mutation {i} ({what}), {mode} load: {type(exc).__name__}: {exc}") from exc
            del table
    print(f"\ncontent fuzz outcomes ({mutations:,} mutations, device tables: {device}, 1 in {torch_every}):")
    print(dict(sorted(counts.items())))
    for key, n in sorted(by_target.items()):
        print(f"  {n:6d}  {key}")
    return counts
