"""Whole-process wall times of the ``triec`` command line (prints figures, asserts nothing).

Each command runs as a fresh ``python -m triec.cli`` process, ``--runs`` times
after one warm-up; the table gives the median, min and max wall time. "cold"
compiles get an empty cache directory each run (a tokenizer never seen before);
the others share one warmed cache directory. The floor rows show what Python and
the imports alone cost on this machine.

    python scripts/bench_cli.py [--runs 9] [--tokenizer qwen2] [--json OUT]
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


def _time(cmd: list[str], env: dict[str, str], cwd: Path) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.decode()[-2000:]}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--tokenizer", default="qwen2")
    ap.add_argument("--json", dest="json_out", default=None)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="triec-bench-cli-"))
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env["TRIEC_CACHE_DIR"] = str(work / "cache")
    env.setdefault("COLUMNS", "120")
    py = [sys.executable]
    cli = py + ["-m", "triec.cli"]
    values = str(ROOT / "examples" / "tools.txt")
    artifact = str(work / "tools.triec")
    compile_cmd = cli + ["compile", values, "-t", args.tokenizer, "-o", artifact]
    cases: list[tuple[str, list[str], bool]] = [
        ("python -c pass (floor)", py + ["-c", "pass"], False),
        ("python -c 'import numpy' (floor)", py + ["-c", "import numpy"], False),
        ("import triec.runtime", py + ["-c", "import triec.runtime"], False),
        ("triec --help", cli + ["--help"], False),
        (f"triec compile examples/tools.txt -t {args.tokenizer} (warm caches)", compile_cmd, False),
        ("triec inspect tools.triec", cli + ["inspect", artifact], False),
        (f"triec compile examples/tools.txt -t {args.tokenizer} (cold caches)", compile_cmd, True),
    ]
    _time(compile_cmd, env, work)  # warms the cache and writes the artifact inspect reads
    rows = []
    for label, cmd, cold in cases:
        times = []
        for i in range(args.runs + 1):
            run_env = env
            if cold:
                run_env = dict(env, TRIEC_CACHE_DIR=str(work / f"cold-{i}"))
            t = _time(cmd, run_env, work)
            if i:  # the first run warms the page cache
                times.append(t)
        rows.append({"command": label, "median_s": statistics.median(times), "min_s": min(times), "max_s": max(times)})
    print(f"whole-process wall time, {args.runs} runs each (python {sys.version.split()[0]}, {os.cpu_count()} cores)\n")
    print("| command | median (s) | min | max |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| `{r['command']}` | {r['median_s']:.3f} | {r['min_s']:.3f} | {r['max_s']:.3f} |")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
