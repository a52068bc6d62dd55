"""One real vLLM CPU engine with triec's structured-outputs backend: every request kind, greedy, one JSON report.

Run by tests/test_vllm_backend.py in a subprocess (vLLM loads general plugins
once per process, and the backend's frontend replacement is process-wide: the
other vLLM tests keep stock vLLM). It serves the tiny random-weight Llama with
the Qwen2 tokenizer plus ``<think>``/``</think>``, in one of two modes:

* ``spec``: ngram speculative decoding (k = 3), JSON without free whitespace
  (backend ``xgrammar``, ``disable_any_whitespace``: a delegated object schema then ends);
* ``plain``: backend ``auto``, no speculative decoding, the ``deepseek_r1`` reasoning parser on
  (vLLM refuses ``logit_bias`` with speculative decoding, and the reasoning
  group needs a bias on ``</think>`` to end a random model's thinking).

Every batch is all greedy: vLLM 0.32's CPU rejection sampler corrupts per-token
temperatures in mixed greedy/random batches (vllm-project/vllm#55005), which
no backend survives. Prompts close their thinking (``<think>ok</think>``), so
constraints apply from the first output token, except in the reasoning group.

usage: python vllm_backend_driver.py WORKDIR OUT.json spec|plain
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # a script's sys.path[0] is its folder: benchmarks/ (the tiny Llama) is the checkout's
    sys.path.append(str(ROOT))

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

COLORS = ["red", "green", "blue", "re", "redder", "grün", 'say "hi"']
ANIMALS = ["cat", "caterpillar", "dog", "dolphin", "eagle", "emu"]
SPEC = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}


def think_model(root: Path) -> Path:
    """The tiny Llama with ``<think>`` and ``</think>`` added to its tokenizer (ids 151646, 151647)."""
    from transformers import AutoTokenizer

    from benchmarks.tiny_llama import make_tiny_llama

    out = root / "model_think"
    if (out / "tokenizer.json").is_file():
        return out
    make_tiny_llama(out)
    tok = AutoTokenizer.from_pretrained(out)
    tok.add_tokens(["<think>", "</think>"])
    tok.save_pretrained(out)
    return out


def main() -> None:
    root, out_path, mode = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    model = think_model(root)
    art = root / "artifacts"
    art.mkdir(exist_ok=True)
    import triec
    import triec.synthetic.sets

    vocab = triec.Vocabulary.load(str(model), vocab_size=151_936)
    names = triec.synthetic.sets.tool_names(2000)
    triec.compile(COLORS, vocab).save(art / "colors.triec")
    triec.compile(names, vocab).save(art / "tools.triec")
    os.environ["TRIEC_ARTIFACT_DIR"] = str(art)

    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import StructuredOutputsParams as SO
    from vllm.v1.structured_output.utils import choice_as_grammar

    tok = AutoTokenizer.from_pretrained(model)
    end_think = tok.convert_tokens_to_ids("</think>")
    t = time.perf_counter()
    kw: dict = (
        {
            "speculative_config": SPEC,
            "structured_outputs_config": {"backend": "xgrammar", "disable_any_whitespace": True},
        }
        if mode == "spec"
        else {"structured_outputs_config": {"reasoning_parser": "deepseek_r1"}}
    )
    llm = LLM(
        model=str(model), max_num_seqs=8, max_model_len=512, enforce_eager=True, seed=0, disable_log_stats=False, **kw
    )
    report: dict = {"mode": mode, "start_s": round(time.perf_counter() - t, 1), "end_think": end_think, "cases": []}
    big = names[:1000]
    groups = {  # name -> (triec-served constraint, xgrammar's of the same language or None, allowed texts)
        "choice": [(SO(choice=v), SO(grammar=choice_as_grammar(v)), v) for v in (COLORS, ANIMALS, big)],
        "regex": [
            (
                SO(regex="(cat|caterpillar|dog)"),
                SO(grammar=choice_as_grammar(["cat", "caterpillar", "dog"])),
                ["cat", "caterpillar", "dog"],
            )
        ],
        "enum": [
            (
                SO(json={"type": "string", "enum": v}),
                SO(json={"anyOf": [{"type": "string", "enum": v}]}),
                [json.dumps(x) for x in v],
            )
            for v in (COLORS, ANIMALS)
        ],
        "artifact": [
            (SO(json={"x-triec-artifact": "colors"}), SO(grammar=choice_as_grammar(COLORS)), COLORS),
            (
                SO(json={"x-triec-artifact": "tools", "x-triec-restrict": names[5:9]}),
                SO(grammar=choice_as_grammar(names[5:9])),
                names[5:9],
            ),
        ],
    }
    prompts, params, meta = [], [], []
    for group, cases in groups.items():
        for ci, (ours, ref, allowed) in enumerate(cases):
            for pi in range(2):  # values in the prompt: the ngram proposer drafts them
                head = ", ".join(allowed[pi : pi + 4])
                prompt = f"Options: {head}. Pick #{pi}: {allowed[pi]}, {allowed[pi]} <think>ok</think>"
                for side, so in (("triec", ours), ("xgrammar", ref)):
                    prompts.append(prompt)
                    params.append(SamplingParams(max_tokens=48, temperature=0.0, structured_outputs=so))
                    meta.append({"group": group, "case": ci, "prompt": pi, "side": side, "allowed": list(allowed)})
    # tool calls as vLLM's hermes parser constrains strict tools (one call, and any number): the schema layer's
    # trie over the begins next to xgrammar serving the same tag inside a one-element "sequence" (not triec's)
    from test_vllm_structured import WEATHER, hermes_tag

    tools = [(n, WEATHER) for n in names[:40]]
    for ci, first in enumerate((True, False)):
        tag = hermes_tag(tools, stop_after_first=first)
        ref = {"type": "structural_tag", "format": {"type": "sequence", "elements": [tag["format"]]}}
        for pi in range(2):
            call = (
                f'<tool_call>\n{{"name": "{names[pi]}", "arguments": {{"city": "Paris", "unit": "c"}}}}\n</tool_call>'
            )
            for side, so in (
                ("triec", SO(structural_tag=json.dumps(tag))),
                ("xgrammar", SO(structural_tag=json.dumps(ref))),
            ):
                prompts.append(f"Tools: {names[pi]}. {call} {call} <think>ok</think>")
                params.append(SamplingParams(max_tokens=40, temperature=0.0, structured_outputs=so))
                meta.append({"group": "tags", "case": ci, "prompt": pi, "side": side, "allowed": None})
    # delegated kinds, in the same batches: a real regex, a general JSON schema
    for i in range(3):
        prompts.append(f"Code #{i}: ab-12, cd-34 <think>ok</think>")
        params.append(
            SamplingParams(max_tokens=24, temperature=0.0, structured_outputs=SO(regex=r"[a-z]{2,6}-[0-9]{2}"))
        )
        meta.append({"group": "delegated_regex", "case": i, "prompt": 0, "side": "xgrammar", "allowed": None})
        schema = {
            "type": "object",
            "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}, "ok": {"type": "boolean"}},
            "required": ["n", "ok"],
            "additionalProperties": False,
        }
        prompts.append(f'Object #{i}: {{"n": 1, "ok": true}} <think>ok</think>')
        params.append(SamplingParams(max_tokens=40, temperature=0.0, structured_outputs=SO(json=schema)))
        meta.append({"group": "delegated_json", "case": i, "prompt": 0, "side": "xgrammar", "schema": schema})
    # a flat enum-and-const object: with TRIEC_VLLM_COMPACT_JSON=1 and any whitespace (plain) triec's compact
    # spelling, under disable_any_whitespace (spec) xgrammar's ("," and ":"): both valid per the schema
    obj = {
        "type": "object",
        "properties": {"color": {"enum": COLORS[:3]}, "v": {"const": 1}},
        "required": ["color", "v"],
        "additionalProperties": False,
    }
    for i in range(2):
        prompts.append(f'Object #{i}: {{"color": "red", "v": 1}} <think>ok</think>')
        params.append(SamplingParams(max_tokens=24, temperature=0.0, structured_outputs=SO(json=obj)))
        meta.append({"group": "object", "case": i, "prompt": 0, "side": "compact", "allowed": None})
    # reasoning: the prompt opens thinking, a bias on </think> ends it after a few tokens; the answer is constrained
    for i, bias in enumerate((6.0, 8.0, 100.0) if mode == "plain" else ()):
        prompts.append(f"Think first #{i}.<think>")
        params.append(
            SamplingParams(
                max_tokens=40,
                temperature=0.0,
                logit_bias={end_think: bias},
                structured_outputs=SO(choice=ANIMALS),
                skip_special_tokens=False,
            )
        )
        meta.append({"group": "reasoning", "case": i, "prompt": 0, "side": "triec", "allowed": ANIMALS})
    t = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    report["generate_s"] = round(time.perf_counter() - t, 2)
    for m, o in zip(meta, outs, strict=True):
        c = o.outputs[0]
        report["cases"].append({**m, "text": c.text, "ids": list(c.token_ids), "finish": c.finish_reason})
    # a new 10,000-value list after warm-up: how long one request takes end to end (the compile is in it)
    fresh = [f"item-{i:05d}-{'x' * (i % 7)}" for i in range(10_000)]
    t = time.perf_counter()
    o = llm.generate(
        ["Pick one: item-00042- <think>ok</think>"],
        SamplingParams(max_tokens=16, temperature=0.0, structured_outputs=SO(choice=fresh)),
        use_tqdm=False,
    )
    report["k10000"] = {
        "s": round(time.perf_counter() - t, 3),
        "text": o[0].outputs[0].text,
        "valid": o[0].outputs[0].text in fresh,
    }
    # bad input from LLM.generate: refused before the engine, the engine keeps serving
    refusals = {}
    for name, so in (
        ("empty", lambda: SO(choice=[])),
        ("too_many", lambda: SO(choice=[f"v{i}" for i in range(25_000)])),
        ("non_string", lambda: SO(choice=["red", 3])),
        ("bad_artifact", lambda: SO(json={"x-triec-artifact": "../etc/passwd"})),
        ("missing_artifact", lambda: SO(json={"x-triec-artifact": "nope"})),
    ):
        try:
            llm.generate(["x"], SamplingParams(max_tokens=4, structured_outputs=so()), use_tqdm=False)
            refusals[name] = "served"
        except Exception as exc:  # noqa: BLE001  the kind of exception is what the test checks
            refusals[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    report["refusals"] = refusals
    o = llm.generate(
        ["Again: <think>ok</think>"],
        SamplingParams(max_tokens=16, temperature=0.0, structured_outputs=SO(choice=COLORS)),
        use_tqdm=False,
    )
    report["after_refusals"] = o[0].outputs[0].text
    spec = {}
    for metric in llm.get_metrics():
        if metric.name.startswith("vllm:spec_decode_num_") and hasattr(metric, "value"):
            spec[metric.name] = metric.value
    report["spec"] = spec
    out_path.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
