"""``tokenization="canonical"`` against ``"any"``, side by side in one run: compile time, artifact size, rows, advance.

    python scripts/bench_canonical.py [--k 100000] [--tokenizer qwen2] [--repeats 3] [--json OUT]

Each repeat compiles the same K synthetic tool names both ways, alternating (the machine is shared:
medians of interleaved runs). The `any` compile gets its vocabulary automaton from the disk cache
(built once, outside the timing), as a serving machine would; the canonical compile builds the
encoder from the tokenizer.json on every call (that is part of its cost). Rows and advance are timed
at states along the values' canonical paths, the same states and tokens for both tables.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import triec
import triec.synthetic.sets
from triec.compiler.entry import CompileStats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--k", type=int, default=100_000)
    ap.add_argument("--tokenizer", default="qwen2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", dest="json_out")
    args = ap.parse_args()

    vocab = triec.Vocabulary.load(args.tokenizer)
    vocab.automaton  # noqa: B018 - load or build the cached automaton outside the timing
    values = triec.synthetic.sets.tool_names(args.k)
    times: dict[str, list[float]] = {"any": [], "canonical": []}
    phases: dict[str, dict[str, float]] = {}
    tables: dict[str, triec.MaskTable] = {}
    for _ in range(args.repeats):
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

    result = {
        "tokenizer": vocab.name, "vocab_size": vocab.vocab_size, "k": args.k, "repeats": args.repeats,
        "compile_s": {m: round(statistics.median(v), 3) for m, v in times.items()},
        "compile_ratio_canonical_over_any": round(statistics.median(times["canonical"]) / statistics.median(times["any"]), 3),
        "phases_s": phases,
        "artifact_bytes": sizes,
        "states": {m: t.num_states for m, t in tables.items()},
        "allowed_pairs": {m: t.num_allowed for m, t in tables.items()},
        "row_us": {m: round(v, 2) for m, v in rows.items()},
        "advance_us": {m: round(v, 2) for m, v in steps.items()},
        "python": sys.version.split()[0], "triec": triec.__version__,
    }  # fmt: skip
    print(json.dumps(result, indent=2))
    if args.json_out:
        from triec.artifact.container import atomic_write

        atomic_write(args.json_out, (json.dumps(result, indent=2) + "\n").encode())


if __name__ == "__main__":
    main()
