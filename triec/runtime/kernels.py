"""Fused Triton kernels for a decode step over device tables: fill, fill-and-apply, apply, advance.

The torch path (:mod:`triec.runtime.torch`) does a step as a dozen small kernels, bound by launch overhead
on a GPU. Here each operation is one launch with one program per batch row (advance: a block of rows per
program), over the same device arrays, with no host synchronisation and fixed shapes, so CUDA graphs can
capture them:

* ``fill``: a row's packed int32 bitmask: its dense row (wide states; row 0 is zeros), then its (word, bits)
  pairs stored over it (words are unique per state, so a store is an OR);
* ``fill_apply``: the same, then the logits row masked from the words just written, in the same program;
* ``apply``: a bitmask applied to logits (columns past the mask's words are masked, xgrammar's semantics);
* ``advance``: a binary search of ``row * (V + 2) + token + 1`` among the sorted pair keys; EOS at an
  accepting state finishes the row; a refused token makes it INVALID; FINISHED and INVALID stay.

Several tables of the same width are served by one launch: their arrays are concatenated (:class:`Packed`)
and each batch row names its table; a row's global row is ``row_base[table] + state`` (``+ num_states`` for
the terminal row). Everything is checked against the numpy runtime under Triton's interpreter
(``TRITON_INTERPRET=1``, CPU tensors) in CI, and on a GPU by ``python -m benchmarks.gpu_check`` (the ``gpu`` suite).

Importing this module imports triton; :func:`available` says whether it can run for a device.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from triec.runtime import bitmask as layout

# A jitted function reads no module global but a constexpr or a module: the kernels read the bit layout as
# ``layout.WORD_SHIFT`` and ``layout.BIT_MASK``, and write FINISHED (-1, runtime.states) and INVALID (-2,
# runtime.torch) as literals.
BLOCK_W = 1024  # bitmask words per iteration of fill
BLOCK_P = 256  # (word, bits) pairs per iteration
BLOCK_V = 2048  # logit columns per iteration of apply
BLOCK_B = 128  # rows per program of advance


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def available(device: torch.device) -> bool:
    """Whether the kernels run for tensors on ``device``: CUDA with triton, or any device under the interpreter
    (``TRITON_INTERPRET=1``, set before triton is imported). ``TRIEC_KERNELS=0`` turns them off."""
    if os.environ.get("TRIEC_KERNELS") == "0":
        return False
    if device.type != "cuda" and not interpreting():
        return False
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


@functools.cache
def _kernels() -> dict[str, Any]:
    """The jitted kernels, made on first use (so the interpreter setting is read then, not at import)."""
    return {
        "fill_rows": _fill_rows_kernel(),
        "apply_rows": _apply_rows_kernel(),
        "advance_rows": _advance_rows_kernel(),
    }


def _fill_rows_kernel() -> Any:
    """The row kernel: each program writes one bitmask row (its dense base row, then its sparse words), and with
    ``APPLY`` masks that row's logits in place. Triton is imported here, on first use, as by :func:`_kernels`."""
    import triton
    import triton.language as tl

    @triton.jit
    def fill_rows(
        states,
        tables,
        out,
        out_stride,
        row_base,
        num_states,
        word_offsets,
        word_index,
        word_bits,
        dense_of,
        dense_rows,
        W,
        logits,
        logit_rows,
        logit_stride,
        V,
        APPLY: tl.constexpr,
        HAS_ROWS: tl.constexpr,
        BW: tl.constexpr,
        BP: tl.constexpr,
        BV: tl.constexpr,
    ):
        b = tl.program_id(0)
        t = tl.load(tables + b)
        s = tl.load(states + b).to(tl.int64)
        n = tl.load(num_states + t)
        live = (s >= 0) & (s < n)
        r = tl.load(row_base + t) + tl.where(live, s, n)
        d = tl.load(dense_of + r).to(tl.int64)
        row = out + b.to(tl.int64) * out_stride
        for w0 in range(0, W, BW):
            c = w0 + tl.arange(0, BW)
            m = c < W
            tl.store(row + c, tl.load(dense_rows + d * W + c, mask=m, other=0), mask=m)
        tl.debug_barrier()
        lo = tl.load(word_offsets + r)
        hi = tl.load(word_offsets + r + 1)
        for p0 in range(lo, hi, BP):
            p = p0 + tl.arange(0, BP)
            m = p < hi
            wi = tl.load(word_index + p, mask=m, other=0)
            wb = tl.load(word_bits + p, mask=m, other=0)
            tl.store(row + wi, wb, mask=m)
        if APPLY:
            tl.debug_barrier()
            if HAS_ROWS:
                lr = tl.load(logit_rows + b)
            else:
                lr = b.to(tl.int64)
            lrow = logits + lr * logit_stride
            for c0 in range(0, V, BV):
                c = c0 + tl.arange(0, BV)
                m = c < V
                word = c >> layout.WORD_SHIFT
                wv = tl.load(row + word, mask=m & (word < W), other=0)
                keep = ((wv >> (c & layout.BIT_MASK)) & 1) != 0
                x = tl.load(lrow + c, mask=m)
                tl.store(lrow + c, tl.where(keep, x, float("-inf")), mask=m)

    return fill_rows


def _apply_rows_kernel() -> Any:
    """The apply kernel: a bitmask already filled masks the logits, one block of columns per program."""
    import triton
    import triton.language as tl

    @triton.jit
    def apply_rows(
        bitmask, mask_stride, W, logits, logit_rows, logit_stride, V, HAS_ROWS: tl.constexpr, BV: tl.constexpr
    ):
        b = tl.program_id(0)
        c = tl.program_id(1) * BV + tl.arange(0, BV)
        m = c < V
        if HAS_ROWS:
            lr = tl.load(logit_rows + b)
        else:
            lr = b.to(tl.int64)
        word = c >> layout.WORD_SHIFT
        wv = tl.load(bitmask + b.to(tl.int64) * mask_stride + word, mask=m & (word < W), other=0)
        keep = ((wv >> (c & layout.BIT_MASK)) & 1) != 0
        ptr = logits + lr * logit_stride + c
        x = tl.load(ptr, mask=m)
        tl.store(ptr, tl.where(keep, x, float("-inf")), mask=m)

    return apply_rows


def _advance_rows_kernel() -> Any:
    """The advance kernel: each lane's next state by a bounded binary search over the packed (row, token) keys,
    EOS on an accepting state giving -1."""
    import triton
    import triton.language as tl

    @triton.jit
    def advance_rows(
        states,
        tables,
        tokens,
        key_tokens,
        out,
        B,
        row_base,
        num_states,
        pair_keys,
        num_keys,
        pair_next,
        accepting,
        eos,
        eos_lo,
        eos_count,
        V,
        STEPS: tl.constexpr,
        MAX_EOS: tl.constexpr,
        BB: tl.constexpr,
    ):
        i = tl.program_id(0) * BB + tl.arange(0, BB)
        m = i < B
        t = tl.load(tables + i, mask=m, other=0)
        s = tl.load(states + i, mask=m, other=-2).to(tl.int64)
        tok = tl.load(tokens + i, mask=m, other=0).to(tl.int64)
        ktok = tl.load(key_tokens + i, mask=m, other=0).to(tl.int64)  # the token, or its class in a class layout
        n = tl.load(num_states + t, mask=m, other=0)
        live = (s >= 0) & (s < n)
        r = tl.load(row_base + t, mask=m, other=0) + tl.where(live, s, n)
        key = r * (V + 2) + tl.minimum(tl.maximum(ktok, -1), V) + 1
        lo = key * 0  # (not tl.zeros_like: a library function the interpreter may not patch)
        hi = key * 0 + num_keys
        for _ in tl.static_range(STEPS):  # lower bound: the first key >= key
            go = lo < hi
            mid = (lo + hi) // 2
            k = tl.load(pair_keys + mid, mask=m & go, other=0)
            right = k < key
            lo = tl.where(go & right, mid + 1, lo)
            hi = tl.where(go & (~right), mid, hi)
        at = tl.minimum(lo, num_keys - 1)
        found = tl.load(pair_keys + at, mask=m, other=-1) == key
        nxt = tl.load(pair_next + at, mask=m, other=0).to(tl.int64)
        miss = tl.where(s == -1, -1, -2).to(tl.int64)
        result = tl.where(found, nxt, miss)
        e0 = tl.load(eos_lo + t, mask=m, other=0)
        ec = tl.load(eos_count + t, mask=m, other=0)
        is_eos = tok < -(1 << 40)  # all false
        for j in tl.static_range(MAX_EOS):
            e = tl.load(eos + e0 + j, mask=m & (j < ec), other=-3)
            is_eos = is_eos | ((j < ec) & (e == tok))
        acc = tl.load(accepting + r, mask=m, other=0) != 0
        result = tl.where(is_eos & acc, -1, result)
        tl.store(out + i, result, mask=m)

    return advance_rows


@dataclass
class Packed:
    """Device arrays of one or more tables of the same width, concatenated; rows name their table."""

    vocab_size: int
    words_per_row: int
    row_base: torch.Tensor  # int64 [T]
    num_states: torch.Tensor  # int64 [T]
    word_offsets: torch.Tensor  # int64 [R + 1]
    word_index: torch.Tensor  # int32 [N + 1]
    word_bits: torch.Tensor  # int32 [N + 1]
    dense_of: torch.Tensor  # int32 [R]: 0, or the row of dense_rows
    dense_rows: torch.Tensor  # int32 [D + 1, W]
    pair_keys: torch.Tensor  # int64 [P + 1], ascending, then a sentinel
    pair_next: torch.Tensor  # int32 [P + 1]
    accepting: torch.Tensor  # int8 [R]
    eos: torch.Tensor  # int64 [sum E]
    eos_lo: torch.Tensor  # int64 [T]
    eos_count: torch.Tensor  # int64 [T]
    token_class: torch.Tensor  # int32 [sum V of class tables + 1]: a pattern table's token -> class
    class_base: torch.Tensor  # int64 [T]: where a table's classes start in token_class, -1 where pairs hold tokens
    max_eos: int
    steps: int  # binary search steps over the pair keys

    @property
    def nbytes(self) -> int:
        return sum(v.numel() * v.element_size() for v in self.__dict__.values() if isinstance(v, torch.Tensor))


def pack(
    arrays: Sequence[dict[str, np.ndarray]],
    num_states: Sequence[int],
    vocab_size: int,
    words_per_row: int,
    device: torch.device,
) -> Packed:
    """Concatenate the device arrays of tables (``runtime.torch._device_arrays``) into one :class:`Packed`."""
    row_base, word_off, w_index, w_bits, dense_of, dense, keys, nxt, acc, eos, eos_lo, eos_n = ([] for _ in range(12))
    token_class: list[np.ndarray] = []
    class_base: list[int] = []
    rows = words = dense_n = eos_at = classes_at = 0
    for a, s in zip(arrays, num_states, strict=True):
        offsets = a["word_offsets"].astype(np.int64)  # [S + 2]
        n_pairs = int(offsets[-1])
        row_base.append(rows)
        word_off.append(offsets[:-1] + words)
        w_index.append(a["word_index"][:n_pairs])
        w_bits.append(a["word_bits"][:n_pairs])
        d = np.zeros(s + 1, dtype=np.int32)
        wide = a["wide_states"].astype(np.int64)
        d[wide] = a["wide_dense"].astype(np.int32) + dense_n
        dense_of.append(d)
        dense.append(a["dense_rows"][1:])
        dense_n += a["dense_rows"].shape[0] - 1
        tc = a.get("token_class")
        class_base.append(-1 if tc is None else classes_at)
        if tc is not None:
            token_class.append(tc)
            classes_at += tc.size
        k = a["pair_keys"][:-1].astype(np.int64)  # local row * (V + 2) + token + 1
        keys.append(k + rows * (vocab_size + 2))
        nxt.append(a["pair_next"][:-1])
        acc.append(a["accepting"].astype(np.int8))
        eos.append(a["eos"].astype(np.int64))
        eos_lo.append(eos_at)
        eos_n.append(a["eos"].size)
        eos_at += a["eos"].size
        rows += s + 1
        words += n_pairs
    word_off.append(np.array([words], dtype=np.int64))
    all_keys = np.concatenate([*keys, [np.iinfo(np.int64).max]])

    def put(x: np.ndarray, dtype: npt.DTypeLike) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(x, dtype=dtype)).to(device)

    return Packed(
        vocab_size=vocab_size,
        words_per_row=words_per_row,
        row_base=put(np.array(row_base), np.int64),
        num_states=put(np.array(num_states), np.int64),
        word_offsets=put(np.concatenate(word_off), np.int64),
        word_index=put(np.concatenate([*w_index, [0]]), np.int32),
        word_bits=put(np.concatenate([*w_bits, [0]]), np.int32),
        dense_of=put(np.concatenate(dense_of), np.int32),
        dense_rows=put(
            np.concatenate([np.zeros((1, words_per_row), np.int32), *dense]).reshape(-1, words_per_row), np.int32
        ),
        pair_keys=put(all_keys, np.int64),
        pair_next=put(np.concatenate([*nxt, [0]]), np.int32),
        accepting=put(np.concatenate(acc), np.int8),
        eos=put(np.concatenate([*eos, [0]]), np.int64),
        eos_lo=put(np.array(eos_lo), np.int64),
        eos_count=put(np.array(eos_n), np.int64),
        token_class=put(np.concatenate([*token_class, np.full(1, -1, np.int32)]), np.int32),
        class_base=put(np.array(class_base), np.int64),
        max_eos=max(1, *eos_n),
        steps=max(1, int(all_keys.size).bit_length()),
    )


def _tables_of(p: Packed, tables: torch.Tensor | None, b: int, device: torch.device) -> torch.Tensor:
    if tables is None:
        return torch.zeros(b, dtype=torch.int64, device=device)
    return tables.reshape(-1).to(device=device, dtype=torch.int64)


def fill(
    p: Packed, states: torch.Tensor, tables: torch.Tensor | None = None, out: torch.Tensor | None = None
) -> torch.Tensor:
    """The ``(B, W)`` int32 bitmask rows of ``states`` (of ``tables[i]``); one launch."""
    s = states.reshape(-1).to(dtype=torch.int64)
    b = s.numel()
    if out is None:
        out = torch.empty((b, p.words_per_row), dtype=torch.int32, device=s.device)
    if b:
        k = _kernels()["fill_rows"]
        k[(b,)](
            s,
            _tables_of(p, tables, b, s.device),
            out,
            out.stride(0),
            p.row_base,
            p.num_states,
            p.word_offsets,
            p.word_index,
            p.word_bits,
            p.dense_of,
            p.dense_rows,
            p.words_per_row,
            out,
            s,
            0,
            0,
            APPLY=False,
            HAS_ROWS=False,
            BW=BLOCK_W,
            BP=BLOCK_P,
            BV=BLOCK_V,
        )
    return out


def fill_apply(
    p: Packed,
    logits: torch.Tensor,
    states: torch.Tensor,
    tables: torch.Tensor | None = None,
    rows: torch.Tensor | None = None,
    scratch: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mask ``logits`` rows (``rows[i]``, else row i) to the allowed tokens of ``states[i]``, in place; one launch.

    The bitmask rows are written to ``scratch`` (``(B, W)`` int32, allocated when not given) on the way."""
    s = states.reshape(-1).to(dtype=torch.int64)
    b = s.numel()
    if scratch is None:
        scratch = torch.empty((b, p.words_per_row), dtype=torch.int32, device=s.device)
    if b:
        r = rows.reshape(-1).to(dtype=torch.int64) if rows is not None else s
        k = _kernels()["fill_rows"]
        k[(b,)](
            s,
            _tables_of(p, tables, b, s.device),
            scratch,
            scratch.stride(0),
            p.row_base,
            p.num_states,
            p.word_offsets,
            p.word_index,
            p.word_bits,
            p.dense_of,
            p.dense_rows,
            p.words_per_row,
            logits,
            r,
            logits.stride(0),
            logits.shape[1],
            APPLY=True,
            HAS_ROWS=rows is not None,
            BW=BLOCK_W,
            BP=BLOCK_P,
            BV=BLOCK_V,
        )
    return logits


def apply(logits: torch.Tensor, bitmask: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
    """``logits`` rows (``rows[i]``, else row i) set to -inf where ``bitmask[i]``'s bit is 0, in place; one launch."""
    b = bitmask.shape[0]
    if b:
        r = rows.reshape(-1).to(dtype=torch.int64) if rows is not None else bitmask
        grid = (b, (logits.shape[1] + BLOCK_V - 1) // BLOCK_V)
        _kernels()["apply_rows"][grid](
            bitmask,
            bitmask.stride(0),
            bitmask.shape[1],
            logits,
            r,
            logits.stride(0),
            logits.shape[1],
            HAS_ROWS=rows is not None,
            BV=BLOCK_V,
        )
    return logits


def _key_tokens(p: Packed, tables: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """What each row looks its token up by: the token itself, or in a pattern table's class layout its class
    (-1 where it is in none, or the token lies outside the vocabulary: no pair holds either)."""
    base = p.class_base[tables]
    if p.token_class.numel() == 1:  # no class table in the set
        return tokens
    inside = (tokens >= 0) & (tokens < p.vocab_size)
    at = (base + tokens.clamp(0, p.vocab_size - 1)).clamp_(min=0)
    cls = p.token_class[at].to(torch.int64)
    return torch.where(base >= 0, torch.where(inside, cls, -1), tokens)


def advance(p: Packed, states: torch.Tensor, tokens: torch.Tensor, tables: torch.Tensor | None = None) -> torch.Tensor:
    """Next states (int64) after one token per row; one launch."""
    s = states.reshape(-1).to(dtype=torch.int64)
    t = tokens.reshape(-1).to(device=s.device, dtype=torch.int64)
    b = s.numel()
    out = torch.empty(b, dtype=torch.int64, device=s.device)
    if b:
        grid = ((b + BLOCK_B - 1) // BLOCK_B,)
        tab = _tables_of(p, tables, b, s.device)
        _kernels()["advance_rows"][grid](
            s,
            tab,
            t,
            _key_tokens(p, tab, t),
            out,
            b,
            p.row_base,
            p.num_states,
            p.pair_keys,
            p.pair_keys.numel(),
            p.pair_next,
            p.accepting,
            p.eos,
            p.eos_lo,
            p.eos_count,
            p.vocab_size,
            STEPS=p.steps,
            MAX_EOS=p.max_eos,
            BB=BLOCK_B,
        )
    return out
