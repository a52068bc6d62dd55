"""Triggered constraints: think-then-answer (``triec.runtime.trigger``) and ``tool_choice="auto"``'s triggered tags.

* ``think``: :class:`~triec.runtime.trigger.Triggered` over K synthetic tool names after ``"Answer:"``: its build
  (one pass over the vocabulary), a row and an accept + rollback in the free phase, a row in the answer;
* ``auto``: the triggered hermes tag vLLM sends for ``tool_choice="auto"`` with strict tools (the first N of
  BFCL's 1,998 functions, tools either engine refuses alone left out), ``compile_structural_tag`` against
  xgrammar's ``compile_structural_tag`` of the whole tag on one thread (what vLLM's backend does); rows in the
  free text at the start and after a sentence, in the names after ``<tool_call>\n{"name": "``, and the
  handover into a tool's arguments (its grammar compiled at its first call, then cached).

Each cell is one process; medians of repeated calls. llguidance does not read xgrammar's structural tags, so it
has no cell here.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from benchmarks import docs, results
from benchmarks.schema_peers import bfcl_unavailable, drop, load_registry, refused_tools
from triec.bench.runner import Out, run_cell

if TYPE_CHECKING:
    from triec.engines.xgrammar import XGrammarDriver

FULL: dict[str, Any] = {"think_k": [1_998], "tools": [500], "tokenizers": ["qwen2", "gpt2"], "repeat": 200}
QUICK: dict[str, Any] = {"think_k": [100], "tools": [20], "tokenizers": ["qwen2"], "repeat": 5}


def unavailable() -> str | None:
    from triec.engines import is_installed

    missing = [e for e in ("llguidance", "xgrammar") if not is_installed(e)]
    return f"needs {' and '.join(missing)} (pip install 'triec[bench]')" if missing else bfcl_unavailable()


def median_us(fn: Any, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples) * 1e6


def think_cell(job: dict[str, Any], out: Out) -> None:
    import triec
    import triec.synthetic.sets
    from triec.runtime.trigger import Triggered

    repeat = job["repeat"]
    vocab = triec.Vocabulary.load(job["tokenizer"], vocab_size=151_936 if job["tokenizer"] == "qwen2" else None)
    table = triec.compile(triec.synthetic.sets.tool_names(job["k"]), vocab)
    t = time.perf_counter()
    trig = Triggered(table, vocab, "Answer:")
    build = time.perf_counter() - t
    ids = {b: i for i, b in enumerate(vocab.token_bytes) if b}
    row = np.zeros(table.words_per_row, dtype=np.int32)
    m = trig.matcher()
    free_row = median_us(lambda: m.fill_bitmask(row), repeat)
    word = ids[b" think"]

    def accept_rollback() -> None:
        m.accept_token(word)
        m.rollback(1)

    free_accept = median_us(accept_rollback, repeat)
    for piece in (b"Answer", b":"):
        m.accept_token(ids[piece])
    answer_row = median_us(lambda: m.fill_bitmask(row), repeat)
    out.put(
        status="ok",
        phase="done",
        build_s=build,
        free_states=int(trig.automaton.num_states),
        free_row_us=free_row,
        free_accept_us=free_accept,
        answer_row_us=answer_row,
        vocab_size=vocab.vocab_size,
    )


def drive(m: Any, vocab: Any, text: bytes) -> None:
    """Feed ``text`` with the longest allowed token each step (a plausible tokenization)."""
    tb, i = vocab.token_bytes, 0
    while i < len(text):
        fits = [t for t in m.allowed().tolist() if t < len(tb) and tb[t] and text.startswith(tb[t], i)]
        t = max(fits, key=lambda t: len(tb[t]))
        assert m.accept_token(t), text[: i + len(tb[t])]
        i += len(tb[t])


def auto_cell(job: dict[str, Any], out: Out) -> None:
    import xgrammar as xgr

    import triec
    from triec.schema.compile import compile_structural_tag
    from triec.schema.tags import hermes_tag
    from triec.schema.tools import parse_tools

    n, tokenizer, repeat = job["tools"], job["tokenizer"], job["repeat"]
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
    res: dict[str, Any] = {
        "tools": len(tools),
        "tokenizer": tokenizer,
        "V": vocab.vocab_size,
        "tag_bytes": len(text),
        "triec_build_first_s": builds[0],
        "triec_build_s": statistics.median(builds),
    }
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
    out.put(phase="xgrammar", **res)
    # xgrammar compiles the same tag on one thread (what vLLM's backend does)

    info = cast("XGrammarDriver", table.driver()).engine.info  # compile_structural_tag's engine: xgrammar
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
    out.put(status="ok", phase="done", **res)


def run(quick: bool) -> dict[str, Any]:
    size = QUICK if quick else FULL
    result = results.new("trigger", {"quick": quick, **size})
    for tok in size["tokenizers"]:
        for k in size["think_k"]:
            job = {"tokenizer": tok, "k": k, "repeat": size["repeat"] * 10}
            cell = run_cell("benchmarks.suites.trigger:think_cell", job, timeout=900.0)
            result["cells"].append({"kind": "think", "tokenizer": tok, "k": k, **cell})
        for n in size["tools"]:
            job = {"tokenizer": tok, "tools": n, "repeat": size["repeat"]}
            cell = run_cell("benchmarks.suites.trigger:auto_cell", job, timeout=1800.0)
            result["cells"].append({"kind": "auto", "tokenizer": tok, "n": n, **cell})
    return result


def _us(x: float | None) -> str:
    return "-" if x is None else f"{x:,.1f} µs"


def tables(result: dict[str, Any]) -> dict[str, str]:
    think, auto = [], []
    for c in result["cells"]:
        note = docs.status_note(c)
        if c["kind"] == "think":
            think.append(
                [
                    c["tokenizer"],
                    f"{c['k']:,}",
                    note or docs.seconds(c.get("build_s")),
                    _us(c.get("free_row_us")),
                    _us(c.get("free_accept_us")),
                    _us(c.get("answer_row_us")),
                ]
            )
            continue
        if note:
            auto.append([c["tokenizer"], f"{c['n']:,}", note, *[""] * 6])
            continue
        auto.append(
            [
                f"{c['tokenizer']} ({c['V']:,})",
                f"{c['tools']:,}",
                f"{docs.seconds(c['triec_build_s'])} ({docs.seconds(c['triec_build_first_s'])})",
                docs.seconds(c.get("xgrammar_compile_s")),
                docs.ratio(c.get("xgrammar_compile_s"), c["triec_build_s"]),
                f"{_us(c['triec_free_start_us'])} / {_us(c['triec_free_us'])}",
                f"{_us(c.get('xgrammar_free_start_us'))} / {_us(c.get('xgrammar_free_us'))}",
                f"{_us(c['triec_name_us'])} / {_us(c.get('xgrammar_name_us'))}",
                f"{c['triec_handover_first_ms']:.1f} / {c['triec_handover_repeat_ms']:.1f} ms",
            ]
        )
    return {
        "think": docs.markdown(["tokenizer", "K", "build", "free row", "free accept + rollback", "answer row"], think),
        "auto": docs.markdown(
            [
                "tokenizer",
                "tools",
                "triec build (first in process)",
                "xgrammar compile",
                "ratio",
                "free row triec (start / after text)",
                "xgrammar",
                "names row triec / xgrammar",
                "handover first / repeat",
            ],
            auto,
        ),
    }
