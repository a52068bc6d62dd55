"""What the tail-layout tests share (tests/test_tails.py, tests/test_canonical_tails.py): a set compiled in both
layouts, the checks that the tail table answers like the full one, and the artifact surgery of the loader checks.

The tables whose saved artifacts those checks mutate are fixtures (``tail_table``, ``tail_artifact`` and their
canonical twins, in conftest.py).
"""

from __future__ import annotations

import random
import zlib
from pathlib import Path

import msgpack
import numpy as np
import pytest

import triec
from triec.artifact import container
from triec.compiler.entry import compile as compile_values
from triec.runtime.table import TailMaskTable

Artifact = tuple[Path, bytes, dict]
"""A saved table: its path, its bytes, and ``{"header": ..., "data_start": ...}`` as read back."""


def tail_pair(values: list[str], vocab: triec.Vocabulary, **kw: object) -> tuple[triec.MaskTable, TailMaskTable]:
    """``values`` compiled in the full layout and in the tail layout, with the same options."""
    full = compile_values(values, vocab, layout="full", **kw)  # type: ignore[arg-type]
    tail = compile_values(values, vocab, layout="tails", **kw)  # type: ignore[arg-type]
    assert type(full) is triec.MaskTable and isinstance(tail, TailMaskTable)
    return full, tail


def saved(table: TailMaskTable, path: Path) -> Artifact:
    """``table`` saved at ``path``, and its bytes and header as the loader checks read them."""
    table.save(path)
    data = path.read_bytes()
    header, data_start, _ = container.read_header(data, str(path), verify=False)
    return path, data, {"header": header, "data_start": data_start}


def section_at(info: dict, name: str) -> tuple[int, int, str]:
    """Where section ``name`` starts in the file, its element count and its dtype."""
    sec = next(s for s in info["header"]["sections"] if s["name"] == name)
    return info["data_start"] + sec["offset"], sec["count"], sec["dtype"]


def resealed(data: bytes, info: dict, header: dict | None = None) -> bytes:
    """``data`` with every section's CRC-32 recomputed and the header (or ``header``) written again."""
    header = dict(header or info["header"])
    start = info["data_start"]
    header["sections"] = [
        {**sec, "crc32": zlib.crc32(data[start + sec["offset"] : start + sec["offset"] + sec["length"]])}
        for sec in header["sections"]
    ]
    head = msgpack.packb(header)
    pad = container.align(24 + len(head)) - 24 - len(head)
    preamble = container.PREAMBLE.pack(container.MAGIC, 4, len(head), zlib.crc32(head), 0)
    return preamble + head + b"\0" * pad + data[start:]


def assert_same(full: triec.MaskTable, tail: triec.MaskTable, states: np.ndarray | None = None) -> None:
    """Rows, EOS, advance on every allowed token and a refused one, bitmask rows, writers, matcher rows."""
    assert tail.num_states == full.num_states and tail.num_values == full.num_values
    n = full.num_states
    st = np.arange(n, dtype=np.int64) if states is None else np.asarray(states, dtype=np.int64)
    for s in st.tolist():
        a, b = full.allowed(s), tail.allowed(s)
        assert np.array_equal(a, b), f"state {s} ({full.prefix(s)!r})"
        assert np.array_equal(full.transitions(s)[1], tail.transitions(s)[1]), f"next states of {s}"
        for t in a.tolist():
            assert full.advance(s, t) == tail.advance(s, t)
        refused = next(t for t in range(full.vocab_size) if t not in set(a.tolist()))
        with pytest.raises(triec.TokenNotAllowed):
            tail.advance(s, refused)
    width = full.words_per_row
    for lo in range(0, st.shape[0], 256):
        chunk = st[lo : lo + 256]
        want = full.fill_bitmask(chunk, np.empty((chunk.shape[0], width), dtype=np.int32))
        assert np.array_equal(tail.fill_bitmask(chunk, np.empty_like(want)), want)
        w = tail.mask_writer(256)
        assert np.array_equal(w.fill(chunk), want)
        assert np.array_equal(w.fill(chunk[::-1]), want[::-1])  # the writer clears what it set before
        for i in range(0, chunk.shape[0], 37):
            assert np.array_equal(w.fill_one(int(chunk[i]))[0], want[i])
        assert np.array_equal(w.fill(chunk[:3]), want[:3])


def assert_walks_agree(full: triec.MaskTable, tail: triec.MaskTable, walks: int, seed: int = 5) -> None:
    """Random token walks (a random allowed token at each step) to EOS: the same rows and states in both tables,
    then the same bitmask rows through their matchers, a rollback and a validation of the whole path."""
    rng = random.Random(seed)
    for _ in range(walks):
        s, path = 0, []
        while True:
            a = full.allowed(s)
            assert np.array_equal(a, tail.allowed(s))
            t = int(a[rng.randrange(a.shape[0])])
            n1, n2 = full.advance(s, t), tail.advance(s, t)
            assert n1 == n2
            path.append(t)
            if n1 == triec.FINISHED:
                break
            s = n1
        m1, m2 = full.matcher(), tail.matcher()
        r1, r2 = np.zeros(full.words_per_row, np.int32), np.zeros(full.words_per_row, np.int32)
        for t in path:
            m1.fill_bitmask(r1)
            m2.fill_bitmask(r2)
            assert np.array_equal(r1, r2)
            assert m1.accept_token(t) and m2.accept_token(t)
        assert m2.is_terminated()
        m2.rollback(len(path))
        assert m2.state == 0 and m2.validate_tokens(path) == len(path)


def assert_restricted_same(full: triec.MaskTable, tail: TailMaskTable, subset: list[str]) -> None:
    """Both tables restricted to ``subset``: the same states, rows and bitmask rows, and the same compacted arrays."""
    r1, r2 = full.restrict(subset), tail.restrict(subset)
    assert np.array_equal(r1.states, r2.states)
    for s in r1.states.tolist():
        assert np.array_equal(r1.allowed(s), r2.allowed(s))
    out1 = r1.fill_bitmask(r1.states, np.empty((r1.num_states, full.words_per_row), np.int32))
    assert np.array_equal(r2.fill_bitmask(r2.states, np.empty_like(out1)), out1)
    c1, c2 = r1.compact(), r2.compact()
    for field in ("allowed_offsets", "allowed_tokens", "allowed_next", "value_state", "value_lcp", "state_byte"):
        assert np.array_equal(getattr(c1, field), getattr(c2, field)), field
