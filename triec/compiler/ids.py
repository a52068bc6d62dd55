"""``triec.compile_ids``: semantic-ID catalogs, values given as token-id sequences, into a token-trie table.

Generative retrieval and recommendation (DSI, TIGER) decode items spelled as a few code tokens each. There is no
text to walk: the table is the token trie of the items, and a state's row is its children. It is an ordinary
:class:`~triec.runtime.table.MaskTable` in the full layout (format version 1), read by the same runtime, writer,
device table and integrations: one state per token edge, numbered in preorder with siblings by token id; the
pair (t, child) in the parent's row; EOS at the states where an item ends; ``value_lcp`` counted in tokens;
``state_byte`` all zero (states carry no bytes; a value's token is the one its state is entered by). The header
says ``build_options.tokenization = "ids"`` (docs/format.md, "Ids tables"; docs/decisions.md D-entry on ids).

The build is vectorized (a million items of four codes: about a second): sort the items, their longest common
prefixes in tokens, one state per token past that prefix, and each item's first new state hung from the state
at that depth on its path (:func:`triec.runtime.ids.first_parents`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from itertools import chain, pairwise
from typing import Any

import numpy as np

from triec._arrays import concat_ranges
from triec.errors import ValuesError
from triec.runtime import MaskTable
from triec.runtime.ids import first_parents

MAX_ITEM_IDS = 1024
"""Most ids one item holds (a semantic ID is a handful; a longer line is a mistake, not an item)."""
MAX_STATES = 2**31 - 2
"""Most token edges one table holds: states and value ids are int32 in the format."""
_PADDED = 1 << 26
"""Items are sorted as one padded matrix (numpy's lexsort) up to this many cells, else by Python's sort."""
_IDS_TEXT = re.compile(rb"[0-9 \t\r\n]*")


class _Where:
    """``where[i]`` of a file's items: ``FILE:LINE``, computed only when an error names one."""

    def __init__(self, source: str, lines: np.ndarray | None = None) -> None:
        self.source = source
        self.lines = lines

    def __getitem__(self, i: int) -> str:
        if self.lines is None:
            return f"item {i}"
        return f"{self.source}:{int(self.lines[i])}"


class Items:
    """A catalog's items as one CSR (``flat`` ids, ``offsets``), and where each came from, to name it."""

    def __init__(self, flat: np.ndarray, offsets: np.ndarray, where: _Where) -> None:
        self.flat = flat
        self.offsets = offsets
        self.where = where  # where[i]: "FILE:LINE" or "items item i"

    def __len__(self) -> int:
        return int(self.offsets.shape[0]) - 1

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


def items_from_python(items: Iterable[Sequence[int]]) -> Items:
    """The items of :func:`compile_ids` (each a sequence of ints: lists, tuples, numpy arrays; or one 2-D integer
    array, an item a row, read without a Python object per item)."""
    if isinstance(items, np.ndarray) and items.ndim == 2 and items.dtype.kind in "iu":
        k, width = items.shape
        offsets = np.arange(k + 1, dtype=np.int64) * width
        return Items(np.ascontiguousarray(items, dtype=np.int64).reshape(-1), offsets, _Where(""))
    seqs = items if isinstance(items, list) else list(items)
    for i, seq in enumerate(seqs):
        if isinstance(seq, str | bytes) or not hasattr(seq, "__len__"):
            raise ValuesError(f"item {i}: expected a sequence of token ids, found {type(seq).__name__}")
    lengths = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs))
    try:
        flat = np.fromiter(chain.from_iterable(seqs), dtype=np.int64, count=int(lengths.sum()))
    except (TypeError, ValueError, OverflowError):
        flat = None
    if flat is None or (
        flat.size and not all(isinstance(t, int | np.integer) and not isinstance(t, bool) for s in seqs for t in s)
    ):
        for i, seq in enumerate(seqs):
            for t in seq:
                if not isinstance(t, int | np.integer) or isinstance(t, bool):
                    raise ValuesError(f"item {i}: token id {t!r} is not an integer")
                if not -(2**62) < int(t) < 2**62:
                    raise ValuesError(f"item {i}: token id {int(t)} is out of range")
    assert flat is not None
    offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return Items(flat, offsets, _Where(""))


def parse_ids(raw: bytes, source: str) -> Items:
    """One item per line, decimal token ids separated by spaces or tabs (``triec compile --ids FILE``).

    Every line holds an item: a blank line (but the newline ending the file), anything but ids, or a line of
    more than :data:`MAX_ITEM_IDS` ids is a :class:`ValuesError` naming ``FILE:LINE``."""
    if raw.endswith(b"\n"):
        raw = raw[:-1]
    if not raw:
        raise ValuesError(f"{source}: no items: a table needs at least one")
    if not _IDS_TEXT.fullmatch(raw):
        for number, line in enumerate(raw.split(b"\n"), start=1):
            bad = re.search(rb"[^0-9 \t\r]+", line)
            if bad is not None:
                word = line[bad.start() :].split()[0].decode("utf-8", "replace")
                raise ValuesError(f"{source}:{number}: {word[:40]!r} is not a token id (decimal digits only)")
    flat, line_of = _decimal_words(np.frombuffer(raw, dtype=np.uint8), source)
    num_lines = raw.count(b"\n") + 1
    counts = np.bincount(line_of, minlength=num_lines)
    empty = np.flatnonzero(counts == 0)
    if empty.size:
        raise ValuesError(
            f"{source}:{int(empty[0]) + 1}: empty line: every line is one item, its ids separated by spaces"
        )
    long = np.flatnonzero(counts > MAX_ITEM_IDS)
    if long.size:
        i = int(long[0])
        raise ValuesError(f"{source}:{i + 1}: {counts[i]:,} ids on one line: an item holds at most {MAX_ITEM_IDS:,}")
    offsets = np.zeros(num_lines + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return Items(flat, offsets, _Where(source, np.arange(1, num_lines + 1)))


def _decimal_words(buf: np.ndarray, source: str) -> tuple[np.ndarray, np.ndarray]:
    """(value, 0-based line) int64 of every run of decimal digits in ``buf`` (digits and whitespace only), in
    O(bytes) numpy and O(ids) memory: the runs' ends, then one pass per place (the k-th digit from each run's end,
    times 10 ** k). A run of more than 18 digits (past int64) is a :class:`ValuesError` naming its line."""
    digit = buf >= 48  # the text holds digits (48-57) and whitespace (9, 10, 13, 32) only
    edge = np.diff(digit.astype(np.int8), prepend=np.int8(0), append=np.int8(0))
    starts, ends = np.flatnonzero(edge == 1), np.flatnonzero(edge == -1)
    newlines = np.flatnonzero(buf == 10)
    line_of = np.searchsorted(newlines, starts)
    width = ends - starts
    if width.size and int(width.max()) > 18:
        k = int(np.argmax(width > 18))
        word = bytes(buf[starts[k] : min(ends[k], starts[k] + 40)]).decode()
        raise ValuesError(f"{source}:{int(line_of[k]) + 1}: token id {word} is out of range")
    values = np.zeros(starts.size, dtype=np.int64)
    scale = 1
    for k in range(int(width.max()) if width.size else 0):  # the k-th digit from each run's end, where it has one
        has = np.flatnonzero(width > k)
        values[has] += (buf[ends[has] - 1 - k].astype(np.int64) - 48) * scale
        scale *= 10
    return values, line_of


def check_items(items: Items, vocab_size: int, eos_token_ids: Sequence[int]) -> None:
    """Every id a content token of the mask (``0 .. vocab_size - 1``, no EOS id), every item non-empty and at most
    :data:`MAX_ITEM_IDS` long: else :class:`ValuesError` naming the first item that is not."""
    if len(items) == 0:
        raise ValuesError("no items: a table needs at least one")
    lengths = items.lengths()
    if int(lengths.min()) == 0:
        raise ValuesError(f"{items.where[int(np.argmin(lengths))]}: an empty item (a value is at least one id)")
    if int(lengths.max()) > MAX_ITEM_IDS:
        i = int(np.argmax(lengths))
        raise ValuesError(f"{items.where[i]}: {lengths[i]:,} ids: an item holds at most {MAX_ITEM_IDS:,}")
    if int(lengths.sum()) > MAX_STATES:
        raise ValuesError(f"{int(lengths.sum()):,} ids: over the {MAX_STATES:,} a table holds (state ids are int32)")
    flat = items.flat
    eos = np.asarray(sorted(eos_token_ids), dtype=np.int64)
    bad = (flat < 0) | (flat >= vocab_size)
    is_eos = np.isin(flat, eos) if eos.size else np.zeros(flat.shape, dtype=bool)
    found = np.flatnonzero(bad | is_eos)
    if found.size:
        at = int(found[0])
        i = int(np.searchsorted(items.offsets, at, side="right")) - 1
        t = int(flat[at])
        why = (
            f"is an EOS id ({', '.join(map(str, eos.tolist()))}): it ends the output and is never part of an item"
            if is_eos[at]
            else f"is outside the mask 0..{vocab_size - 1} (vocab_size {vocab_size})"
        )
        raise ValuesError(f"{items.where[i]}: token id {t} {why}")


def sort_items(items: Items) -> tuple[np.ndarray, np.ndarray]:
    """(order, lcp): the items' indices in token order (a prefix before its extensions) and each sorted item's
    longest common prefix with the one before it, in tokens (0 for the first)."""
    k = len(items)
    lengths = items.lengths()
    width = int(lengths.max())
    if k * width <= _PADDED:
        padded = np.full((k, width), -1, dtype=np.int64)  # -1 sorts before every id: a prefix first
        cols = np.arange(width, dtype=np.int64)
        mask = cols[None, :] < lengths[:, None]
        padded[mask] = items.flat
        order = np.lexsort(padded.T[::-1])
        padded = padded[order]
        differ = padded[1:] != padded[:-1]
        first = np.where(differ.any(axis=1), differ.argmax(axis=1), width)
        shorter = np.minimum(lengths[order][1:], lengths[order][:-1])
        lcp = np.r_[0, np.minimum(first, shorter)].astype(np.int64)
        return order, lcp
    seqs = [
        items.flat[a:b].tolist() for a, b in zip(items.offsets[:-1].tolist(), items.offsets[1:].tolist(), strict=True)
    ]
    order_list = sorted(range(k), key=seqs.__getitem__)
    lcp_list = [0]
    for a, b in pairwise(order_list):
        x, y = seqs[a], seqs[b]
        n, j = min(len(x), len(y)), 0
        while j < n and x[j] == y[j]:
            j += 1
        lcp_list.append(j)
    return np.asarray(order_list, dtype=np.int64), np.asarray(lcp_list, dtype=np.int64)


def ids_table(items: Items, table_fields: dict[str, Any]) -> tuple[MaskTable, int]:
    """The token trie of checked ``items`` as a mask table, and how many duplicates were dropped."""
    order, lcp = sort_items(items)
    lengths = items.lengths()[order]
    # an item equal to the one before it (sorted: equal items are adjacent) shares all of it and is as long
    keep = np.r_[True, (lcp[1:] < lengths[1:]) | (lengths[:-1] != lengths[1:])]
    duplicates = int((~keep).sum())
    if duplicates:
        order, lcp, lengths = order[keep], lcp[keep], lengths[keep]
        # the item after a dropped duplicate shares with the kept copy what it shared with the duplicate
    new = lengths - lcp  # states each item creates: >= 1 (sorted, distinct, a prefix before its extensions)
    value_state = np.cumsum(new)
    num_states = int(value_state[-1]) + 1
    starts = items.offsets[:-1][order]
    tokens = items.flat[concat_ranges(starts + lcp, new)]  # the token into each created state, states 1 .. S-1 in order
    src = np.arange(-1, num_states - 1, dtype=np.int64)[1:]  # a created state hangs from the one before it...
    firsts = np.r_[0, value_state[:-1]]  # ... but an item's first new state (index into src: state - 1)
    src[firsts] = first_parents(value_state, lcp)
    at = np.argsort(src, kind="stable")  # siblings keep their creation order: ascending tokens
    offsets = np.zeros(num_states + 1, dtype=np.uint32)
    np.cumsum(np.bincount(src, minlength=num_states), out=offsets[1:])
    table = MaskTable.from_compile(
        allowed_offsets=offsets,
        allowed_tokens=tokens[at].astype(np.int32),
        allowed_next=(at + 1).astype(np.int32),
        value_state=value_state.astype(np.int32),
        value_lcp=lcp.astype(np.int32),
        state_byte=np.zeros(num_states, dtype=np.uint8),
        **table_fields,
    )
    return table, duplicates
