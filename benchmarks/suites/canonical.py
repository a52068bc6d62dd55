"""``tokenization="canonical"`` against ``"any"``, side by side in one process: compile, artifact size, rows, advance.

Each repeat compiles the same K synthetic tool names both ways, alternating (medians of interleaved runs). The
``any`` compile gets its vocabulary automaton from the disk cache (built once, outside the timing), as a
serving machine would; the canonical compile builds the encoder from the tokenizer.json on every call (that is
part of its cost). Rows and advance are timed at states along the values' canonical paths, the same states and
tokens for both tables.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from typing import Any

from benchmarks import docs, results
from triec.bench.runner import Out, run_cell

FULL = {"k": 100_000, "tokenizer": "qwen2", "repeats": 3}
QUICK = {"k": 500, "tokenizer": "qwen2", "repeats": 1}


def unavailable() -> str | None:
    return None


def cell(job: dict[str, Any], out: Out) -> None:
    import triec
    import triec.synthetic.sets
    from triec.compiler.entry import CompileStats

    vocab = triec.Vocabulary.load(job["tokenizer"])
    vocab.automaton  # noqa: B018 - load or build the cached automaton outside the timing
    values = triec.synthetic.sets.tool_names(job["k"])
    times: dict[str, list[float]] = {"any": [], "canonical": []}
    phases: dict[str, dict[str, float]] = {}
    tables: dict[str, triec.MaskTable] = {}
    for _ in range(job["repeats"]):
        for mode in ("any", "canonical"):
            stats = CompileStats()
            t0 = time.perf_counter()
            tables[mode] = triec.compile(values, vocab, tokenization=mode, stats=stats)
            times[mode].append(time.perf_counter() - t0)
            phases[mode] = {k: round(v, 4) for k, v in stats.phases.items()}
    sizes = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode, table in tables.items():
            sizes[mode] = table.save(os.path.join(tmp, f"{mode}.triec"))

    # rows and advance: the states along 2,000 values' canonical paths, in both tables
    encoder = vocab.encoder()
    picks = values[:: max(1, len(values) // 2000)][:2000]
    paths = [encoder.encode(v, add_special_tokens=False).ids for v in picks]
    walks = {}
    for mode, table in tables.items():
        states, tokens = [], []
        for ids in paths:
            s = table.start
            for t in ids:
                states.append(s)
                tokens.append(t)
                s = table.advance(s, t)
        walks[mode] = (table.mask_writer(1), states[:5000], tokens[:5000])
    per_row: dict[str, list[float]] = {m: [] for m in tables}
    per_step: dict[str, list[float]] = {m: [] for m in tables}
    for _ in range(7):  # interleaved: both tables in every round
        for mode, table in tables.items():
            writer, sample, toks = walks[mode]
            t0 = time.perf_counter()
            for s in sample:
                writer.fill_one(s)
            per_row[mode].append((time.perf_counter() - t0) / len(sample) * 1e6)
            t0 = time.perf_counter()
            for s, t in zip(sample, toks, strict=True):
                table.advance(s, t)
            per_step[mode].append((time.perf_counter() - t0) / len(sample) * 1e6)
    rows = {m: statistics.median(v) for m, v in per_row.items()}
    steps = {m: statistics.median(v) for m, v in per_step.items()}

    fields = {
        "tokenizer": vocab.name,
        "vocab_size": vocab.vocab_size,
        "k": job["k"],
        "repeats": job["repeats"],
        "compile_s": {m: round(statistics.median(v), 3) for m, v in times.items()},
        "compile_ratio_canonical_over_any": round(
            statistics.median(times["canonical"]) / statistics.median(times["any"]), 3
        ),
        "phases_s": phases,
        "artifact_bytes": sizes,
        "states": {m: t.num_states for m, t in tables.items()},
        "allowed_pairs": {m: t.num_allowed for m, t in tables.items()},
        "row_us": {m: round(v, 2) for m, v in rows.items()},
        "advance_us": {m: round(v, 2) for m, v in steps.items()},
    }
    out.put(status="ok", phase="done", **fields)


def run(quick: bool) -> dict[str, Any]:
    size = QUICK if quick else FULL
    result = results.new("canonical", {"quick": quick, **size})
    result["cells"].append(run_cell("benchmarks.suites.canonical:cell", size, timeout=1800.0))
    return result


def tables(result: dict[str, Any]) -> dict[str, str]:
    c = result["cells"][0]
    if c.get("status") != "ok":
        return {"compare": docs.markdown(["", "any", "canonical"], [["the cell", docs.status_note(c), ""]])}
    rows = [
        ["compile (median)", *(docs.seconds(c["compile_s"][m]) for m in ("any", "canonical"))],
        ["artifact bytes", *(docs.count(c["artifact_bytes"][m]) for m in ("any", "canonical"))],
        ["states", *(docs.count(c["states"][m]) for m in ("any", "canonical"))],
        ["allowed pairs", *(docs.count(c["allowed_pairs"][m]) for m in ("any", "canonical"))],
        ["row (`fill_one`)", *(f"{c['row_us'][m]:.2f} µs" for m in ("any", "canonical"))],
        ["advance", *(f"{c['advance_us'][m]:.2f} µs" for m in ("any", "canonical"))],
    ]
    head = f"{c['tokenizer']}, K = {c['k']:,}"
    return {"compare": docs.markdown([head, "any", "canonical"], rows)}
