"""Think-then-answer: free text until a trigger (``"Answer:"``), then one value of a table, then EOS.

The paper's most accurate mode (section 5.3): the model reasons unconstrained and
the trie takes over once it writes the trigger. Exact at the byte level, so a
token may span the free text and the trigger (``" Answer"``), the trigger and the
value (``": yes"``), or all three:

* the free phase is a small automaton over the triggers (:class:`TriggerAutomaton`:
  state = the longest tail of the text read that begins a trigger, as the
  vocabulary automaton does for tokens, applied to a handful of strings);
* each of its states has one precomputed row: every token but EOS, except the
  tokens whose bytes complete a trigger and then continue in a way no value
  allows; the tokens that complete a trigger well land on the trie state of the
  bytes after it (found once, at :class:`Triggered` build);
* from there the table's own rows and transitions serve, unchanged.

A row costs one copy of ``ceil(V / 32)`` words in the free phase and the table's
own O(allowed) in the answer. EOS is refused in the free phase (an answer must
come): a caller with a token budget writes the trigger itself when the budget is
spent. numpy only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

import numpy as np

from triec.errors import TriecError
from triec.runtime.bitmask import ids_of, is_set, pack
from triec.runtime.kinds import SetTable
from triec.runtime.matcher import TableMatcher, TokenSteps, undo


class TriggerAutomaton:
    """Where the free text stands towards a few trigger strings: state ``q`` is the longest proper prefix of a
    trigger that ends the text read (``prefixes[q]``). :meth:`feed` reports the first trigger completed."""

    def __init__(self, triggers: Iterable[bytes]) -> None:
        self.triggers = sorted(set(triggers))
        if not self.triggers or any(not t for t in self.triggers):
            raise TriecError("triggers must be non-empty strings")
        prefixes = sorted({t[:i] for t in self.triggers for i in range(len(t))}, key=lambda p: (len(p), p))
        self.prefixes = prefixes
        index = {p: i for i, p in enumerate(prefixes)}
        # goto[q][b] = next state, or -1 - k where trigger k completes on b
        self.goto: list[dict[int, int]] = []
        for p in prefixes:
            row: dict[int, int] = {}
            for b in range(256):
                text = p + bytes([b])
                done = next((t for t in self.triggers if text.endswith(t)), None)
                if done is not None:
                    row[b] = -1 - self.triggers.index(done)
                    continue
                k = next(i for i in range(len(text) + 1) if text[i:] in index)
                row[b] = index[text[k:]]
            self.goto.append(row)

    @property
    def num_states(self) -> int:
        return len(self.prefixes)

    def feed(self, q: int, data: bytes) -> tuple[int, int, int]:
        """(state, trigger, end): ``trigger`` -1 and the state after ``data``; or the trigger first completed and
        the offset in ``data`` just past it (the state is then meaningless)."""
        goto = self.goto
        for i, b in enumerate(data):
            q = goto[q][b]
            if q < 0:
                return -1, -1 - q, i + 1
        return q, -1, 0


class TokenBytes(Protocol):
    """What :class:`Triggered` reads of a vocabulary: a :class:`~triec.Vocabulary`, or anything with its bytes."""

    @property
    def token_bytes(self) -> Sequence[bytes]: ...


class Triggered:
    """A table used after a trigger: the free phase's rows and landings, computed once per (table, triggers).

    ``vocab`` is the table's :class:`~triec.Vocabulary` (anything with its
    ``token_bytes``); ``triggers`` are strings (UTF-8) or bytes. Tokens that
    complete a trigger and whose rest is no prefix of a value are left out of
    that state's row. With a canonical table (``table.canonical``) the value is tokenized on its own:
    a token may complete a trigger only where it ends with it, and the value's tokens follow. Build cost: one pass over the vocabulary (0.2-0.5 s at
    V = 151,936), then O(1) per row.
    """

    def __init__(self, table: SetTable, vocab: TokenBytes, triggers: str | bytes | Sequence[str | bytes]) -> None:
        if isinstance(triggers, (str, bytes)):
            triggers = [triggers]
        self.table = table
        self.automaton = TriggerAutomaton(t.encode("utf-8") if isinstance(t, str) else bytes(t) for t in triggers)
        table.check_tokenizer(vocab)  # the same tokenizer, or TokenizerMismatchError
        token_bytes = tuple(vocab.token_bytes)
        self.token_bytes = token_bytes
        self.eos = frozenset(int(e) for e in table.eos_token_ids)
        width = table.words_per_row
        self.words = width
        n = len(token_bytes)
        base = np.zeros(table.vocab_size, dtype=bool)
        base[:n] = True
        base[list(e for e in self.eos if e < base.shape[0])] = False
        # tokens that may complete a trigger from some state: those holding one, or starting with a trigger's tail
        tails = tuple({t[-j:] for t in self.automaton.triggers for j in range(1, len(t) + 1)})
        whole = self.automaton.triggers
        candidates = [
            i for i, tb in enumerate(token_bytes) if tb and (tb.startswith(tails) or any(t in tb for t in whole))
        ]
        canonical = table.canonical
        self.landing: list[dict[int, int]] = []  # per free state: token -> trie state after the trigger
        rows = np.empty((self.automaton.num_states, width), dtype=np.int32)
        for q in range(self.automaton.num_states):
            allowed = base.copy()
            lands: dict[int, int] = {}
            for t in candidates:
                _, k, end = self.automaton.feed(q, token_bytes[t])
                if k < 0:
                    continue
                rest = token_bytes[t][end:]
                # canonical tables: the value's own tokens start at a token boundary just after the trigger
                s = (0 if not rest else None) if canonical else table.state_for_prefix(rest)
                if s is None or t in self.eos:
                    allowed[t] = False
                else:
                    lands[t] = s
            self.landing.append(lands)
            rows[q] = pack(allowed)
        self.rows = rows

    def matcher(self) -> TriggeredMatcher:
        return TriggeredMatcher(self)


class TriggeredMatcher(TokenSteps):
    """One sequence: free text until a trigger, then the table's matcher (same methods as ``TableMatcher``)."""

    def __init__(self, triggered: Triggered) -> None:
        self.t = triggered
        self.q = 0
        self.inner: TableMatcher[SetTable] | None = None
        self._history: list[int | None] = []  # free state before each free token; None for a token in the answer

    @property
    def phase(self) -> str:
        return "free" if self.inner is None else "answer"

    @property
    def value(self) -> str | None:
        return None if self.inner is None else self.inner.value

    @property
    def num_accepted(self) -> int:
        return len(self._history)

    def is_terminated(self) -> bool:
        return self.inner is not None and self.inner.is_terminated()

    def reset(self) -> None:
        self.q, self.inner = 0, None
        self._history.clear()

    def fork(self) -> TriggeredMatcher:
        other = TriggeredMatcher(self.t)
        other.q, other._history = self.q, list(self._history)
        other.inner = None if self.inner is None else self.inner.fork()
        return other

    def fill_bitmask(self, row: np.ndarray) -> None:
        if self.inner is None:
            row[:] = self.t.rows[self.q]
        else:
            self.inner.fill_bitmask(row)

    def allowed(self) -> np.ndarray:
        if self.inner is None:
            return ids_of(self.t.rows[self.q]).astype(np.int32)
        return self.inner.allowed()

    def accept_token(self, token: int) -> bool:
        t = int(token)
        if self.inner is not None:
            ok = self.inner.accept_token(t)
            if ok:
                self._history.append(None)
            return ok
        row = self.t.rows[self.q]
        if not is_set(row, t):
            return False
        land = self.t.landing[self.q].get(t)
        if land is not None:
            self.inner = TableMatcher(self.t.table, land)
            self._history.append(self.q)
            return True
        q, k, _ = self.t.automaton.feed(self.q, self.t.token_bytes[t])
        assert k < 0, "a completing token outside the landings cannot be in the row"
        self._history.append(self.q)
        self.q = q
        return True

    def rollback(self, n: int) -> None:
        for prev in undo(self._history, n):
            if prev is None:
                assert self.inner is not None
                self.inner.rollback(1)
            else:
                self.inner = None
                self.q = prev


__all__ = ["TriggerAutomaton", "Triggered", "TriggeredMatcher"]
