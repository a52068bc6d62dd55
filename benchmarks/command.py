"""``python -m benchmarks SUITE``: run one suite or all of them, write their results, and rewrite the docs from them.

``triec bench`` (the package's command) is the ``peers`` suite's run on the user's own set (:mod:`triec.cli.bench`);
this is the rest, from a checkout: ``all`` runs every suite in :data:`~benchmarks.suites.NAMES` order, a suite whose framework or
device is missing reports ``skipped: <why>`` there and the run goes on, while a suite named alone that cannot
run is an error (exit 2). ``docs`` runs nothing and rewrites docs/benchmarks.md from the result files.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from benchmarks import results
from benchmarks.suites import NAMES, load

ALL = "all"
DOCS = "docs"
DEFAULT_RESULTS = Path("docs") / "results"
DEFAULT_DOCUMENT = Path("docs") / "benchmarks.md"

EXIT_FAILED = 1
EXIT_UNAVAILABLE = 2


@dataclass(frozen=True)
class SuiteOutcome:
    """What became of one suite in a run: ``ok`` (with the file written, if any), ``skipped`` or ``failed``."""

    suite: str
    status: str
    detail: str = ""
    seconds: float = 0.0


def choices() -> list[str]:
    return [*NAMES, ALL, DOCS]


def run(
    suite: str,
    *,
    quick: bool,
    out: Path | None,
    write_docs: bool,
    document: Path = DEFAULT_DOCUMENT,
    say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
    sections: list[str] | None = None,
) -> int:
    """Run ``suite`` (a name, ``all`` or ``docs``); the exit code. Results go to ``out`` (none when None).
    ``sections``: only those sections of a suite that has them (``SECTION_NAMES``), merged into its result file."""
    if suite not in choices():
        say(f"python -m benchmarks: no suite {suite!r}; choose from {', '.join(choices())}")
        return EXIT_UNAVAILABLE
    if sections and (why := _bad_sections(suite, sections)):
        say(f"python -m benchmarks: {why}")
        return EXIT_UNAVAILABLE
    names = [] if suite == DOCS else list(NAMES) if suite == ALL else [suite]
    outcomes = [run_one(name, quick=quick, out=out, alone=suite != ALL, say=say, sections=sections) for name in names]
    for o in outcomes:
        say(
            f"{o.suite}: {o.status}{': ' + o.detail if o.detail else ''}"
            + (f" ({o.seconds:.0f} s)" if o.seconds else "")
        )
    if write_docs or suite == DOCS:  # `python -m benchmarks docs` is exactly the rewrite
        where = out or DEFAULT_RESULTS
        for path in _write_docs(document, where, [o.suite for o in outcomes if o.status == "ok"] or None):
            say(f"wrote {path}")
    if any(o.status == "failed" for o in outcomes):
        return EXIT_FAILED
    if suite != ALL and any(o.status == "skipped" for o in outcomes):
        return EXIT_UNAVAILABLE
    return 0


def _bad_sections(suite: str, sections: list[str]) -> str | None:
    """Why ``--section`` cannot apply: a suite without sections, or a section it does not have."""
    have = getattr(load(suite), "SECTION_NAMES", None) if suite in NAMES else None
    if have is None:
        return f"--section: the suite {suite!r} has no sections" if suite in NAMES else f"--section with {suite!r}"
    unknown = [s for s in sections if s not in have]
    return f"--section: {suite} has no section {', '.join(unknown)} (it has {', '.join(have)})" if unknown else None


def run_one(
    name: str,
    *,
    quick: bool,
    out: Path | None,
    alone: bool,
    say: Callable[[str], None],
    sections: list[str] | None = None,
) -> SuiteOutcome:
    """One suite: skipped when it cannot run here, else its result validated and written to ``out`` (with
    ``sections``: merged into the result file already there, :func:`benchmarks.results.merge_sections`)."""
    module = load(name)
    why = module.unavailable()
    if why:
        return SuiteOutcome(name, "skipped", why)
    say(f"{name}: running{' (quick)' if quick else ''}{' sections ' + ', '.join(sections) if sections else ''}")
    t0 = time.perf_counter()
    try:
        found = cast(Any, module).run(quick, sections=sections) if sections else module.run(quick)
        result = results.validate(found, name)
        if sections and out is not None and results.path(out, name).is_file():
            result = results.merge_sections(results.read(out, name), result, sections)
    except Exception as exc:  # noqa: BLE001 - one suite's failure is reported, the others still run
        if alone:
            traceback.print_exc()
        return SuiteOutcome(name, "failed", f"{type(exc).__name__}: {exc}", time.perf_counter() - t0)
    seconds = time.perf_counter() - t0
    broken = sum(c.get("status") == "error" for c in result["cells"])
    if broken and (quick or broken == len(result["cells"])):  # a measurement that broke is not a result
        first = next(c for c in result["cells"] if c.get("status") == "error")
        return SuiteOutcome(name, "failed", f"{broken} cells broke: {first.get('error', '')}"[:300], seconds)
    if out is None:
        return SuiteOutcome(name, "ok", f"{len(result['cells'])} cells (not written)", seconds)
    return SuiteOutcome(name, "ok", f"{len(result['cells'])} cells in {results.write(result, out)}", seconds)


def _write_docs(document: Path, where: Path, suites: list[str] | None) -> list[Path]:
    from benchmarks import docs

    return docs.write(document, where, suites)
