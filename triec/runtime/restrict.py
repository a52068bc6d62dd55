"""Per-request subsets of a compiled table, without recompiling.

A retrieval step often narrows a large registry to a few values for one
request. The subset's trie is a sub-trie of the table's: its states are the
table's states on the paths from the root to the subset's terminals. A token
allowed in the table at state s, leading to state n, is allowed in the subset
iff n is one of those states; EOS iff s is a subset terminal. So the view only
needs the sorted list of its states, found from the subset's bytes alone.

State ids: the view answers in the *parent's* state ids. Because preorder
restricted to a sub-trie is the sub-trie's preorder, the subset's state k (its
id in ``triec.compile(subset)``) is the parent state ``view.states[k]``, and
``view.subset_state(s)`` maps back (a binary search). ``view.compact()``
renumbers into a standalone table of the parent's class (``parent.derive``) equal,
array for array, to a fresh compile of the subset.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

from triec._arrays import find_sorted
from triec._memo import per_table
from triec.errors import ValueNotInTable
from triec.keys import prepare_values, spell_all
from triec.runtime.arrays import TableArrays, content
from triec.runtime.header import TableHeader
from triec.runtime.kinds import SetTable
from triec.runtime.states import StateQueries

Parent = TypeVar("Parent", bound=SetTable)
"""The parent's class (a :class:`~triec.runtime.table.MaskTable`): what ``compact()`` returns."""


@dataclass(frozen=True)
class PathIndex:
    """Per value m: its terminal state, the run of nodes it created, and where that run hangs.

    Value m creates the nodes ``run_start[m] .. ends[m]`` (consecutive ids, one
    per byte past the prefix it shares with value m - 1). The first of them
    hangs from node ``hang[m]``, created by value ``creator[m]``, the first value
    with that prefix. Following ``creator`` walks up a value's root path one
    run at a time. Built once per table in O(K) vectorized numpy.

    Walking the subset's values in sorted order, a path node is new iff its id
    exceeds the previous subset value's terminal (preorder), and new nodes are
    always whole runs: if a run held both a node shared with the previous
    subset value p and the next node on the path, its creator would be the
    first value with both prefixes, yet p has the shorter one and sorts first.
    """

    ends: array[int]
    run_start: array[int]
    hang: array[int]
    creator: array[int]


@per_table
def path_index(table: TableArrays) -> PathIndex:
    """The table's :class:`PathIndex`, built on first use (O(K) vectorized)."""
    ends = np.asarray(table.value_state, dtype=np.int64)
    lcp = np.asarray(table.value_lcp, dtype=np.int64)
    created = np.diff(ends, prepend=0)
    run_start = ends - created + 1
    # The first value with value m's first lcp[m] bytes is the previous m' < m with
    # lcp[m'] < lcp[m]: found for all values at once by pointer jumping.
    creator = np.arange(ends.size, dtype=np.int64) - 1
    active = np.flatnonzero(lcp > 0)
    while active.size:
        active = active[lcp[creator[active]] >= lcp[active]]
        creator[active] = creator[creator[active]]
    creator = np.maximum(creator, 0)
    # Node at depth lcp[m] in the creator's run: its start sits at depth lcp[creator] + 1.
    hang = np.where(lcp > 0, run_start[creator] + lcp - lcp[creator] - 1, 0)
    return PathIndex(*(array("q", a.tobytes()) for a in (ends, run_start, hang, creator)))


def _ids_length(key: bytes) -> int:
    return key.count(b" ") + 1


class RestrictedTable(StateQueries, Generic[Parent]):
    """A view of a mask table that allows only a subset of its values (``table.restrict(values)``).

    ``allowed``, ``advance``, ``is_accepting`` and bitmask rows equal those of
    compiling the subset alone, at the parent's state ids (see the module
    docstring for the mapping). Asking about a parent state that is not a
    prefix of any subset value raises ``IndexError``. A query filters the
    parent's allowed list of that state, so it costs what the parent's does.
    """

    def __init__(self, parent: Parent, keys: list[bytes], states: np.ndarray, value_state: np.ndarray) -> None:
        self.parent = parent
        self.value_bytes = keys
        self.states = states  # int64, ascending: parent ids of the subset's states (subset id = position)
        self.value_state = value_state  # int64, ascending: parent ids of the subset's terminals
        self._lcp: list[int] = []  # per value: the depth where its path leaves the previous one's (set by build)
        self._key_index: dict[bytes, int] | None = None
        # the parent's vocabulary; not its name, build or artifact (a view is not loaded from one)
        self.hold_header(TableHeader(parent.vocab_size, parent.eos_token_ids, parent.tokenizer_fingerprint))
        self.encoding = parent.encoding
        self.tokenization = parent.tokenization
        self.canonical = parent.canonical
        self._values: list[str] | None = None
        self._strings: list[str] | None = None

    @classmethod
    def build(cls, table: Parent | RestrictedTable[Parent], values: Iterable[str | bytes]) -> RestrictedTable[Parent]:
        """Find the subset's states: per value, a binary search plus one run of states per branch point.

        ``values`` are the user's values (spelled with the table's encoding here).
        """
        keys, _ = prepare_values(spell_all(values, table.encoding))
        if isinstance(table, RestrictedTable):  # a subset of a subset: check here, build on the root table
            for key in keys:
                table._index_of(key)
            table = table.parent
        found = [(table.find_value(key), key) for key in keys]
        for m, key in found:
            if m < 0:
                raise ValueNotInTable(f"value {key.decode('utf-8', 'replace')!r} is not one of the table's values")
        if table.canonical:
            found.sort()  # table order (token order) is preorder; for a byte trie it is the keys' own
            keys = [key for _, key in found]
        # depths count bytes, or an ids table's tokens (its values are their ids joined by one space)
        units: Callable[[bytes], int] = _ids_length if getattr(table, "ids", False) else len
        index = path_index(table)
        ends, run_start, hang, creator = index.ends, index.run_start, index.hang, index.creator
        states: list[int] = [0]
        terminals: list[int] = []
        lcp: list[int] = []  # per subset value: the depth where its path leaves the previous one's
        last = 0  # the previous terminal: in preorder, a path node is new iff its id is larger
        for m, key in found:
            end = top = ends[m]
            runs: list[range] = []
            depth = units(key) + 1  # of the first new node: the run start's depth in the run's creator
            while top > last:  # walk up the path, one run of nodes per creating value
                runs.append(range(run_start[m], top + 1))  # whole runs only: see PathIndex
                depth -= top + 1 - run_start[m]
                top, m = hang[m], creator[m]
            for run in reversed(runs):
                states.extend(run)
            terminals.append(end)
            lcp.append(depth - 1)
            last = end
        view = cls(table, keys, np.array(states, dtype=np.int64), np.array(terminals, dtype=np.int64))
        view._lcp = lcp
        return view

    # ------------------------------------------------------------- shape and values

    @property
    def num_states(self) -> int:
        return int(self.states.shape[0])

    def __repr__(self) -> str:
        return f"RestrictedTable(values={self.num_values}, states={self.num_states}, parent={self.parent!r})"

    def _index_of(self, key: bytes) -> int:
        if self.parent.canonical:  # token order
            if self._key_index is None:
                self._key_index = {k: j for j, k in enumerate(self.value_bytes)}
            i = self._key_index.get(key, len(self.value_bytes))
        else:
            i = bisect_left(self.value_bytes, key)
        if i == len(self.value_bytes) or self.value_bytes[i] != key:
            raise ValueNotInTable(f"value {key.decode('utf-8', 'replace')!r} is not one of this subset's values")
        return i

    def _member(self, parent_states: np.ndarray) -> np.ndarray:
        """Which parent states are states of the view (vectorized)."""
        i = np.minimum(np.searchsorted(self.states, parent_states), self.num_states - 1)
        member: np.ndarray = self.states[i] == parent_states  # bool (numpy's stubs type ndarray == as Any)
        return member

    def subset_state(self, state: int) -> int:
        """The id of parent state ``state`` in a fresh compile of the subset."""
        s = int(state)
        k = find_sorted(self.states, s)
        if k == self.num_states or int(self.states[k]) != s:
            raise IndexError(f"state {state} is not a state of this subset (no subset value has its prefix)")
        return k

    def _check_state(self, state: int) -> int:
        self.subset_state(state)
        return int(state)

    def prefix(self, state: int) -> bytes:
        return self.parent.prefix(self._check_state(state))

    def state_for_prefix(self, prefix: bytes | str) -> int | None:
        s = self.parent.state_for_prefix(prefix)
        return s if s is not None and bool(self._member(np.array([s]))[0]) else None

    # ------------------------------------------------------------- masks

    def _check_states(self, states: np.ndarray) -> None:
        member = self._member(states)
        if not member.all():
            bad = int(states[~member][0])
            raise IndexError(f"state {bad} is not a state of this subset (no subset value has its prefix)")

    def _content(self, state: int) -> tuple[np.ndarray, np.ndarray]:
        """The parent's tokens of ``state`` whose next state is still in the subset."""
        tokens, nxt = content(self.parent, state)
        keep = self._member(nxt)
        return tokens[keep], nxt[keep]

    def _contents(self, states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        row, tokens, nxt = self.parent.content_pairs(states)  # the parent's rows, whatever its layout
        keep = self._member(nxt)
        return row[keep], tokens[keep]

    def check_tokenizer(self, fingerprint_or_vocab: object) -> None:
        """As :meth:`MaskTable.check_tokenizer` (the view shares its parent's tokenizer)."""
        self.parent.check_tokenizer(fingerprint_or_vocab)

    # ------------------------------------------------------------- derived tables

    def restrict(self, values: Iterable[str | bytes]) -> RestrictedTable[Parent]:
        """A narrower view; every value must be in this subset."""
        return RestrictedTable.build(self, values)

    def compact(self) -> Parent:
        """A standalone table with the subset's own state ids: equal to ``triec.compile(subset)``.

        Costs O(allowed pairs of the subset's states) (the root's list is the
        parent's); use it to get a ``mask_writer`` or ``to_torch`` table.
        """
        parent = self.parent
        row, tokens, nxt = parent.content_pairs(self.states)  # the parent's rows, whatever its layout
        keep = self._member(nxt)
        row = row[keep]
        offsets = np.zeros(self.num_states + 1, dtype=np.uint32)
        np.cumsum(np.bincount(row, minlength=self.num_states), out=offsets[1:])
        return parent.derive(
            allowed_offsets=offsets,
            allowed_tokens=np.ascontiguousarray(tokens[keep], dtype=np.int32),
            allowed_next=np.searchsorted(self.states, nxt[keep]).astype(np.int32),
            value_state=np.searchsorted(self.states, self.value_state).astype(np.int32),
            value_lcp=np.array(self._lcp, dtype=np.int32),
            state_byte=np.ascontiguousarray(parent.state_byte[self.states]),
            values=self.values,
        )
