"""Compile and load: what ``triec.compile`` costs by K, value set and tokenizer, and what its artifact costs to load.

Each (tokenizer, set, K) cell is one process (:func:`triec.bench.runner.run_cell`) with the tokenizer's
vocabulary automaton in the disk cache, as on a serving machine. In order:

* ``peak``: growth of the resident high-water mark during the first compile (``VmHWM`` reset just before;
  the vocabulary, automaton and values already in memory), next to issue 9's budget, 4 x artifact + automaton;
* ``compile``: ``triec.compile(values, vocab)``, warm, with its phases (``values`` = encode, sort and dedupe;
  ``trie``; ``masks`` = the walk and the CSR sort), medians and spread;
* the artifact's bytes, plain and zstd; ``load``: a plain ``triec.load`` (layout + index checks) and
  ``triec.load(verify=True)`` (section CRCs and every content check).

The ``cold`` cells are a first compile in a process that never saw the tokenizer (an empty cache directory):
reading the tokenizer, building its automaton, compiling.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import docs, results
from benchmarks.measure import median, peak_rss_bytes, stats, timed
from triec.bench.runner import Out, rss_bytes, run_cell

WIDTH = {"qwen2": 151_936}
"""Logits widths the cells pad to (Qwen2.5's); other tokenizers keep their own."""

FULL: dict[str, Any] = {
    "cells": [
        *(("qwen2", "tools", k) for k in (100, 1_000, 10_000, 100_000)),
        ("qwen2", "codes", 100_000),
        ("qwen2", "products", 1_500),
        ("gpt2", "tools", 10_000),
    ],
    "cold": [("qwen2", 100), ("gpt2", 100)],
    "repeat": 9,
    "timeout": 600.0,
}
QUICK: dict[str, Any] = {"cells": [("qwen2", "tools", 100)], "cold": [("qwen2", 100)], "repeat": 2, "timeout": 300.0}


def unavailable() -> str | None:
    return None


def values_of(name: str, k: int) -> list[str]:
    from triec.synthetic import sets

    if name == "tools":
        return sets.tool_names(k)
    if name == "codes":
        return sets.wide_codes(k)
    if name == "products":
        return sets.product_names(k)
    raise ValueError(f"unknown value set {name!r}")


def _reset_peak() -> None:
    try:  # Linux >= 4.0: the high-water mark restarts from the current RSS
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def warm_cell(job: dict[str, Any], out: Out) -> None:
    import triec
    from triec.compiler.entry import CompileStats

    vocab = triec.Vocabulary.load(job["tokenizer"], vocab_size=job["vocab_size"])
    automaton = vocab.automaton
    values = values_of(job["set"], job["k"])
    out.put(phase="peak", tokenizer_tokens=vocab.num_tokens, vocab_size=vocab.vocab_size, values=len(values))
    _reset_peak()
    before = rss_bytes()
    table = triec.compile(values, vocab)
    peak = max(peak_rss_bytes(), before) - before
    automaton_bytes = sum(
        getattr(automaton, n).nbytes
        for n in ("root_child", "edge_keys", "edge_child", "has_child", "node_key", "key_offsets", "key_ids")
    )
    out.put(phase="compile", peak_growth_bytes=peak, automaton_bytes=automaton_bytes)
    phases: list[dict[str, float]] = []

    def compile_once() -> None:
        st = CompileStats()
        triec.compile(values, vocab, stats=st)
        phases.append(st.phases)
        out.data.update(states=st.num_states, pairs=st.num_allowed, sharing_ratio=st.sharing_ratio)

    samples = timed(compile_once, job["repeat"])
    out.put(
        phase="artifact",
        compile_s=stats(samples),
        phases_s={p: statistics.median(x[p] for x in phases[1:]) for p in ("values", "trie", "masks")},
    )
    with tempfile.TemporaryDirectory() as tmp:
        plain, packed = os.path.join(tmp, "a.triec"), os.path.join(tmp, "a.triec.zst")
        size, zsize = table.save(plain), table.save(packed)
        out.put(phase="load", artifact_bytes=size, artifact_zstd_bytes=zsize)
        load = stats(timed(lambda: triec.load(plain), max(50, job["repeat"])))
        verify = stats(timed(lambda: triec.load(plain, verify=True), max(5, job["repeat"] // 2)))
    out.put(status="ok", phase="done", load_s=load, load_verify_s=verify)


def cold_cell(job: dict[str, Any], out: Out) -> None:
    import triec

    t1 = time.perf_counter()
    vocab = triec.Vocabulary.load(job["tokenizer"], vocab_size=job["vocab_size"])
    t2 = time.perf_counter()
    vocab.automaton  # noqa: B018 - built: the cache directory is empty
    t3 = time.perf_counter()
    triec.compile(values_of("tools", job["k"]), vocab)
    t4 = time.perf_counter()
    out.put(
        status="ok", phase="done", tokenizer_s=t2 - t1, automaton_s=t3 - t2, compile_s=t4 - t3, first_compile_s=t4 - t1
    )


def run(quick: bool) -> dict[str, Any]:
    import triec

    size = QUICK if quick else FULL
    result = results.new("compile_load", {"quick": quick, "repeat": size["repeat"], "timeout_s": size["timeout"]})
    for tokenizer in sorted({t for t, _, _ in size["cells"]}):
        triec.Vocabulary.load(tokenizer, vocab_size=WIDTH.get(tokenizer)).automaton  # noqa: B018 - caches warm
    for tokenizer, name, k in size["cells"]:
        job = {
            "tokenizer": tokenizer,
            "vocab_size": WIDTH.get(tokenizer),
            "set": name,
            "k": k,
            "repeat": size["repeat"],
        }
        cell = run_cell("benchmarks.suites.compile_load:warm_cell", job, timeout=size["timeout"])
        result["cells"].append({"kind": "warm", "tokenizer": tokenizer, "set": name, "k": k, **cell})
    for tokenizer, k in size["cold"]:
        with tempfile.TemporaryDirectory(prefix="triec-cold-cache-") as cache:
            job = {"tokenizer": tokenizer, "vocab_size": WIDTH.get(tokenizer), "k": k}
            env = {**os.environ, "TRIEC_CACHE_DIR": cache}
            cell = run_cell("benchmarks.suites.compile_load:cold_cell", job, timeout=size["timeout"], env=env)
        result["cells"].append({"kind": "cold", "tokenizer": tokenizer, "set": "tools", "k": k, **cell})
    return result


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:.2f}"


def tables(result: dict[str, Any]) -> dict[str, str]:
    warm = [c for c in result["cells"] if c["kind"] == "warm"]
    rows = []
    for c in warm:
        note = docs.status_note(c)
        budget = (4 * c["artifact_bytes"] + c["automaton_bytes"]) if "artifact_bytes" in c else None
        phases = c.get("phases_s") or {}
        rows.append(
            [
                c["tokenizer"],
                c["set"],
                f"{c['k']:,}",
                docs.count(c.get("states")),
                docs.count(c.get("pairs")),
                note or docs.spread(c.get("compile_s")),
                " / ".join(_ms(phases.get(p)) for p in ("values", "trie", "masks")),
                docs.count(c.get("artifact_bytes")),
                docs.count(c.get("artifact_zstd_bytes")),
                docs.seconds(median(c.get("load_s"))),
                docs.seconds(median(c.get("load_verify_s"))),
                f"{docs.mib(c.get('peak_growth_bytes'))} ({docs.mib(budget)})",
            ]
        )
    compile_table = docs.markdown(
        [
            "tokenizer",
            "set",
            "K",
            "states",
            "pairs",
            "compile (min-max)",
            "values / trie / masks ms",
            "artifact B",
            "zstd B",
            "load",
            "load verify",
            "peak (budget)",
        ],
        rows,
    )
    cold = [
        [
            c["tokenizer"],
            f"{c['k']:,}",
            docs.status_note(c) or docs.seconds(c.get("first_compile_s")),
            docs.seconds(c.get("tokenizer_s")),
            docs.seconds(c.get("automaton_s")),
            docs.seconds(c.get("compile_s")),
        ]
        for c in result["cells"]
        if c["kind"] == "cold"
    ]
    cold_table = docs.markdown(["tokenizer", "K", "first compile", "tokenizer", "automaton", "compile"], cold)
    return {"compile": compile_table, "cold": cold_table}


def plots(result: dict[str, Any], directory: Path) -> list[Path]:
    """Compile time against K, log-log, per set and tokenizer (the peers' compile is in ``bench.png``)."""
    plt = docs.pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    series: dict[str, list[tuple[int, float]]] = {}
    for c in result["cells"]:
        if c["kind"] == "warm" and median(c.get("compile_s")) is not None:
            series.setdefault(f"{c['set']}, {c['tokenizer']}", []).append((c["k"], median(c["compile_s"]) or 0.0))
    for label, pts in series.items():
        ax.plot(*zip(*sorted(pts), strict=True), marker="o", label=label)
    ax.set(xscale="log", yscale="log", xlabel="K (values)", ylabel="seconds", title="triec.compile, warm (median)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return [docs.save_png(fig, directory / "bench-compile.png")]
