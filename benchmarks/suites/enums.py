"""Large enums anywhere in a JSON schema, side by side (issue 20): triec.compile_schema against llguidance and xgrammar.

    triec bench enums [--quick]   # settings: FULL and QUICK below

Shapes (compact output, K ICD-10-CM style codes from ``triec.synthetic.sets.wide_codes``):

* ``icd``: ``{"patient": string maxLength 20, "codes": array of 1-5 items of an enum of K codes,
  "severity": enum ["low", "high"]}`` (issue 20's schema);
* ``nested``: an enum in a nested object after free text: ``{"note": string, "encounter": {"summary":
  string, "diagnosis": enum of K codes, "confidence": number}}``;
* ``two``: two large enums in one object: ``{"ticket": string maxLength 40, "primary": enum of K codes,
  "secondary": enum of K other codes (another seed)}``;
* ``items``: the enum in an array of objects: ``{"visit": string maxLength 30, "entries": 1-3 items of
  {"code": enum of K codes, "note": string maxLength 30}}`` (each item a fresh pass through the trie);
* ``anyof``: the enum in one branch of an ``anyOf`` of objects after free text: ``{"note": string,
  "finding": anyOf [{"diagnosis": enum of K codes, "certain": boolean}, {"text": string maxLength 40}]}``
  (a quarter of the documents take the other branch).

One fresh process per (shape, K, cell), each stopped at ``timeout``. Decode paths are real: documents
with seeded values, encoded by the tokenizer itself (tokens that straddle ``": "``, ``["`` and ``",``
included); the same documents in every cell.

* *build*: triec = ``compile_schema`` (cold: the first in the process, the vocabulary and its automaton
  from the disk caches; warm: the median of ``--repeat`` after it) and, apart, the engine's compile of the
  schema with its enums reduced to markers (what the first matcher pays once); peers = the engine's compile
  of the whole schema (llguidance: ``LLMatcher`` construction, lazy; a refusal is reported as such).
* *rows inside an enum*: triec = ``table.mask_writer(1).fill([m])`` where the output is inside an enum value
  (after its opening quote, up to its closing quote): the first such row of the first value ("start"),
  the later ones ("deeper"), and those of them with crossing tokens judged against the engine ("judged");
  peers = their own row at the same positions.
* *rows outside*: triec's row there (the engine's row plus the probes that admit tokens into a slot) and
  the engine's own row at the same state, timed right after it; peers = their row.
* *handovers*: ``accept_token`` of the token that enters a slot from the engine (into) and of the one that
  leaves it (out).
* *threshold*: one enum property of K codes (``{"patient": string maxLength 20, "code": enum of K,
  "severity": enum ["low", "high"]}``) served by a trie (``threshold=K``) against left in the engine (the
  engine alone on the schema), side by side in one process per (K, engine): build (triec's includes the
  engine's compile of the reduced schema) and the mean and median row over whole documents.

Asserts nothing: figures only. The machine is shared: compare within one run.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

from benchmarks import docs, results
from benchmarks.schema_peers import (
    Encoder,
    Peer,
    f_s,
    f_us,
    first_line,
    median_s,
    ratio,
    summary_us,
)
from triec.bench.runner import Out, run_cell

SHAPES = ("icd", "nested", "two", "items", "anyof")
CELLS = ("triec-llguidance", "triec-xgrammar", "llguidance", "xgrammar")
THRESHOLD_K = (4, 8, 16, 32, 64, 128, 256, 1024)
PATIENTS = ("John Smith", "Mary Jones", "Ana Ruiz", "Li Wei", "Omar Haddad", "Eva Novak", "Kofi Mensah", "Yuki Sato")
NOTES = (
    "Patient reports mild chest pain since Monday.",
    "Follow-up visit, no new symptoms.",
    "Sudden onset of headache and nausea.",
    "Referred by GP for persistent cough.",
)
SEP: dict[str, Any] = {"separators": (", ", ": "), "ensure_ascii": False}


def codes(k: int, seed: int = 0) -> list[str]:
    from triec.synthetic.sets import wide_codes

    return wide_codes(k, seed)


def make_schema(shape: str, k: int) -> dict[str, Any]:
    enum = {"type": "string", "enum": codes(k)}
    if shape == "icd":
        props = {
            "patient": {"type": "string", "maxLength": 20},
            "codes": {"type": "array", "minItems": 1, "maxItems": 5, "items": enum},
            "severity": {"type": "string", "enum": ["low", "high"]},
        }
    elif shape == "nested":
        inner = {"summary": {"type": "string"}, "diagnosis": enum, "confidence": {"type": "number"}}
        props = {
            "note": {"type": "string"},
            "encounter": {
                "type": "object",
                "properties": inner,
                "required": list(inner),
                "additionalProperties": False,
            },
        }
    elif shape == "two":
        props = {
            "ticket": {"type": "string", "maxLength": 40},
            "primary": enum,
            "secondary": {"type": "string", "enum": codes(k, seed=1)},
        }
    elif shape == "items":
        item = {"code": enum, "note": {"type": "string", "maxLength": 30}}
        props = {
            "visit": {"type": "string", "maxLength": 30},
            "entries": {
                "type": "array",
                "minItems": 1,
                "maxItems": 3,
                "items": {"type": "object", "properties": item, "required": list(item), "additionalProperties": False},
            },
        }
    elif shape == "anyof":
        coded = {"diagnosis": enum, "certain": {"type": "boolean"}}
        free = {"text": {"type": "string", "maxLength": 40}}
        props = {
            "note": {"type": "string"},
            "finding": {
                "anyOf": [
                    {"type": "object", "properties": coded, "required": list(coded), "additionalProperties": False},
                    {"type": "object", "properties": free, "required": list(free), "additionalProperties": False},
                ]
            },
        }
    elif shape == "threshold":
        props = {
            "patient": {"type": "string", "maxLength": 20},
            "code": enum,
            "severity": {"type": "string", "enum": ["low", "high"]},
        }
    else:
        raise SystemExit(f"unknown shape {shape!r}")
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def documents(shape: str, k: int, n: int, seed: int, enc: Encoder) -> list[dict[str, Any]]:
    """n documents of the shape with seeded values: token ids and the byte spans of every enum value."""
    rng = random.Random(seed)
    pool = codes(k)
    pool2 = codes(k, seed=1) if shape == "two" else pool
    out: list[dict[str, Any]] = []
    while len(out) < n:
        values: list[str] = []
        if shape == "icd":
            chosen = rng.sample(pool, min(len(pool), rng.randint(1, 5)))
            doc: dict[str, Any] = {
                "patient": rng.choice(PATIENTS),
                "codes": chosen,
                "severity": rng.choice(["low", "high"]),
            }
            values = chosen
        elif shape == "nested":
            c = rng.choice(pool)
            doc = {
                "note": rng.choice(NOTES),
                "encounter": {"summary": rng.choice(NOTES), "diagnosis": c, "confidence": round(rng.random(), 2)},
            }
            values = [c]
        elif shape == "two":
            a, b = rng.choice(pool), rng.choice(pool2)
            doc = {"ticket": rng.choice(NOTES)[:40], "primary": a, "secondary": b}
            values = [a, b]
        elif shape == "items":
            chosen = rng.sample(pool, min(len(pool), rng.randint(1, 3)))
            doc = {
                "visit": rng.choice(PATIENTS),
                "entries": [{"code": c, "note": rng.choice(NOTES)[:30]} for c in chosen],
            }
            values = chosen
        elif shape == "anyof":
            if rng.random() < 0.75:
                c = rng.choice(pool)
                doc = {"note": rng.choice(NOTES), "finding": {"diagnosis": c, "certain": rng.random() < 0.5}}
                values = [c]
            else:
                doc = {"note": rng.choice(NOTES), "finding": {"text": rng.choice(NOTES)[:40]}}
        else:  # threshold
            c = rng.choice(pool)
            doc = {"patient": rng.choice(PATIENTS), "code": c, "severity": rng.choice(["low", "high"])}
            values = [c]
        text = json.dumps(doc, **SEP)
        spans, pos = [], 0
        raw = text.encode("utf-8")
        for v in values:  # each value's literal, in document order
            lit = json.dumps(v, ensure_ascii=False).encode("utf-8")
            i = raw.index(lit, pos)
            spans.append((i + 1, i + len(lit) - 1))  # inside: after the opening quote .. before the closing one
            pos = i + len(lit)
        ids = enc.ids(text)
        if ids is not None:
            out.append({"ids": ids, "spans": spans, "text": text})
    return out


def where(done: int, spans: list[tuple[int, int]]) -> int:
    """The index of the enum value the output is inside after ``done`` bytes, or -1."""
    for j, (a, b) in enumerate(spans):
        if a <= done <= b:
            return j
    return -1


# ---------------------------------------------------------------- triec worker


def triec_cell(job: dict[str, Any], out: Out) -> None:
    import numpy as np

    import triec
    from triec.schema.compile import compile_schema

    engine = job["cell"].split("-", 1)[1]
    vocab = triec.Vocabulary.load(job["tokenizer"], vocab_size=job["vocab_size"])
    schema = make_schema(job["shape"], job["k"])
    enc = Encoder(vocab, job["tokenizer"])
    docs = documents(job["shape"], job["k"], job["docs"], job["seed"], enc)
    out.put(phase="build")
    t0 = time.perf_counter()
    table = compile_schema(schema, vocab, engine=engine, threshold=job["k"])  # every K-value enum a slot, as measured
    cold = time.perf_counter() - t0
    warm = []
    for _ in range(job["repeat"]):
        t0 = time.perf_counter()
        table = compile_schema(schema, vocab, engine=engine, threshold=job["k"])
        warm.append(time.perf_counter() - t0)
    drv = table.driver()
    out.put(
        phase="engine compile",
        build_cold_s=cold,
        build_warm_s=median_s(warm),
        build_warm_all_s=warm,
        slots=table.info.get("slots"),
        engine_enums=table.info.get("engine_enums"),
        states=table.num_states,
    )
    grammar_s = []
    for _ in range(max(1, job["repeat"] // 2)):
        drv.clear_cache()
        table.clear_caches()
        t0 = time.perf_counter()
        table.matcher()
        grammar_s.append(time.perf_counter() - t0)
    out.put(phase="rows", engine_compile_s=median_s(grammar_s))

    writer = table.mask_writer(1)
    spare = np.zeros(table.words_per_row, dtype=np.int32)
    passes = []
    for _ in range(2):  # the first pass warms the tables and the engine's lazy state; the second is reported
        r: dict[str, list[float]] = {
            k: [] for k in ("start", "deeper", "judged", "outside", "outside_engine", "into", "out", "other_accept")
        }
        for d in docs:
            m = table.matcher()
            done, seen_first = 0, False
            for t in d["ids"] + [vocab.eos_token_ids[0]]:
                inside = where(done, d["spans"])
                static = m.static_source() is not None
                phase = m.phase
                t1 = time.perf_counter()
                writer.fill([m])
                t2 = time.perf_counter()
                if phase in ("slot", "tail"):
                    if inside == 0 and not seen_first:
                        r["start"].append(t2 - t1)
                        seen_first = True
                    else:
                        r["deeper"].append(t2 - t1)
                    if not static:
                        r["judged"].append(t2 - t1)
                elif phase == "engine":
                    r["outside"].append(t2 - t1)
                    t3 = time.perf_counter()
                    drv.fill(m.st.m, spare)
                    r["outside_engine"].append(time.perf_counter() - t3)
                t4 = time.perf_counter()
                if not m.accept_token(t):
                    raise RuntimeError(f"triec refused token {t} in {d['text']!r} after {done} bytes")
                t5 = time.perf_counter()
                after = m.phase
                if phase == "engine" and after in ("slot", "tail"):
                    r["into"].append(t5 - t4)
                elif phase in ("slot", "tail") and after == "engine":
                    r["out"].append(t5 - t4)
                else:
                    r["other_accept"].append(t5 - t4)
                if t < vocab.num_tokens:
                    done += len(vocab.token_bytes[t])
            if not m.is_terminated():
                raise RuntimeError("the document did not end the output")
        passes.append(r)
    out.put(
        phase="done",
        status="ok",
        docs=len(docs),
        rows_first_pass={k: summary_us(v) for k, v in passes[0].items()},
        **{f"rows_{k}": summary_us(v) for k, v in passes[1].items()},
    )


# ---------------------------------------------------------------- peer worker


def peer_cell(job: dict[str, Any], out: Out) -> None:
    import triec

    engine = job["cell"]
    vocab = triec.Vocabulary.load(job["tokenizer"], vocab_size=job["vocab_size"])
    schema = make_schema(job["shape"], job["k"])
    enc = Encoder(vocab, job["tokenizer"])
    docs = documents(job["shape"], job["k"], job["docs"], job["seed"], enc)
    peer = Peer(engine, vocab)
    out.put(phase="compile", engine_setup_s=peer.setup_s)
    times: list[float] = []
    try:
        while len(times) < job["repeat"] and sum(times) < job["compile_budget_s"]:
            t0 = time.perf_counter()
            compiled = peer.compile_schema(schema)
            times.append(time.perf_counter() - t0)
    except Exception as e:  # noqa: BLE001
        out.put(status="refused", error="refused: " + first_line(e))
        return
    out.put(phase="rows", compile_s=median_s(times), compile_all_s=times, memory_size_bytes=peer.memory_bytes(compiled))
    start = peer.start(compiled)
    row = peer.new_row()
    passes = []
    for _ in range(2):
        r: dict[str, list[float]] = {"start": [], "deeper": [], "outside": []}
        for d in docs:
            m = peer.fork(start)
            done, seen_first = 0, False
            for t in d["ids"] + [vocab.eos_token_ids[0]]:
                inside = where(done, d["spans"])
                t1 = time.perf_counter()
                peer.fill(m, row)
                dt = time.perf_counter() - t1
                if inside < 0:
                    r["outside"].append(dt)
                elif inside == 0 and not seen_first:
                    r["start"].append(dt)
                    seen_first = True
                else:
                    r["deeper"].append(dt)
                if t in vocab.eos_token_ids:
                    break
                if not peer.accept(m, t):
                    raise RuntimeError(f"{engine} refused token {t} in {d['text']!r} after {done} bytes")
                done += len(vocab.token_bytes[t])
        passes.append(r)
    out.put(
        phase="done",
        status="ok",
        docs=len(docs),
        rows_first_pass={k: summary_us(v) for k, v in passes[0].items()},
        **{f"rows_{k}": summary_us(v) for k, v in passes[1].items()},
    )


# ---------------------------------------------------------------- threshold worker


def threshold_cell(job: dict[str, Any], out: Out) -> None:
    """One enum property of K codes, served by a trie vs left in the engine, interleaved in one process."""
    import numpy as np

    import triec
    from triec.schema.compile import compile_schema
    from triec.schema.grammar import driver

    engine, k = job["engine"], job["k"]
    vocab = triec.Vocabulary.load(job["tokenizer"], vocab_size=job["vocab_size"])
    schema = make_schema("threshold", k)
    enc = Encoder(vocab, job["tokenizer"])
    docs = documents("threshold", k, job["docs"], job["seed"], enc)
    drv = driver(engine, vocab)
    res: dict[str, Any] = {"k": k, "engine": engine}
    build_trie, build_engine = [], []
    table = compile_schema(schema, vocab, engine=engine, threshold=k)  # warm-up: per-process caches
    for _ in range(job["repeat"]):
        drv.clear_cache()
        t0 = time.perf_counter()
        table = compile_schema(schema, vocab, engine=engine, threshold=k)
        table.matcher()  # the engine's compile of the reduced schema
        build_trie.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        whole = drv.compile(schema)
        build_engine.append(time.perf_counter() - t0)
    assert table.info["slots"], table.info
    res.update(build_trie_s=median_s(build_trie), build_engine_s=median_s(build_engine))
    writer = table.mask_writer(1)
    row = np.zeros(table.words_per_row, dtype=np.int32)
    for rep in range(2):
        tr: list[float] = []
        en: list[float] = []
        tr_in: list[float] = []
        en_in: list[float] = []
        for d in docs:  # interleaved: the trie table's document, then the engine's, same tokens
            m = table.matcher()
            done = 0
            for t in d["ids"] + [vocab.eos_token_ids[0]]:
                inside = where(done, d["spans"]) >= 0
                t1 = time.perf_counter()
                writer.fill([m])
                dt = time.perf_counter() - t1
                tr.append(dt)
                if inside:
                    tr_in.append(dt)
                if not m.accept_token(t):
                    raise RuntimeError(f"triec refused {t}")
                if t < vocab.num_tokens:
                    done += len(vocab.token_bytes[t])
            e = drv.start(whole)
            done = 0
            for t in d["ids"] + [vocab.eos_token_ids[0]]:
                inside = where(done, d["spans"]) >= 0
                t1 = time.perf_counter()
                drv.fill(e, row)
                dt = time.perf_counter() - t1
                en.append(dt)
                if inside:
                    en_in.append(dt)
                if not drv.accept(e, t):
                    raise RuntimeError(f"{engine} refused {t}")
                if t < vocab.num_tokens:
                    done += len(vocab.token_bytes[t])
        if rep == 1:
            res.update(
                rows_trie=summary_us(tr),
                rows_engine=summary_us(en),
                rows_trie_inside=summary_us(tr_in),
                rows_engine_inside=summary_us(en_in),
                rows_per_doc=len(tr) / max(1, len(docs)),
            )
    out.put(status="ok", **res)


def worker(job: dict[str, Any], out: Out) -> None:
    try:
        if job["cell"] == "threshold":
            threshold_cell(job, out)
        elif job["cell"].startswith("triec-"):
            triec_cell(job, out)
        else:
            peer_cell(job, out)
    except Exception as e:  # noqa: BLE001
        out.put(status="error", error=f"{type(e).__name__}: {first_line(e, 300)}")


# ---------------------------------------------------------------- tables


def _m(c: dict[str, Any], key: str, stat: str = "median") -> float | None:
    s = c.get(key)
    return None if not s or not s.get("n") else s[stat]


def status_text(c: dict[str, Any]) -> str:
    """A cell's refusal, timeout or error, safe inside a markdown cell."""
    return (c.get("error") or c.get("status", "")).replace("|", "\\|") if c else ""


def tables_text(res: dict[str, Any]) -> str:
    cells = res["cells"]
    out = []
    keys = [(s, k) for s in res["settings"]["shapes"] for k in res["settings"]["k"]]

    def get(s: str, k: int, c: str) -> dict[str, Any]:
        found: dict[str, Any] = cells.get(f"{s}|{k}|{c}", {})
        return found

    out.append(
        "Build (triec: compile_schema warm, and with the engine's compile of the reduced schema; ratio = peer "
        "compile / triec warm build + engine compile, same engine)\n"
    )
    out.append(
        "| shape | K | triec+llg cold | warm | + engine | llguidance | ratio | triec+xgr cold | warm | + engine "
        "| xgrammar | ratio |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s, k in keys:
        row = [s, f"{k:,}"]
        for e in ("llguidance", "xgrammar"):
            t, p = get(s, k, f"triec-{e}"), get(s, k, e)
            total = (t.get("build_warm_s") or 0) + (t.get("engine_compile_s") or 0) if t.get("build_warm_s") else None
            row += [
                f_s(t.get("build_cold_s")) or status_text(t),
                f_s(t.get("build_warm_s")),
                f_s(total),
                f_s(p.get("compile_s")) or status_text(p),
                ratio(p.get("compile_s"), total),
            ]
        out.append("| " + " | ".join(row) + " |")
    out.append(
        "\nMask rows (medians; inside an enum: the first row of the first value, deeper rows, and triec's "
        "rows with judged crossing tokens; outside: triec's row = engine + probes, and the engine's own row "
        "at the same state; ratio = peer / triec, same engine)\n"
    )
    out.append(
        "| shape | K | engine | triec start | peer start | ratio | triec deeper (p99) | peer deeper | ratio "
        "| triec judged | triec outside | engine alone | peer outside | into | out |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s, k in keys:
        for e in ("llguidance", "xgrammar"):
            t, p = get(s, k, f"triec-{e}"), get(s, k, e)
            if not t:
                continue
            if t.get("status") != "ok":
                out.append(f"| {s} | {k:,} | {e} | {status_text(t)} |" + " |" * 11)
                continue
            ps = status_text(p) if p and p.get("status") != "ok" else ""
            row = [
                s,
                f"{k:,}",
                e,
                f_us(_m(t, "rows_start")),
                f_us(_m(p, "rows_start")) or ps,
                ratio(_m(p, "rows_start"), _m(t, "rows_start")),
                f"{f_us(_m(t, 'rows_deeper'))} ({f_us(_m(t, 'rows_deeper', 'p99'))})",
                f_us(_m(p, "rows_deeper")),
                ratio(_m(p, "rows_deeper"), _m(t, "rows_deeper")),
                f_us(_m(t, "rows_judged")),
                f_us(_m(t, "rows_outside")),
                f_us(_m(t, "rows_outside_engine")),
                f_us(_m(p, "rows_outside")),
                f_us(_m(t, "rows_into")),
                f_us(_m(t, "rows_out")),
            ]
            out.append("| " + " | ".join(row) + " |")
    th = res.get("threshold") or {}
    if th:
        out.append(
            "\nEnum threshold: one enum property of K codes served by a trie (threshold = K) vs left in the "
            "engine, side by side per (K, engine); build = compile (triec: compile_schema + the engine's compile "
            "of the reduced schema); rows over whole documents (mean / median) and inside the enum (median)\n"
        )
        out.append(
            "| K | engine | build trie | build engine | rows trie mean / median | rows engine mean / median "
            "| inside trie | inside engine | trie / engine (mean row) |"
        )
        out.append("|---|---|---|---|---|---|---|---|---|")
        for key in sorted(th, key=lambda x: (th[x].get("engine", ""), th[x].get("k", 0))):
            c = th[key]
            if c.get("status") != "ok":
                out.append(f"| {c.get('k', '')} | {c.get('engine', '')} | {status_text(c)} |" + " |" * 6)
                continue
            out.append(
                "| "
                + " | ".join(
                    [
                        f"{c['k']:,}",
                        c["engine"],
                        f_s(c["build_trie_s"]),
                        f_s(c["build_engine_s"]),
                        f"{f_us(_m(c, 'rows_trie', 'mean'))} / {f_us(_m(c, 'rows_trie'))}",
                        f"{f_us(_m(c, 'rows_engine', 'mean'))} / {f_us(_m(c, 'rows_engine'))}",
                        f_us(_m(c, "rows_trie_inside")),
                        f_us(_m(c, "rows_engine_inside")),
                        ratio(_m(c, "rows_trie", "mean"), _m(c, "rows_engine", "mean")),
                    ]
                )
                + " |"
            )
    return "\n".join(out)


# ---------------------------------------------------------------- main


# ---------------------------------------------------------------- the suite

FULL: dict[str, Any] = {
    "shapes": ["icd", "nested"],
    "k": [1_000, 10_000],
    "cells": list(CELLS),
    "tokenizer": "qwen2",
    "vocab_size": 151_936,
    "docs": 30,
    "repeat": 5,
    "compile_budget_s": 30.0,
    "threshold_k": [16, 256],
    "threshold_docs": 20,
    "threshold_engines": ["llguidance", "xgrammar"],
    "seed": 0,
    "timeout": 300.0,
    "max_rss_gb": 8.0,
}
QUICK: dict[str, Any] = {
    **FULL,
    "shapes": ["icd"],
    "k": [200],
    "docs": 3,
    "repeat": 2,
    "threshold_docs": 2,
    "threshold_k": [64],
    "timeout": 300.0,
}
TABLES = {"Build": "build", "Mask rows": "rows", "Enum threshold": "threshold"}
"""Each table by the start of its caption (a run without threshold cells, or with only them, has fewer)."""


def unavailable() -> str | None:
    from triec.engines import is_installed

    missing = [e for e in ("llguidance", "xgrammar") if not is_installed(e)]
    return f"needs {' and '.join(missing)} (pip install 'triec[bench]')" if missing else None


def run(quick: bool) -> dict[str, Any]:
    """Every (shape, K, cell) in its own process, then the threshold cells (one per K and engine)."""
    import triec

    a = QUICK if quick else FULL
    vocab = triec.Vocabulary.load(a["tokenizer"], vocab_size=a["vocab_size"])
    _ = vocab.automaton  # disk caches warm before any cell
    result = results.new("enums", {**a, "quick": quick})
    base = {
        "tokenizer": a["tokenizer"],
        "vocab_size": a["vocab_size"],
        "repeat": a["repeat"],
        "seed": a["seed"],
        "compile_budget_s": a["compile_budget_s"],
    }
    limits = {"timeout": a["timeout"], "max_rss": int(a["max_rss_gb"] * 2**30)}
    for s in a["shapes"]:
        for k in a["k"]:
            for c in a["cells"]:
                job = {**base, "cell": c, "shape": s, "k": k, "docs": a["docs"]}
                cell = run_cell("benchmarks.suites.enums:worker", job, **limits)
                result["cells"].append({"shape": s, "k": k, "cell": c, **cell})
    for e in a["threshold_engines"]:
        for k in a["threshold_k"]:
            job = {**base, "cell": "threshold", "engine": e, "k": k, "docs": a["threshold_docs"]}
            cell = run_cell("benchmarks.suites.enums:worker", job, **limits)
            result["cells"].append({"shape": "threshold", "k": k, "cell": "threshold", "engine": e, **cell})
    return result


def as_keyed(result: dict[str, Any]) -> dict[str, Any]:
    """The suite's cells keyed as :func:`tables_text` reads them (``shape|K|cell``, threshold ``engine|K``)."""
    cells = [c for c in result["cells"] if c["cell"] != "threshold"]
    threshold = [c for c in result["cells"] if c["cell"] == "threshold"]
    settings = {
        **result["settings"],
        "shapes": list(dict.fromkeys(c["shape"] for c in cells)),
        "k": list(dict.fromkeys(c["k"] for c in cells)),
    }
    return {
        "settings": settings,
        "cells": {f"{c['shape']}|{c['k']}|{c['cell']}": c for c in cells},
        "threshold": {f"{c['engine']}|{c['k']}": c for c in threshold},
    }


def tables(result: dict[str, Any]) -> dict[str, str]:
    return docs.split_tables(tables_text(as_keyed(result)), TABLES)
