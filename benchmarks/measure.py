"""What the suites measure with: the statistics every table uses (:func:`stats`: median and spread), timing loops,
peak memory, and what a result records about where it ran (:func:`machine`, :func:`versions`).

A cell runs in its own process through :func:`triec.bench.runner.run_cell` (the package's, shared with
``triec bench``); these are the suites' own helpers around it.
"""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from triec.bench.runner import engine_versions, machine_info


def stats(samples: Sequence[float]) -> dict[str, float | int]:
    """Median and spread of durations in seconds: ``n``, ``median``, ``min``, ``max``, ``q1``, ``q3``."""
    if not samples:
        return {"n": 0}
    xs = sorted(float(x) for x in samples)
    q1, q3 = (xs[0], xs[-1]) if len(xs) < 4 else statistics.quantiles(xs, n=4)[::2]
    return {"n": len(xs), "median": statistics.median(xs), "min": xs[0], "max": xs[-1], "q1": q1, "q3": q3}


def median(summary: Any) -> float | None:
    """The median of a :func:`stats` summary, or None when there is none (a cell cut off before it)."""
    if isinstance(summary, dict) and summary.get("n"):
        return float(summary["median"])
    return None


def timed(fn: Callable[[], Any], repeat: int, warmup: int = 1) -> list[float]:
    """Wall times of ``repeat`` calls of ``fn`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def per_call(fn: Callable[[], Any], calls: int, rounds: int) -> list[float]:
    """Seconds per call of ``fn``, one sample per round of ``calls`` back-to-back calls (for microsecond work)."""
    fn()
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t0) / calls)
    return out


def peak_rss_bytes() -> int:
    """This process's resident high-water mark (``VmHWM``; ``ru_maxrss`` where /proc is absent)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_peak_rss() -> None:
    """Start a new :func:`peak_rss_bytes` high-water mark (Linux: ``clear_refs`` 5); elsewhere it stays the process's."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def machine() -> dict[str, Any]:
    """CPU, cores, memory, platform, Python, and the load when the run started (a shared machine says so)."""
    info = machine_info()
    with contextlib.suppress(OSError):
        info["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return info


def versions(extra: Sequence[str] = ()) -> dict[str, str | None]:
    """triec's, the peers' and ``extra`` distributions' versions (None: not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    found: dict[str, str | None] = {
        **engine_versions(),
        "numpy": _version("numpy"),
        "python": platform.python_version(),
    }
    for name in extra:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def _version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None
