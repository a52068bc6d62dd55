"""One measurement cell in its own process, cut off at a time and a memory limit (``triec bench``'s cells, and the
suites' in the repository's benchmarks/ folder).

A cell is a function ``fn(job, out)`` named ``"module:function"``. :func:`run_cell` starts
``python -m triec.bench.runner TARGET JOB OUT`` and watches it: past ``timeout`` seconds, or once its
resident memory passes ``max_rss`` bytes, it is killed, and the cell's status says so (a limit reached is a
result, not a failure). The child writes its results through :class:`Out` after every phase, so a killed
cell still reports what it finished and the phase it was in. Processes because a peer's compile can take
minutes or many GB, peak memory is only honest per process, and "cold" must mean a process that never saw
the tokenizer.

Also here: what a result records about where it ran (:func:`machine_info`, :func:`engine_versions`). The
suites' statistics and timing loops are benchmarks/measure.py's (a checkout's, not the package's).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

STATUSES = ("ok", "timeout", "memory", "error", "refused", "missing", "skipped")
"""What a cell's ``status`` may say: ``timeout`` and ``memory`` are limits reached, ``refused`` an engine
that declined the input, ``missing`` / ``skipped`` a framework or device that is not there."""

POLL_S = 0.1
DEFAULT_TIMEOUT_S = 600.0
DEFAULT_MAX_RSS = 16 * 2**30


# ---------------------------------------------------------------- where it ran


def rss_bytes(pid: int | None = None) -> int:
    """Resident memory of a process (this one by default); 0 once it is gone."""
    try:
        with open(f"/proc/{pid or 'self'}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def machine_info() -> dict[str, Any]:
    """What a reader needs to compare figures: CPU, cores, memory, Python and numpy."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = None
    with contextlib.suppress(ValueError, OSError, AttributeError):
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    import numpy as np

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_bytes": mem,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
    }


def engine_versions() -> dict[str, str | None]:
    """triec's and each peer engine's version (None: not installed)."""
    from triec._version import __version__
    from triec.engines import ENGINES, engine_version

    return {"triec": __version__, **{e: engine_version(e) for e in ENGINES}}


# ---------------------------------------------------------------- a cell's process


class Out:
    """A cell's results as the child knows them, rewritten (temp file, then rename) after every phase."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.data: dict[str, Any] = {"status": "running", "phase": "start"}
        self.put()

    def put(self, **fields: Any) -> None:
        self.data.update(fields)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.data, f)
        os.replace(tmp, self.path)


def _child(target: str, job_path: str, out_path: str) -> int:
    out = Out(out_path)
    try:
        module, _, name = target.partition(":")
        fn = getattr(importlib.import_module(module), name)
        fn(json.loads(Path(job_path).read_text()), out)
        if out.data.get("status") == "running":
            out.put(status="ok")
    except Exception as exc:  # noqa: BLE001 - the cell's result: its status says what went wrong
        out.put(status="error", error=first_line(exc))
    return 0


def first_line(exc: BaseException | str, limit: int = 300) -> str:
    """``Type: message``, first line only, cut to ``limit`` characters (a table cell, not a traceback)."""
    text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    line = text.strip().splitlines()[0] if text.strip() else text
    return line[:limit]


def run_cell(
    target: str,
    job: dict[str, Any],
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    max_rss: int | None = DEFAULT_MAX_RSS,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run ``target(job, out)`` in a fresh process; its results with ``status``, ``wall_s`` and ``peak_rss``.

    ``peak_rss`` is the largest resident size the parent saw while polling (the child may report its own
    exact high-water mark as well). A cell past ``timeout`` is ``timeout``, one past ``max_rss`` ``memory``;
    either keeps the fields written before and names the phase it was cut off in.
    """
    with tempfile.TemporaryDirectory(prefix="triec-bench-cell-") as tmp:
        job_path, out_path = os.path.join(tmp, "job.json"), os.path.join(tmp, "out.json")
        Path(job_path).write_text(json.dumps(job))
        t0 = time.perf_counter()
        with open(os.path.join(tmp, "stderr"), "w+") as log:  # a file, not a pipe: a chatty child never blocks
            proc = subprocess.Popen(
                [sys.executable, "-m", "triec.bench.runner", target, job_path, out_path],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=log,
                text=True,
            )
            killed, peak = _watch(proc, t0, timeout, max_rss)
            log.seek(0)
            stderr = log.read()
        wall = time.perf_counter() - t0
        try:
            data: dict[str, Any] = json.loads(Path(out_path).read_text())
        except (OSError, ValueError):
            data = {"status": "running", "phase": "start"}
    phase = data.get("phase", "start")
    if killed == "timeout":
        data.update(status="timeout", error=f"> {timeout:g} s (stopped during {phase})")
    elif killed == "memory":
        data.update(status="memory", error=f"> {(max_rss or 0) / 2**30:.1f} GiB resident (stopped during {phase})")
    elif proc.returncode != 0 or data.get("status") == "running":
        tail = stderr.strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
        data.update(status="error", error=first_line(f"worker exited with {proc.returncode}: {tail[0]}"))
    data["wall_s"] = wall
    data["peak_rss"] = max(peak, int(data.get("peak_rss") or 0))
    return data


def _watch(proc: subprocess.Popen[str], t0: float, timeout: float, max_rss: int | None) -> tuple[str | None, int]:
    """Wait for ``proc``; kill it past the limits. Returns (what killed it or None, the peak RSS seen)."""
    peak = 0
    try:
        while True:
            try:
                proc.wait(timeout=POLL_S)
                return None, peak
            except subprocess.TimeoutExpired:
                pass
            peak = max(peak, rss_bytes(proc.pid))
            reason = "timeout" if time.perf_counter() - t0 > timeout else None
            if reason is None and max_rss is not None and peak > max_rss:
                reason = "memory"
            if reason:
                return reason, peak
    finally:  # a limit reached, or Ctrl-C in the parent: no cell outlives its run
        if proc.poll() is None:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    sys.exit(_child(*sys.argv[1:4]))
