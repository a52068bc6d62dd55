"""``tool_choice="auto"`` with strict tools (issue 27): the triggered hermes tag vLLM sends, triec against xgrammar.

    python scripts/bench_auto_tools.py [--tools 500,1998] [--tokenizers qwen2,gpt2] [--no-xgrammar] [--repeat 200]

For each registry (the first N of BFCL's 1,998 public functions, strict parameters, tools either engine
refuses alone left out as in scripts/bench_tools.py) and tokenizer, one process measures side by side:

* build: ``compile_structural_tag`` (the begins' trie; each tool's grammar is compiled when a call picks it),
  the median of three and the first (which also pays the per-vocabulary groups of the begins' endings), against
  xgrammar's ``compile_structural_tag`` of the whole tag on one thread (what vLLM's backend does);
* rows (medians of ``--repeat`` fills, full-width int32 rows): free text at the start, free text after a
  sentence, the names after ``<tool_call>\\n{"name": "`` (in the slot), for triec and xgrammar's matcher;
* the handover into a tool's arguments: the first call of a tool (its grammar compiled then) and a repeat.

llguidance does not read xgrammar's structural tags (it has its own Lark/JSON input), so it has no cell here.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_tools import drop, load_registry, refused_tools  # noqa: E402
from bench_trigger import median_us  # noqa: E402

import triec  # noqa: E402
from triec.schema.compile import compile_structural_tag  # noqa: E402
from triec.schema.tags import hermes_tag  # noqa: E402
from triec.schema.tools import parse_tools  # noqa: E402


def drive(m, vocab, text: bytes) -> None:
    """Feed ``text`` with the longest allowed token each step (a plausible tokenization)."""
    tb, i = vocab.token_bytes, 0
    while i < len(text):
        fits = [t for t in m.allowed().tolist() if t < len(tb) and tb[t] and text.startswith(tb[t], i)]
        t = max(fits, key=lambda t: len(tb[t]))
        assert m.accept_token(t), text[: i + len(tb[t])]
        i += len(tb[t])


def cell(n: int, tokenizer: str, repeat: int, with_xgrammar: bool) -> dict:
    vocab = triec.Vocabulary.load(tokenizer, vocab_size=151_936 if tokenizer == "qwen2" else None)
    _ = vocab.automaton
    raw = load_registry(f"bfcl-{n}" if n < 1998 else "bfcl")
    raw = drop(raw, sorted(refused_tools(raw, vocab)))
    tools = [(t.name, t.parameters) for t in parse_tools(raw, "bfcl", "xgrammar")]
    tag = hermes_tag(tools, "auto")
    text = json.dumps(tag, ensure_ascii=False)
    builds = []
    for _ in range(3):
        t = time.perf_counter()
        table = compile_structural_tag(tag, vocab)
        builds.append(time.perf_counter() - t)
    res: dict = {"tools": len(tools), "tokenizer": tokenizer, "V": vocab.vocab_size, "tag_bytes": len(text),
                 "triec_build_first_s": builds[0], "triec_build_s": statistics.median(builds)}  # fmt: skip
    row = np.zeros(table.words_per_row, dtype=np.int32)
    name = tools[len(tools) // 2][0]
    prefix_free = b"Let me think about which function fits."
    prefix_name = b'<tool_call>\n{"name": "'
    m = table.matcher()
    res["triec_free_start_us"] = median_us(lambda: m.fill_bitmask(row), repeat)
    drive(m, vocab, prefix_free)
    res["triec_free_us"] = median_us(lambda: m.fill_bitmask(row), repeat)
    drive(m, vocab, b" " + prefix_name)
    res["triec_name_us"] = median_us(lambda: m.fill_bitmask(row), repeat)
    assert m.phase == "slot"
    to_args = (name + '", "arguments": ').encode()
    t = time.perf_counter()
    m1 = m.fork()
    drive(m1, vocab, to_args)
    m1.fill_bitmask(row)
    res["triec_handover_first_ms"] = (time.perf_counter() - t) * 1e3
    t = time.perf_counter()
    m2 = m.fork()
    drive(m2, vocab, to_args)
    m2.fill_bitmask(row)
    res["triec_handover_repeat_ms"] = (time.perf_counter() - t) * 1e3
    if with_xgrammar:
        import xgrammar as xgr

        info = table.driver().engine.info
        compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        t = time.perf_counter()
        ctx = compiler.compile_structural_tag(text)
        res["xgrammar_compile_s"] = time.perf_counter() - t
        xm = xgr.GrammarMatcher(ctx)
        bm = xgr.allocate_token_bitmask(1, vocab.vocab_size)
        res["xgrammar_free_start_us"] = median_us(lambda: xm.fill_next_token_bitmask(bm, 0), repeat)
        assert xm.accept_string(prefix_free.decode())
        res["xgrammar_free_us"] = median_us(lambda: xm.fill_next_token_bitmask(bm, 0), repeat)
        assert xm.accept_string(" " + prefix_name.decode())
        res["xgrammar_name_us"] = median_us(lambda: xm.fill_next_token_bitmask(bm, 0), repeat)
        res["build_ratio"] = res["xgrammar_compile_s"] / res["triec_build_s"]
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tools", default="500,1998")
    ap.add_argument("--tokenizers", default="qwen2,gpt2")
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--no-xgrammar", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    rows = []
    for tok in a.tokenizers.split(","):
        for n in (int(x) for x in a.tools.split(",")):
            r = cell(n, tok, a.repeat, not a.no_xgrammar)
            rows.append(r)
            print(json.dumps(r), file=sys.stderr, flush=True)
    print("| tokenizer | tools | triec build (first in process) | xgrammar compile | ratio | free row (start / after text) triec | xgrammar "
          "| names row triec | xgrammar | handover first / repeat |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        xc = f"{r['xgrammar_compile_s']:.1f} s" if "xgrammar_compile_s" in r else "-"
        ratio = f"{r['build_ratio']:.0f}x" if "build_ratio" in r else "-"
        xf = f"{r['xgrammar_free_start_us']:.0f} / {r['xgrammar_free_us']:.0f} us" if "xgrammar_free_us" in r else "-"
        xn = f"{r['xgrammar_name_us']:.0f} us" if "xgrammar_name_us" in r else "-"
        print(f"| {r['tokenizer']} ({r['V']:,}) | {r['tools']:,} | {r['triec_build_s'] * 1e3:.0f} ms "
              f"({r['triec_build_first_s'] * 1e3:.0f} ms) | {xc} | {ratio} "
              f"| {r['triec_free_start_us']:.0f} / {r['triec_free_us']:.0f} us | {xf} | {r['triec_name_us']:.1f} us | {xn} "
              f"| {r['triec_handover_first_ms']:.1f} / {r['triec_handover_repeat_ms']:.1f} ms |")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
