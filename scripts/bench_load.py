"""What a plain ``triec.load`` costs, and how much of it is the index checks (prints, asserts nothing).

    python scripts/bench_load.py [--k 100000] [--tokenizer qwen2] [--vocab-size 151936] [--repeat 300]

Compiles ``triec.synthetic.sets.tool_names(K)``, writes the artifact to a temporary
directory and times, side by side in one process (medians, warm page cache):

* layout only: mmap + header + section table (what a plain load did before
  the index checks; docs/decisions.md D3);
* plain ``triec.load``: the layout plus :func:`triec.runtime.validate.check_indices`;
* ``check_indices`` alone on an already-mapped table (pages already touched);
* ``triec.load(verify=True)``: section CRCs plus every content check.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import triec
from triec.artifact.container import read_buffer
from triec.artifact.masks import parse_artifact
from triec.runtime.validate import check_indices
from triec.synthetic.sets import tool_names


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=100_000)
    ap.add_argument("--tokenizer", default="qwen2")
    ap.add_argument("--vocab-size", type=int, default=151_936)
    ap.add_argument("--repeat", type=int, default=300)
    args = ap.parse_args()
    vocab = triec.Vocabulary.load(args.tokenizer, vocab_size=args.vocab_size)
    table = triec.compile(tool_names(args.k), vocab)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.triec"
        size = table.save(path)
        source = str(path)

        def layout_only() -> object:
            buf, _ = read_buffer(source)
            return parse_artifact(buf, source)

        loaded = triec.load(path)
        rows = [
            ("layout only (before the index checks)", median_ms(layout_only, args.repeat)),
            ("plain triec.load (layout + index checks)", median_ms(lambda: triec.load(path), args.repeat)),
            ("check_indices on a mapped table", median_ms(lambda: check_indices(loaded, source), args.repeat)),
            ("triec.load(verify=True)", median_ms(lambda: triec.load(path, verify=True), max(args.repeat // 10, 5))),
        ]
    print(
        f"K={args.k:,} {args.tokenizer} width {vocab.vocab_size:,}: {table.num_states:,} states, "
        f"{table.num_allowed:,} pairs, {size:,} bytes; medians of {args.repeat} loads"
    )
    for name, ms in rows:
        print(f"  {name:<44} {ms:8.3f} ms")


if __name__ == "__main__":
    main()
