"""Tool registries side by side (issue 18): triec.compile_tools against llguidance and xgrammar on the whole format.

    triec bench tools [--quick]   # settings: FULL and QUICK below

One fresh process per (registry, cell), run one after the other, each stopped at ``timeout`` seconds
or ``max_rss_gb`` of resident memory (reported as such, with the phase it was in). Registries:
``rich-K`` / ``flat-K`` = ``triec.synthetic.registries.make_registry(K, 0, profile=...)`` (every tool its
own argument schema), ``bfcl`` = fixtures/registries/bfcl-1998.json.zst (1,998 public functions),
``bfcl-N`` its first N. Cells:

* ``triec-llguidance`` / ``triec-xgrammar``: ``compile_tools(tools, vocab, format=F, engine=E)``.
  *build cold* = the first compile in the process (vocabulary loaded, its automaton on disk: the
  disk caches warm, nothing of the registry in memory); *build warm* = the median of ``--repeat``
  compiles after it. *Name rows*: ``table.mask_writer(1).fill([m])`` at every step of real decode
  paths (the tokenizer's own encoding of ``[{"name": "<name>", "parameters": {``) while the output is
  inside the name (after its opening quote, before its closing one); two passes over the paths,
  the second reported. *First handover*: for ``--first`` tools never used before, the time from the
  end of the last precomputed row (the tail's last offsets need the tool's grammar to judge the
  tokens that run into the arguments: the lazy compile happens there) to the first argument row
  filled: that row's fill, the token that ends the tail, and everything between. *Cached*: the same
  tools again (their grammars compiled). *Argument rows*: ``--arg-steps`` rows after the handover,
  each token drawn (seeded) from the allowed set. *Memory*: resident growth over the first handovers
  per compiled grammar, and (xgrammar) ``CompiledGrammar.memory_size_bytes`` of every cached grammar.
* ``llguidance`` / ``xgrammar``: the whole format compiled as one JSON Schema (vLLM's
  ``tool_choice="required"`` schema for ``vllm``: ``triec.schema.tools.whole_format``, the oracle triec's
  tables are tested against); ``llguidance-lark``: the format as lark with one ``%json`` per tool, each
  tool's parameters strictified (``additionalProperties: false`` where absent: xgrammar's reading; the
  workaround where llguidance refuses the one schema, and the only form it compiles near 2,000 tools). *compile* = the compile call (llguidance:
  ``LLMatcher`` construction, lazy). *Name field at its start* (after ``[{"name": "``) as
  /work/proto/registry/RESULTS.md measured it: *cold* = the first fill after a fresh compile (median of
  up to 20 compiles, llguidance only: it builds lexer states lazily and shares them between copies),
  *warm* = fills on fresh forks of the same state. *Name rows* along the same decode paths as triec,
  one fork of the start per path. *First argument row* of each of the first ``--first`` tools (the
  peers' counterpart of a first handover). *Argument rows* as for triec, from the engine's own rows.

Asserts nothing: figures only. The machine is shared: compare within one run.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any, cast

from benchmarks import docs, results
from benchmarks.schema_peers import (
    Encoder,
    Peer,
    bfcl_unavailable,
    drop,
    f_s,
    f_us,
    first_line,
    load_registry,
    median_s,
    ratio,
    refused_tools,
    row_ids,
    rss_bytes,
    summary_us,
)
from triec.bench.runner import Out, run_cell

REGISTRIES = ("rich-1000", "rich-2000", "flat-2000", "bfcl", "rich-10000", "flat-10000")
CELLS = ("triec-llguidance", "triec-xgrammar", "llguidance", "llguidance-lark", "xgrammar")


# ---------------------------------------------------------------- paths


def decode_paths(tools: list[Any], fmt: Any, enc: Encoder, count: int, seed: int) -> tuple[list[dict[str, Any]], int]:
    """Real decode paths: the tokenizer's encoding of the call up to its arguments' first byte, for sampled tools."""
    from triec.encoding import json_string_literal

    idx = random.Random(seed).sample(range(len(tools)), min(count, len(tools)))
    out, skipped = [], 0
    for i in idx:
        lit = json_string_literal(tools[i].name)
        head = fmt.prefix + lit  # the name field: from its opening quote to its closing one
        ids = enc.ids(head + fmt.tail + "{")
        if ids is None:
            skipped += 1
            continue
        out.append(
            {
                "tool": i,
                "name": tools[i].name,
                "ids": ids,
                "name_from": len(fmt.prefix.encode()) + 1,
                "name_to": len(head.encode()) - 1,
            }
        )
    return out, skipped


# ---------------------------------------------------------------- triec worker


def triec_cell(job: dict[str, Any], out: Out) -> None:
    import numpy as np

    import triec
    from triec.compiler.entry import CompileStats
    from triec.schema.compile import compile_tools
    from triec.schema.tools import parse_tools, tool_format

    engine = job["cell"].split("-", 1)[1]
    t0 = time.perf_counter()
    vocab = triec.Vocabulary.load(job["tokenizer"], vocab_size=job["vocab_size"])
    out.put(phase="registry", vocab_load_s=time.perf_counter() - t0)
    raw = drop(load_registry(job["registry"]), job.get("drop", []))
    enc = Encoder(vocab, job["tokenizer"])
    fmt = tool_format(job["format"])
    out.put(phase="build", k=len(raw))

    stats = CompileStats()
    t0 = time.perf_counter()
    table = compile_tools(raw, vocab, format=fmt.name, engine=engine, stats=stats)
    cold = time.perf_counter() - t0
    cold_phases = dict(stats.phases)
    warm, phases = [], []
    for _ in range(job["repeat"]):
        stats = CompileStats()
        t0 = time.perf_counter()
        table = compile_tools(raw, vocab, format=fmt.name, engine=engine, stats=stats)
        warm.append(time.perf_counter() - t0)
        phases.append(dict(stats.phases))
    mid = sorted(range(len(warm)), key=warm.__getitem__)[len(warm) // 2]
    out.put(
        phase="driver",
        build_cold_s=cold,
        build_cold_phases=cold_phases,
        build_warm_s=median_s(warm),
        build_warm_all_s=warm,
        build_warm_phases=phases[mid],
        states=table.num_states,
        grammars=len(table.grammars),
    )
    t0 = time.perf_counter()
    drv = table.driver()  # the engine's tokenizer setup: once per process and vocabulary, not per registry
    out.put(phase="paths", engine_setup_s=time.perf_counter() - t0)

    tools = parse_tools(raw, "registry", engine)
    paths, skipped = decode_paths(tools, fmt, enc, job["paths"], job["seed"])
    eos = set(vocab.eos_token_ids)
    writer = table.mask_writer(1)

    # -------- name rows: two passes, the second reported (the first includes the table's first rows)
    t0 = time.perf_counter()
    writer.fill([table.matcher()])
    first_row_s = time.perf_counter() - t0
    passes: list[list[float]] = []
    starts: list[float] = []
    for _ in range(2):
        xs: list[float] = []
        starts = []
        for p in paths:
            m = table.matcher()
            done = 0
            for t in p["ids"]:
                if m.phase != "slot":
                    break
                inside = p["name_from"] <= done <= p["name_to"]
                t1 = time.perf_counter()
                writer.fill([m])
                t2 = time.perf_counter()
                if inside:
                    xs.append(t2 - t1)
                    if len(starts) < len(paths) and done == p["name_from"]:
                        starts.append(t2 - t1)
                if not m.accept_token(t):
                    raise RuntimeError(f"triec refused token {t} on the path of {p['name']!r}")
                done += len(vocab.token_bytes[t])
        passes.append(xs)
    out.put(
        phase="first handovers",
        first_row_s=first_row_s,
        name_rows_first_pass=summary_us(passes[0]),
        name_rows=summary_us(passes[1]),
        name_start_rows=summary_us(starts),
        paths=len(paths),
        paths_skipped=skipped,
    )

    # -------- handovers into tools never used before, then the same tools cached
    compile_s = drv.compile_seconds  # the driver appends each compile's time (engines.base.EngineDriver)
    compile_s.clear()
    rng = random.Random(job["seed"] + 1)
    value_grammar = cast("np.ndarray", table.slots[0].value_grammar)  # a tool table: each name's arguments' grammar
    chosen = [p for p in paths if not table.is_compiled(int(value_grammar[_value_of(table, p)]))]
    chosen = chosen[: job["first"]]

    def walk(p: dict[str, Any], steps: int) -> dict[str, Any]:
        m = table.matcher()
        res: dict[str, Any] = {"args": [], "compiles": 0, "compile_s": 0.0}
        before = (drv.compiles, len(compile_s))
        mark = time.perf_counter()  # end of the last precomputed row's step
        ids = list(p["ids"])
        i, handed = 0, False
        row = writer.buffer[0]
        while True:
            if handed and len(res["args"]) >= steps:
                break
            t1 = time.perf_counter()
            static = m.static_source() is not None
            writer.fill([m])
            t2 = time.perf_counter()
            if m.phase == "engine":
                if not handed:
                    res["handover"] = t2 - mark
                    handed = True
                else:
                    res["args"].append(t2 - t1)
            if i < len(ids):
                t = ids[i]
                i += 1
            else:
                allowed = [x for x in row_ids(row).tolist() if x not in eos]
                if not allowed or m.is_terminated():
                    break
                t = rng.choice(allowed)
            if not m.accept_token(t):
                raise RuntimeError(f"triec refused token {t} after the path of {p['name']!r}")
            t3 = time.perf_counter()
            if static and not handed:
                mark = t3
        res["compiles"] = drv.compiles - before[0]
        res["compile_s"] = sum(compile_s[before[1] :])
        return res

    rss0 = rss_bytes()
    firsts = [walk(p, job["arg_steps"]) for p in chosen]
    rss1 = rss_bytes()
    grammars_compiled = sum(r["compiles"] for r in firsts)
    xg_mem = None
    if engine == "xgrammar":
        sizes = [int(g.memory_size_bytes) for g in drv.compiled_grammars()]
        xg_mem = {
            "grammars": len(sizes),
            "median_bytes": float(np.median(sizes)) if sizes else None,
            "mean_bytes": float(np.mean(sizes)) if sizes else None,
            "total_bytes": int(sum(sizes)),
        }
    row_cache = table.row_cache
    out.put(
        phase="cached handovers",
        first_handover=summary_us([r["handover"] for r in firsts if "handover" in r]),
        first_handover_compile=summary_us([r["compile_s"] for r in firsts if r["compiles"]]),
        first_handover_rest=summary_us([r["handover"] - r["compile_s"] for r in firsts if "handover" in r]),
        first_handover_tools=len(firsts),
        grammars_compiled=grammars_compiled,
        args_rows_first=summary_us([x for r in firsts for x in r["args"]]),
        memory={
            "rss_growth_bytes": rss1 - rss0,
            "per_grammar_bytes": (rss1 - rss0) / max(1, grammars_compiled),
            "cache_bound_grammars": drv.cache_size,
            "xgrammar_memory_size": xg_mem,
            "row_cache_entries": len(row_cache),
            "row_cache_bytes": int(sum(getattr(v, "nbytes", 0) for v in row_cache.values())),
            "row_cache_bound": table.row_cache_size,
            "templates": table.cached_templates,
            "row_bytes": table.words_per_row * 4,
        },
    )
    cached = [walk(p, job["arg_steps"]) for p in chosen]
    out.put(
        phase="done",
        status="ok",
        cached_handover=summary_us([r["handover"] for r in cached if "handover" in r]),
        cached_compiles=sum(r["compiles"] for r in cached),
        args_rows=summary_us([x for r in cached for x in r["args"]]),
    )


def _value_of(table: Any, p: dict[str, Any]) -> int:
    """The value index of a path's tool in the names slot."""
    import bisect

    from triec.encoding import json_string_literal

    keys = table.slots[0].keys
    key = table.prefix + json_string_literal(p["name"]).encode("utf-8")
    i = bisect.bisect_left(keys, key)
    assert keys[i] == key
    return i


# ---------------------------------------------------------------- peer worker


def peer_cell(job: dict[str, Any], out: Out) -> None:
    import triec
    from triec.schema.tools import parse_tools, tool_format, whole_format

    name = job["cell"]
    engine = "llguidance" if name.startswith("llguidance") else "xgrammar"
    vocab = triec.Vocabulary.load(job["tokenizer"], vocab_size=job["vocab_size"])
    raw = drop(load_registry(job["registry"]), job.get("drop", []))
    enc = Encoder(vocab, job["tokenizer"])
    fmt = tool_format(job["format"])
    if fmt.name != "vllm":
        out.put(status="n/a", error="peers are measured on the vllm format only")
        return
    peer = Peer(engine, vocab)
    tools = parse_tools(raw, "registry", engine)
    paths, skipped = decode_paths(tools, fmt, enc, job["paths"], job["seed"])
    out.put(phase="compile", k=len(tools), engine_setup_s=peer.setup_s, paths=len(paths), paths_skipped=skipped)

    schema, _ = whole_format(tools, fmt, parallel=True)
    if name == "llguidance-lark":
        lark = vllm_lark(tools)
        source_bytes = len(lark.encode())

        def compile_() -> Any:
            return peer.compile_lark(lark)
    else:
        source_bytes = len(json.dumps(schema, ensure_ascii=False).encode())

        def compile_() -> Any:
            return peer.compile_schema(schema)

    rss0 = rss_bytes()
    times = []
    try:
        for _ in range(job["repeat"] if engine == "llguidance" or len(tools) <= 100 else 1):
            t0 = time.perf_counter()
            compiled = compile_()
            times.append(time.perf_counter() - t0)
    except Exception as e:  # noqa: BLE001  (the engine's refusal, reported as such)
        out.put(status="refused", error="refused: " + first_line(e), source_bytes=source_bytes)
        return
    out.put(
        phase="name field",
        compile_s=median_s(times),
        compile_all_s=times,
        source_bytes=source_bytes,
        rss_after_compile_bytes=rss_bytes(),
        rss_compile_growth_bytes=rss_bytes() - rss0,
        memory_size_bytes=peer.memory_bytes(compiled),
    )
    start = peer.start(compiled)
    row = peer.new_row()

    def at(ids: list[int]) -> Any:
        m = peer.fork(start)
        for t in ids:
            if not peer.accept(m, t):
                raise RuntimeError(f"{name} refused token {t}")
        return m

    head = enc.ids(fmt.prefix + '"') or []
    # cold: the first fill at the name's start after a fresh compile (llguidance builds its lexer lazily)
    cold: list[float] = []
    if engine == "llguidance":
        budget = time.perf_counter() + job["cold_budget_s"]
        while len(cold) < job["cold_reps"] and time.perf_counter() < budget:
            fresh = compile_()
            m = peer.start(fresh)
            for t in head:
                peer.accept(m, t)
            t0 = time.perf_counter()
            peer.fill(m, row)
            cold.append(time.perf_counter() - t0)
    else:
        m = at(head)
        t0 = time.perf_counter()
        peer.fill(m, row)
        cold.append(time.perf_counter() - t0)
    base = at(head)
    warm = []
    for _ in range(job["warm_reps"]):
        m = peer.fork(base)
        t0 = time.perf_counter()
        peer.fill(m, row)
        warm.append(time.perf_counter() - t0)
    out.put(
        phase="paths",
        name_start_cold=summary_us(cold),
        name_start_warm=summary_us(warm),
        name_start_allowed=int(row_ids(row).size),
    )

    # the same decode paths as triec: rows inside the name, the first row of each tool's arguments, then rows
    rng = random.Random(job["seed"] + 1)
    eos = set(vocab.eos_token_ids)
    names: list[float] = []
    starts: list[float] = []
    first_args: list[float] = []
    args: list[float] = []
    for j, p in enumerate(paths):
        m = peer.fork(start)
        done = 0
        for t in p["ids"]:
            if p["name_from"] <= done <= p["name_to"]:
                t0 = time.perf_counter()
                peer.fill(m, row)
                names.append(time.perf_counter() - t0)
                if done == p["name_from"]:
                    starts.append(names[-1])
            if not peer.accept(m, t):
                raise RuntimeError(f"{name} refused token {t} on the path of {p['name']!r}")
            done += len(vocab.token_bytes[t])
        if j >= job["first"]:
            continue
        for step in range(job["arg_steps"] + 1):
            t0 = time.perf_counter()
            peer.fill(m, row)
            dt = time.perf_counter() - t0
            (first_args if step == 0 else args).append(dt)
            allowed = [x for x in row_ids(row).tolist() if x not in eos and x < vocab.num_tokens]
            if not allowed:
                break
            if not peer.accept(m, rng.choice(allowed)):
                break
    out.put(
        phase="done",
        status="ok",
        name_rows=summary_us(names),
        name_start_rows=summary_us(starts),
        first_args_row=summary_us(first_args),
        args_rows=summary_us(args),
        rss_end_bytes=rss_bytes(),
    )


def strictify(s: Any) -> Any:
    """``additionalProperties: false`` wherever ``properties`` is given without it (xgrammar's strict reading)."""
    if isinstance(s, list):
        return [strictify(x) for x in s]
    if not isinstance(s, dict):
        return s
    out: dict[str, Any] = {}
    for k, v in s.items():
        if k in ("properties", "$defs", "definitions", "patternProperties") and isinstance(v, dict):
            out[k] = {n: strictify(x) for n, x in v.items()}
        elif k in ("enum", "const", "required", "default", "examples"):
            out[k] = v
        else:
            out[k] = strictify(v)
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def vllm_lark(tools: list[Any]) -> str:
    """vLLM's array as lark, one ``%json`` per tool (each in its own JSON context), every tool's parameters
    strictified: the form /work/proto/registry measured, the only one llguidance compiles at about 2,000 tools
    (without ``additionalProperties: false`` the grammar passes llguidance's 65,525-symbol limit on BFCL)."""
    from benchmarks.schema_peers import XG_OPTIONS

    lines = [
        '%llguidance {"no_forcing": true}',
        'start: "[" call (", " call)* "]"',
        "call: " + " | ".join(f"call_{i}" for i in range(len(tools))),
    ]
    for i, t in enumerate(tools):
        begin = '{"name": ' + json.dumps(t.name, ensure_ascii=False) + ', "parameters": '
        params = strictify(t.parameters)
        doc = {**params, "x-guidance": XG_OPTIONS} if isinstance(params, dict) else params
        lines.append(f'call_{i}: {json.dumps(begin, ensure_ascii=False)} args_{i} "}}"')
        lines.append(f"args_{i}: %json " + json.dumps(doc, ensure_ascii=False))
    return "\n".join(lines)


def worker(job: dict[str, Any], out: Out) -> None:
    try:
        (triec_cell if job["cell"].startswith("triec-") else peer_cell)(job, out)
    except Exception as e:  # noqa: BLE001
        out.put(status="error", error=f"{type(e).__name__}: {first_line(e, 300)}")


# ---------------------------------------------------------------- tables


def _us(s: dict[str, Any] | None, key: str = "median") -> float | None:
    return None if not s or not s.get("n") else s[key]


def status_text(c: dict[str, Any]) -> str:
    """A cell's refusal, timeout or error, safe inside a markdown cell."""
    text: str = c.get("error") or c.get("status", "?")
    return text.replace("|", "\\|")


def tables_text(res: dict[str, Any]) -> str:
    out = []
    cells = res["cells"]

    def get(reg: str, cell: str) -> dict[str, Any]:
        found: dict[str, Any] = cells.get(f"{reg}|{cell}", {})
        return found

    regs = res["settings"]["registries"]
    # build
    out.append(
        "Build (triec: compile_tools; peers: the whole format compiled; ratio = peer / triec warm, same engine)\n"
    )
    out.append(
        "| registry | K | triec+llg cold | triec+llg warm | triec+xgr cold | triec+xgr warm | llguidance | ratio "
        "| llguidance lark | ratio | xgrammar | ratio |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in regs:
        tl, tx = get(r, "triec-llguidance"), get(r, "triec-xgrammar")
        row = [r, f"{tl.get('k') or tx.get('k') or '':,}" if (tl.get("k") or tx.get("k")) else ""]
        for t in (tl, tx):
            row += [f_s(t.get("build_cold_s")) or status_text(t) if t else "", f_s(t.get("build_warm_s"))]
        for name, base in (("llguidance", tl), ("llguidance-lark", tl), ("xgrammar", tx)):
            c = get(r, name)
            if not c:
                row += ["", ""]
            elif c.get("compile_s") is not None:
                row += [f_s(c["compile_s"]), ratio(c["compile_s"], base.get("build_warm_s"))]
            else:
                row += [status_text(c), ""]
        out.append("| " + " | ".join(row) + " |")
    # name rows
    out.append(
        "\nA mask row in the name field (median / p99; triec: the mask writer along real decode paths, and its "
        "first row inside the name; peers: their rows along the same paths and at the same first row, and at "
        "the name's start cold (first fill after a fresh compile) / warm (fresh forks); ratios = peer / triec, "
        "same engine)\n"
    )
    out.append(
        "| registry | engine | triec along paths | triec at the start | peer | peer along paths | peer at the start "
        "| start cold / warm | ratio along (median) | ratio at the start (median) |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|---|")
    for r in regs:
        for e, peers in (("llguidance", ("llguidance", "llguidance-lark")), ("xgrammar", ("xgrammar",))):
            t = get(r, f"triec-{e}")
            if not t:
                continue
            n, st = t.get("name_rows"), t.get("name_start_rows")
            tri = [
                f"{f_us(_us(n))} / {f_us(_us(n, 'p99'))}" if _us(n) is not None else status_text(t),
                f"{f_us(_us(st))} / {f_us(_us(st, 'p99'))}" if _us(st) is not None else "",
            ]
            shown = False
            for name in peers:
                c = get(r, name)
                if not c:
                    continue
                shown = True
                pn, ps = c.get("name_rows"), c.get("name_start_rows")
                if _us(pn) is None:
                    out.append("| " + " | ".join([r, e, *tri, name, status_text(c), "", "", "", ""]) + " |")
                    continue
                out.append(
                    "| "
                    + " | ".join(
                        [
                            r,
                            e,
                            *tri,
                            name,
                            f"{f_us(_us(pn))} / {f_us(_us(pn, 'p99'))}",
                            f"{f_us(_us(ps))} / {f_us(_us(ps, 'p99'))}",
                            f"{f_us(_us(c.get('name_start_cold')))} / {f_us(_us(c.get('name_start_warm')))}",
                            ratio(_us(pn), _us(n)),
                            ratio(_us(ps), _us(st)),
                        ]
                    )
                    + " |"
                )
            if not shown:
                out.append("| " + " | ".join([r, e, *tri, "", "", "", "", "", ""]) + " |")
    # handovers and arguments
    out.append(
        "\nInto a tool's arguments (triec: first handover into a tool never used before, its lazy compile "
        "included, and its compile alone; the same tools cached; argument rows after the handover, medians "
        "/ p99; peers: the first row of each tool's arguments, and argument rows; llguidance's from the lark "
        "form where it refuses the one schema)\n"
    )
    out.append(
        "| registry | engine | first handover | of which compile | cached handover | argument rows (first visit) "
        "| argument rows (cached) | peer: first argument row | peer: argument rows |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|")
    for r in regs:
        for e in ("llguidance", "xgrammar"):
            t, c = get(r, f"triec-{e}"), get(r, e)
            if e == "llguidance" and c.get("status") != "ok" and get(r, "llguidance-lark").get("status") == "ok":
                c = get(r, "llguidance-lark")  # the peer's figures from the form it compiles
            if not t:
                continue
            fh, ch = t.get("first_handover"), t.get("cached_handover")
            row = [
                r,
                e,
                f"{f_us(_us(fh))} / {f_us(_us(fh, 'p99'))}" if _us(fh) is not None else status_text(t),
                f_us(_us(t.get("first_handover_compile"))),
                f"{f_us(_us(ch))} / {f_us(_us(ch, 'p99'))}" if _us(ch) is not None else "",
                f"{f_us(_us(t.get('args_rows_first')))} / {f_us(_us(t.get('args_rows_first'), 'p99'))}",
                f"{f_us(_us(t.get('args_rows')))} / {f_us(_us(t.get('args_rows'), 'p99'))}",
            ]
            if _us(c.get("first_args_row")) is not None:
                row += [
                    f"{f_us(_us(c['first_args_row']))} / {f_us(_us(c['first_args_row'], 'p99'))}",
                    f"{f_us(_us(c.get('args_rows')))} / {f_us(_us(c.get('args_rows'), 'p99'))}",
                ]
            else:
                row += [status_text(c) if c else "", ""]
            out.append("| " + " | ".join(row) + " |")
    # memory
    out.append(
        "\nArgument-grammar cache (resident growth over the first handovers per compiled grammar; xgrammar: "
        "CompiledGrammar.memory_size_bytes; the bound = TRIEC_GRAMMAR_CACHE grammars x that; peers: "
        "resident growth of the whole-format compile)\n"
    )
    out.append(
        "| registry | engine | grammars compiled | RSS per grammar | memory_size_bytes (median) | bound "
        "(grammars) | row cache entries (bytes) | peer compile RSS growth | peer memory_size_bytes |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|")
    for r in regs:
        for e in ("llguidance", "xgrammar"):
            t, c = get(r, f"triec-{e}"), get(r, e)
            mem = t.get("memory")
            if not mem:
                continue
            per = mem["per_grammar_bytes"]
            xm = (mem.get("xgrammar_memory_size") or {}).get("median_bytes")
            bound = mem["cache_bound_grammars"] * max(per, xm or 0)
            out.append(
                "| "
                + " | ".join(
                    [
                        r,
                        e,
                        str(t.get("grammars_compiled")),
                        f"{per / 1024:,.0f} KiB",
                        f"{xm / 1024:,.0f} KiB" if xm else "",
                        f"{bound / 2**20:,.0f} MiB ({mem['cache_bound_grammars']:,})",
                        f"{mem['row_cache_entries']:,} ({mem['row_cache_bytes'] / 2**20:,.1f} MiB; bound {mem['row_cache_bound']:,} "
                        f"x {mem['row_bytes'] / 1024:,.1f} KiB)",
                        f"{c['rss_compile_growth_bytes'] / 2**20:,.0f} MiB"
                        if c.get("rss_compile_growth_bytes") is not None
                        else "",
                        f"{c['memory_size_bytes'] / 2**20:,.1f} MiB" if c.get("memory_size_bytes") else "",
                    ]
                )
                + " |"
            )
    return "\n".join(out)


# ---------------------------------------------------------------- main


# ---------------------------------------------------------------- the suite

FULL: dict[str, Any] = {
    "registries": ["rich-1000", "bfcl"],
    "cells": list(CELLS),
    "format": "vllm",
    "tokenizer": "qwen2",
    "vocab_size": 151_936,
    "paths": 200,
    "first": 100,
    "arg_steps": 12,
    "repeat": 7,
    "cold_reps": 20,
    "warm_reps": 50,
    "seed": 0,
    "timeout": 240.0,
    "max_rss_gb": 8.0,
    "drop_refused": "bfcl",
}
QUICK: dict[str, Any] = {
    **FULL,
    "registries": ["rich-40"],
    "cells": ["triec-llguidance", "triec-xgrammar", "llguidance"],
    "paths": 6,
    "first": 3,
    "arg_steps": 3,
    "repeat": 2,
    "cold_reps": 2,
    "warm_reps": 3,
    "timeout": 300.0,
}
TABLES = ("build", "names", "arguments", "memory")


def unavailable() -> str | None:
    from triec.engines import is_installed

    missing = [e for e in ("llguidance", "xgrammar") if not is_installed(e)]
    return f"needs {' and '.join(missing)} (pip install 'triec[bench]')" if missing else bfcl_unavailable()


def run(quick: bool) -> dict[str, Any]:
    """Every (registry, cell) in its own process, one after the other."""
    import triec

    a = QUICK if quick else FULL
    vocab = triec.Vocabulary.load(a["tokenizer"], vocab_size=a["vocab_size"])
    _ = vocab.automaton  # the disk caches (decoded vocabulary, automaton) warm before any cell
    drops: dict[str, dict[str, str]] = {}
    for r in a["registries"]:
        if r.startswith("bfcl") if a["drop_refused"] == "bfcl" else a["drop_refused"] == "all":
            drops[r] = refused_tools(load_registry(r), vocab)
    result = results.new("tools", {**a, "quick": quick, "dropped": drops})
    for r in a["registries"]:
        for c in a["cells"]:
            job = {
                "drop": sorted(drops.get(r, {})),
                "cell": c,
                "registry": r,
                "format": a["format"],
                "tokenizer": a["tokenizer"],
                "vocab_size": a["vocab_size"],
                "paths": a["paths"],
                "first": a["first"],
                "arg_steps": a["arg_steps"],
                "repeat": a["repeat"],
                "cold_reps": a["cold_reps"],
                "warm_reps": a["warm_reps"],
                "cold_budget_s": min(90.0, a["timeout"] / 4),
                "seed": a["seed"],
            }
            cell = run_cell(
                "benchmarks.suites.tools:worker", job, timeout=a["timeout"], max_rss=int(a["max_rss_gb"] * 2**30)
            )
            result["cells"].append({"registry": r, "cell": c, **cell})
    return result


def as_keyed(result: dict[str, Any]) -> dict[str, Any]:
    """The suite's cells keyed ``registry|cell``, as :func:`tables_text` reads them."""
    return {"settings": result["settings"], "cells": {f"{c['registry']}|{c['cell']}": c for c in result["cells"]}}


def tables(result: dict[str, Any]) -> dict[str, str]:
    return docs.split_tables(tables_text(as_keyed(result)), TABLES)
