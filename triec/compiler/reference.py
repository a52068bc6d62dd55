"""The reference implementation: deliberately simple, built on pyahocorasick.

It scans every value with an Aho-Corasick automaton over the token strings and
records each match as an allowed (state, token) pair. One Python object per
match makes it several times slower than :mod:`triec.compiler.walk`, and that is the
point: it shares no code with the fast path (its own prefix numbering, its own
matching), so tests that find both produce identical tables are meaningful.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np


def prefix_states(keys: Sequence[bytes]) -> dict[bytes, int]:
    """Number every distinct prefix in preorder: insert sorted keys byte by byte.

    A map keyed by every prefix: memory grows with the square of a value's length. Tests and brute force
    (small sets) only; :func:`walk_prefixes` gives the same numbering in memory linear in the input.
    """
    states: dict[bytes, int] = {b"": 0}
    for key in sorted(keys):
        for end in range(1, len(key) + 1):
            states.setdefault(key[:end], len(states))
    return states


def _common_prefix(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    if n == 0 or a[0] != b[0]:
        return 0
    diff = np.flatnonzero(np.frombuffer(a, np.uint8, n) != np.frombuffer(b, np.uint8, n))
    return int(diff[0]) if diff.size else n


def walk_prefixes(keys: Sequence[bytes]) -> Iterator[tuple[bytes, array[int]]]:
    """Each key in sorted order with its path: ``path[d]`` is the state id of ``key[:d]``, ``d = 0 .. len(key)``
    (int32, as state ids are in every table).

    The numbering of :func:`prefix_states` (preorder: sorted keys inserted byte by byte), kept as one path of
    int64 ids truncated to the common prefix with the previous key and extended: memory the longest key, not
    every prefix. The path is reused: read it before the next key.
    """
    path = array("i", [0])
    prev = b""
    count = 1
    for key in sorted(keys):
        common = _common_prefix(prev, key)
        del path[common + 1 :]
        fresh = len(key) - common
        if fresh > 0:
            path.extend(range(count, count + fresh))
            count += fresh
        yield key, path
        prev = key


def count_prefixes(keys: Sequence[bytes]) -> int:
    """The number of distinct prefixes (states), the empty one included."""
    n = 1
    for _key, path in walk_prefixes(keys):
        n = max(n, path[-1] + 1)
    return n


def key_states(keys: Sequence[bytes]) -> np.ndarray:
    """The state of each distinct key (its whole prefix), in sorted order of the keys."""
    return np.fromiter((path[-1] for _key, path in walk_prefixes(keys)), dtype=np.int64)


def prefix_of(keys: Sequence[bytes], state: int) -> bytes:
    """The prefix numbered ``state`` (a walk of the keys until it appears: for error messages)."""
    import bisect

    for key, path in walk_prefixes(keys):
        if path[-1] >= state:
            d = bisect.bisect_left(path, state)
            if d < len(path) and path[d] == state:
                return key[:d]
    raise IndexError(f"no prefix numbered {state}")


def reference_transitions(
    keys: Sequence[bytes], token_bytes: Sequence[bytes], num_states: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets, tokens, next_state) CSR, exactly like :func:`triec.compiler.walk.walk` returns.

    Every match of a token inside a value is one (state, token, next state) triple, kept in flat int32 arrays
    and sorted at the end: memory linear in the matches (about 30 bytes each), whatever a value's length (issue 37).
    """
    automaton = _token_automaton(token_bytes)
    src, tok, dst = array("i"), array("i"), array("i")  # state and token ids are int32 in every table
    states = 1
    for key, path in walk_prefixes(keys):
        states = max(states, path[-1] + 1)
        for end, (length, ids) in automaton.iter(key.decode("latin-1")):
            a, b = path[end + 1 - length], path[end + 1]
            for tid in ids:
                src.append(a)
                tok.append(tid)
                dst.append(b)
    if num_states is not None and num_states != states:
        raise AssertionError(f"reference found {states} states, expected {num_states}")
    s = np.frombuffer(src, dtype=np.int32) if src else np.zeros(0, np.int32)
    order = np.argsort(s.astype(np.int64) << 32 | np.frombuffer(tok, dtype=np.int32).astype(np.int64))
    s = s[order]
    del src
    t = np.frombuffer(tok, dtype=np.int32)[order] if tok else np.zeros(0, np.int32)
    del tok
    d = np.frombuffer(dst, dtype=np.int32)[order] if dst else np.zeros(0, np.int32)
    del dst, order
    keep = np.ones(s.size, dtype=bool)
    keep[1:] = (s[1:] != s[:-1]) | (t[1:] != t[:-1])  # the same token at the same prefix, matched in two values
    s, t, d = s[keep], t[keep], d[keep]
    offsets = np.zeros(states + 1, dtype=np.int64)
    np.cumsum(np.bincount(s, minlength=states), out=offsets[1:])
    return offsets, t, d


_AUTOMATA: dict[int, tuple[Sequence[bytes], Any]] = {}


def _token_automaton(token_bytes: Sequence[bytes]) -> Any:  # an ahocorasick.Automaton (pyahocorasick has no stubs)
    """pyahocorasick automaton over the token strings, memoized per vocabulary object.

    Building it costs 0.1-0.5 s; the stress tests compare dozens of sets per
    tokenizer. The memo holds the sequence itself, so its id cannot be reused.
    """
    found = _AUTOMATA.get(id(token_bytes))
    if found is not None and found[0] is token_bytes:
        return found[1]
    import ahocorasick

    ids_by_bytes: dict[bytes, list[int]] = {}
    for tid, b in enumerate(token_bytes):
        if b:
            ids_by_bytes.setdefault(b, []).append(tid)
    automaton = ahocorasick.Automaton(ahocorasick.STORE_ANY, ahocorasick.KEY_STRING)
    for b, ids in ids_by_bytes.items():
        automaton.add_word(b.decode("latin-1"), (len(b), ids))  # latin-1: one char per byte
    automaton.make_automaton()
    if len(_AUTOMATA) >= 8:
        _AUTOMATA.clear()
    _AUTOMATA[id(token_bytes)] = (token_bytes, automaton)
    return automaton


def brute_force_allowed(keys: Sequence[bytes], token_bytes: Sequence[bytes]) -> dict[bytes, list[int]]:
    """The definition itself: token t is allowed at prefix p iff p + bytes(t) is a prefix of a value.

    O(states x vocabulary): only for small sets.
    """
    prefixes = set(prefix_states(keys))
    return {p: [t for t, b in enumerate(token_bytes) if b and p + b in prefixes] for p in sorted(prefixes)}
