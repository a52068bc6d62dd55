"""One beam step's constraint, timed the way transformers calls it, over recorded beams (the ``beams`` suite).

:func:`record_beams` runs a constrained beam search of ``W`` beams with seeded random log-probabilities (each
step: every beam's allowed continuations but EOS, the ``W`` best by summed score, as transformers keeps its
running beams) and keeps each step's ``input_ids``: realistic rows (beams fork, share prefixes and drop) with
no model in the loop. :func:`time_steps` then replays those steps through a constraint built afresh per round,
each step called as ``generate`` calls a logits processor (``input_ids`` of ``W`` rows, scores ``W x vocab``),
so a processor that follows its rows from call to call sees the same sequence it would in a real search;
methods alternate round by round.
:class:`StepClock` times whole steps of a real ``generate``: one timestamp a step, taken after every other
processor.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

Allowed = Callable[[list[int]], Sequence[int]]
"""The allowed next tokens after a row's generated tokens."""


def record_beams(
    allowed: Allowed, prompt: Sequence[int], width: int, steps: int, vocab_size: int, eos: int, seed: int = 0
) -> list[Any]:
    """Each step's ``input_ids`` (a ``(width, len(prompt) + step)`` int64 tensor) of a constrained beam search
    driven by seeded random log-probabilities; a step with fewer than ``width`` live continuations repeats its
    best rows (transformers would fill them from finished hypotheses)."""
    import torch

    rng = np.random.default_rng(seed)
    beams: list[list[int]] = [[]]
    scores = [0.0]
    out = []
    for _ in range(steps):
        rows = (beams * width)[:width] if len(beams) < width else beams
        out.append(torch.tensor([[*prompt, *b] for b in rows], dtype=torch.int64))
        candidates: list[tuple[float, int, int]] = []
        for i, b in enumerate(beams):
            ids = np.asarray([t for t in allowed(b) if t != eos], dtype=np.int64)
            if ids.shape[0] == 0:
                continue
            logits = rng.standard_normal(vocab_size).astype(np.float32)
            logp = logits - np.log(np.exp(logits - logits.max()).sum()) - logits.max()
            cand = scores[i] + logp[ids]
            top = np.argsort(-cand)[:width]
            candidates += [(float(cand[j]), i, int(ids[j])) for j in top]
        if not candidates:
            break
        candidates.sort(key=lambda c: -c[0])
        kept = candidates[:width]
        beams = [[*beams[i], t] for _, i, t in kept]
        scores = [s for s, _, _ in kept]
    return out


def time_steps(
    makers: dict[str, Callable[[], Callable[[Any, Any], Any]]],
    steps: list[Any],
    vocab_size: int,
    rounds: int,
    seed: int = 1,
) -> dict[str, dict[str, Any]]:
    """Seconds of each step's call, per method and round, as wall time and as this process's CPU time (on a
    shared machine the wall time counts the neighbours' load too). Each round, method after method (alternating,
    so a busy moment falls on all of them): ``make()`` builds the constraint a ``generate`` call would hold (a
    fresh processor), then the steps are called in order with seeded random scores (made beforehand). The first
    round warms up and is kept apart: ``{method: {"warmup": [wall...], "wall": [[...]...], "cpu": [[...]...]}}``."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    scores = [torch.randn(int(ids.shape[0]), vocab_size, generator=gen) for ids in steps]
    found: dict[str, dict[str, Any]] = {name: {"wall": [], "cpu": []} for name in makers}
    for _ in range(rounds + 1):
        for name, make in makers.items():
            processor = make()
            wall, cpu = [], []
            for ids, s in zip(steps, scores, strict=True):
                t0, c0 = time.perf_counter(), time.process_time()
                processor(ids, s)
                wall.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
            found[name]["wall"].append(wall)
            found[name]["cpu"].append(cpu)
    for f in found.values():
        f["warmup"] = f["wall"].pop(0)
        f["cpu"].pop(0)
    return found


class StepClock:
    """A logits processor that changes nothing and notes the time of each call (wall and this process's CPU):
    placed after the others, the gaps between its calls are whole decode steps (forward, constraint, beam
    bookkeeping)."""

    def __init__(self) -> None:
        self.marks: list[tuple[float, float]] = []

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        self.marks.append((time.perf_counter(), time.process_time()))
        return scores

    def steps(self, cpu: bool = False) -> list[float]:
        """Seconds of each decode step after the first (the first call follows the prompt's prefill)."""
        i = 1 if cpu else 0
        return [b[i] - a[i] for a, b in zip(self.marks, self.marks[1:], strict=False)]


class Timed:
    """A logits processor wrapped to note the wall and CPU time of each of its calls (the constraint's own
    share of a step: its time over the step's, call by call)."""

    def __init__(self, inner: Callable[[Any, Any], Any]) -> None:
        self.inner = inner
        self.calls: list[tuple[float, float]] = []

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        t0, c0 = time.perf_counter(), time.process_time()
        out = self.inner(input_ids, scores)
        self.calls.append((time.perf_counter() - t0, time.process_time() - c0))
        return out
