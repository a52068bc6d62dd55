"""The bit layout (triec/runtime/bitmask.py) against xgrammar's and llguidance's own rows for the same ids."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from triec.runtime import bitmask


@pytest.mark.parametrize("width", [1, 31, 32, 33, 100, 151_936])
def test_set_unpack_and_ids_round_trip(width: int) -> None:
    rng = np.random.default_rng(width)
    ids = np.unique(rng.integers(0, width, min(width, 500)))
    row = np.zeros(bitmask.words_for(width), dtype=np.int32)
    bitmask.set_bits(row, np.concatenate([ids, ids]))  # repeated ids OR once
    assert np.array_equal(bitmask.ids_of(row, width), ids)
    assert bitmask.are_set(row, ids).all()
    assert all(bitmask.is_set(row, int(t)) for t in ids[:20])
    assert not bitmask.is_set(row, width + 64) and not bitmask.is_set(row, -1)
    bitmask.clear_bits(row, ids[::2])
    assert np.array_equal(bitmask.ids_of(row, width), ids[1::2])


def test_the_layout_is_little_endian_words_of_32() -> None:
    row = np.zeros(2, dtype=np.int32)
    bitmask.set_bits(row, [0, 31, 33])
    assert row.view(np.uint32).tolist() == [1 | (1 << 31), 1 << 1]
    assert bitmask.words_for(32) == 1 and bitmask.words_for(33) == 2
    assert bitmask.last_word_mask(33) == 1 and bitmask.last_word_mask(64) == -1


def test_scatter_bits_writes_each_pair_into_its_row() -> None:
    rows = np.zeros((3, 2), dtype=np.int32)
    bitmask.scatter_bits(rows, np.array([0, 2, 2]), np.array([5, 40, 40]))
    assert [bitmask.ids_of(r).tolist() for r in rows] == [[5], [], [40]]


def test_the_layout_is_xgrammars() -> None:
    torch = pytest.importorskip("torch")
    xgr = pytest.importorskip("xgrammar")
    width = 1000
    ids = np.array([0, 1, 31, 32, 500, 999])
    ours = np.zeros(bitmask.words_for(width), dtype=np.int32)
    bitmask.set_bits(ours, ids)
    logits = torch.zeros(1, width)
    xgr.apply_token_bitmask_inplace(logits, torch.from_numpy(ours[None]))
    assert np.flatnonzero(torch.isfinite(logits)[0].numpy()).tolist() == ids.tolist()


def test_set_few_pack_and_ids_in_words_agree_with_set_bits() -> None:
    width = 100
    ids = [0, 5, 31, 32, 63, 99]
    row = np.zeros(bitmask.words_for(width), dtype=np.int32)
    bitmask.set_few(row, ids)
    expected = bitmask.set_bits(np.zeros_like(row), ids)
    assert np.array_equal(row, expected)
    flags = np.zeros(width, dtype=bool)
    flags[ids] = True
    assert np.array_equal(bitmask.pack(flags), row)
    assert np.array_equal(bitmask.unpack(row, width), flags)
    words = np.flatnonzero(row)
    which, found = bitmask.ids_in_words(words, row[words])
    assert found.tolist() == ids and np.array_equal(words[which], bitmask.word_of(found))
    as_bytes = np.ascontiguousarray(row).view(np.uint8)
    assert [t for t in range(width) if as_bytes[t >> 3] & bitmask.BYTE_BITS[t & 7]] == ids


# ----------------------------------------------------------------------------- the layout is written once

LAYOUT_ELSEWHERE: frozenset[str] = frozenset()
"""Files that still write the bit layout out by hand."""


def _layout_written_out(path: Path) -> list[str]:
    """Token-bit arithmetic in one file's code (docstrings and comments are not code): ``>> 5``, ``<< 5``, ``& 31``,
    ``% 32``, ``// 32``, ``* 32``, ``+ 31``, ``- 31``, and numpy's ``bitorder=`` (packing rows by hand)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.BinOp):
            op = type(node.op)
            for side in (node.left, node.right):
                if not (isinstance(side, ast.Constant) and type(side.value) is int):
                    continue
                v = side.value
                if (
                    (op in (ast.RShift, ast.LShift) and v == 5 and side is node.right)
                    or (op in (ast.BitAnd, ast.Mod) and v in (31, 32))
                    or (op in (ast.FloorDiv, ast.Mult) and v == 32)
                    or (op in (ast.Add, ast.Sub) and v == 31)
                ):
                    found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.keyword) and node.arg == "bitorder":
            found.append(f"line {node.value.lineno}: bitorder={ast.unparse(node.value)}")
    return found


def test_the_bit_layout_is_written_in_one_module() -> None:
    """Every other module asks triec/runtime/bitmask.py for a word, a bit, a row's width or its ids."""
    package = Path(bitmask.__file__).resolve().parents[1]
    found, clean = [], []
    for path in sorted(package.rglob("*.py")):
        name = path.relative_to(package.parent).as_posix()
        if name == "triec/runtime/bitmask.py":
            continue
        hits = _layout_written_out(path)
        if name in LAYOUT_ELSEWHERE:
            clean += [] if hits else [name]
        else:
            found += [f"{name} {h}" for h in hits]
    assert found == [], "write these with triec.runtime.bitmask"
    assert clean == [], "no longer writes the layout out: drop it from LAYOUT_ELSEWHERE"


def test_the_layout_check_sees_the_patterns(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""t >> 5 in a docstring is no code."""\nw = t >> 5\nb = 1 << (t & 31)\nn = (v + 31) // 32\n'
        'x = np.packbits(a, bitorder="little")\n'
    )
    lines = sorted(h.split(":")[0] for h in _layout_written_out(sample))
    assert lines == ["line 2", "line 3", "line 4", "line 4", "line 5"]
