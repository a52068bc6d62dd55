"""triec's vLLM backend against vLLM's xgrammar with a trained model: validity, equal outputs, req/s, acceptance.

SmolLM2-135M-Instruct (the tests' trained model, float32), vLLM's CPU engine,
greedy, prefix caching off (repeats would reuse cached prompts and hide the
prompt cost), one engine per (cell, method) in its own process. Prompts: BFCL
``multiple`` questions (fixtures/eval/bfcl), chat template of SmolLM2 with the
tools rendered (tests/smollm_tools.jinja, 8 shown) for the tool cells.

* ``choice``: ``choice`` over all 1,998 BFCL function names, 50 questions;
* ``spec``: the same with ngram speculative decoding (k = 3, the candidates
  named in the prompt): draft acceptance from vLLM's own counters;
* ``required`` / ``auto``: ``tool_choice`` over 500 strict BFCL tools, the
  structural tag vLLM's hermes builder writes (what the server sends), 20
  questions: calls that parse and fit their schema.

Each cell prints one JSON line; the parent compares token ids between methods
(``equal``) and prints a markdown table.

    python -m benchmarks.trained_driver --json docs/results/bench_trained.json --md out.md
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import ROOT
from benchmarks.vllm_backend import hermes_calls_ok
from benchmarks.vllm_processors import run_child

CELLS = ("choice", "spec", "required", "auto")
SPEC = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}


def registry() -> list[dict[str, Any]]:
    import zstandard

    raw = (ROOT / "fixtures" / "registries" / "bfcl-1998.json.zst").read_bytes()
    tools: list[dict[str, Any]] = json.loads(zstandard.ZstdDecompressor().decompress(raw, max_output_size=1 << 28))
    return tools


def questions(n: int) -> list[dict[str, Any]]:
    from triec.eval import bfcl

    names = {t["function"]["name"] for t in registry()}
    items = bfcl.convert("multiple", ROOT / "fixtures" / "eval" / "bfcl")
    return [i for i in items if all(c in names for c in i["candidates"])][:n]


def tools_for(item: dict[str, Any], tools: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    by_name = {t["function"]["name"]: t for t in tools}
    first = [by_name[c] for c in item["candidates"]]
    rest = [t for t in tools if t["function"]["name"] not in item["candidates"]]
    return [{"type": "function", "function": {**t["function"], "strict": True}} for t in (first + rest)[:n]]


def child(args: argparse.Namespace) -> dict[str, Any]:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    if args.method == "triec":
        os.environ["TRIEC_VLLM_BACKEND"] = "1"
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionToolsParam
    from vllm.sampling_params import StructuredOutputsParams
    from vllm.tool_parsers.structural_tag_registry import get_model_structural_tag

    tok = AutoTokenizer.from_pretrained(args.model)
    tools_all = registry()
    names = sorted({t["function"]["name"] for t in tools_all})
    tool_cell = args.cell in ("required", "auto")
    items = questions(20 if tool_cell else 50)
    template = (ROOT / "tests" / "smollm_tools.jinja").read_text()
    prompts, params, per_tools = [], [], []
    for item in items:
        if tool_cell:
            tools = tools_for(item, tools_all, 500)
            text = tok.apply_chat_template(
                item["messages"][1:], tools=tools, chat_template=template, add_generation_prompt=True, tokenize=False
            )
            tparams = [ChatCompletionToolsParam(type="function", function=t["function"]) for t in tools]
            tag = get_model_structural_tag("hermes", tparams, args.cell, reasoning=False)
            so = StructuredOutputsParams(structural_tag=json.dumps(tag.model_dump()))
            per_tools.append({t["function"]["name"]: t["function"]["parameters"] for t in tools})
            max_tokens = 128
        else:
            text = tok.apply_chat_template(item["messages"], add_generation_prompt=True, tokenize=False)
            so = StructuredOutputsParams(choice=names)
            max_tokens = 48
        prompts.append({"prompt_token_ids": tok.encode(text, add_special_tokens=False)})
        params.append(SamplingParams(max_tokens=max_tokens, temperature=0.0, structured_outputs=so))
    kw = {"speculative_config": SPEC} if args.cell == "spec" else {}
    t0 = time.perf_counter()
    llm = LLM(
        model=args.model,
        dtype="float32",
        max_model_len=4096,
        max_num_seqs=16,
        enforce_eager=True,
        seed=0,
        enable_prefix_caching=False,
        disable_log_stats=False,
        **kw,
    )
    start_s = time.perf_counter() - t0
    llm.generate([prompts[0]], [SamplingParams(max_tokens=2, temperature=0.0)], use_tqdm=False)  # warm
    t = time.perf_counter()
    llm.generate([prompts[0]], [params[0]], use_tqdm=False)
    first = time.perf_counter() - t
    t = time.perf_counter()
    llm.generate([prompts[0]], [params[0]], use_tqdm=False)
    second = time.perf_counter() - t
    t = time.perf_counter()
    results = llm.generate(prompts, params, use_tqdm=False)
    elapsed = time.perf_counter() - t
    outs = [r.outputs[0] for r in results]
    if tool_cell:
        # at least one call, every <tool_call> block a known tool with arguments that fit, and the output finished
        valid = [
            o.finish_reason == "stop" and "<tool_call>" in o.text and hermes_calls_ok(o.text, schemas)
            for o, schemas in zip(outs, per_tools, strict=True)
        ]
    else:
        valid = [o.text in names and o.finish_reason == "stop" for o in outs]
    row = {
        "cell": args.cell,
        "method": args.method,
        "start_s": round(start_s, 1),
        "requests": len(outs),
        "req_s": round(len(outs) / elapsed, 3),
        "first_ms": round(first * 1e3),
        "second_ms": round(second * 1e3),
        "first_overhead_ms": round((first - second) * 1e3),
        "valid": sum(valid),
        "correct": sum(o.text == i["gold"] for o, i in zip(outs, items, strict=True)) if not tool_cell else None,
        "tokens_per_req": round(statistics.mean(len(o.token_ids) for o in outs), 2),
        "ids": [list(o.token_ids) for o in outs],
    }
    if args.cell == "spec":
        counters = {m.name: getattr(m, "value", None) for m in llm.get_metrics()}
        drafted = counters.get("vllm:spec_decode_num_draft_tokens") or 0
        accepted = counters.get("vllm:spec_decode_num_accepted_tokens") or 0
        row.update(drafted=drafted, accepted=accepted, acceptance=round(accepted / drafted, 3) if drafted else None)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", default=",".join(CELLS))
    ap.add_argument("--methods", default="triec,xgrammar")
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--json", default=None)
    ap.add_argument("--md", default=None)
    ap.add_argument("--model", default=None, help="a model directory (default: the trained-model fixture)")
    ap.add_argument("--cell", help=argparse.SUPPRESS)
    ap.add_argument("--method", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.cell:
        print("CELL " + json.dumps(child(args)), flush=True)
        return 0
    if args.model is None:
        from triec.eval.gguf_model import prepare

        args.model = str(prepare())
    rows: list[dict[str, Any]] = []
    for cell in args.cells.split(","):
        for method in args.methods.split(","):
            cmd = [
                sys.executable,
                "-m",
                "benchmarks.trained_driver",
                "--cell",
                cell,
                "--method",
                method,
                "--model",
                args.model,
            ]
            row, crash = run_child(cmd, args.timeout)
            row = row or {"cell": cell, "method": method, "error": crash}
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "ids"}), flush=True)
    by = {(r["cell"], r["method"]): r for r in rows}
    for r in rows:
        ref = by.get((r["cell"], "xgrammar"))
        if "ids" in r and ref and "ids" in ref:
            r["equal_to_xgrammar"] = sum(a == b for a, b in zip(r["ids"], ref["ids"], strict=True))
    lines = [
        "| cell | method | requests | valid | correct | equal to xgrammar | req/s | first-request overhead ms | tokens/req | acceptance |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['cell']} | {r['method']} | error: {r['error']} |")
            continue
        lines.append(
            f"| {r['cell']} | {r['method']} | {r['requests']} | {r['valid']} | {r['correct'] if r['correct'] is not None else '-'} | "
            f"{r.get('equal_to_xgrammar', '-')} | {r['req_s']} | {r['first_overhead_ms']} | {r['tokens_per_req']} | "
            f"{r.get('acceptance', '-')} |"
        )
    md = "\n".join(lines)
    print(md)
    if args.json:
        Path(args.json).write_text(
            json.dumps([{k: v for k, v in r.items() if k != "ids"} for r in rows], indent=1) + "\n"
        )
    if args.md:
        Path(args.md).write_text(md + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
