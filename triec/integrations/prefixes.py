"""Each row's position from its own tokens: what a constraint needs where rows reorder between steps (beam search).

Greedy and sampled decoding extend every row by one token, so a row's state can follow it step by step. Beam search
does not: between two calls of a logits processor the rows are reordered, duplicated and dropped (each kept beam
continues some beam of the step before), so a state kept by row index describes another row's text. A triec state is
a function of the tokens generated alone, so the position of a row is found from its tokens: the position of the
same tokens without the last (some row's position at the step before, remembered by its tokens) advanced by the
last one. Each step costs one dictionary lookup and one advance per distinct row, never a walk from the start
(:class:`Prefixes`); only the last step's positions are kept.

A row whose tokens the constraint refused (beam search keeps ``-inf`` candidates when fewer allowed ones remain, and
pads finished beams) is **dead**: it allows the EOS ids only, as a finished row does, so no row is ever all
forbidden. Positions are table states (ints: :data:`~triec.runtime.states.FINISHED` after EOS, :data:`DEAD`) for
the tables the device serves, or host matchers (``None`` when dead) for schema tables and think-then-answer.
Framework-free.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from triec.errors import TokenNotAllowed
from triec.runtime.states import FINISHED

P = TypeVar("P")

DEAD = -2
"""The state of a row whose tokens the table refused: the device table's ``INVALID`` (:mod:`triec.runtime.torch`),
whose row allows the EOS ids only, as a finished row's."""


class Prefixes(Generic[P]):
    """Positions of rows given by their generated tokens, remembered from one step to the next.

    ``start`` is the position before any token, ``step(position, token)`` the position after one more (it must not
    change ``position``: a beam forks). :meth:`positions` answers a step's rows; rows of the same tokens share one
    position object.
    """

    def __init__(self, start: Callable[[], P], step: Callable[[P, int], P]) -> None:
        self._start = start
        self._step = step
        self._last: dict[tuple[int, ...], P] = {}

    def reset(self) -> None:
        """Forget every position: the next call starts from the prompt."""
        self._last = {}

    def positions(self, rows: Sequence[Sequence[int]]) -> list[P]:
        """The position of each row (its generated tokens). A row one token longer than a row of the last call
        continues it; any other is walked from the start (a new call, or a row no earlier step had)."""
        found: dict[tuple[int, ...], P] = {}
        out: list[P] = []
        for row in rows:
            key = tuple(row)
            pos = found.get(key)
            if pos is None:
                pos = found[key] = self._position(key)
            out.append(pos)
        self._last = found
        return out

    def _position(self, key: tuple[int, ...]) -> P:
        known = self._last.get(key)
        if known is not None:  # the same rows asked again
            return known
        if not key:
            return self._start()
        parent = self._last.get(key[:-1])
        if parent is None:
            parent = self._start()
            for t in key[:-1]:
                parent = self._step(parent, t)
        return self._step(parent, key[-1])


def state_step(advance: Callable[[int, int], int], eos: Sequence[int]) -> Callable[[int, int], int]:
    """``step`` for table states: the table's advance; after EOS (FINISHED) an EOS keeps the row finished; a refused
    token, or anything after the end, makes the row dead."""
    ends = frozenset(int(e) for e in eos)

    def step(state: int, token: int) -> int:
        if state == FINISHED:
            return FINISHED if token in ends else DEAD
        if state == DEAD:
            return DEAD
        try:
            return advance(state, token)
        except (TokenNotAllowed, IndexError):
            return DEAD

    return step


M = TypeVar("M")


def matcher_step(
    fork: Callable[[M], M], accept: Callable[[M, int], bool], ended: Callable[[M], bool]
) -> Callable[[M | None, int], M | None]:
    """``step`` for host matchers: a fork of the parent that accepts the token (a finished matcher ignores what
    follows its EOS: generate pads finished rows), ``None`` (dead) where it is refused."""

    def step(parent: M | None, token: int) -> M | None:
        if parent is None:
            return None
        if ended(parent):
            return parent
        child = fork(parent)
        return child if accept(child, token) else None

    return step
