"""Sort and deduplicate byte strings held in one buffer, with numpy alone (no copy of the bytes).

``sorted(list_of_bytes)`` plus ``dict.fromkeys`` took about 1.4 s for a million
values here, and a list of a million ``bytes`` objects costs about 60 MB. This
module sorts ``(data, offsets)`` directly: values are compared several bytes at a
time as one uint64 sort key each (the tied run's id, the bytes zero-padded past
the value's end, the length left, which orders a value before its extensions),
and only the runs still tied take part in the next round, one argsort each. The rounds also yield each value's
longest common prefix with its predecessor, which the trie needs anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SortedKeys:
    """Sorted, unique byte strings, left where they are in ``data``.

    Key ``i`` is ``data[starts[i]:starts[i] + offsets[i + 1] - offsets[i]]``:
    ``offsets`` are the cumulative lengths in sorted order, ``starts`` point into
    ``data`` (which is not reordered: a million values need no copy).
    """

    data: np.ndarray  # uint8
    starts: np.ndarray  # int64 [K]
    offsets: np.ndarray  # int64 [K + 1]
    lcp: np.ndarray  # int64 [K]: bytes key i shares with key i - 1 (0 for key 0)
    duplicates: int  # values dropped because an equal one came before
    keys: list[bytes] | None = None  # the keys as bytes objects, when the caller had them anyway

    @classmethod
    def contiguous(
        cls,
        data: np.ndarray,
        offsets: np.ndarray,
        lcp: np.ndarray,
        duplicates: int = 0,
        keys: list[bytes] | None = None,
    ) -> SortedKeys:
        return cls(data, offsets[:-1].astype(np.int64), offsets.astype(np.int64), lcp, duplicates, keys)


# _KEEP[n]: the top n bytes of a uint64 (a big-endian chunk cut to the value's end)
_KEEP = np.array([((1 << 64) - 1) ^ ((1 << (8 * (8 - n))) - 1) for n in range(9)], dtype=np.uint64)
_LEFT_BITS = 4  # low bits of a sort key: value bytes left, capped at nbytes + 1 (<= 8)


def _u64_at_every_byte(data: np.ndarray, end: int) -> np.ndarray:
    """A view whose item ``i`` (0 <= i <= end) is bytes ``i .. i + 7`` of ``data`` as a big-endian uint64.

    Reads past ``end`` are masked by the callers; ``data`` is copied with 8 zero
    bytes appended only if it does not already extend 8 bytes past ``end``.
    """
    padded = (
        data
        if data.shape[0] >= end + 8 and data.flags.c_contiguous
        else np.concatenate([data[:end], np.zeros(8, dtype=np.uint8)])
    )
    return np.ndarray(shape=(end + 1,), dtype=">u8", buffer=padded, strides=(1,))


def _sort_keys(
    words: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    done: int,
    nbytes: int,
    run: np.ndarray | None,
    run_bits: int,
) -> np.ndarray:
    """One uint64 per value: its run, then its bytes ``done .. done + nbytes - 1``, then the bytes left.

    The value bytes read zero past the value's end; the low bits say how many
    bytes are left, capped at ``nbytes + 1``: of two values equal so far, the
    one that ends inside the chunk (a prefix of the other) sorts first, and two
    keys are equal only if both values are equal so far and both go on (or are
    equal). The run id on top keeps every tied run in place.
    """
    pos = starts + done
    np.minimum(pos, words.shape[0] - 1, out=pos)
    x: np.ndarray = words[pos]
    del pos
    x = x.byteswap(inplace=True).view(np.uint64)  # native order, same bytes: no second copy
    left = lengths - done
    x &= _KEEP[np.clip(left, 0, nbytes)]
    x >>= np.uint64(64 - 8 * nbytes - _LEFT_BITS)
    x |= np.minimum(left, nbytes + 1).astype(np.uint64)
    if run is not None:
        x |= run.astype(np.uint64) << np.uint64(64 - run_bits)
    return x


def _equal_leading_bytes(x: np.ndarray, nbytes: int) -> np.ndarray:
    """Equal leading value bytes (0..nbytes) of two sort keys of one run, given their xor."""
    out = np.zeros(x.shape[0], dtype=np.int64)
    for j in range(1, nbytes + 1):
        out += (x >> np.uint64(_LEFT_BITS + 8 * (nbytes - j))) == 0
    return out


def sort_unique(data: np.ndarray, offsets: np.ndarray) -> SortedKeys:
    """Sort the values ``data[offsets[i]:offsets[i + 1]]`` bytewise, drop duplicates, compute LCPs.

    ``data`` may extend past ``offsets[-1]`` (8 spare bytes there save a copy of the buffer).
    """
    k = offsets.shape[0] - 1
    starts = np.asarray(offsets[:-1], dtype=np.int64)
    lengths = np.diff(offsets).astype(np.int64, copy=False)
    if k == 0:
        return SortedKeys(data, starts, np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64), 0)
    words = _u64_at_every_byte(data, int(offsets[-1]))

    nbytes = (64 - _LEFT_BITS) // 8
    key = _sort_keys(words, starts, lengths, 0, nbytes, None, 0)
    order = np.argsort(key)
    c, ln = key[order], lengths[order]
    del key
    lcp = np.zeros(k, dtype=np.int64)  # lcp[i]: sorted value i against sorted value i - 1
    dup = np.zeros(k, dtype=bool)
    # Runs still tied, as slots of ``order`` (pos); every member is equal on its first ``done`` bytes.
    pos = np.arange(k, dtype=np.int64)
    done = 0
    first_round, run_bits = True, 0
    while True:
        x = c[1:] ^ c[:-1]
        tied = x == 0
        tied &= np.minimum(ln[1:], ln[:-1]) > done + nbytes
        # pairs in one run that this round told apart: their LCP is known now
        boundary = ~tied if first_round else (x >> np.uint64(64 - run_bits) == 0) & ~tied
        split = np.nonzero(boundary)[0]
        at = pos[split + 1]
        shorter = np.minimum(ln[split + 1], ln[split])
        lcp[at] = np.minimum(done + _equal_leading_bytes(x[split], nbytes), shorter)
        dup[at] = x[split] == 0
        member = np.zeros(pos.shape[0], dtype=bool)
        member[1:] = tied
        member[:-1] |= tied
        keep = np.nonzero(member)[0]
        del member, boundary, split, at, shorter, x, c
        if keep.size == 0:
            break
        done += nbytes
        first_round = False
        run = np.cumsum(np.concatenate(([1], ~tied)))[keep]  # a new run wherever a pair is not tied
        run_bits = int(run[-1]).bit_length()
        nbytes = min(8, (64 - _LEFT_BITS - run_bits) // 8)
        pos, ln = pos[keep], ln[keep]
        del keep, tied
        idx = order[pos]
        key = _sort_keys(words, starts[idx], ln, done, nbytes, run, run_bits)
        del run
        sub = np.argsort(key)  # the run id on top keeps runs in place, sorted within
        order[pos] = idx[sub]
        c, ln = key[sub], ln[sub]
        del key, sub, idx

    keep = np.nonzero(~dup)[0]
    unique = order[keep]
    out_offsets = np.zeros(unique.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths[unique], out=out_offsets[1:])
    return SortedKeys(data, starts[unique], out_offsets, lcp[keep], k - keep.shape[0])
