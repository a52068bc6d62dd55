"""Tool-call schemas side by side: triec.compile_schema vs llguidance and xgrammar on the whole schema.

    python scripts/bench_schema.py [--k 10000] [--tokenizer qwen2] [--paths 200] [--repeat 5]

Prints (and with --json writes) build times, one mask row inside the name field
(median / p99, along the shortest token path of sampled names), and the handover
(the accept_token that enters the arguments' engine). Asserts nothing: figures only.
The machine is shared: compare within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import triec  # noqa: E402
from triec.schema.grammar import driver  # noqa: E402
from triec.synthetic.sets import tool_names  # noqa: E402
from triec.verify.paths import token_paths  # noqa: E402

ARGS = {"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["query"], "additionalProperties": False}


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.array(xs), q))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--k", type=int, default=10_000)
    ap.add_argument("--tokenizer", default="qwen2")
    ap.add_argument("--vocab-size", type=int, default=151_936)
    ap.add_argument("--paths", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    os.environ.setdefault("TRIEC_CACHE_DIR", tempfile.mkdtemp(prefix="triec-bench-schema-"))
    vocab = triec.Vocabulary.load(a.tokenizer, vocab_size=a.vocab_size if a.tokenizer == "qwen2" else None)
    names = tool_names(a.k)
    schema = {"type": "object", "properties": {"name": {"type": "string", "enum": names}, "arguments": ARGS},
              "required": ["name", "arguments"], "additionalProperties": False}
    out: dict = {"k": a.k, "tokenizer": a.tokenizer, "vocab_size": vocab.vocab_size}
    _ = vocab.automaton  # the per-tokenizer automaton is cached on disk; not part of any build below
    llg, xgr = driver("llguidance", vocab), driver("xgrammar", vocab)  # engines' tokenizer setup, once per process

    # ---- build
    t0 = time.perf_counter()
    table = triec.compile_schema(schema, vocab)
    out["triec_build_cold_s"] = time.perf_counter() - t0  # the first compile in this process (token index built)
    warm = []
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        table = triec.compile_schema(schema, vocab)
        warm.append(time.perf_counter() - t0)
    out["triec_build_disk_cache_s"] = out["triec_build_memory_s"] = statistics.median(warm)  # no engine work to cache
    t0 = time.perf_counter()
    table.matcher()
    out["triec_first_matcher_s"] = time.perf_counter() - t0  # the engine's matcher on the vocabulary, once per process
    ll_times, xg_times = [], []
    for _ in range(max(1, a.repeat // 2)):
        t0 = time.perf_counter()
        ll_whole = llg.compile(schema)
        ll_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        xg_whole = xgr.compile(schema)
        xg_times.append(time.perf_counter() - t0)
    out["llguidance_compile_s"] = statistics.median(ll_times)
    out["xgrammar_compile_s"] = statistics.median(xg_times)

    # ---- rows inside the name field, along shortest token paths to sampled names
    parent, via = token_paths(table.trie)
    rng = random.Random(0)
    leaves = table.trie.value_state.tolist()
    chosen = rng.sample(leaves, min(a.paths, len(leaves)))
    writer = table.mask_writer(1)
    row = np.zeros(table.words_per_row, dtype=np.int32)
    t_writer, t_fill, t_ll, t_xg, t_handover = [], [], [], [], []
    handover_tokens: set[bytes] = set()
    eng_row = np.zeros(table.words_per_row, dtype=np.int32)
    for leaf in chosen:
        path = []
        s = leaf
        while s > 0:
            path.append(int(via[s]))
            s = int(parent[s])
        path.reverse()
        m = table.matcher()
        lo, xo = llg.start(ll_whole), xgr.start(xg_whole)
        for t in path:
            t1 = time.perf_counter_ns()
            writer.fill([m])
            t2 = time.perf_counter_ns()
            m.fill_bitmask(row)
            t3 = time.perf_counter_ns()
            llg.fill(lo, eng_row)
            t4 = time.perf_counter_ns()
            xgr.fill(xo, eng_row)
            t5 = time.perf_counter_ns()
            t_writer.append((t2 - t1) / 1e3)
            t_fill.append((t3 - t2) / 1e3)
            t_ll.append((t4 - t3) / 1e3)
            t_xg.append((t5 - t4) / 1e3)
            assert m.accept_token(t) and llg.accept(lo, t) and xgr.accept(xo, t)
        # through the tail: the longest allowed token each step, timing the one that hands over
        while m.phase != "engine":
            ids = m.allowed()
            t = max(ids.tolist(), key=lambda i: len(vocab.token_bytes[i]))
            t1 = time.perf_counter_ns()
            m.accept_token(t)
            t2 = time.perf_counter_ns()
            if m.phase == "engine":
                t_handover.append((t2 - t1) / 1e3)
                handover_tokens.add(vocab.token_bytes[t])
    # the same paths again, triec alone (no engine work between steps: warm caches)
    t_writer_alone, t_handover_alone = [], []
    for leaf in chosen:
        path = []
        s = leaf
        while s > 0:
            path.append(int(via[s]))
            s = int(parent[s])
        m = table.matcher()
        for t in reversed(path):
            t1 = time.perf_counter_ns()
            writer.fill([m])
            t_writer_alone.append((time.perf_counter_ns() - t1) / 1e3)
            m.accept_token(t)
        while m.phase != "engine":
            ids = m.allowed()
            t = max(ids.tolist(), key=lambda i: len(vocab.token_bytes[i]))
            t1 = time.perf_counter_ns()
            m.accept_token(t)
            t2 = time.perf_counter_ns()
            if m.phase == "engine":
                t_handover_alone.append((t2 - t1) / 1e3)
    for key, xs in {"triec_writer_alone": t_writer_alone, "triec_handover_alone": t_handover_alone, "triec_writer": t_writer, "triec_fill_bitmask": t_fill, "llguidance": t_ll, "xgrammar": t_xg,
                    "triec_handover": t_handover}.items():
        out[f"{key}_us"] = {"median": pct(xs, 50), "p99": pct(xs, 99), "mean": float(np.mean(xs)), "n": len(xs)}
    out["handover_tokens"] = sorted(b.decode("utf-8", "replace") for b in handover_tokens)
    out["ratios"] = {
        "build_xgrammar_over_triec": out["xgrammar_compile_s"] / out["triec_build_disk_cache_s"],
        "build_llguidance_over_triec": out["llguidance_compile_s"] / out["triec_build_disk_cache_s"],
        "row_median_llguidance_over_triec": out["llguidance_us"]["median"] / out["triec_writer_us"]["median"],
        "row_p99_xgrammar_over_triec": out["xgrammar_us"]["p99"] / out["triec_writer_us"]["p99"],
    }
    slot = table.slots[0]
    out["states"], out["entries"] = table.num_states, int(slot.entry_state.shape[0])
    out["crossing_tokens"] = int(slot.exits.tokens.shape[0] + slot.tails.tokens.shape[0] + slot.enters.tokens.shape[0])
    print(json.dumps(out, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
