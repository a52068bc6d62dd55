"""``python -m benchmarks SUITE|all|docs [--quick] [--out DIR] [--section NAME] [--write-docs]``, from the
repository root.

What ``triec bench SUITE`` was until issue 50 (the suites left the package): one suite, every suite (``all``: one
whose framework or device is missing says ``skipped: why``), or ``docs`` (only rewrite docs/benchmarks.md's tables
and plots from the result files). Exit codes: 0, 1 when a suite failed, 2 when one named alone cannot run here
(or the arguments are wrong), 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.command import DEFAULT_RESULTS, EXIT_UNAVAILABLE, choices, run

EXIT_INTERRUPTED = 130


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Run a benchmark suite of docs/benchmarks.md, write its result file, rewrite the docs' tables.",
    )
    p.add_argument(
        "suite",
        metavar="SUITE",
        help=f"{', '.join(choices()[:-2])}; 'all' (every suite); or 'docs' (rewrite docs/benchmarks.md from the "
        "result files)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="every suite at its smallest size (proves it runs; not timings); results are written only with --out",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="the directory of the result files (<suite>.json); default: docs/results, none with --quick",
    )
    p.add_argument(
        "--section",
        action="append",
        metavar="NAME",
        help="only this section of a suite that has sections (beams: linking, model, semantic, vllm; repeatable), "
        "merged into the suite's result file in --out",
    )
    p.add_argument(
        "--write-docs", action="store_true", help="then rewrite docs/benchmarks.md's tables and plots from the results"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.quick and args.write_docs:
        print(
            "python -m benchmarks: --write-docs with --quick: quick runs are not timings, and the docs hold timings",
            file=sys.stderr,
        )
        return EXIT_UNAVAILABLE
    where = args.out if args.out is not None or args.quick else DEFAULT_RESULTS
    try:
        return run(args.suite, quick=args.quick, out=where, write_docs=args.write_docs, sections=args.section)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
