"""Compile-side figures for docs/benchmarks.md: prints medians, asserts nothing.

    python scripts/bench_compile.py [--tokenizer qwen2] [--vocab-size 151936] [--k 100,1000,10000,100000,1000000]
                                    [--repeat 15] [--set tools|codes]

Measures, on the seeded synthetic tool names, in one process:
  * warm compile (automaton in memory) with its phases, median of --repeat runs;
  * the reference (pyahocorasick) implementation on the same input, for the ratio;
  * artifact bytes, plain and zstd; triec.load time (median);
  * peak memory of one compile in a fresh process: the growth of peak RSS (VmHWM,
    reset just before) over the RSS just before triec.compile (vocabulary,
    automaton and the values list already loaded), next to the budget of
    issue 9: 4 x artifact + automaton;
  * a cold first compile for a tokenizer never seen (fresh cache dir, new process).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import triec
from triec.compiler.entry import CompileStats
from triec.synthetic.sets import tool_names, wide_codes

SETS = {"tools": tool_names, "codes": wide_codes}


def median_ms(fn, repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times), result


COLD = """
import json, sys, time
t0 = time.perf_counter()
import triec
from triec.synthetic.sets import tool_names, wide_codes

SETS = {"tools": tool_names, "codes": wide_codes}
t1 = time.perf_counter()
v = triec.Vocabulary.load(sys.argv[1], vocab_size=int(sys.argv[2]) if sys.argv[2] != "0" else None)
t2 = time.perf_counter()
v.automaton
t3 = time.perf_counter()
triec.compile(tool_names(int(sys.argv[3])), v)
t4 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "tokenizer": t2 - t1, "automaton": t3 - t2, "compile": t4 - t3, "first_compile": t4 - t1}))
"""


def long_value_sets() -> dict[str, list[str]]:
    """Seeded text over letters, digits, spaces and punctuation: unshared tails dominate depth."""
    import random

    rng = random.Random(0)
    alphabet = "abcdefghijklmnopqrstuvwxyz     .,;:-_0123456789ABCDEFGHIJ"
    return {
        "one 1,000,000-byte value": ["".join(rng.choices(alphabet, k=1_000_000))],
        "1,000 values of 2 KB": ["".join(rng.choices(alphabet, k=2048)) for _ in range(1000)],
    }


def cold_compile(tokenizer: str, vocab_size: int, k: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TRIEC_CACHE_DIR=cache)
        out = subprocess.run(
            [sys.executable, "-c", COLD, tokenizer, str(vocab_size), str(k)], env=env, capture_output=True, text=True, check=True
        )
    return json.loads(out.stdout)


MEMORY = """
import json, os, sys, tempfile
import triec
from triec.synthetic.sets import tool_names, wide_codes
v = triec.Vocabulary.load(sys.argv[1], vocab_size=int(sys.argv[2]) if sys.argv[2] != "0" else None)
a = v.automaton
values = {"tools": tool_names, "codes": wide_codes}[sys.argv[4]](int(sys.argv[3]))
def status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))
try:  # reset the peak RSS (Linux >= 4.0), so loading the tokenizer's own peak does not count
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
except OSError:
    pass
rss_before = status("VmRSS")
table = triec.compile(values, v)
peak = max(status("VmHWM"), rss_before)
with tempfile.TemporaryDirectory() as d:
    size = table.save(os.path.join(d, "a.triec"))
automaton = sum(x.nbytes for x in (a.root_child, a.edge_keys, a.edge_child, a.has_child, a.node_key, a.key_offsets, a.key_ids))
print(json.dumps({"rss_before": rss_before, "peak": peak, "artifact": size, "automaton": automaton}))
"""


def compile_memory(tokenizer: str, vocab_size: int, k: int, value_set: str) -> dict[str, int]:
    """Peak RSS growth of one compile in a fresh process (Linux ru_maxrss)."""
    out = subprocess.run(
        [sys.executable, "-c", MEMORY, tokenizer, str(vocab_size), str(k), value_set], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", default="qwen2")
    ap.add_argument("--vocab-size", type=int, default=151936)
    ap.add_argument("--k", default="100,1000,10000,100000,1000000")
    ap.add_argument("--set", default="tools", choices=sorted(SETS), help="tools: synthetic tool names; codes: ICD-10 style codes")
    ap.add_argument("--no-memory", action="store_true", help="skip the fresh-process peak memory measurement")
    ap.add_argument("--no-long", action="store_true", help="skip the long-value sets (one 1,000,000-byte value, 1,000 x 2 KB)")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--reference-max-k", type=int, default=10000)
    args = ap.parse_args()
    ks = [int(x) for x in args.k.split(",")]

    vocab = triec.Vocabulary.load(args.tokenizer, vocab_size=args.vocab_size or None)
    vocab.automaton  # noqa: B018 - warm: built or loaded before timing
    print(f"tokenizer {vocab.name}: {vocab.num_tokens} tokens, mask width {vocab.vocab_size}, numpy {np.__version__}")
    header = (
        f"{'K':>8} {'states':>8} {'pairs':>8} {'r':>6} | {'compile ms':>10} {'values':>7} {'trie':>7} {'masks':>7} "
        f"| {'ref ms':>8} {'ratio':>6} | {'bytes':>10} {'zstd':>9} | {'load ms':>8} | {'peak MiB':>8} {'budget':>7}"
    )
    print(header)
    print("-" * len(header))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in ks:
            names = SETS[args.set](k)
            triec.compile(names, vocab)  # warm-up
            phases: list[dict[str, float]] = []

            def run(names: list[str] = names, phases: list[dict[str, float]] = phases) -> triec.MaskTable:
                st = CompileStats()
                table = triec.compile(names, vocab, stats=st)
                phases.append(st.phases)
                return table

            ms, table = median_ms(run, args.repeat)
            ph = {p: 1000 * statistics.median(x[p] for x in phases) for p in ("values", "trie", "masks")}
            st = CompileStats()
            triec.compile(names, vocab, stats=st)
            ref_ms = float("nan")
            if k <= args.reference_max_k:
                ref_ms, _ = median_ms(lambda names=names: triec.compile(names, vocab, implementation="reference"), 3)
            plain = Path(tmp) / f"k{k}.triec"
            packed = Path(tmp) / f"k{k}.triec.zst"
            size = table.save(plain)
            zsize = table.save(packed)
            load_ms, _ = median_ms(lambda plain=plain: triec.load(plain), max(args.repeat, 50))
            mem = None if args.no_memory else compile_memory(args.tokenizer, args.vocab_size, k, args.set)
            peak_mib = (mem["peak"] - mem["rss_before"]) / 2**20 if mem else float("nan")
            budget_mib = (4 * mem["artifact"] + mem["automaton"]) / 2**20 if mem else float("nan")
            row = {
                "k": k,
                "states": st.num_states,
                "pairs": st.num_allowed,
                "sharing_ratio": st.sharing_ratio,
                "compile_ms": ms,
                "phases_ms": ph,
                "reference_ms": ref_ms,
                "artifact_bytes": size,
                "zstd_bytes": zsize,
                "load_ms": load_ms,
                "peak_compile_mib": peak_mib,
                "memory_budget_mib": budget_mib,
            }
            rows.append(row)
            print(
                f"{k:>8} {st.num_states:>8} {st.num_allowed:>8} {st.sharing_ratio:>6.3f} | {ms:>10.2f} {ph['values']:>7.2f} "
                f"{ph['trie']:>7.2f} {ph['masks']:>7.2f} | {ref_ms:>8.1f} {ref_ms / ms:>6.1f} | {size:>10,} {zsize:>9,} | "
                f"{load_ms:>8.3f} | {peak_mib:>8.0f} {budget_mib:>7.0f}"
            )
    print("peak MiB: growth of peak RSS during one compile in a fresh process; budget: 4 x artifact + automaton")
    if not args.no_long:
        print()
        for label, values in long_value_sets().items():
            triec.compile(values, vocab)
            ms, table = median_ms(lambda values=values: triec.compile(values, vocab), max(3, args.repeat // 3))
            print(f"long values, {label}: {ms:.1f} ms ({table.num_states:,} states, {table.num_allowed:,} pairs)")
    cold = cold_compile(args.tokenizer, args.vocab_size, min(ks))
    print(
        f"\ncold first compile (new process, empty cache, K={min(ks)}): {1000 * cold['first_compile']:.0f} ms "
        f"= tokenizer {1000 * cold['tokenizer']:.0f} + automaton {1000 * cold['automaton']:.0f} + compile "
        f"{1000 * cold['compile']:.1f} (import triec: {1000 * cold['import']:.0f} ms)"
    )


if __name__ == "__main__":
    main()
