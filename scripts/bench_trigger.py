"""Think-then-answer's costs (triec.runtime.trigger): build, free-phase rows and accepts, answer rows.

    python scripts/bench_trigger.py [--tokenizer qwen2] [--k 1998] [--repeat 2000]

Prints medians of repeated calls (the machine is shared: read ratios, not absolutes).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import triec
import triec.synthetic.sets
from triec.runtime.trigger import Triggered


def median_us(fn, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", default="qwen2")
    ap.add_argument("--k", type=int, default=1998)
    ap.add_argument("--repeat", type=int, default=2000)
    args = ap.parse_args()
    vocab = triec.Vocabulary.load(args.tokenizer)
    table = triec.compile(triec.synthetic.sets.tool_names(args.k), vocab)
    t = time.perf_counter()
    trig = Triggered(table, vocab, "Answer:")
    build = time.perf_counter() - t
    ids = {b: i for i, b in enumerate(vocab.token_bytes) if b}
    row = np.zeros(table.words_per_row, dtype=np.int32)
    m = trig.matcher()
    free_row = median_us(lambda: m.fill_bitmask(row), args.repeat)
    word = ids[b" think"]
    free_accept = median_us(lambda: (m.accept_token(word), m.rollback(1)), args.repeat)
    for piece in (b"Answer", b":"):
        m.accept_token(ids[piece])
    answer_row = median_us(lambda: m.fill_bitmask(row), args.repeat)
    print(f"{vocab.name} V={vocab.vocab_size:,} K={args.k:,} triggers={trig.automaton.triggers}")
    print(f"  build (one pass over the vocabulary): {build * 1e3:.0f} ms; free states {trig.automaton.num_states}")
    print(f"  free row {free_row:.1f} us | free accept + rollback {free_accept:.1f} us | answer row {answer_row:.1f} us")


if __name__ == "__main__":
    main()
