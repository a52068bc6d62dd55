"""Progress displays for long commands: rich bars on stderr, and only on a terminal.

The work itself (:mod:`triec.verify.tables`, :mod:`triec.bench.peers`, :mod:`triec.compiler.walk`) only
calls a callback; these classes turn the calls into bars. When stderr is not a
terminal, or the command prints JSON or was asked to be quiet, they draw
nothing, so logs and pipes never fill with redraws.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from triec.cli import _common

if TYPE_CHECKING:
    from triec.bench.peers import BenchProgress
    from triec.verify.tables import CheckProgress

SHOW_AFTER_S = 1.0  # a compile walk shows its bar only once it has run this long


def interactive(enabled: bool = True) -> bool:
    """Draw progress? Only when asked to and stderr is a terminal (looked up now: tests swap the console)."""
    return enabled and _common.err.is_terminal


class _Bars:
    """A rich Progress on stderr that exists only when shown; a no-op context otherwise."""

    def __init__(self, show: bool) -> None:
        self.show = interactive(show)
        self.progress: Progress | None = None

    def columns(self) -> tuple[ProgressColumn | str, ...]:
        raise NotImplementedError

    def __enter__(self) -> Self:
        if self.show:
            self.progress = Progress(*self.columns(), console=_common.err, transient=True)
            self.progress.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


_PHASE_TEXT = {
    "preparing": "deriving the reference",
    "loading": "loading the engine",
    "compiling": "compiling the grammar",
    "skipped": "skipped",
    "error": "failed",
}


class VerifyBars(_Bars):
    """One bar per comparison: states checked of the selection, then decode walks, with elapsed time and ETA."""

    def __init__(self, show: bool) -> None:
        super().__init__(show)
        self.tasks: dict[str, TaskID] = {}

    def columns(self) -> tuple[ProgressColumn | str, ...]:
        return (
            TextColumn("{task.description:<14}"),
            BarColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
        )

    def __call__(self, p: CheckProgress) -> None:
        if self.progress is None:
            return
        task = self.tasks.get(p.against)
        total = max(1, p.states_total + p.walks_total)  # a unit per state and per walk
        if task is None:
            task = self.tasks[p.against] = self.progress.add_task(p.against, total=total, detail="")
        detail = f"states {p.states:,}/{p.states_total:,}"
        if p.walks_total:
            detail += f"  walks {p.walks:,}/{p.walks_total:,}"
        if p.phase in _PHASE_TEXT:
            detail = _PHASE_TEXT[p.phase]
        completed = total if p.phase == "done" else p.states + p.walks
        self.progress.update(task, total=total, completed=completed, detail=detail)
        if p.phase in ("done", "skipped", "error"):
            self.progress.stop_task(task)


class BenchBar(_Bars):
    """One bar over the (K, engine) cells, naming the cell being measured."""

    def __init__(self, show: bool) -> None:
        super().__init__(show)
        self.task: TaskID | None = None

    def columns(self) -> tuple[ProgressColumn | str, ...]:
        return (
            TextColumn("bench"),
            BarColumn(),
            TextColumn("{task.completed:.0f}/{task.total:.0f} cells"),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
        )

    def __call__(self, p: BenchProgress) -> None:
        if self.progress is None:
            if p.status is not None:  # no terminal: one plain line per finished cell (a log, not redraws)
                _common.err.print(f"[dim]{p.cell}: {p.status} ({p.seconds:.1f} s)[/]", highlight=False)
            return
        if self.task is None:
            self.task = self.progress.add_task("", total=p.total)
        label = f"{p.cell} ({p.status})" if p.status else f"{p.cell}..."
        self.progress.update(self.task, completed=p.done, total=p.total, description=label)


class _BarOnceKnown(BarColumn):
    """A bar only for tasks that have a total: phases without one keep the bare spinner."""

    def render(self, task: Task) -> Any:
        return super().render(task) if task.total is not None else Text("")


class PhaseDisplay(_Bars):
    """A spinner per phase (``triec compile``); a phase that reports progress grows a bar after a second."""

    def __init__(self, show: bool) -> None:
        super().__init__(show)
        self.task: TaskID | None = None
        self.started = 0.0

    def columns(self) -> tuple[ProgressColumn | str, ...]:
        return (
            SpinnerColumn(),
            TextColumn("{task.description}"),
            _BarOnceKnown(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
        )

    def begin(self, label: str) -> None:
        self.started = time.perf_counter()
        if self.progress is not None:
            if self.task is not None:
                self.progress.remove_task(self.task)
            self.task = self.progress.add_task(f"{label}...", total=None, detail="")

    def step(self, done: int, total: int) -> None:
        """``done`` of ``total`` units (walk levels' states, or chunks); shown once the phase has run a second."""
        if self.progress is None or self.task is None or time.perf_counter() - self.started < SHOW_AFTER_S:
            return
        self.progress.update(self.task, completed=done, total=total, detail=f"{100 * done / max(total, 1):3.0f}%")


class Phases:
    """Times named phases and shows a spinner while one runs (stderr, interactive only).

    ``with phases.phase(...) as step`` gives a ``step(done, total)`` callback: a phase
    that reports through it (the compile's walk) grows a progress bar once it has run
    about a second.
    """

    def __init__(self, show: bool) -> None:
        self.show = interactive(show)
        self.seconds: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str, label: str) -> Iterator[Callable[[int, int], None]]:
        t0 = time.perf_counter()
        try:
            with PhaseDisplay(self.show) as display:
                display.begin(label)
                yield display.step
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0
