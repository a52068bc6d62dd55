"""The two searches behind :func:`triec.rank`: best-first (exact) and beam search over a table's states. Framework-free.

Both walk token paths after the prompt. A path's score is the sum of the model's log-softmax over its whole
vocabulary along the path (what transformers' beam search adds up); a value's score is its best path's, the
closing EOS token included. The model is asked through one question (:class:`Scorer`): the log-softmax rows that
follow a batch of paths. The table is asked through :class:`Space`: each state's content tokens and the states they
lead to, and whether a state is a whole value (where the EOS ids end it).

**Exact.** A priority queue of partial paths by score. Log-probabilities are never positive, so a path's score never
rises as it grows, and the popped entries come out best first: the first completions popped are exactly the most
probable token paths, and the first completion of a value is its best path. The search pops until ``k`` distinct
values have completed. Up to ``batch`` partial paths are popped for one batched model call, but never past a
completion: a completion is popped only when no popped path awaits its row, since a descendant of such a path could
still outscore it. ``max_expansions`` bounds the rows asked for; when it is hit the result says so.

**Beam.** transformers' beam search (``length_penalty=0``, ``early_stopping=False``) over the same rows: each step
ranks every (beam, allowed token) candidate by score, keeps the best ``max(2, 1 + #EOS) x W``, of which the EOS
candidates among the first ``W`` finish and the first ``W`` others go on; finished hypotheses keep the best ``W``;
the search stops when the best running beam cannot beat the worst of ``W`` finished ones. The distinct values of the
finished hypotheses are the answer, best first. The work is bounded by ``W`` rows a step and ``max_tokens`` steps.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

Path = tuple[int, ...]


class Scorer(Protocol):
    """The model after one prompt: the next-token log-softmax rows (over the model's whole vocabulary) that follow
    each token path, in order; a row may be wider than the table's vocabulary (its extra ids are never asked for)."""

    def logprobs(self, paths: Sequence[Path]) -> np.ndarray: ...


class Space:
    """A table's states as the searches read them: content transitions (memoized per state), acceptance, the EOS
    ids and each accepting state's value. Any table of states serves (``transitions``, ``is_accepting``,
    ``eos_token_ids``, ``start``); an open set names a value by its text (``value`` gives ``None`` there)."""

    def __init__(self, table: Any) -> None:
        self.table = table
        self.start = int(table.start)
        self.eos = tuple(int(e) for e in table.eos_token_ids)
        self._rows: dict[int, tuple[list[int], list[int], bool]] = {}
        self._below: dict[int, range] = {}
        self._values_below = getattr(table, "values_below", None)
        try:
            self.count: int | None = len(table.value_bytes)
        except (AttributeError, NotImplementedError, TypeError):  # an open set (a pattern)
            self.count = None

    def row(self, state: int) -> tuple[list[int], list[int], bool]:
        """(content tokens, the states they lead to, whether ``state`` is a whole value)."""
        found = self._rows.get(state)
        if found is None:
            tokens, nxt = self.table.transitions(state)
            found = self._rows[state] = (tokens.tolist(), nxt.tolist(), bool(self.table.is_accepting(state)))
        return found

    def below(self, state: int) -> range | None:
        """The indices of the values whose paths pass through ``state`` (None where the table cannot say)."""
        if self._values_below is None:
            return None
        found = self._below.get(state)
        if found is None:
            found = self._below[state] = self._values_below(state)
        return found

    def index(self, state: int) -> int:
        """The index of the value ``state`` completes (-1 where the table keeps no list)."""
        return int(self.table.value_index(state)) if self.count is not None else -1

    def value(self, state: int) -> str:
        named = self.table.value(state)
        if named is not None:
            return str(named)
        return bytes(self.table.prefix(state)).decode("utf-8", "replace")


@dataclass
class Found:
    """What a search returns: distinct values best first, each with its best path found (EOS included)."""

    values: list[str] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    paths: list[Path] = field(default_factory=list)
    proven: int = 0
    expansions: int = 0
    hit_bound: bool = False
    indices: list[int] = field(default_factory=list)  # the found values' indices in the table, ascending

    def add(self, value: str, score: float, path: Path, index: int = -1) -> bool:
        if value in self.values:
            return False
        if index >= 0:
            bisect.insort(self.indices, index)
        self.values.append(value)
        self.scores.append(score)
        self.paths.append(path)
        return True


def _best_eos(row: np.ndarray, eos: Sequence[int]) -> int:
    return max(eos, key=lambda e: float(row[e]))


def _children(space: Space, score: float, path: Path, state: int, row: np.ndarray) -> list[tuple[float, int, int]]:
    """(score, token, next state) of each finite content continuation."""
    tokens, nxt, _ = space.row(state)
    if not tokens:
        return []
    scores = (score + row[np.asarray(tokens, dtype=np.int64)].astype(np.float64)).tolist()
    return [(s, t, n) for s, t, n in zip(scores, tokens, nxt, strict=True) if s > -math.inf]


def _spent(space: Space, found: Found, state: int) -> bool:
    """Every value below ``state`` has completed already: its paths can only repeat them (pruned, exactly)."""
    below = space.below(state)
    if below is None or len(below) > len(found.indices):
        return False
    have = bisect.bisect_left(found.indices, below.stop) - bisect.bisect_left(found.indices, below.start)
    return have == len(below)


def exact(scorer: Scorer, space: Space, k: int, *, max_expansions: int, batch: int) -> Found:
    """The ``k`` most probable values, best first (fewer where the set has fewer); see the module's docstring.

    A partial path below which every value has completed is dropped unexpanded: it can only spell them again.
    """
    found = Found()
    if space.count is not None:
        k = min(k, space.count)
    tie = 0
    # (-score, tie, path, state, value or None): value set = a completion (the path ends with EOS)
    heap: list[tuple[float, int, Path, int, str | None]] = [(-0.0, tie, (), space.start, None)]
    while heap and len(found.values) < k:
        pending: list[tuple[float, int, Path, int, str | None]] = []
        while heap and len(pending) < batch:
            if heap[0][4] is not None:
                if pending:
                    break  # a popped path's descendants may still outscore this completion: expand them first
                neg, _, path, state, value = heapq.heappop(heap)
                if found.add(str(value), -neg, path, space.index(state)) and len(found.values) == k:
                    break
                continue
            if found.indices and _spent(space, found, heap[0][3]):
                heapq.heappop(heap)
                continue
            if found.expansions + len(pending) >= max_expansions:
                found.hit_bound = True
                break
            pending.append(heapq.heappop(heap))
        if not pending:
            if found.hit_bound:
                break
            continue
        pending.sort(key=lambda n: n[2])  # neighbours share prefixes: sequential scorers reuse their cache
        rows = scorer.logprobs([n[2] for n in pending])
        found.expansions += len(pending)
        for (neg, _, path, state, _), row in zip(pending, rows, strict=True):
            for s, t, n in _children(space, -neg, path, state, row):
                tie += 1
                heapq.heappush(heap, (-s, tie, (*path, t), n, None))
            if space.row(state)[2] and space.eos:
                e = _best_eos(row, space.eos)
                s = -neg + float(row[e])
                if s > -math.inf:
                    tie += 1
                    heapq.heappush(heap, (-s, tie, (*path, e), state, space.value(state)))
        if found.hit_bound:
            break
    found.proven = len(found.values)
    if found.hit_bound:  # what else completed, in score order: valid values, each proven only to score at least this
        for neg, _, path, _, value in sorted(heap):
            if value is not None and len(found.values) < k:
                found.add(value, -neg, path)
    return found


@dataclass(order=True)
class _Candidate:
    key: tuple[float, int, int]  # (-score, beam, token): transformers' topk order over (beam, token) ids
    score: float = field(compare=False)
    path: Path = field(compare=False)
    state: int = field(compare=False)  # the next state, or -1 for EOS
    value: str | None = field(compare=False, default=None)


def beam(scorer: Scorer, space: Space, k: int, *, width: int, max_tokens: int) -> Found:
    """transformers' beam search of ``width`` beams over the table's paths; the distinct values of its finished
    hypotheses, best first, at most ``k``. See the module's docstring."""
    found = Found()
    keep = max(2, 1 + len(space.eos)) * width
    running: list[tuple[float, Path, int]] = [(0.0, (), space.start)]
    finished: list[tuple[float, Path, str]] = []
    for _ in range(max_tokens):
        if not running:
            break
        rows = scorer.logprobs([p for _, p, _ in running])
        found.expansions += len(running)
        candidates = _beam_candidates(space, running, rows)
        top = heapq.nsmallest(keep, candidates)
        for c in top[:width]:
            if c.value is not None:
                finished.append((c.score, c.path, c.value))
        finished = sorted(finished, key=lambda f: -f[0])[:width]
        running = [(c.score, c.path, c.state) for c in top if c.value is None][:width]
        if len(finished) == width and (not running or running[0][0] <= finished[-1][0]):
            break
    else:
        found.hit_bound = bool(running)
    for score, path, value in finished:
        if len(found.values) < k:
            found.add(value, score, path)
    return found


def _beam_candidates(space: Space, running: list[tuple[float, Path, int]], rows: np.ndarray) -> list[_Candidate]:
    out: list[_Candidate] = []
    for b, ((score, path, state), row) in enumerate(zip(running, rows, strict=True)):
        for s, t, n in _children(space, score, path, state, row):
            out.append(_Candidate((-s, b, t), s, (*path, t), n))
        if space.row(state)[2]:
            name = space.value(state)
            for e in space.eos:
                s = score + float(row[e])
                if s > -math.inf:
                    out.append(_Candidate((-s, b, e), s, (*path, e), -1, name))
    return out


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float64 (what adapters whose framework gives raw logits use)."""
    x = np.asarray(logits, dtype=np.float64)
    m = x.max(axis=-1, keepdims=True)
    out: np.ndarray = x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))
    return out


def shared_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class Sequential:
    """A :class:`Scorer` over an engine that runs one sequence with a cache it can cut back (llama.cpp, mlx-lm):
    each path goes from the longest prefix the cache holds. ``cut(n)`` keeps the cache's first ``n`` tokens;
    ``feed(tokens)`` runs them after it and returns the last position's raw logits."""

    def __init__(self, prompt: Sequence[int], cut: Callable[[int], None], feed: Callable[[list[int]], Any]) -> None:
        if not prompt:
            raise ValueError("the prompt must hold at least one token")
        self.prompt = [int(t) for t in prompt]
        self._cut, self._feed = cut, feed
        self._held: list[int] = []

    def logprobs(self, paths: Sequence[Path]) -> np.ndarray:
        rows = []
        for path in paths:
            full = self.prompt + list(path)
            keep = min(shared_prefix(self._held, full), len(full) - 1)
            self._cut(keep)
            logits = self._feed(full[keep:])
            self._held = full
            rows.append(log_softmax(np.asarray(logits).reshape(-1)))
        return np.stack(rows) if rows else np.zeros((0, 0))
