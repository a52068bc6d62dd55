"""triec against xgrammar, llguidance and outlines-core on one value set: the suite behind ``triec bench``.

The same run as ``triec bench`` on the user's own set (:func:`triec.bench.peers.run_bench`: one process per
(K, engine) cell, same vocabulary, EOS ids, values and decode paths for every engine), on the seeded synthetic
tool names with the bundled Qwen2 tokenizer padded to 151,936. A peer that is not installed is a ``missing``
cell; one past the time limit a ``timeout`` cell.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks import docs, results
from triec.bench.peers import ALL_ENGINES, markdown_table, plot, run_bench

FULL: dict[str, Any] = {
    "ks": [10, 100, 1_000, 10_000],
    "batches": [1, 8, 32, 256],
    "repeat": 5,
    "timeout": 300.0,
    "paths": 50,
}
QUICK: dict[str, Any] = {"ks": [10], "batches": [1, 4], "repeat": 1, "timeout": 120.0, "paths": 3}


def unavailable() -> str | None:
    return None  # triec alone still runs; a missing peer is a cell that says so


def run(quick: bool) -> dict[str, Any]:
    size = QUICK if quick else FULL
    bench = run_bench(
        tokenizer="qwen2", vocab_size=151_936, value_source="tools", engines=list(ALL_ENGINES), seed=0, **size
    )
    result = results.new("peers", {**bench["settings"], "quick": quick, "timed": bench["timed"]})
    for row in bench["results"]:
        facts = {k: v for k, v in row.items() if k != "engines"}
        result["cells"] += [{**facts, "engine": name, **cell} for name, cell in row["engines"].items()]
    return result


def as_bench(result: dict[str, Any]) -> dict[str, Any]:
    """The suite's flat cells back in :func:`run_bench`'s shape (rows of K, engines by name)."""
    rows: dict[int, dict[str, Any]] = {}
    for cell in result["cells"]:
        facts = {k: cell[k] for k in ("k", "values", "value_bytes", "paths", "paths_skipped", "steps") if k in cell}
        row = rows.setdefault(cell["k"], {**facts, "engines": {}})
        if cell["engine"] == "triec":
            row["states"] = cell.get("states")
        row["engines"][cell["engine"]] = {k: v for k, v in cell.items() if k not in facts and k != "engine"}
    return {"settings": result["settings"], "results": list(rows.values())}


def tables(result: dict[str, Any]) -> dict[str, str]:
    return {"compile": markdown_table(as_bench(result)) + "\n"}


def plots(result: dict[str, Any], directory: Path) -> list[Path]:
    target = directory / "bench.png"
    docs.pyplot()
    plot(as_bench(result), str(target))
    return [target]
