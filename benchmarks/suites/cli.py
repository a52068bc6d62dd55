"""The ``triec`` command line as whole processes: what a user waits for, next to Python's own start-up.

Each command is a fresh process (``python -m triec.cli ...``), run ``runs`` times after one warm-up run, its
commands interleaved run for run so that all see the same load; the table gives the median wall time with
its spread and the median CPU time (user + system, steadier than wall on a shared machine). ``warm`` commands
share one cache directory; the ``cold`` compile gets an empty one each run (a tokenizer never seen). The floor
rows are Python and numpy alone. The values: 1,000 seeded synthetic tool names, Qwen2.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import triec
from benchmarks import docs, results
from benchmarks.measure import stats

FULL = {"runs": 9}
QUICK = {"runs": 1}


def unavailable() -> str | None:
    return None


def _process(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall seconds, user + system CPU seconds) of one process; raises when it fails."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read() if proc.stderr else b""
    if proc.stderr:
        proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {err.decode(errors='replace')[-500:]}")
    return wall, usage.ru_utime + usage.ru_stime


def run(quick: bool) -> dict[str, Any]:
    from triec.synthetic.sets import tool_names

    runs = (QUICK if quick else FULL)["runs"]
    result = results.new("cli", {"quick": quick, "runs": runs, "tokenizer": "qwen2", "values": 1_000})
    with tempfile.TemporaryDirectory(prefix="triec-bench-cli-") as tmp:
        work = Path(tmp)
        (work / "tools.txt").write_text("\n".join(tool_names(1_000)) + "\n")
        package_root = str(Path(triec.__file__).resolve().parents[1])
        path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)
        env = {**os.environ, "PYTHONPATH": path, "TRIEC_CACHE_DIR": str(work / "cache"), "COLUMNS": "120"}
        py, cli = [sys.executable], [sys.executable, "-m", "triec.cli"]
        compile_cmd = [*cli, "compile", "tools.txt", "-t", "qwen2", "-o", "tools.triec"]
        cases = [
            ("python -c pass (floor)", [*py, "-c", "pass"], False),
            ("python -c 'import numpy' (floor)", [*py, "-c", "import numpy"], False),
            ("python -c 'import triec.runtime'", [*py, "-c", "import triec.runtime"], False),
            ("triec --help", [*cli, "--help"], False),
            ("triec compile tools.txt (warm caches)", compile_cmd, False),
            ("triec inspect tools.triec", [*cli, "inspect", "tools.triec"], False),
            ("triec compile tools.txt (cold caches)", compile_cmd, True),
        ]
        _process(compile_cmd, env, work)  # warms the cache; writes the artifact inspect reads
        samples: dict[str, list[tuple[float, float]]] = {label: [] for label, _, _ in cases}
        for i in range(runs + 1):
            for label, cmd, cold in cases:
                e = {**env, "TRIEC_CACHE_DIR": str(work / f"cold-{i}")} if cold else env
                sample = _process(cmd, e, work)
                if i:  # the first round warms the page cache
                    samples[label].append(sample)
    for label, _, cold in cases:
        walls, cpus = [w for w, _ in samples[label]], [c for _, c in samples[label]]
        result["cells"].append(
            {
                "command": label,
                "cold": cold,
                "status": "ok",
                "wall_s": stats(walls),
                "cpu_s": stats(cpus),
                "cpu_median_s": statistics.median(cpus),
            }
        )
    return result


def tables(result: dict[str, Any]) -> dict[str, str]:
    rows = [[f"`{c['command']}`", docs.spread(c["wall_s"]), docs.seconds(c["cpu_median_s"])] for c in result["cells"]]
    return {"processes": docs.markdown(["command", "wall, median (min-max)", "CPU, median"], rows)}
