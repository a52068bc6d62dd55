"""A tool-call schema: ``triec.compile_schema`` against llguidance and xgrammar compiling the whole schema.

``{"name": <one of K tool names>, "arguments": {"query": string, "limit": integer}}``, K seeded tool names,
Qwen2 padded to 151,936, the peers in the same compact convention (docs/verify.md), all in one process so
every figure is side by side. Measured: build times (triec's first and warm builds, the first matcher; the
peers' compiles), one mask row inside the name field along the shortest token path of sampled names (triec's
writer interleaved with both engines' own rows at the same steps, and triec alone again), and the handover
(the ``accept_token`` that enters the arguments' engine). Rows are microseconds: median / p99.
"""

from __future__ import annotations

import random
import statistics
import time
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from benchmarks import docs, results
from triec.bench.runner import Out, run_cell

if TYPE_CHECKING:
    from triec.schema.slot import Groups

ARGS = {
    "type": "object",
    "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
    "required": ["query"],
    "additionalProperties": False,
}

FULL = {"k": 10_000, "paths": 200, "repeat": 5}
QUICK = {"k": 100, "paths": 5, "repeat": 1}


def unavailable() -> str | None:
    from triec.engines import is_installed

    missing = [e for e in ("llguidance", "xgrammar") if not is_installed(e)]
    return f"needs {' and '.join(missing)} (pip install 'triec[bench]')" if missing else None


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.array(xs), q))


def cell(job: dict[str, Any], out: Out) -> None:
    import triec
    from triec.schema.grammar import driver
    from triec.synthetic.sets import tool_names
    from triec.verify.paths import token_paths

    vocab = triec.Vocabulary.load(
        job["tokenizer"], vocab_size=job["vocab_size"] if job["tokenizer"] == "qwen2" else None
    )
    names = tool_names(job["k"])
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "enum": names}, "arguments": ARGS},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }
    res: dict[str, Any] = {"k": job["k"], "tokenizer": job["tokenizer"], "vocab_size": vocab.vocab_size}
    _ = vocab.automaton  # the per-tokenizer automaton is cached on disk; not part of any build below
    llg, xgr = driver("llguidance", vocab), driver("xgrammar", vocab)  # engines' tokenizer setup, once per process

    # ---- build
    t0 = time.perf_counter()
    table = triec.compile_schema(schema, vocab)
    res["triec_build_cold_s"] = time.perf_counter() - t0  # the first compile in this process (token index built)
    warm = []
    for _ in range(job["repeat"]):
        t0 = time.perf_counter()
        table = triec.compile_schema(schema, vocab)
        warm.append(time.perf_counter() - t0)
    res["triec_build_disk_cache_s"] = res["triec_build_memory_s"] = statistics.median(warm)  # no engine work to cache
    t0 = time.perf_counter()
    table.matcher()
    res["triec_first_matcher_s"] = time.perf_counter() - t0  # the engine's matcher on the vocabulary, once per process
    ll_times, xg_times = [], []
    for _ in range(max(1, job["repeat"] // 2)):
        t0 = time.perf_counter()
        ll_whole = llg.compile(schema)
        ll_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        xg_whole = xgr.compile(schema)
        xg_times.append(time.perf_counter() - t0)
    res["llguidance_compile_s"] = statistics.median(ll_times)
    res["xgrammar_compile_s"] = statistics.median(xg_times)

    out.put(phase="rows", **res)
    # ---- rows inside the name field, along shortest token paths to sampled names
    parent, via = token_paths(table.trie)
    rng = random.Random(0)
    leaves = table.trie.value_state.tolist()
    chosen = rng.sample(leaves, min(job["paths"], len(leaves)))
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
    for key, xs in {
        "triec_writer_alone": t_writer_alone,
        "triec_handover_alone": t_handover_alone,
        "triec_writer": t_writer,
        "triec_fill_bitmask": t_fill,
        "llguidance": t_ll,
        "xgrammar": t_xg,
        "triec_handover": t_handover,
    }.items():
        res[f"{key}_us"] = {"median": pct(xs, 50), "p99": pct(xs, 99), "mean": float(np.mean(xs)), "n": len(xs)}
    res["handover_tokens"] = sorted(b.decode("utf-8", "replace") for b in handover_tokens)
    res["ratios"] = {
        "build_xgrammar_over_triec": res["xgrammar_compile_s"] / res["triec_build_disk_cache_s"],
        "build_llguidance_over_triec": res["llguidance_compile_s"] / res["triec_build_disk_cache_s"],
        "row_median_llguidance_over_triec": res["llguidance_us"]["median"] / res["triec_writer_us"]["median"],
        "row_p99_xgrammar_over_triec": res["xgrammar_us"]["p99"] / res["triec_writer_us"]["p99"],
    }
    slot = table.slots[0]
    res["states"], res["entries"] = table.num_states, int(slot.entry_state.shape[0])
    tails = cast("Groups", slot.tails)  # bound: the table's vocabulary derived them
    res["crossing_tokens"] = int(slot.exits.tokens.shape[0] + tails.tokens.shape[0] + slot.enters.tokens.shape[0])
    out.put(status="ok", phase="done", **res)


def run(quick: bool) -> dict[str, Any]:
    size = QUICK if quick else FULL
    result = results.new("schemas", {"quick": quick, "tokenizer": "qwen2", "vocab_size": 151_936, **size})
    job = {"tokenizer": "qwen2", "vocab_size": 151_936, **size}
    result["cells"].append(run_cell("benchmarks.suites.schemas:cell", job, timeout=1800.0))
    return result


def _us(c: dict[str, Any], key: str) -> str:
    s = c.get(f"{key}_us")
    return "-" if not s else f"{s['median']:.2f} / {s['p99']:.2f} µs"


def tables(result: dict[str, Any]) -> dict[str, str]:
    c = result["cells"][0]
    if c.get("status") != "ok":
        return {"schema": docs.markdown(["what", "measured"], [["the cell", docs.status_note(c)]])}
    r = c["ratios"]
    rows = [
        ["K (tool names) / trie states", f"{c['k']:,} / {c['states']:,}", ""],
        [
            "triec build, warm (first in the process)",
            f"{docs.seconds(c['triec_build_memory_s'])} ({docs.seconds(c['triec_build_cold_s'])})",
            "",
        ],
        ["triec first matcher (engine template + word rows, once)", docs.seconds(c["triec_first_matcher_s"]), ""],
        [
            "llguidance compile of the whole schema",
            docs.seconds(c["llguidance_compile_s"]),
            f"{r['build_llguidance_over_triec']:.2f}x triec's build",
        ],
        [
            "xgrammar compile of the whole schema",
            docs.seconds(c["xgrammar_compile_s"]),
            f"{r['build_xgrammar_over_triec']:.1f}x triec's build",
        ],
        ["one row in the name field, triec alone (median / p99)", _us(c, "triec_writer_alone"), ""],
        ["the same, interleaved with the engines' rows", _us(c, "triec_writer"), ""],
        ["llguidance row", _us(c, "llguidance"), f"median {r['row_median_llguidance_over_triec']:.1f}x triec's"],
        ["xgrammar row", _us(c, "xgrammar"), f"p99 {r['row_p99_xgrammar_over_triec']:.1f}x triec's"],
        ["`m.fill_bitmask(row)` (zeroes the row, then the words)", _us(c, "triec_fill_bitmask"), ""],
        ["handover into the arguments, alone", _us(c, "triec_handover_alone"), ""],
        ["handover, interleaved", _us(c, "triec_handover"), ""],
    ]
    return {"schema": docs.markdown(["what", "measured", "ratio"], rows)}
