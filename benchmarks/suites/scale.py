"""Large sets with little prefix sharing (issue 43): the tail layout against the full one, by K.

Each (set, K, layout) cell is one process (:func:`triec.bench.runner.run_cell`), qwen2's automaton in the disk
cache. Sets: ``titles`` (:func:`triec.synthetic.sets.titles`, seed 7: Wikipedia-like titles, one value alone
below 97% of the states) and ``tools`` (tool names, the regression check: ``auto`` keeps them in the full layout).
``pypi`` is the Python package index's names (the environment's list, when present). ``titles (canonical)``:
the titles with each value's encoder tokenization only (GENRE's tries), full against tails. Per cell:

* ``compile``: ``triec.compile(values, vocab, layout=...)`` once (large K) or its median, and the growth of the
  resident high-water mark during it (values and vocabulary already in memory);
* the artifact's bytes against the values' text (UTF-8 bytes, no separators);
* ``load``: a plain ``triec.load`` (layout and every index checked), median;
* row and advance cost on a seeded sample of tail and of branching states (a state is a tail when one value alone
  lies below it, whatever the layout): ``allowed(s)``, ``advance(s, t)`` for the row's first token, and one
  ``mask_writer().fill_one(s)``, microseconds per call.
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

from benchmarks import docs, results
from benchmarks.measure import median, peak_rss_bytes, reset_peak_rss, stats, timed
from triec.bench.runner import Out, rss_bytes, run_cell

FULL: dict[str, Any] = {
    "cells": [
        ("titles", 100_000, "full"),
        ("titles", 100_000, "tails"),
        ("titles", 1_000_000, "full"),
        ("titles", 1_000_000, "tails"),
        ("titles", 10_000_000, "tails"),
        ("tools", 1_000, "auto"),
        ("tools", 100_000, "auto"),
        ("tools", 1_000_000, "auto"),
        ("tools", 1_000_000, "tails"),
        ("pypi", 0, "full"),
        ("pypi", 0, "auto"),
        ("titles", 100_000, "full", "canonical"),
        ("titles", 100_000, "tails", "canonical"),
        ("titles", 1_000_000, "full", "canonical"),
        ("titles", 1_000_000, "tails", "canonical"),
    ],
    "repeat": 3,
    "timeout": 900.0,
    "max_rss": 7 * 2**30,
}
QUICK: dict[str, Any] = {
    "cells": [
        ("titles", 2_000, "full"),
        ("titles", 2_000, "tails"),
        ("tools", 1_000, "auto"),
        ("titles", 2_000, "tails", "canonical"),
    ],
    "repeat": 2,
    "timeout": 300.0,
    "max_rss": 4 * 2**30,
}
SAMPLE = 2_000
"""States of each kind whose rows are timed."""


def unavailable() -> str | None:
    return None


PYPI = "/work/.library/env/packages/pypi.tsv"
"""The Python package index's names (a TSV whose first column is the name; ``TRIEC_PYPI_NAMES`` to point
elsewhere): a real set of about 890,000 values. K = 0 in a cell: all of them."""


def pypi_names() -> list[str]:
    path = os.environ.get("TRIEC_PYPI_NAMES", PYPI)
    with open(path, encoding="utf-8") as f:
        next(f)  # the header
        return sorted({line.split("\t", 1)[0] for line in f if line.strip()})


def values_of(name: str, k: int) -> list[str]:
    from triec.synthetic import sets

    if name == "pypi":
        names = pypi_names()
        return names if k == 0 else names[:k]
    if name == "titles":
        return sets.titles(k, seed=7)
    if name == "tools":
        return sets.tool_names(k)
    raise ValueError(f"unknown value set {name!r}")


def _kinds(table: Any) -> tuple[list[int], list[int]]:
    """A seeded sample of tail states and of branching states (any layout)."""
    import numpy as np

    from triec.compiler.tails import branching_states, tail_lengths

    vs = np.asarray(table.value_state, dtype=np.int64)
    lcp = np.asarray(table.value_lcp, dtype=np.int64)
    created = np.diff(vs, prepend=0)
    created[0] = vs[0]
    branching = branching_states(table.num_states, vs, tail_lengths(lcp, lcp + created))
    rng = np.random.default_rng(0)
    tails, branch = np.flatnonzero(~branching), np.flatnonzero(branching)
    pick = [x[rng.integers(0, x.shape[0], min(SAMPLE, x.shape[0]))] if x.shape[0] else x for x in (tails, branch)]
    return pick[0].tolist(), pick[1].tolist()


def _row_costs(table: Any, states: list[int]) -> dict[str, Any]:
    if not states:
        return {}
    firsts = []
    for s in states:
        a = table.allowed(s)
        firsts.append((s, int(a[0]) if a.shape[0] else -1))
    walkable = [(s, t) for s, t in firsts if t >= 0 and t not in table.eos_token_ids]
    writer = table.mask_writer(1)

    def rows() -> None:
        for s in states:
            table.allowed(s)

    def steps() -> None:
        for s, t in walkable:
            table.advance(s, t)

    def fills() -> None:
        for s in states:
            writer.fill_one(s)

    out = {
        "allowed_us": stats([x / len(states) * 1e6 for x in timed(rows, 3)]),
        "fill_one_us": stats([x / len(states) * 1e6 for x in timed(fills, 3)]),
    }
    if walkable:
        out["advance_us"] = stats([x / len(walkable) * 1e6 for x in timed(steps, 3)])
    return out


def cell(job: dict[str, Any], out: Out) -> None:
    import triec
    from triec.compiler.entry import CompileStats

    vocab = triec.Vocabulary.load("qwen2")
    vocab.automaton  # noqa: B018 - cached, as on a serving machine
    values = values_of(job["set"], job["k"])
    text = sum(len(v.encode("utf-8")) for v in values)
    n_values = len(values)
    out.put(phase="compile", values=len(values), text_bytes=text)
    reset_peak_rss()
    before = rss_bytes()
    st = CompileStats()
    t0 = time.perf_counter()
    how = {"layout": job["layout"], "tokenization": job.get("tokenization", "any")}
    table = triec.compile(values, vocab, stats=st, **how)
    first = time.perf_counter() - t0
    peak = max(peak_rss_bytes(), before) - before
    del values
    tails = table.tails
    out.put(
        phase="artifact",
        compile_first_s=first,
        compile_phases_s=st.phases,
        peak_growth_bytes=peak,
        states=st.num_states,
        stored_pairs=st.num_allowed,
        layout="full" if tails is None else "tails",
        tail_states=0 if tails is None else tails.num_tails,
    )
    if n_values <= 100_000 and job["repeat"] > 1:
        values = values_of(job["set"], job["k"])
        samples = timed(lambda: triec.compile(values, vocab, **how), job["repeat"] - 1, warmup=0)
        out.put(compile_s=stats([first, *samples]))
        del values
    else:
        out.put(compile_s=stats([first]))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "a.triec")
        size = table.save(path)
        del table
        out.put(phase="load", artifact_bytes=size, artifact_vs_text=size / text)
        load = stats(timed(lambda: triec.load(path), 7))
        out.put(phase="rows", load_s=load)
        loaded = triec.load(path)
        tail_states, branch_states = _kinds(loaded)
        out.put(
            status="ok",
            phase="done",
            tail_rows=_row_costs(loaded, tail_states),
            branch_rows=_row_costs(loaded, branch_states),
            rss_served_bytes=rss_bytes(),
        )


def run(quick: bool) -> dict[str, Any]:
    import triec

    size = QUICK if quick else FULL
    result = results.new(
        "scale", {"quick": quick, "repeat": size["repeat"], "timeout_s": size["timeout"], "max_rss": size["max_rss"]}
    )
    triec.Vocabulary.load("qwen2").automaton  # noqa: B018 - caches warm
    for name, k, layout, *rest in size["cells"]:  # (set, K, layout[, tokenization]): any tokenization unless named
        tokenization = rest[0] if rest else "any"
        if name == "pypi" and not os.path.exists(os.environ.get("TRIEC_PYPI_NAMES", PYPI)):
            result["cells"].append(
                {"set": name, "k": k, "asked": layout, "status": "missing", "error": "no names file"}
            )
            continue
        job = {"set": name, "k": k, "layout": layout, "tokenization": tokenization, "repeat": size["repeat"]}
        found = run_cell("benchmarks.suites.scale:cell", job, timeout=size["timeout"], max_rss=size["max_rss"])
        result["cells"].append({"set": name, "k": k, "asked": layout, "tokenization": tokenization, **found})
    return result


def _us(summary: Any) -> str:
    m = median(summary)
    return "-" if m is None else f"{m:.2f}"


def tables(result: dict[str, Any]) -> dict[str, str]:
    rows = []
    for c in result["cells"]:
        note = docs.status_note(c)
        t, b = c.get("tail_rows") or {}, c.get("branch_rows") or {}
        ratio = c.get("artifact_vs_text")
        rows.append(
            [
                c["set"] + (" (canonical)" if c.get("tokenization") == "canonical" else ""),
                f"{c.get('values', c['k']):,}",
                c.get("layout", c["asked"]),
                docs.count(c.get("states")),
                docs.count(c.get("tail_states")),
                docs.count(c.get("stored_pairs")),
                note or docs.seconds(median(c.get("compile_s"))),
                docs.mib(c.get("peak_growth_bytes")),
                docs.count(c.get("artifact_bytes")),
                "-" if ratio is None else f"{ratio:.2f}x",
                docs.seconds(median(c.get("load_s"))),
                f"{_us(t.get('allowed_us'))} / {_us(b.get('allowed_us'))}",
                f"{_us(t.get('advance_us'))} / {_us(b.get('advance_us'))}",
                f"{_us(t.get('fill_one_us'))} / {_us(b.get('fill_one_us'))}",
            ]
        )
    table = docs.markdown(
        [
            "set",
            "K",
            "layout",
            "states",
            "tail states",
            "stored pairs",
            "compile",
            "peak growth",
            "artifact B",
            "vs text",
            "load",
            "allowed us (tail / branch)",
            "advance us",
            "fill_one us",
        ],
        rows,
    )
    return {"scale": table}
