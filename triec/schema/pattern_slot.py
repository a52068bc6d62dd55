"""A pattern slot: a ``format`` or ``pattern`` field's JSON string served from its minimal DFA inside a schema table.

An enum's slot walks a finite trie; a pattern's language may be infinite
(``time``'s fraction loops), so its slot holds a :class:`~triec.runtime.pattern.PatternTable`
over the whole JSON string, quotes included (the table ``triec.compile_string_schema``
builds, equal to xgrammar's own handling of the field). Its states play the trie's
part: state 0 stands before the opening quote (where the engine hands over), the one
accepting state after the closing quote (the DFA is trimmed and nothing follows a
closing quote, so minimization leaves exactly one). The crossing tokens are found
over the DFA instead of the trie:

* **exits**: a head is the first bytes of a token that run from some state to the
  closing quote; every head ends in ``"``, so the heads are the token prefixes that
  end in an interior quote, and each is run from every state at once (a few thousand
  numpy steps at 151K tokens);
* **enters** and the static rows are :mod:`triec.schema.slot`'s, over
  :meth:`PatternSlot.walk_bytes`.

The slot has one "value" (index 0: some string of the language), so the grammar after
it is the entering engine's, resumed, as for an enum entered from the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, cast

import numpy as np

from triec.schema.slot import Groups, Slot, enter_groups, head_group
from triec.tokenizer.index import token_index

if TYPE_CHECKING:
    from triec.runtime.pattern import PatternTable
    from triec.tokenizer.vocabulary import Vocabulary

QUOTE = 0x22


@dataclass(eq=False)
class PatternSlot(Slot):
    """A slot whose states are a pattern table's (``trie`` holds the :class:`PatternTable`)."""

    has_values: ClassVar[bool] = False

    @property
    def table(self) -> PatternTable:
        return cast("PatternTable", self.trie)

    @property
    def final(self) -> int:
        """The state after the closing quote (the only accepting one)."""
        return int(self.trie.value_state[0])

    @property
    def pattern(self) -> str:
        """The regex of the whole JSON string, quotes included."""
        return self.table.pattern

    @property
    def format_name(self) -> str | None:
        return self.table.format_name

    @property
    def keys(self) -> list[bytes]:
        """A pattern slot has no list of keys."""
        return []

    def leaf_value(self, state: int) -> int:
        return 0 if int(state) == self.final else -1

    def walk_bytes(self, state: int, data: bytes) -> tuple[int, int, bytes] | None:
        """Run the DFA over ``data``: (-1, state', b"") inside the string, (0, -1, rest) past its closing quote."""
        t = self.table
        s = int(state)
        final = self.final
        for i, b in enumerate(data):
            s = t.byte_step(s, b)
            if s < 0:
                return None
            if s == final:
                return (0, -1, data[i + 1 :])
        return (-1, s, b"")

    def forced(self, state: int) -> bytes:
        """The bytes every string of the language continues with from ``state`` (through the tail at its end)."""
        t = self.table
        off, nxt, byt = t.dfa_offsets, t.dfa_next, t.dfa_bytes
        out = bytearray()
        s, final = int(state), self.final
        seen = set()  # a trimmed DFA has no cycle of single edges; a damaged file's must not loop here
        while s != final and s not in seen:
            seen.add(s)
            lo, hi = int(off[s]), int(off[s + 1])
            if hi - lo != 1:
                return bytes(out)
            out.append(int(byt[lo]))
            s = int(nxt[lo])
        return bytes(out) + (self.tail if s == final else b"")


def exit_heads(table: PatternTable, vocab: Vocabulary) -> list[tuple[bytes, np.ndarray]]:
    """(head, the states it runs from to the closing quote) for every token prefix ending in an interior quote."""
    tb_all = vocab.token_bytes
    heads = sorted(
        {b'"'} | {tb_all[t][: i + 1] for t, i in token_index(vocab).positions(QUOTE) if i + 1 < len(tb_all[t])}
    )
    delta = table.dense_dfa()
    final = int(table.value_state[0])
    start = np.arange(table.num_states, dtype=np.int32)
    out = []
    for h in heads:
        cur = start
        for b in h:
            cur = delta[cur, b]
        hit = np.flatnonzero(cur == final)
        if hit.size:
            out.append((h, hit.astype(np.int32)))
    return out


def build_pattern_slot(table: PatternTable, vocab: Vocabulary, *, marker: str, tail: bytes = b"") -> PatternSlot:
    """The slot of one field: ``table`` is its JSON string's pattern table (state 0 before the opening quote)."""
    if table.num_values != 1:
        raise ValueError(
            f"a pattern slot's table has one accepting state (after the closing quote), not {table.num_values}"
        )
    ti = token_index(vocab)
    states: list[np.ndarray] = []
    groups: list[np.ndarray] = []
    labels: list[Groups] = []
    for h, hit in exit_heads(table, vocab):
        g = head_group(vocab, ti, h, tail)
        if int(g.offsets[-1]) == 0:
            continue
        states.append(hit)
        groups.append(np.full(hit.shape[0], len(labels), dtype=np.int32))
        labels.append(g)
    e_state = np.concatenate(states) if states else np.zeros(0, dtype=np.int32)
    e_group = np.concatenate(groups) if groups else np.zeros(0, dtype=np.int32)
    order = np.lexsort((e_group, e_state))
    exits = Groups.concat(labels) if labels else Groups.pack([], [], ti.first_id)
    slot = PatternSlot(
        cast(Any, table),
        tail,
        0,
        marker,
        exits,
        e_state[order].astype(np.int32),
        e_group[order].astype(np.int32),
        np.zeros(e_state.shape[0], dtype=np.int32),
        None,  # bound below, once the entering groups are known: the rows are derived once
        Groups.pack([], [], ti.first_id),
        None,
        QUOTE,
    )
    slot.enters = enter_groups(slot, vocab)
    slot.bind(vocab)
    return slot
