"""Serving-side figures for docs/benchmarks.md ("Serving"): prints medians, asserts nothing.

    python scripts/bench_serving.py [--repeat 21] [--threads 1] [--skip-torch]

On the seeded synthetic tool names with the bundled Qwen2 tokenizer at width
151,936, in one process:
  * the CPU mask writer (``table.mask_writer``): one state through ``fill([s])``
    and ``fill_one(s)``, and batches of 128 mixed states, against
    ``fill_bitmask`` on the same states; K = 1,000 and 100,000;
  * the device table (``table.to_torch``): its bytes and layout, and per-step
    times on CPU tensors for B = 1, 32, 256 (scripts/gpu_check.py times CUDA);
  * ``table.restrict``: 50 and 1,000 values out of 100,000, first call (which
    builds the per-table path index) and later calls, plus ``compact()``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import triec
from triec.synthetic.sets import tool_names


def per_call_us(fn: Callable[[], object], calls: int, repeat: int) -> float:
    """Median over ``repeat`` rounds of the mean time per call (``fn`` makes ``calls`` calls)."""
    fn()
    rounds = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        rounds.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(rounds)


def bench_writer(table: triec.MaskTable, repeat: int) -> None:
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    writer = table.mask_writer(128)
    create_ms = (time.perf_counter() - t0) * 1e3
    singles = rng.integers(0, table.num_states, 4096).tolist()
    batches = [rng.integers(0, table.num_states, 128) for _ in range(64)]
    lists = [b.tolist() for b in batches]
    out = np.zeros((128, table.words_per_row), dtype=np.int32)

    def one() -> None:
        fill = writer.fill
        for s in singles:
            fill([s])

    def one_fast() -> None:
        fill_one = writer.fill_one
        for s in singles:
            fill_one(s)

    def one_reference() -> None:
        for s in singles[:512]:
            table.fill_bitmask([s], out)

    def batch() -> None:
        for b in batches:
            writer.fill(b)

    def batch_lists() -> None:
        for b in lists:
            writer.fill(b)

    def batch_reference() -> None:
        for b in batches[:16]:
            table.fill_bitmask(b, out)

    print(f"  writer created in {create_ms:.1f} ms (first writer per table: builds the word pairs)")
    print(f"  one state, fill([s])         {per_call_us(one, len(singles), repeat):8.2f} us")
    print(f"  one state, fill_one(s)       {per_call_us(one_fast, len(singles), repeat):8.2f} us")
    print(f"  one state, fill_bitmask      {per_call_us(one_reference, 512, repeat):8.2f} us")
    print(f"  128 mixed states (ndarray)   {per_call_us(batch, len(batches), repeat):8.2f} us")
    print(f"  128 mixed states (list)      {per_call_us(batch_lists, len(lists), repeat):8.2f} us")
    print(f"  128 mixed states fill_bitmask{per_call_us(batch_reference, 16, repeat):8.2f} us")


def bench_device(table: triec.MaskTable, iters: int) -> None:
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from gpu_check import time_step

    device = torch.device("cpu")
    dev = table.to_torch(device)
    parts = {
        "allowed pairs (int64 key + int32 next)": dev.pair_keys.nbytes + dev.pair_next.nbytes,
        "mask words (int32 word + int32 bits)": dev.word_index.nbytes + dev.word_bits.nbytes,
        "per state (int32 offset + bool accepting)": dev.word_offsets.nbytes + dev.accepting.nbytes,
        f"dense rows ({dev.wide_states.numel()} wide states + the zero row)": dev.dense_rows.nbytes
        + dev.wide_states.nbytes,
    }
    print(f"  device table: {dev.nbytes:,} bytes, narrow_words={dev.narrow_words}")
    for what, n in parts.items():
        print(f"    {what:55s} {n:>12,}")
    rng = np.random.default_rng(1)
    print("      B |  fill us | apply us | advance us | step us (fill+apply+argmax+advance), CPU tensors")
    for b in (1, 32, 256):
        states = torch.from_numpy(rng.integers(0, table.num_states, b))
        logits = torch.randn(b, table.vocab_size)
        fill, apply, adv, step = time_step(dev, states, logits, iters, heavy_iters=max(2, iters // (b // 8 + 1)))
        print(f"  B={b:<4} | {fill:8.1f} | {apply:8.1f} | {adv:10.1f} | {step:7.1f}")


def bench_restrict(values: list[str], vocab: triec.Vocabulary, repeat: int) -> None:
    table = triec.compile(values, vocab)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.triec"
        table.save(path)
        loaded = triec.load(path)
        rng = random.Random(0)
        t0 = time.perf_counter()
        loaded.restrict(rng.sample(values, 50))
        first_loaded = (time.perf_counter() - t0) * 1e3
        del loaded
    rng = random.Random(1)
    t0 = time.perf_counter()
    table.restrict(rng.sample(values, 50))
    first = (time.perf_counter() - t0) * 1e3
    print(
        f"  first restrict: {first:.2f} ms on the compiled table (path index), "
        f"{first_loaded:.2f} ms on a freshly loaded artifact (value bytes + path index)"
    )
    for n in (50, 1000):
        subsets = [rng.sample(values, n) for _ in range(repeat)]
        times, compacts = [], []
        for sub in subsets:
            t0 = time.perf_counter()
            view = table.restrict(sub)
            t1 = time.perf_counter()
            view.compact()
            t2 = time.perf_counter()
            times.append(t1 - t0)
            compacts.append(t2 - t1)
        print(
            f"  restrict to {n:>4} of {len(values):,}: {statistics.median(times) * 1e3:7.3f} ms"
            f"   compact(): {statistics.median(compacts) * 1e3:7.3f} ms   ({view.num_states} states)"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=21)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--iters", type=int, default=50, help="steps per device timing round")
    ap.add_argument("--skip-torch", action="store_true")
    args = ap.parse_args(argv)
    vocab = triec.Vocabulary.load("qwen2", vocab_size=151936)
    big = tool_names(100_000)
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}; medians of {args.repeat} rounds")
    for k in (1000, 100_000):
        table = triec.compile(big[:k] if k < len(big) else big, vocab)
        print(f"\nK={k:,}: {table.num_states:,} states, {table.num_allowed:,} pairs")
        bench_writer(table, args.repeat)
        if not args.skip_torch:
            import torch

            if args.threads:
                torch.set_num_threads(args.threads)
            bench_device(table, args.iters)
    print(f"\nrestrict, K={len(big):,}:")
    bench_restrict(big, vocab, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
