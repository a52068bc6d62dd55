"""Serving a schema table: one matcher per sequence, one writer for a batch of them.

A matcher is in the name field (a trie state), in the literal tail (an offset
into it), or in the continuation (a copy of the engine's handover template);
the first two read precomputed rows (:mod:`triec.schema.rows`), only the last
asks the engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from triec._arrays import row_ids
from triec.schema.rows import leaf_value, row_maps, source_words

if TYPE_CHECKING:
    from triec.schema.continuation import Continuation
    from triec.schema.table import SchemaTable


class SchemaMatcher:
    """One sequence: ``allowed``, ``fill_bitmask``, ``accept_token``, ``is_terminated``, ``value``, ``reset``."""

    def __init__(self, table: SchemaTable, cont: Continuation) -> None:
        self.table = table
        self._cont_src = cont
        self._drv = cont.driver
        self._words = source_words(table)
        self._leaf = leaf_value(table)
        self._rows = row_maps(table)
        self._s = table.num_states
        self._n = table.tail_len
        self._eos = tuple(table.eos_token_ids)
        self.reset()

    def reset(self) -> None:
        """Back to the start: nothing emitted."""
        self._src = 0  # trie state, or S + tail offset; -1 in the continuation
        self._value = -1
        self._cont: Any = None
        self._done = False
        if 0 in self._leaf:  # a key can't be empty, but keep the invariant: a leaf reads tail row 0
            self._enter_leaf(0)

    def move_to(self, state: int, tail_offset: int | None = None, value: int = -1) -> None:
        """Position at trie state ``state``, or at ``tail_offset`` bytes into the tail after value ``value`` (checks
        start there without decoding a path)."""
        self.reset()
        if tail_offset is None:
            if state in self._leaf:
                self._enter_leaf(state)
            else:
                self._src = int(state)
        else:
            if not 0 <= tail_offset < self._n or not 0 <= value < self.table.num_values:
                raise IndexError(f"tail offset {tail_offset} / value {value} out of range")
            self._value, self._src = int(value), self._s + int(tail_offset)

    def copy(self) -> SchemaMatcher:
        """An independent matcher in the same position (the engine's state copied, when in the continuation)."""
        c = SchemaMatcher(self.table, self._cont_src)
        c._src, c._value, c._done = self._src, self._value, self._done
        c._cont = None if self._cont is None else self._drv.copy(self._cont)
        return c

    # ------------------------------------------------------------- state

    @property
    def value(self) -> str | None:
        """The chosen name, known once its closing quote has been read (the handover to the tail)."""
        return None if self._value < 0 else self.table.names[self._value]

    @property
    def value_index(self) -> int:
        return self._value

    @property
    def phase(self) -> str:
        if self._done:
            return "terminated"
        if self._cont is not None:
            return "continuation"
        return "tail" if self._src >= self._s or self._value >= 0 else "name"

    def is_terminated(self) -> bool:
        """True after EOS was accepted at the end of a complete output."""
        return self._done

    def _enter_leaf(self, leaf: int) -> None:
        self._value = self._leaf[leaf]
        self._src = self._s  # tail offset 0

    def _go(self, k: int) -> None:
        """Follow straddle entry k (the value is already set)."""
        st = self.table.straddles
        j = int(st.target[k])
        if j < self._n:
            self._src = self._s + j
            return
        self._cont = self._cont_src.new(st.rest_of(k))
        self._src = -1

    # ------------------------------------------------------------- decoding

    def accept_token(self, token: int) -> bool:
        """Advance by one token; False (and no change) when it is not allowed here."""
        if self._done:
            return False
        t = int(token)
        if self._cont is not None:
            ok = self._drv.accept(self._cont, t)
            if ok and t in self._eos:
                self._done = True
            return ok
        src = self._src
        if src >= self._s:  # tail offset
            k = self._rows[src - self._s].get(t)
            if k is None:
                return False
            self._go(k)
            return True
        trie = self.table.trie
        lo, hi = int(trie.allowed_offsets[src]), int(trie.allowed_offsets[src + 1])
        if hi > lo:
            toks = trie.allowed_tokens[lo:hi]
            i = int(np.searchsorted(toks, t))
            if i < hi - lo and int(toks[i]) == t:
                nxt = int(trie.allowed_next[lo + i])
                if nxt in self._leaf:
                    self._enter_leaf(nxt)
                else:
                    self._src = nxt
                return True
        tb = self.table
        for e in tb.entries_at(src):
            k = self._rows[int(tb.entry_row[e])].get(t)
            if k is not None:
                self._value = self._leaf[int(tb.entry_leaf[e])]
                self._go(k)
                return True
        return False

    def accept_tokens(self, tokens: Sequence[int]) -> int:
        """Accept tokens in order; returns how many were accepted (stops at the first refused)."""
        n = 0
        for t in tokens:
            if not self.accept_token(t):
                break
            n += 1
        return n

    def fill_bitmask(self, row: np.ndarray) -> None:
        """Write the whole row (xgrammar's layout). In the name field and tail: a memset plus the words set."""
        if self._cont is not None and not self._done:
            self._drv.fill(self._cont, row)
            return
        row.fill(0)
        if self._done:
            for e in self._eos:
                row[e >> 5] |= np.int32(np.uint32(1 << (e & 31)).view(np.int32))
            return
        w = self._words
        lo, hi = w.offsets_list[self._src], w.offsets_list[self._src + 1]
        row[w.words[lo:hi]] = w.bits[lo:hi]

    def allowed(self) -> np.ndarray:
        """Allowed token ids, ascending (EOS included where the output is complete)."""
        row = np.zeros(self.table.words_per_row, dtype=np.int32)
        self.fill_bitmask(row)
        return row_ids(row)

    def words_source(self) -> int:
        """The precomputed row this matcher reads (-1 in the continuation)."""
        return -1 if self._cont is not None or self._done else self._src


class SchemaMaskWriter:
    """Rows for up to ``max_batch`` matchers in one owned buffer.

    Name-field and tail rows cost the words set now plus those set last time;
    a row the engine wrote (continuation) is zeroed in full before its next
    name-field use. The returned view is valid until the next ``fill``; do not
    write to it.
    """

    def __init__(self, table: SchemaTable, max_batch: int = 1) -> None:
        if int(max_batch) < 1:
            raise ValueError(f"max_batch must be >= 1, not {max_batch}")
        self.table = table
        self.max_batch = int(max_batch)
        self.width = table.words_per_row
        self._buf = np.zeros((self.max_batch, self.width), dtype=np.int32)
        self._mv = [memoryview(self._buf[i]) for i in range(self.max_batch)]
        self._words = source_words(table)
        self._last: list[int] = [-2] * self.max_batch  # source written per row; -1 = full row (engine); -2 = clean

    @property
    def buffer(self) -> np.ndarray:
        return self._buf

    def _clear(self, i: int) -> None:
        last = self._last[i]
        if last == -2:
            return
        if last == -1:
            self._buf[i].fill(0)
        else:
            w = self._words
            lo, hi = w.offsets_list[last], w.offsets_list[last + 1]
            if hi - lo <= 12:
                mv = self._mv[i]
                wl = w.words_list
                for k in range(lo, hi):
                    mv[wl[k]] = 0
            else:
                self._buf[i][w.words[lo:hi]] = 0
        self._last[i] = -2

    def fill(self, matchers: Sequence[SchemaMatcher]) -> np.ndarray:
        """Write one row per matcher and return ``buffer[:len(matchers)]``."""
        n = len(matchers)
        if n > self.max_batch:
            raise ValueError(f"{n} matchers exceed this writer's max_batch of {self.max_batch}")
        w = self._words
        engine_rows: dict[Any, tuple[list[Any], list[int]]] = {}
        for i in range(n):
            m = matchers[i]
            src = m.words_source()
            if src >= 0 and src == self._last[i]:
                continue
            self._clear(i)
            if src < 0:
                if m._cont is not None and not m._done:  # the engine writes the whole row: batched below
                    handles, rows = engine_rows.setdefault(m._drv, ([], []))
                    handles.append(m._cont)
                    rows.append(i)
                else:
                    m.fill_bitmask(self._buf[i])
                self._last[i] = -1
                continue
            lo, hi = w.offsets_list[src], w.offsets_list[src + 1]
            if hi - lo <= 12:
                mv = self._mv[i]
                wl, bl = w.words_list, w.bits_list
                for k in range(lo, hi):
                    mv[wl[k]] = bl[k]
            else:
                self._buf[i][w.words[lo:hi]] = w.bits[lo:hi]
            self._last[i] = src
        for drv, (handles, rows) in engine_rows.items():
            drv.fill_many(handles, self._buf, rows)
        return self._buf[:n]
