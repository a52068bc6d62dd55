"""docs/benchmarks.md's tables and plots, written from the suites' result files, never by hand.

A table sits between two markers naming its suite and table::

    <!-- bench:compile_load:compile -->
    | K | ... |
    <!-- /bench:compile_load:compile -->

:func:`render` rewrites every such block from ``<results>/<suite>.json`` through the suite's own
``tables(result)``; :func:`mismatches` says which blocks differ from what the result files give (a test holds
it empty). Plots are PNG files the suites draw next to the document (:func:`write_plots`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

MARKER = re.compile(
    r"<!-- bench:(?P<suite>[a-z0-9_]+):(?P<table>[a-z0-9_-]+) -->\n(?P<body>.*?)<!-- /bench:(?P=suite):(?P=table) -->",
    re.S,
)


# ---------------------------------------------------------------- cells of a table


def markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table; ``|`` inside a cell is escaped."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def seconds(s: float | None) -> str:
    """A duration with a unit that keeps three significant digits: ``1.23 s``, ``45.6 ms``, ``7.8 µs``."""
    if s is None:
        return "-"
    if s >= 1:
        return f"{s:,.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.2f} µs"


def spread(summary: Any) -> str:
    """A :func:`benchmarks.measure.stats` summary as ``median (min-max)``; ``-`` when it has no samples."""
    if not isinstance(summary, dict) or not summary.get("n"):
        return "-"
    if summary["n"] == 1:
        return seconds(summary["median"])
    return f"{seconds(summary['median'])} ({_bare(summary['min'], summary['median'])}-{_bare(summary['max'], summary['median'])})"


def _bare(x: float, like: float) -> str:
    """``x`` in the unit :func:`seconds` gives ``like``, without the unit (a spread's ends)."""
    scale = 1 if like >= 1 else 1e3 if like >= 1e-3 else 1e6
    return f"{x * scale:.2f}"


def ratio(x: float | None, base: float | None) -> str:
    """``x / base`` as ``2.3x``; empty when either is missing."""
    if x is None or base is None or base <= 0:
        return ""
    r = x / base
    return f"{r:,.0f}x" if r >= 100 else f"{r:.1f}x" if r >= 10 else f"{r:.2f}x"


def count(n: Any) -> str:
    return "-" if n is None else f"{int(n):,}"


def mib(n: Any) -> str:
    return "-" if n is None else f"{n / 2**20:,.1f} MiB"


def status_note(cell: dict[str, Any]) -> str:
    """What a cell that did not finish says in place of its figures: ``timeout: > 60 s (stopped during compile)``."""
    status = cell.get("status", "ok")
    return "" if status == "ok" else f"{status}: {cell.get('error', '')}".rstrip(": ")


# ---------------------------------------------------------------- the document


def blocks(text: str) -> list[tuple[str, str, str]]:
    """Every marked block of ``text`` as (suite, table, body)."""
    return [(m["suite"], m["table"], m["body"]) for m in MARKER.finditer(text)]


def rendered(results: str | Path, suite: str, cache: dict[str, dict[str, str]] | None = None) -> dict[str, str]:
    """Every table of ``suite`` rendered from its result file in ``results``."""
    from benchmarks import results as results_mod
    from benchmarks.suites import load

    if cache is not None and suite in cache:
        return cache[suite]
    tables = load(suite).tables(results_mod.read(results, suite))
    if cache is not None:
        cache[suite] = tables
    return tables


def render(text: str, results: str | Path) -> str:
    """``text`` with every marked block rewritten from the result files in ``results``."""
    cache: dict[str, dict[str, str]] = {}

    def body(m: re.Match[str]) -> str:
        tables = rendered(results, m["suite"], cache)
        if m["table"] not in tables:
            raise KeyError(f"suite {m['suite']} has no table {m['table']!r} (it has {', '.join(sorted(tables))})")
        return (
            f"<!-- bench:{m['suite']}:{m['table']} -->\n{tables[m['table']]}<!-- /bench:{m['suite']}:{m['table']} -->"
        )

    return MARKER.sub(body, text)


def mismatches(text: str, results: str | Path) -> list[str]:
    """``suite:table`` of every marked block whose body is not what its result file renders."""
    cache: dict[str, dict[str, str]] = {}
    return [f"{s}:{t}" for s, t, body in blocks(text) if rendered(results, s, cache).get(t) != body]


def write(document: Path, results: Path, suites: Sequence[str] | None = None) -> list[Path]:
    """Rewrite ``document``'s tables from ``results`` and redraw the plots of ``suites`` (default: every suite
    with a result file) next to it. Returns the files written."""
    from benchmarks import results as results_mod

    text = document.read_text(encoding="utf-8")
    new = render(text, results)
    written = []
    if new != text:
        results_mod.write_text(document, new)
        written.append(document)
    return written + write_plots(document.parent, results, suites)


def write_plots(directory: Path, results: Path, suites: Sequence[str] | None = None) -> list[Path]:
    """Every plot of ``suites`` whose result file exists, as PNG files in ``directory``."""
    from benchmarks import decode_speed
    from benchmarks import results as results_mod
    from benchmarks.suites import NAMES, load

    written: list[Path] = []
    for suite in suites or list(NAMES):
        if not results_mod.path(results, suite).is_file():
            continue
        draw = getattr(load(suite), "plots", None)
        if draw is not None:
            written += draw(results_mod.read(results, suite), directory)
    if set(suites or NAMES) & set(decode_speed.SUITES):  # one plot across the engines' suites
        found = {s: results_mod.read(results, s) for s in decode_speed.SUITES if results_mod.path(results, s).is_file()}
        if data := decode_speed.series(found):
            written.append(save_png(decode_speed.figure(data, pyplot()), directory / decode_speed.TARGET))
    return written


def save_png(fig: Any, target: Path) -> Path:
    """Save a matplotlib figure as PNG at ``target`` (temp file, then rename) and close it."""
    import io

    import matplotlib.pyplot as plt

    from benchmarks.results import write_bytes

    png = io.BytesIO()
    fig.savefig(png, dpi=100, format="png", metadata={"Software": None})
    plt.close(fig)
    write_bytes(target, png.getvalue())
    return target


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (no display), or a clear error when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        from triec.errors import TriecError

        raise TriecError("plots need matplotlib: pip install matplotlib (or pip install 'triec[bench]')") from exc
    return plt


def split_tables(text: str, names: Sequence[str] | dict[str, str]) -> dict[str, str]:
    """Text of captioned Markdown tables (a caption paragraph, then the table) as one entry per table; each entry
    is the caption, a blank line and the table. ``names``: the tables' names in order (raises when the counts
    differ), or caption prefix -> name (a table whose caption matches none is left out)."""
    chunks: list[list[str]] = []
    caption: list[str] = []
    in_table = False
    for line in text.splitlines():
        if line.startswith("|"):
            if not in_table:
                chunks.append([*caption, *([""] if caption else []), line])
                caption, in_table = [], True
            else:
                chunks[-1].append(line)
        else:
            in_table = False
            if line.strip():
                caption.append(line.strip())
    if isinstance(names, dict):
        found = {}
        for chunk in chunks:
            name = next((n for prefix, n in names.items() if chunk[0].startswith(prefix)), None)
            if name is not None:
                found[name] = "\n".join(chunk) + "\n"
        return found
    if len(chunks) != len(names):
        raise ValueError(f"{len(chunks)} tables for the {len(names)} names {', '.join(names)}")
    return {name: "\n".join(chunk) + "\n" for name, chunk in zip(names, chunks, strict=True)}
