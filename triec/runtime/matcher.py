"""One sequence over a mask table, in the style of the grammar engines' matchers.

Serving backends (vLLM's structured outputs, SGLang's grammar objects) drive one
stateful object per request: fill its row, accept the sampled token, roll back
what speculative decoding rejects, copy it for parallel samples. ``TableMatcher``
is that object for a plain table, with the same method names as the schema
matchers (:mod:`triec.schema`), so a backend needs one code path for both.
Every operation costs O(allowed tokens of the state); numpy only.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Generic, TypeVar

import numpy as np

from triec._arrays import find_sorted
from triec.runtime.arrays import content
from triec.runtime.bitmask import set_bits
from triec.runtime.kinds import SetTable
from triec.runtime.word_masks import state_words

Table = TypeVar("Table", bound=SetTable)
"""The table's class (a :class:`~triec.runtime.table.MaskTable`): what :attr:`TableMatcher.table` is."""


class TokenSteps:
    """``accept_tokens`` and ``validate_tokens`` for any matcher with ``accept_token`` and ``rollback``."""

    def accept_token(self, token: int) -> bool:  # pragma: no cover - every matcher has its own
        raise NotImplementedError

    def rollback(self, n: int) -> None:  # pragma: no cover - every matcher has its own
        raise NotImplementedError

    def accept_tokens(self, tokens: Sequence[int]) -> int:
        """Accept in order; returns how many were accepted (stops at the first refused)."""
        n = 0
        for t in tokens:
            if not self.accept_token(t):
                break
            n += 1
        return n

    def validate_tokens(self, tokens: Sequence[int]) -> int:
        """How many of ``tokens`` would be accepted in order; the matcher does not move."""
        n = self.accept_tokens(tokens)
        self.rollback(n)
        return n


class TableMatcher(TokenSteps, Generic[Table]):
    """``fill_bitmask``, ``accept_token``, ``rollback``, ``is_terminated``, ``fork``, ``jump_forward``.

    ``accept_token`` returns False and changes nothing for a token the state does
    not allow. EOS is accepted where the prefix is a value and ends the sequence;
    after that only :meth:`rollback` or :meth:`reset` moves it.
    """

    def __init__(self, table: Table, state: int = 0) -> None:
        self.table = table
        self._words = state_words(table) if table.tails is None else None  # a tail table's rows: computed per fill
        self._eos = frozenset(table.eos_token_ids)
        self._state = int(state)
        self._done = False
        self._history: list[int] = []  # state before each accepted token (-1 before an EOS)

    # ------------------------------------------------------------- state

    @property
    def state(self) -> int:
        """The trie state (prefix read so far)."""
        return self._state

    @property
    def value(self) -> str | None:
        """The value read, once the prefix is one (else None)."""
        return self.table.value(self._state)

    @property
    def num_accepted(self) -> int:
        return len(self._history)

    def is_terminated(self) -> bool:
        """True once EOS was accepted."""
        return self._done

    def is_accepting(self) -> bool:
        """True where EOS is allowed next (the prefix is a complete value)."""
        return not self._done and self.table.is_accepting(self._state)

    def reset(self) -> None:
        self._state, self._done = 0, False
        self._history.clear()

    def fork(self) -> TableMatcher[Table]:
        """An independent copy at the same state, with the same rollback history."""
        other = type(self)(self.table, self._state)
        other._done = self._done
        other._history = list(self._history)
        return other

    # ------------------------------------------------------------- rows

    def fill_bitmask(self, row: np.ndarray) -> None:
        """Write the whole row (int32 words, bit set = allowed); after EOS, nothing is allowed."""
        row.fill(0)
        if self._done:
            return
        w = self._words
        if w is None:
            set_bits(row, self.table.allowed(self._state))
            return
        r = w.row(self._state)
        lo, hi = int(w.offsets[r]), int(w.offsets[r + 1])
        row[w.words[lo:hi]] = w.bits[lo:hi]

    def allowed(self) -> np.ndarray:
        """Allowed token ids, ascending (EOS where the prefix is a value)."""
        if self._done:
            return np.zeros(0, dtype=np.int32)
        return self.table.allowed(self._state)

    # ------------------------------------------------------------- decoding

    def accept_token(self, token: int) -> bool:
        t = int(token)
        if self._done:
            return False
        if t in self._eos:
            if not self.table.is_accepting(self._state):
                return False
            self._history.append(-1)
            self._done = True
            return True
        tails = self.table.tails
        if tails is not None:  # a tail table: one step, no row built
            if not 0 <= t < self.table.vocab_size:
                return False
            found = tails.step(self._state, t)
            if found < 0:
                return False
            self._history.append(self._state)
            self._state = found
            return True
        toks, nxt = content(self.table, self._state)
        i = find_sorted(toks, t)
        if i >= toks.shape[0] or int(toks[i]) != t:
            return False
        self._history.append(self._state)
        self._state = int(nxt[i])
        return True

    def rollback(self, n: int) -> None:
        """Undo the last ``n`` accepted tokens (EOS included)."""
        for prev in undo(self._history, n):
            if prev == -1:
                self._done = False
            else:
                self._state = prev

    def jump_forward(self) -> bytes:
        """The bytes every value below this state continues with (empty where the next byte is a choice)."""
        if self._done or self.table.canonical:
            return b""  # canonical: forced bytes are not forced tokens (the engine would retokenize them)
        keys = self.table.value_bytes
        p = self.table.prefix(self._state)
        lo = bisect.bisect_left(keys, p)
        if lo == len(keys) or self.table.is_accepting(self._state):
            return b""  # a value ends here: stopping is one of the choices
        hi = lo + 1
        # the last key with prefix p: exponential then binary search (keys with prefix p are contiguous)
        step = 1
        while hi < len(keys) and keys[hi].startswith(p):
            hi = min(len(keys), hi + step)
            step *= 2
        lo2, hi2 = lo, hi
        while lo2 + 1 < hi2:
            mid = (lo2 + hi2) // 2
            if keys[mid].startswith(p):
                lo2 = mid
            else:
                hi2 = mid
        a, b = keys[lo], keys[lo2]
        k = len(p)
        limit = min(len(a), len(b))
        while k < limit and a[k] == b[k]:
            k += 1
        return whole_chars(a[len(p) : k])


def whole_chars(data: bytes) -> bytes:
    """``data`` without a trailing incomplete UTF-8 character (forced text is decoded by its callers)."""
    i = len(data) - 1
    while i >= 0 and (data[i] & 0xC0) == 0x80:
        i -= 1
    if i < 0:
        return data if not data else b""
    lead = data[i]
    need = 1 if lead < 0x80 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
    return data if len(data) - i >= need else data[:i]


_Step = TypeVar("_Step")


def undo(history: list[_Step], n: int) -> list[_Step]:
    """The last ``n`` entries of a matcher's history, popped, the latest first: what ``rollback(n)`` undoes.
    ``ValueError`` (nothing popped) where fewer than ``n`` were accepted."""
    n = int(n)
    if not 0 <= n <= len(history):
        raise ValueError(f"cannot roll back {n} tokens: {len(history)} accepted")
    return [history.pop() for _ in range(n)]
