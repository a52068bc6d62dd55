"""The reference implementation: deliberately simple, built on pyahocorasick.

It scans every value with an Aho-Corasick automaton over the token strings and
records each match as an allowed (state, token) pair. One Python object per
match makes it several times slower than :mod:`triec.build.walk`, and that is the
point: it shares no code with the fast path (its own prefix numbering, its own
matching), so tests that find both produce identical tables are meaningful.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def prefix_states(keys: Sequence[bytes]) -> dict[bytes, int]:
    """Number every distinct prefix in preorder: insert sorted keys byte by byte."""
    states: dict[bytes, int] = {b"": 0}
    for key in sorted(keys):
        for end in range(1, len(key) + 1):
            states.setdefault(key[:end], len(states))
    return states


def reference_transitions(
    keys: Sequence[bytes], token_bytes: Sequence[bytes], num_states: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets, tokens, next_state) CSR, exactly like :func:`triec.build.walk.walk` returns."""
    states = prefix_states(keys)
    if num_states is not None and num_states != len(states):
        raise AssertionError(f"reference found {len(states)} states, expected {num_states}")
    automaton = _token_automaton(token_bytes)

    allowed: list[dict[int, int]] = [{} for _ in range(len(states))]
    for key in keys:
        for end, (length, ids) in automaton.iter(key.decode("latin-1")):
            start = end + 1 - length
            src = states[key[:start]]
            dst = states[key[: end + 1]]
            for tid in ids:
                allowed[src][tid] = dst
    offsets = np.zeros(len(states) + 1, dtype=np.int64)
    tokens: list[int] = []
    nexts: list[int] = []
    for s, pairs in enumerate(allowed):
        for tid in sorted(pairs):
            tokens.append(tid)
            nexts.append(pairs[tid])
        offsets[s + 1] = len(tokens)
    return offsets, np.array(tokens, dtype=np.int32), np.array(nexts, dtype=np.int32)


_AUTOMATA: dict[int, tuple[Sequence[bytes], object]] = {}


def _token_automaton(token_bytes: Sequence[bytes]):  # noqa: ANN202 - ahocorasick.Automaton
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
