"""Whole-process wall times of the ``triec`` command line (prints figures, asserts nothing).

Each command runs as a fresh ``python -m triec.cli`` process, ``--runs`` times
after one warm-up; the table gives the median wall time, and the median CPU
time (user + system) of the process, which is steadier than wall time on a
shared machine. "cold" compiles get an empty cache directory each run (a
tokenizer never seen before); the others share one warmed cache directory.
The floor rows show what Python and the imports alone cost on this machine.

``--baseline DIR`` runs the same commands from another checkout (e.g. ``git
archive main | tar -x -C DIR``) interleaved with this one, run for run, so
both see the same load:

    python scripts/bench_cli.py [--runs 9] [--tokenizer qwen2] [--baseline DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall seconds, user + system CPU seconds) of one process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read() if proc.stderr else b""
    if proc.stderr:
        proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {err.decode()[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime


class Tree:
    """One checkout of triec: its commands, environment and warmed cache."""

    def __init__(self, label: str, root: Path, work: Path, tokenizer: str) -> None:
        self.label, self.root, self.work = label, root, work / label
        self.work.mkdir(parents=True)
        self.env = dict(os.environ, PYTHONPATH=str(root), TRIEC_CACHE_DIR=str(self.work / "cache"), COLUMNS="120")
        py = [sys.executable]
        cli = py + ["-m", "triec.cli"]
        values = str(ROOT / "examples" / "tools.txt")
        artifact = str(self.work / "tools.triec")
        compile_cmd = cli + ["compile", values, "-t", tokenizer, "-o", artifact]
        self.cases: list[tuple[str, list[str], bool]] = [
            ("python -c pass (floor)", py + ["-c", "pass"], False),
            ("python -c 'import numpy' (floor)", py + ["-c", "import numpy"], False),
            ("python -c 'import triec.runtime'", py + ["-c", "import triec.runtime"], False),
            ("triec --help", cli + ["--help"], False),
            (f"triec compile examples/tools.txt -t {tokenizer} (warm caches)", compile_cmd, False),
            ("triec inspect tools.triec", cli + ["inspect", artifact], False),
            (f"triec compile examples/tools.txt -t {tokenizer} (cold caches)", compile_cmd, True),
        ]
        _run(compile_cmd, self.env, self.work)  # warms the cache and writes the artifact inspect reads
        self.cold = 0

    def run(self, index: int) -> tuple[float, float]:
        _, cmd, cold = self.cases[index]
        env = self.env
        if cold:
            self.cold += 1
            env = dict(env, TRIEC_CACHE_DIR=str(self.work / f"cold-{self.cold}"))
        return _run(cmd, env, self.work)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--tokenizer", default="qwen2")
    ap.add_argument("--baseline", type=Path, default=None, help="another checkout to run side by side")
    ap.add_argument("--json", dest="json_out", default=None)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="triec-bench-cli-"))
    trees = [Tree("this", ROOT, work, args.tokenizer)]
    if args.baseline is not None:
        trees.insert(0, Tree("baseline", args.baseline.resolve(), work, args.tokenizer))
    rows = []
    for index, (label, _, _) in enumerate(trees[0].cases):
        samples: dict[str, list[tuple[float, float]]] = {t.label: [] for t in trees}
        for i in range(args.runs + 1):
            for tree in trees:  # interleaved: every tree sees the same moment's load
                sample = tree.run(index)
                if i:  # the first run warms the page cache
                    samples[tree.label].append(sample)
        row: dict[str, object] = {"command": label}
        for tree in trees:
            walls = [w for w, _ in samples[tree.label]]
            cpus = [c for _, c in samples[tree.label]]
            row[tree.label] = {"median_s": statistics.median(walls), "min_s": min(walls), "cpu_median_s": statistics.median(cpus)}
        rows.append(row)
    load = os.getloadavg()[0]
    print(f"whole-process times, {args.runs} runs each (python {sys.version.split()[0]}, {os.cpu_count()} cores, load {load:.1f})\n")
    labels = [t.label for t in trees]
    head = " | ".join(f"{lab} wall median (min) | {lab} CPU" for lab in labels)
    print(f"| command | {head} |" + (" wall ratio |" if len(trees) > 1 else ""))
    print("|---|" + "---|---|" * len(trees) + ("---|" if len(trees) > 1 else ""))
    for r in rows:
        cells = " | ".join(f"{r[lab]['median_s']:.3f} ({r[lab]['min_s']:.3f}) | {r[lab]['cpu_median_s']:.3f}" for lab in labels)
        ratio = f" {r['this']['median_s'] / r['baseline']['median_s']:.2f} |" if len(trees) > 1 else ""
        print(f"| `{r['command']}` | {cells} |{ratio}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
