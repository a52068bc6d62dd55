"""The one place that knows how a token id maps to a bit of a mask row.

A bitmask row is the layout xgrammar, llguidance and vLLM share: int32 words, token ``t`` is bit
``t & 31`` (least significant first) of word ``t >> 5``, 1 = allowed; a row of width ``V`` has
``ceil(V / 32)`` words and the bits past ``V`` in the last word are 0. Every other module (numpy,
torch, the Triton kernels' host side, the engines' adapters, the integrations) calls these functions
instead of writing the shifts out, so the layout can be read, tested and changed in one file.
numpy only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

WORD_BITS = 32
"""Token ids per word."""
WORD_SHIFT = 5
"""``id >> WORD_SHIFT`` is an id's word (the Triton kernels read this constant)."""
BIT_MASK = WORD_BITS - 1
"""``id & BIT_MASK`` is an id's bit inside its word (the Triton kernels read this constant)."""
BYTE_BITS: tuple[int, ...] = tuple(1 << i for i in range(8))
"""The value of each bit of a byte, least significant first: a row read as bytes (little-endian words) holds
token ``t`` at bit ``t & 7`` of byte ``t >> 3`` (the torch path unpacks rows this way)."""

IntArray = npt.NDArray[np.integer[Any]]


def words_for(width: int) -> int:
    """Words in a row that holds ``width`` token ids."""
    return (int(width) + BIT_MASK) >> WORD_SHIFT


def word_of(ids: Any) -> Any:
    """The word index of each id (an int for an int, an int64 array for an array)."""
    if isinstance(ids, (int, np.integer)):
        return int(ids) >> WORD_SHIFT
    return np.asarray(ids, dtype=np.int64) >> WORD_SHIFT


def bit_of(ids: Any) -> Any:
    """The uint32 word value with only each id's bit set (an int for an int, a uint32 array for an array)."""
    if isinstance(ids, (int, np.integer)):
        return 1 << (int(ids) & BIT_MASK)
    return np.left_shift(np.uint32(1), (np.asarray(ids, dtype=np.int64) & BIT_MASK).astype(np.uint32))


def flat_word(rows: IntArray, ids: IntArray, words_per_row: int) -> npt.NDArray[np.int64]:
    """The index of each (row, id) pair's word in a C-ordered (rows x words_per_row) buffer."""
    return np.asarray(rows, dtype=np.int64) * words_per_row + (np.asarray(ids, dtype=np.int64) >> WORD_SHIFT)


def as_int32(bits: Any) -> Any:
    """A uint32 word value (or array) viewed as the int32 a row stores."""
    if isinstance(bits, (int, np.integer)):
        return np.uint32(bits).view(np.int32)
    return np.asarray(bits, dtype=np.uint32).view(np.int32)


def set_bits(row: npt.NDArray[np.int32], ids: Any) -> npt.NDArray[np.int32]:
    """OR the bits of ``ids`` into one int32 row in place (repeated ids are fine); returns the row."""
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    if ids.size:
        np.bitwise_or.at(row.view(np.uint32), word_of(ids), bit_of(ids))
    return row


def set_few(row: npt.NDArray[np.int32], ids: Iterable[int]) -> None:
    """OR the bits of a few Python int ids into one int32 row in place: item writes on the row's uint32
    memoryview (a numpy call costs microseconds a token, these well under one)."""
    words = row.view(np.uint32).data  # the array's memoryview (format "I")
    for t in ids:
        words[t >> WORD_SHIFT] |= 1 << (t & BIT_MASK)


def or_few(words: memoryview, ids: Iterable[int]) -> list[int]:
    """:func:`set_few` on a row's uint32 memoryview held by the caller (format ``"I"``); returns the words written,
    for the caller to clear them later."""
    written = []
    for t in ids:
        w = t >> WORD_SHIFT
        words[w] |= 1 << (t & BIT_MASK)
        written.append(w)
    return written


def clear_bits(row: npt.NDArray[np.int32], ids: Any) -> npt.NDArray[np.int32]:
    """Clear the bits of ``ids`` in one int32 row in place; returns the row."""
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    if ids.size:
        np.bitwise_and.at(row.view(np.uint32), word_of(ids), ~bit_of(ids))
    return row


def scatter_bits(rows: npt.NDArray[np.int32], row_index: IntArray, ids: IntArray) -> npt.NDArray[np.int32]:
    """OR the bit of ``ids[i]`` into row ``row_index[i]`` of a C-contiguous (n, words) int32 buffer, in place."""
    flat = rows.reshape(-1).view(np.uint32)
    np.bitwise_or.at(flat, flat_word(row_index, ids, rows.shape[1]), bit_of(ids))
    return rows


def is_set(row: npt.NDArray[np.integer[Any]], token: int) -> bool:
    """Whether ``token``'s bit is set in one row (False past the row's end, and for negative ids)."""
    t = int(token)
    w = t >> WORD_SHIFT
    return t >= 0 and w < row.shape[0] and bool((int(row[w]) >> (t & BIT_MASK)) & 1)


def are_set(row: npt.NDArray[np.integer[Any]], ids: IntArray) -> npt.NDArray[np.bool_]:
    """Whether each id's bit is set in one row; ids must lie inside the row."""
    ids = np.asarray(ids, dtype=np.int64)
    words = row.view(np.uint32)[ids >> WORD_SHIFT]
    found: npt.NDArray[np.bool_] = ((words >> (ids & BIT_MASK).astype(np.uint32)) & 1).astype(bool)
    return found


def unpack(row: npt.NDArray[np.integer[Any]], width: int | None = None) -> npt.NDArray[np.bool_]:
    """One row (or the last axis of rows) as booleans, one per token id, cut to ``width`` when given."""
    words = np.ascontiguousarray(row).view(np.uint8)
    bits = np.unpackbits(words, axis=-1, bitorder="little").view(bool)
    return bits if width is None else bits[..., :width]


def pack(allowed: npt.NDArray[np.bool_]) -> npt.NDArray[np.int32]:
    """One row of booleans (one per token id) as an int32 row of ``words_for(len(allowed))`` words: :func:`unpack`
    undone."""
    flags = np.zeros(words_for(allowed.shape[0]) * WORD_BITS, dtype=bool)
    flags[: allowed.shape[0]] = allowed
    return np.packbits(flags, bitorder="little").view(np.int32)


def ids_of(row: npt.NDArray[np.integer[Any]], width: int | None = None) -> npt.NDArray[np.int64]:
    """The token ids whose bits are set in one row, ascending."""
    return np.flatnonzero(unpack(row, width)).astype(np.int64)


def ids_in_words(word_index: IntArray, words: IntArray) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The ids set in some words of a row: ``words[i]`` is word ``word_index[i]``; returns (i, id) per set bit,
    in order of ``i`` then id (a sparse row read back without unpacking its zero words)."""
    values = np.ascontiguousarray(words, dtype=np.int32).reshape(-1, 1)
    which, bit = np.nonzero(unpack(values))
    return which.astype(np.int64), np.asarray(word_index, dtype=np.int64)[which] * WORD_BITS + bit


def last_word_mask(width: int) -> int:
    """The int32 value of the valid bits of a row's last word (all ones when ``width`` fills it)."""
    extra = words_for(width) * WORD_BITS - int(width)
    return int(np.uint32((1 << (WORD_BITS - extra)) - 1).view(np.int32))
