"""Per-sequence serving of a schema table: ``SchemaMatcher`` (one sequence), ``SchemaMaskWriter`` (a batch).

Exactness at a slot's edges rests on three facts the compile checks:

* no token of the vocabulary holds ``"`` followed by a marker's first byte, so the
  engine's own mask never lets a token into a marker;
* at a slot's opening quote the engine takes the marker and refuses
  :data:`~triec.schema.slot.OTHER`, which any free string would take: two probes
  (a few microseconds) tell a slot from an extra key or a string value;
* nothing but the slot's values can start at its position (the compile leaves
  ambiguous enums in the engine), and the grammar after a value depends on the
  value at most through its own grammar.

So the allowed set in the engine is the engine's row plus the slot entries the
probes admit; in a slot it is the precomputed row plus the crossing tokens whose
rest the grammar after the value accepts (judged once per grammar, or once per
visit when the entering engine resumes). A token that crosses several
boundaries is read byte by byte by :meth:`SchemaMatcher._consume`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np

from triec._arrays import find_sorted
from triec._memo import per_table
from triec.errors import TriecError
from triec.runtime.bitmask import are_set, ids_of, is_set, set_few
from triec.runtime.matcher import TokenSteps, undo, whole_chars
from triec.schema.parts import SchemaParts
from triec.schema.slot import DYNAMIC, HANDOVER, OTHER, TAIL, Groups, Slot
from triec.tokenizer.index import token_index

ENGINE, SLOT, TAILP, DONE = 0, 1, 2, 3
PHASES = ("engine", "slot", "tail", "terminated")
_EMPTY = np.zeros(0, dtype=np.int64)
Table = TypeVar("Table", bound=SchemaParts)
"""The table's class (a :class:`~triec.schema.table.SchemaTable`): what a matcher's ``table`` is."""
_OTHER = OTHER.encode("utf-8")


@dataclass
class State:
    """Where a sequence is. Transitions build new states; an engine handle is never changed once shared."""

    phase: int
    g: int = -1  # the grammar of the engine handle
    m: Any = None  # ENGINE: the live handle; SLOT/TAIL: the handle after the marker (the entering engine resumes)
    s: int = -1  # slot
    pos: int = 0  # trie state (SLOT) or tail offset (TAIL)
    val: int = -1  # the value whose key was closed
    chosen: tuple[tuple[int, int], ...] = ()  # (slot, value) of every value read so far
    visit: int = 0  # slot entries so far
    cache: dict[Any, Any] = field(default_factory=dict)  # per visit: judged tokens, rows after the marker
    fresh: bytes | None = None  # ENGINE: the handle is grammar g's template fed exactly these bytes (else None)
    last: bytes = b""  # triggered tags: the last bytes the engines read (a trigger's prefix must end them to enter)

    def copy(self) -> State:
        return State(
            self.phase,
            self.g,
            self.m,
            self.s,
            self.pos,
            self.val,
            self.chosen,
            self.visit,
            self.cache,
            self.fresh,
            self.last,
        )


class SchemaMatcher(TokenSteps, Generic[Table]):
    """One sequence: ``fill_bitmask``, ``allowed``, ``accept_token``, ``rollback``, ``is_terminated``, ``fork``.

    ``accept_token`` returns False without changing anything for a token the row
    does not allow; EOS ends the sequence where the grammar is complete.
    """

    def __init__(self, table: Table, state: State | None = None) -> None:
        self.table = table
        self.drv = table.driver()
        self._eos = frozenset(table.eos_token_ids)
        self._bytes = _byte_tokens(table)
        self._num_tokens = table.vocabulary().num_tokens
        self.history: list[Any] = []  # per accepted token: 1 (one engine step), 2 (EOS) or the State before it
        # triggered tags: a slot is entered only where the engines' text ends with the trigger but its last byte
        # (that byte is the slot's opening one), so a row probes only the heads that can complete it (D25);
        # an engine step's history is then the ``last`` bytes before it
        self._need = _trigger_prefix(table)
        self._keep = len(self._need)
        self.st = state if state is not None else self._initial()

    def _initial(self) -> State:
        t = self.table
        if t.start_slot >= 0:
            return self._land(State(SLOT, s=t.start_slot, pos=0), 0)
        return State(ENGINE, g=t.start_grammar, m=t.template(t.start_grammar), fresh=b"")

    def reset(self) -> None:
        """Back to the start: nothing emitted."""
        self.history.clear()
        self.st = self._initial()

    # ------------------------------------------------------------- queries

    @property
    def phase(self) -> str:
        return PHASES[self.st.phase]

    def is_terminated(self) -> bool:
        """True after EOS was accepted at the end of a complete output."""
        return self.st.phase == DONE

    @property
    def values(self) -> list[tuple[int, str]]:
        """(slot, value) of every enum value read so far, in order (a format or pattern field's string is not kept)."""
        return [(s, self.table.values_of(s)[v]) for s, v in self.st.chosen]

    @property
    def value(self) -> str | None:
        """The last value read in the first slot (a tool-call table's chosen tool), once its key is closed."""
        for s, v in reversed(self.st.chosen):
            if s == 0:
                return self.table.values_of(0)[v]
        return None

    @property
    def value_index(self) -> int:
        for s, v in reversed(self.st.chosen):
            if s == 0:
                return v
        return -1

    def fork(self) -> SchemaMatcher[Table]:
        """An independent copy at the same point (its rollback history starts empty)."""
        st = self.st.copy()
        if st.m is not None:
            st.m = self.drv.copy(st.m)
        st.cache = dict(st.cache)
        return SchemaMatcher(self.table, st)

    copy = fork

    # ------------------------------------------------------------- rows

    def fill_bitmask(self, row: np.ndarray) -> None:
        """Write the whole row (int32 words, xgrammar's layout, bit set = allowed)."""
        st = self.st
        if st.phase == ENGINE:
            if st.fresh is None:
                self._engine_row(st, row)
            else:
                row[:] = self._fresh_row(st)
            return
        row.fill(0)
        if st.phase == DONE:
            set_few(row, self._eos)
            return
        slot = self.table.slots[st.s]
        src = st.pos if st.phase == SLOT else slot.tail_row(st.pos)
        _or_source(slot, src, row)
        if slot.dynamic[src]:
            set_few(row, self._dynamic_here(st, slot).tolist())

    def allowed(self) -> np.ndarray:
        """Allowed token ids, ascending (EOS included where the output may end)."""
        row = np.zeros(self.table.words_per_row, dtype=np.int32)
        self.fill_bitmask(row)
        return ids_of(row)

    def static_source(self) -> tuple[Slot, int] | None:
        """(slot, source row) when this row is exactly a precomputed one (no engine, no judged tokens), else None."""
        st = self.st
        if st.phase not in (SLOT, TAILP):
            return None
        slot = self.table.slots[st.s]
        src = st.pos if st.phase == SLOT else slot.tail_row(st.pos)
        return None if slot.dynamic[src] else (slot, src)

    def _engine_row(self, st: State, row: np.ndarray) -> None:
        """The engine's row plus every token the probes let into a slot."""
        t = self.table
        self.drv.fill(st.m, row)
        if self._need and not any(st.last.endswith(before) for before in _trigger_tails(t)):
            return  # triggered tags: no head can complete the trigger after this text (free text, mostly)
        for s in t.grammars[st.g].slots:
            slot = t.slots[s]
            mark = slot.marker.encode("utf-8")
            opener = bytes([slot.open])
            ob = int(self._bytes[slot.open])
            need = self._need
            if (ob < 0 or is_set(row, ob)) and st.last.endswith(need) and self._at_slot(st.m, opener, mark):
                _or_source(slot, slot.enter_state, row)
                if slot.dynamic[slot.enter_state]:
                    set_few(row, self._dynamic_here(self._entered(st, s), slot).tolist())
            en = slot.enters
            gates = _head_gates(t)[s]
            if not gates.size:
                continue
            if need:  # triggered tags: only the heads that can complete the trigger here (a handful, no numpy)
                for j, h, before, gate in _trigger_heads(t)[s]:
                    if not st.last.endswith(before) or (gate >= 0 and not is_set(row, gate)):
                        continue
                    if self._at_slot(st.m, h + opener, mark):
                        self._enter_row(st, s, slot, j, h, row)
                continue
            # heads whose gate token (the longest token spelling a prefix of the head and the opener) is allowed
            live = np.flatnonzero((gates < 0) | are_set(row, np.maximum(gates, 0)))
            for j in live.tolist():
                h = en.labels[j]
                if self._at_slot(st.m, h + opener, mark):
                    self._enter_row(st, s, slot, j, h, row)

    def _enter_row(self, st: State, s: int, slot: Slot, j: int, h: bytes, row: np.ndarray) -> None:
        """Add the tokens of entering head ``j`` (the engine stands at the slot after reading ``h``)."""
        en = slot.enters
        _or_source(slot, slot.enter_row(j), row)
        if slot.dynamic[slot.enter_row(j)]:
            at = self._entered(st, s, h)
            lo, hi = en.span(j)
            for k in (np.flatnonzero(en.kind[lo:hi] == DYNAMIC) + lo).tolist():
                if self._rest_ok(at, s, int(en.leaf[k]), en.rest_of(k), int(en.rest_token[k])):
                    set_few(row, (int(en.tokens[k]),))

    def _at_slot(self, m: Any, head: bytes, mark: bytes) -> bool:
        """After ``head`` (ending in the slot's opening byte), does the engine stand at the marker's slot?"""
        return self.drv.probe(m, head + mark) and not self.drv.probe(m, head + _OTHER)

    # ------------------------------------------------------------- judged tokens

    def _dynamic_here(self, st: State, slot: Slot) -> np.ndarray:
        """Tokens of this trie state or tail offset whose rest the grammar after the value must accept."""
        if st.phase == TAILP:
            assert slot.tails is not None  # bound: a matcher's table.vocabulary() binds every slot
            return self._judged(st, slot, slot.tails, st.pos, st.val)
        out = [
            self._judged(st, slot, slot.exits, int(slot.entry_group[k]), int(slot.entry_leaf[k]))
            for k in slot.entries_at(st.pos)
        ]
        return np.concatenate(out) if out else _EMPTY

    def _judged(self, st: State, slot: Slot, groups: Groups, gi: int, val: int) -> np.ndarray:
        vg = slot.value_grammar
        key: Any = (id(groups), gi, int(vg[val])) if vg is not None else (id(groups), gi)
        cache = self.table.row_cache if vg is not None else st.cache
        found = cache.get(key)
        if found is None:  # the group's candidates are found only on a miss: a tail's group can span thousands
            lo, hi = groups.span(gi)
            dyn = np.flatnonzero(groups.kind[lo:hi] == DYNAMIC) + lo
            if not dyn.size:  # nothing to judge: no handover (it would compile the value's grammar for nothing)
                found = _EMPTY
            else:
                after = self._handover(st, st.s, val)
                found = groups.tokens[self._viable(after, st.s, groups, dyn)].astype(np.int64)
            _put(self.table, cache, key, found, vg is not None)
        return found

    def _viable(self, after: State, s: int, groups: Groups, ks: np.ndarray) -> np.ndarray:
        """The candidates ``ks`` whose rest ``after`` accepts (the state right after a value and its tail).

        A rest that is itself a token is judged by the row after the value; any other by its first byte in that
        row first (most rests die there: after a tail only a few bytes can follow), then by reading it."""
        row = self._row_after(after, s).view(np.uint32)
        rt = groups.rest_token[ks]
        known = rt >= 0
        ok = np.zeros(ks.shape[0], dtype=bool)
        t = rt[known].astype(np.int64)
        ok[known] = are_set(row, t)
        unknown = np.flatnonzero(~known)
        if unknown.size:
            first = groups.rest[groups.rest_offsets[ks[unknown]]]
            bt = self._bytes[first].astype(np.int64)
            alive = (bt < 0) | are_set(row, np.maximum(bt, 0))
            for i in unknown[alive].tolist():
                ok[i] = self._consume(after, groups.rest_of(int(ks[i]))) is not None
        return ks[ok]

    def _rest_ok(self, st: State, s: int, val: int, rest: bytes, rest_token: int) -> bool:
        """Is ``rest`` viable right after value ``val``'s key and its slot's tail?"""
        after = self._handover(st, s, val)
        if rest_token >= 0:
            return is_set(self._row_after(after, s), rest_token)
        return self._consume(after, rest) is not None

    def _row_after(self, after: State, s: int) -> np.ndarray:
        """The whole row right after a value (an engine-phase state), cached with what it depends on."""
        if after.fresh is not None:  # the value picked the grammar that follows: its template's row
            return self._fresh_row(after)
        found = after.cache.get(("row",))
        if found is None:
            found = np.zeros(self.table.words_per_row, dtype=np.int32)
            self._engine_row(after, found)
            after.cache[("row",)] = found
        return found

    def _fresh_row(self, st: State) -> np.ndarray:
        """The row of a handle that is its grammar's template fed ``st.fresh``: a function of (g, bytes) alone, so
        one row serves every sequence there (the first rows after each handover into a tool's arguments)."""
        key = ("row", st.g, st.fresh)
        found = self.table.row_cache.get(key)
        if found is None:
            found = np.zeros(self.table.words_per_row, dtype=np.int32)
            self._engine_row(st, found)
            _put(self.table, self.table.row_cache, key, found, True)
        return found

    # ------------------------------------------------------------- transitions

    def _land(self, st: State, state: int) -> State:
        """``st`` at trie state ``state`` of its slot; a key's end goes on into the tail or the grammar after."""
        slot = self.table.slots[st.s]
        v = slot.leaf_value(state)
        if v >= 0:
            return self._leaf(st, v)
        st.phase, st.pos = SLOT, state
        return st

    def _leaf(self, st: State, val: int) -> State:
        slot = self.table.slots[st.s]
        st.val = val
        if slot.has_values:  # a pattern slot's string is not one of a list
            st.chosen = (*st.chosen, (st.s, val))
        if slot.tail:
            st.phase, st.pos = TAILP, 0
            return st
        return self._handover(st, st.s, val)

    def _handover(self, st: State, s: int, val: int) -> State:
        """The engine-phase state right after value ``val`` of slot s and its tail (``st`` unchanged)."""
        slot = self.table.slots[s]
        out = st.copy()
        out.s, out.val = s, val
        out.phase = ENGINE
        if slot.value_grammar is not None:  # the value picks the grammar that follows
            g = int(slot.value_grammar[val])
            out.g, out.m, out.cache, out.fresh = g, self.table.template(g), {}, b""
        else:
            out.fresh = None
        return out  # else the entering engine resumes: its handle already read the marker

    def _entered(self, st: State, s: int, head: bytes = b"") -> State:
        """The state at slot s's entry after the engine read ``head`` (``st`` unchanged)."""
        slot = self.table.slots[s]
        out = st.copy()
        out.cache, out.fresh = {}, None
        out.visit = st.visit + 1
        if slot.value_grammar is None:  # the engine reads the marker (a JSON string) now and resumes after the value
            m = self.drv.copy(st.m)
            spelled = head + b'"' + slot.marker.encode("utf-8") + b'"'
            if not self.drv.feed(m, spelled):
                raise TriecError(f"{self.drv.name} refused the marker it had just accepted ({spelled!r})")
            out.m = m
        else:
            out.m = None
        out.phase, out.s, out.pos, out.val = SLOT, s, slot.enter_state, -1
        return out

    def _slot_start(self, st: State, byte: int) -> int:
        """The slot whose opening byte ``byte`` starts here, or -1."""
        for s in self.table.grammars[st.g].slots:
            slot = self.table.slots[s]
            if slot.open == byte and self._at_slot(st.m, bytes([byte]), slot.marker.encode("utf-8")):
                return s
        return -1

    def _consume(self, st: State, data: bytes) -> State | None:
        """The state after reading ``data`` (any bytes, across any boundaries), or None; ``st`` is not changed."""
        st = st.copy()
        own = False  # whether st.m is ours to feed (a handle shared with the caller is copied first)
        i = 0
        while i < len(data):
            if st.phase == ENGINE:
                opens = self.table.opening_bytes(st.g)
                if data[i] in opens:
                    s = self._slot_start(st, data[i])
                    if s >= 0:
                        st, own = self._entered(st, s), True
                        continue
                j = i + 1  # feed the engine up to the next byte that could open a slot
                while j < len(data) and data[j] not in opens:
                    j += 1
                if not own:
                    st.m, own = self.drv.copy(st.m), True
                if not self.drv.feed(st.m, data[i:j]):
                    return None
                if st.fresh is not None:
                    st.fresh += data[i:j]
                if self._keep:
                    st.last = (st.last + data[i:j])[-self._keep :]
                i = j
            elif st.phase == SLOT:
                slot = self.table.slots[st.s]
                got = slot.walk_bytes(st.pos, data[i:])
                if got is None:
                    return None
                val, state, rest = got
                if val < 0:
                    return self._land(st, state)
                resumes = slot.value_grammar is None
                st = self._leaf(st, val)
                own = own if resumes else st.phase == ENGINE  # a fresh template is ours
                data, i = rest, 0
            elif st.phase == TAILP:
                tail = self.table.slots[st.s].tail
                k = min(len(tail) - st.pos, len(data) - i)
                if data[i : i + k] != tail[st.pos : st.pos + k]:
                    return None
                st.pos += k
                i += k
                if st.pos == len(tail):
                    resumes = self.table.slots[st.s].value_grammar is None
                    st = self._handover(st, st.s, st.val)
                    own = own if resumes else True
            else:
                return None
        return st

    # ------------------------------------------------------------- decoding

    def accept_token(self, token: int) -> bool:
        """Advance by one token; False (and no change) when it is not allowed here."""
        t = int(token)
        st = self.st
        if st.phase == DONE:
            return False
        if st.phase == ENGINE:
            if t in self._eos:
                if self.drv.accept(st.m, t):
                    self.history.append(2)
                    st.phase = DONE
                    return True
                return False
            if t in self.table.crossing(st.g) and 0 <= t < self._num_tokens:
                new = self._consume(st, self.table.vocabulary().token_bytes[t])
                if new is not None and new.visit != st.visit:  # it entered a slot (and maybe left it again)
                    self.history.append(st)
                    self.st = new
                    return True
            if self.drv.accept(st.m, t):
                if self._keep:
                    self.history.append(st.last)
                    st.last = (st.last + self.table.vocabulary().token_bytes[t])[-self._keep :]
                else:
                    self.history.append(1)
                st.fresh = None  # a token the engine took itself: its state is no longer a template's plus bytes
                return True
            return False
        if t in self._eos or not 0 <= t < self._num_tokens:
            return False
        slot = self.table.slots[st.s]
        new = None
        if st.phase == SLOT:
            toks, nxt = slot.trie.transitions(st.pos)
            i = find_sorted(toks, t)
            if i < toks.shape[0] and int(toks[i]) == t:
                new = self._land(st.copy(), int(nxt[i]))
            else:
                for e in slot.entries_at(st.pos):
                    new = self._cross(st, slot, slot.exits, int(slot.entry_group[e]), int(slot.entry_leaf[e]), t)
                    if new is not None:
                        break
        else:
            assert slot.tails is not None  # bound: a matcher's table.vocabulary() binds every slot
            new = self._cross(st, slot, slot.tails, st.pos, st.val, t)
        if new is None:
            return False
        self.history.append(st)
        self.st = new
        return True

    def _cross(self, st: State, slot: Slot, groups: Groups, gi: int, val: int, t: int) -> State | None:
        """Follow crossing token t of group gi (an exit head or a tail offset)."""
        k = groups.find(gi, t)
        if k < 0:
            return None
        kind = int(groups.kind[k])
        base = st.copy() if groups is slot.tails else self._leaf(st.copy(), val)
        if kind == TAIL:
            base.phase, base.pos = TAILP, int(groups.target[k])
            return base
        after = base if base.phase == ENGINE else self._handover(base, base.s, base.val)
        rest = groups.rest_of(k)
        if kind == HANDOVER and not rest:
            return after
        return self._consume(after, rest) if kind in (HANDOVER, DYNAMIC) else None

    def rollback(self, n: int) -> None:
        """Undo the last ``n`` accepted tokens (EOS included)."""
        steps = 0
        for rec in undo(self.history, n):
            if isinstance(rec, (int, bytes)):  # an engine step (2: the EOS that ended the output; bytes: ``last``)
                steps += 1
                if rec == 2:
                    self.st.phase = ENGINE
                elif isinstance(rec, bytes):
                    self.st.last = rec
                continue
            if steps:
                self.drv.rollback(self.st.m, steps)
                steps = 0
            self.st = rec
        if steps:
            self.drv.rollback(self.st.m, steps)

    @property
    def num_accepted(self) -> int:
        return len(self.history)

    def jump_forward(self) -> bytes:
        """Bytes every continuation of the output starts with here (possibly none)."""
        st = self.st
        if st.phase == ENGINE:
            forced = self.drv.forced(st.m)
            for s in self.table.grammars[st.g].slots:
                slot = self.table.slots[s]
                cut = forced.find(bytes([slot.open]) + slot.marker.encode("utf-8"))
                if cut >= 0:
                    forced = forced[: cut + 1]
            return whole_chars(forced)
        if st.phase == TAILP:
            return self.table.slots[st.s].tail[st.pos :]
        if st.phase == SLOT:
            return whole_chars(self.table.slots[st.s].forced(st.pos))
        return b""


class SchemaMaskWriter(Generic[Table]):
    """Rows for up to ``max_batch`` matchers in one owned buffer.

    A precomputed row (a slot or tail position without judged tokens) costs the
    words set now plus those set last time; any other row is written whole
    (engine rows in one batched engine call) and zeroed in full before a
    precomputed row reuses it. The returned view is valid until the next
    ``fill``; do not write to it.
    """

    def __init__(self, table: Table, max_batch: int = 1) -> None:
        if int(max_batch) < 1:
            raise ValueError(f"max_batch must be >= 1, not {max_batch}")
        table.vocabulary()  # binds the slots (a loaded table derives its tail rows from the vocabulary)
        self.table = table
        self.max_batch = int(max_batch)
        self._buf = np.zeros((self.max_batch, table.words_per_row), dtype=np.int32)
        self._mv = [memoryview(self._buf[i]) for i in range(self.max_batch)]  # item writes without numpy scalars
        self._last: list[Any] = [None] * self.max_batch  # (slot, src) written per row; "full"; None = clean

    @property
    def buffer(self) -> np.ndarray:
        return self._buf

    def fill(self, matchers: Sequence[SchemaMatcher[Table]]) -> np.ndarray:
        """Write one row per matcher and return ``buffer[:len(matchers)]``."""
        n = len(matchers)
        if n > self.max_batch:
            raise ValueError(f"{n} matchers exceed this writer's max_batch of {self.max_batch}")
        engine_rows: list[tuple[SchemaMatcher[Table], int]] = []
        for i, m in enumerate(matchers):
            src = m.static_source()
            last = self._last[i]
            if src is not None and last is not None and last != "full" and last[0] is src[0] and last[1] == src[1]:
                continue
            if last == "full":
                self._buf[i].fill(0)
            elif last is not None:
                self._write(i, last[0], last[1], clear=True)
            if src is None:
                self._last[i] = "full"
                if m.st.phase == ENGINE and m.st.fresh is None and not m.table.grammars[m.st.g].slots:
                    engine_rows.append((m, i))  # the engine's own row: batched below (a fresh one is cached)
                else:
                    m.fill_bitmask(self._buf[i])
                continue
            self._write(i, src[0], src[1], clear=False)
            self._last[i] = src
        if engine_rows:
            drv = engine_rows[0][0].drv
            drv.fill_many([m.st.m for m, _ in engine_rows], self._buf, [i for _, i in engine_rows])
        return self._buf[:n]

    def _write(self, i: int, slot: Slot, src: int, *, clear: bool) -> None:
        """Set (or zero) the words of one precomputed row: a loop over a memoryview for the usual few words."""
        off, wl, bl = _row_lists(slot)
        lo, hi = off[src], off[src + 1]
        if hi - lo <= _SMALL:
            mv = self._mv[i]
            if clear:
                for k in range(lo, hi):
                    mv[wl[k]] = 0
            else:
                for k in range(lo, hi):
                    mv[wl[k]] = bl[k]
        else:
            w = slot.words
            self._buf[i][w.words[lo:hi]] = 0 if clear else w.bits[lo:hi]


_SMALL = 12  # words per row written by a Python loop (about 40 ns a word) rather than one numpy assignment (~1 us)


def _trigger_prefix(table: SchemaParts) -> bytes:
    """A triggered table's trigger but its last byte (the slot's opening byte); b"" for any other table."""
    return str(table.info.get("trigger", "")).encode("utf-8")[:-1]


@per_table
def _trigger_heads(table: SchemaParts) -> list[list[tuple[int, bytes, bytes, int]]]:
    """Triggered tags, per slot: the entering heads that can complete the trigger but its last byte, as (index,
    head, the bytes the text before the head must end with, gate token). A head h qualifies when it is a tail of
    that prefix (the text supplies the rest) or ends with all of it; no other head can ever enter."""
    need = _trigger_prefix(table)
    out = []
    for s, slot in enumerate(table.slots):
        gates = _head_gates(table)[s].tolist()
        found = []
        for j, h in enumerate(slot.enters.labels):
            if len(h) < len(need) and need.endswith(h):
                found.append((j, h, need[: len(need) - len(h)], gates[j]))
            elif h.endswith(need):
                found.append((j, h, b"", gates[j]))
        out.append(found)
    return out


@per_table
def _trigger_tails(table: SchemaParts) -> tuple[bytes, ...]:
    """Triggered tags: what the text must end with for any head (or the opening byte alone) to enter a slot."""
    need = _trigger_prefix(table)
    return (need, *{before for heads in _trigger_heads(table) for _, _, before, _ in heads})


@per_table
def _row_lists(slot: Slot) -> tuple[list[int], list[int], list[int]]:
    """A slot's (word, bits) rows as Python lists: list indexing beats numpy scalar indexing on the single-row path."""
    w = slot.words
    return w.offsets.tolist(), w.words.tolist(), w.bits.tolist()


def _or_source(slot: Slot, src: int, row: np.ndarray) -> None:
    off, wl, bl = _row_lists(slot)
    lo, hi = off[src], off[src + 1]
    if hi - lo <= _SMALL:  # int32 words OR-ed as Python ints stay int32: the row's memoryview takes them as they are
        mv = row.data
        for k in range(lo, hi):
            mv[wl[k]] |= bl[k]
        return
    w = slot.words
    row[w.words[lo:hi]] |= w.bits[lo:hi]


def _put(table: SchemaParts, cache: dict[Any, Any], key: Any, value: Any, shared: bool) -> None:
    cache[key] = value
    if shared and len(cache) > table.row_cache_size:  # shared: the cache is the table's row_cache, an OrderedDict
        table.row_cache.popitem(last=False)


@per_table
def _head_gates(table: SchemaParts) -> list[np.ndarray]:
    """Per slot, per entering head: the token spelling the longest prefix of ``head + opening byte``, or -1.

    The engine's row is exact per token (a token is allowed iff its bytes can be read here), so that token's bit
    tells, without a probe, whether the engine can read the head at all; most heads die there (about 2 in 3 of the
    probes a row made with the first byte as the only gate).
    """
    first_id = token_index(table.vocabulary()).first_id
    out = []
    for slot in table.slots:
        opener = bytes([slot.open])
        gates = []
        for h in slot.enters.labels:
            spelled = h + opener
            gate = -1
            for n in range(len(spelled), 0, -1):
                gate = first_id.get(spelled[:n], -1)
                if gate >= 0:
                    break
            gates.append(gate)
        out.append(np.asarray(gates, dtype=np.int64))
    return out


def _byte_tokens(table: SchemaParts) -> np.ndarray:
    return token_index(table.vocabulary()).byte_token
