"""A compiled enum-then-continuation schema and its per-sequence matchers.

The output ``PREFIX + json(name) + TAIL + C`` is served in three phases:

1. **name field**: a trie state n of the keys ``PREFIX + json(name)``; allowed =
   the trie's tokens at n, plus the straddling tokens of every (n, head) entry
   the compile's walk found (tokens closing the name and reading on);
2. **tail**: i bytes of the literal TAIL read after the closing quote
   (i = 0 is the key's leaf); allowed = tail row i of the straddle table;
3. **continuation**: a copy of the engine's handover template, fed the bytes x
   a straddling token carried past the tail; the engine's own mask and
   advance, EOS exactly where the engine allows it.

Phases 1 and 2 are rows of precomputed (word, bits) pairs, written in
O(words set); only phase 3 touches the engine. This module imports numpy
alone; the engine is imported when the first matcher needs it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from triec.csr import concat_ranges
from triec.errors import TriecError
from triec.memo import per_table
from triec.word_masks import StateWords, words_from_pairs

if TYPE_CHECKING:
    from triec.continuation import Continuation
    from triec.runtime import MaskTable
    from triec.straddle import StraddleTable
    from triec.vocabulary import Vocabulary


class SchemaTable:
    """Trie of the name keys + straddle tables + the recorded convention and continuation."""

    kind = "tool-schema"

    def __init__(
        self,
        *,
        trie: MaskTable,
        straddles: StraddleTable,
        entry_state: np.ndarray,
        entry_row: np.ndarray,
        entry_leaf: np.ndarray,
        names: list[str] | dict[bytes, str] | None,
        prefix: bytes,
        tail: bytes,
        name_property: str,
        next_property: str,
        continuation_text: str,
        continuation_sha256: str,
        engine: str,
        engine_version: str | None,
        convention: dict[str, Any],
        vocab: Vocabulary | None = None,
    ) -> None:
        self.trie = trie
        self.straddles = straddles
        self.entry_state = entry_state
        self.entry_row = entry_row
        self.entry_leaf = entry_leaf
        self._names = names
        self.prefix = prefix
        self.tail = tail
        self.name_property = name_property
        self.next_property = next_property
        self.continuation_text = continuation_text
        self.continuation_sha256 = continuation_sha256
        self.engine = engine
        self.engine_version = engine_version
        self.convention = dict(convention)
        self.vocab = vocab
        self._continuations: dict[str, Continuation] = {}
        self._twins: dict[str, SchemaTable] = {}
        self.source: str | None = None
        self.header: dict[str, Any] | None = None

    # ------------------------------------------------------------- shape

    @property
    def vocab_size(self) -> int:
        return self.trie.vocab_size

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return self.trie.eos_token_ids

    @property
    def tokenizer_fingerprint(self) -> str:
        return self.trie.tokenizer_fingerprint

    @property
    def tokenizer_name(self) -> str:
        return self.trie.tokenizer_name

    @property
    def words_per_row(self) -> int:
        return self.trie.words_per_row

    @property
    def num_states(self) -> int:
        """Trie states (the name field); the tail adds ``len(tail) - 1`` more."""
        return self.trie.num_states

    @property
    def tail_len(self) -> int:
        return len(self.tail)

    @property
    def num_values(self) -> int:
        return self.trie.num_values

    @property
    def names(self) -> list[str]:  # noqa: D401
        """Name of each value index (the trie's key order: sorted by the keys' bytes)."""
        if isinstance(self._names, dict):  # from a compile: key -> name, resolved on first use
            self._names = [self._names[k] for k in self.trie.value_bytes]
        if self._names is None:
            import json

            n = len(self.prefix)
            self._names = [json.loads(k[n:].decode("utf-8")) for k in self.trie.value_bytes]
        return self._names

    def __repr__(self) -> str:
        return (
            f"SchemaTable(names={self.num_values}, states={self.num_states}, tail={self.tail!r}, "
            f"straddle_rows={self.straddles.num_rows}, entries={self.entry_state.shape[0]}, engine={self.engine})"
        )

    def entries_at(self, state: int) -> range:
        lo = int(np.searchsorted(self.entry_state, state, side="left"))
        hi = int(np.searchsorted(self.entry_state, state, side="right"))
        return range(lo, hi)

    # ------------------------------------------------------------- engine

    def check_tokenizer(self, fingerprint_or_vocab: Any) -> None:
        """As :meth:`MaskTable.check_tokenizer`."""
        self.trie.check_tokenizer(fingerprint_or_vocab)

    def bind(self, vocab: Vocabulary) -> None:
        """Attach the decoded vocabulary the continuation engine needs (checked against the fingerprint)."""
        self.trie.check_tokenizer(vocab)
        self.vocab = vocab

    def _vocabulary(self) -> Vocabulary:
        if self.vocab is None:
            from triec.verify import resolve_vocabulary

            if not self.tokenizer_name:
                raise TriecError("this table records no tokenizer name; call table.bind(vocab) first")
            vocab, problems = resolve_vocabulary(self.tokenizer_name, self.trie)
            if problems:
                from triec.errors import TokenizerMismatch

                raise TokenizerMismatch(f"{problems[0]}; call table.bind(vocab) with the tokenizer it was compiled for")
            self.bind(vocab)
        assert self.vocab is not None
        return self.vocab

    def with_engine(self, engine: str) -> SchemaTable:
        """This table with its continuation run by ``engine``: the same trie and entries, that engine's straddle tables.

        Straddle tables depend on the engine (its continuation language decides which bytes are viable past the
        tail), so they are built (or read from the cache) for it; the head rows are the same for every engine.
        """
        if engine == self.engine:
            return self
        if engine not in ("llguidance", "xgrammar"):
            raise TriecError(f"unknown continuation engine {engine!r}; expected llguidance or xgrammar")
        found = self._twins.get(engine)
        if found is not None:
            return found
        from triec import straddle
        from triec.engines import engine_version

        vocab = self._vocabulary()
        twin = SchemaTable(
            trie=self.trie, straddles=self.straddles, entry_state=self.entry_state, entry_row=self.entry_row,
            entry_leaf=self.entry_leaf, names=self._names, prefix=self.prefix, tail=self.tail,
            name_property=self.name_property, next_property=self.next_property, continuation_text=self.continuation_text,
            continuation_sha256=self.continuation_sha256, engine=engine, engine_version=engine_version(engine),
            convention=self.convention, vocab=vocab,
        )
        st, _ = straddle.load_or_build(vocab, self.tail, engine, self.continuation_text, lambda: twin.continuation())
        if st.num_rows != self.straddles.num_rows or not np.array_equal(st.head_bytes, self.straddles.head_bytes):
            raise TriecError(f"the straddle heads for {engine} differ from the table's; recompile with engine={engine!r}")
        twin.straddles = st
        self._twins[engine] = twin
        return twin

    def continuation(self, engine: str | None = None) -> Continuation:
        """The engine's handover template (built on first use: the engine's tokenizer setup and a small compile)."""
        name = engine or self.engine
        if name != self.engine:
            return self.with_engine(name).continuation()
        found = self._continuations.get(name)
        if found is None:
            import json

            from triec.continuation import PLACEHOLDER, Continuation, driver
            from triec.encoding import json_string_literal

            drv = driver(name, self._vocabulary())
            found = Continuation(
                drv, json.loads(self.continuation_text), self.name_property,
                self.prefix + json_string_literal(PLACEHOLDER).encode("utf-8") + self.tail,
            )
            self._continuations[name] = found
        return found

    def matcher(self, engine: str | None = None) -> SchemaMatcher:
        """A fresh per-sequence matcher (xgrammar / llguidance style); ``engine`` overrides the compile's."""
        if engine is not None and engine != self.engine:
            return self.with_engine(engine).matcher()
        return SchemaMatcher(self, self.continuation())

    def matcher_at(self, state: int, tail_offset: int | None = None, value: int = -1) -> SchemaMatcher:
        """A matcher positioned at trie state ``state``, or at ``tail_offset`` after value ``value`` (for checks)."""
        m = self.matcher()
        if tail_offset is None:
            if state in _leaf_value(self):
                m._enter_leaf(state)
            else:
                m._src = int(state)
        else:
            if not 0 <= tail_offset < self.tail_len or not 0 <= value < self.num_values:
                raise IndexError(f"tail offset {tail_offset} / value {value} out of range")
            m._value, m._src = int(value), self.num_states + int(tail_offset)
        return m

    def mask_writer(self, max_batch: int = 1) -> SchemaMaskWriter:
        """Rows for batches of matchers, clearing only what it set (O(allowed) in the name field)."""
        return SchemaMaskWriter(self, max_batch)

    def fill_bitmask(self, matchers: Sequence[SchemaMatcher], out: np.ndarray) -> np.ndarray:
        """One full row per matcher into ``out[:len(matchers)]`` (every word written)."""
        for i, m in enumerate(matchers):
            m.fill_bitmask(out[i])
        return out[: len(matchers)]

    # ------------------------------------------------------------- I/O

    def save(self, path: str | os.PathLike[str], *, compress: bool | None = None) -> int:
        from triec.artifact import write_artifact

        return write_artifact(self, path, compress=compress)  # type: ignore[arg-type]


class SourceWords:
    """(word, bits) rows of every non-engine position: trie states 0..S-1, then tail offsets S + i."""

    def __init__(self, sw: StateWords, num_states: int) -> None:
        self.num_states = num_states
        self.offsets = sw.offsets
        self.words = sw.words
        self.bits = sw.bits
        self.offsets_list: list[int] = sw.offsets.tolist()
        self.words_list: list[int] = sw.words.tolist()
        self.bits_list: list[int] = sw.bits.tolist()


@per_table
def source_words(table: SchemaTable) -> SourceWords:
    """Built once per table: O(trie pairs + straddle pairs)."""
    trie, st = table.trie, table.straddles
    s, n = trie.num_states, table.tail_len
    off = np.asarray(trie.allowed_offsets, dtype=np.int64)
    rows = [np.repeat(np.arange(s, dtype=np.int64), np.diff(off))]
    toks = [np.asarray(trie.allowed_tokens, dtype=np.int64)]
    # straddles starting at trie states
    e_row = table.entry_row.astype(np.int64)
    lo = st.offsets[e_row]
    cnt = st.offsets[e_row + 1] - lo
    rows.append(np.repeat(table.entry_state.astype(np.int64), cnt))
    toks.append(st.tokens[concat_ranges(lo, cnt)].astype(np.int64))
    # tail rows at S + i; a leaf reads tail row 0 through its own id
    cnt_t = np.diff(st.offsets[: n + 1])
    rows.append(np.repeat(np.arange(s, s + n, dtype=np.int64), cnt_t))
    toks.append(st.tokens[: int(st.offsets[n])].astype(np.int64))
    sw = words_from_pairs(s + n, np.concatenate(rows), np.concatenate(toks), table.words_per_row)
    return SourceWords(sw, s)


@per_table
def _leaf_value(table: SchemaTable) -> dict[int, int]:
    return {int(s): i for i, s in enumerate(table.trie.value_state.tolist())}


@per_table
def _row_maps(table: SchemaTable) -> list[dict[int, int]]:
    """Per straddle row: token -> entry index in the straddle arrays."""
    st = table.straddles
    toks = st.tokens.tolist()
    off = st.offsets.tolist()
    return [{toks[k]: k for k in range(off[r], off[r + 1])} for r in range(st.num_rows)]


class SchemaMatcher:
    """One sequence: ``allowed``, ``fill_bitmask``, ``accept_token``, ``is_terminated``, ``value``, ``reset``."""

    def __init__(self, table: SchemaTable, cont: Continuation) -> None:
        self.table = table
        self._cont_src = cont
        self._drv = cont.driver
        self._words = source_words(table)
        self._leaf = _leaf_value(table)
        self._rows = _row_maps(table)
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
        from triec.engines import row_ids

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
