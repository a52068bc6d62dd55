"""``triec bench``: triec against xgrammar, llguidance and outlines-core, same inputs, same machine.

Every (K, engine) cell runs in its own subprocess (:mod:`triec.bench.runner`), for three reasons: a peer's
compile can take minutes (a timeout kills the process and the cell says so),
peak RSS is only honest per process, and "cold" must mean a process that has
never seen the tokenizer. The parent picks the values and the decode paths
(each value's own tokenization by the ``tokenizers`` library) and hands them
to the workers in a JSON job file; each worker writes its results after every
phase, so a timeout still keeps what finished.

What is timed (all with :func:`time.perf_counter`, medians reported):

* ``setup``: the engine's tokenizer-level object over the decoded vocabulary
  (triec: decoding + vocabulary automaton from an empty cache = the cold part).
* ``compile``: triec warm = ``triec.compile(values, vocab)`` with the automaton
  in memory; triec cold = tokenizer load + automaton build + compile in a fresh
  process with an empty cache; each peer = grammar construction + compile +
  matcher creation + the first mask (llguidance builds its lexer lazily, so
  the first mask is where the work is).
* ``step``: one full bitmask row (int32, shared layout) at one state along a
  real decode path; the engine advances by the path's tokens between rows
  (advancing is not timed).
* ``batch``: B rows for B requests at mixed states (triec ``MaskWriter.fill``,
  llguidance ``LLExecutor``, xgrammar ``BatchGrammarMatcher``, outlines-core
  a loop, as it has no batch API).
"""

from __future__ import annotations

import os
import random
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from triec.bench import runner
from triec.bench.runner import Out, machine_info
from triec.bench.runner import engine_versions as versions
from triec.engines import ENGINES, install_hint, is_installed
from triec.errors import TriecError
from triec.runtime.bitmask import words_for

if TYPE_CHECKING:
    from triec.tokenizer.vocabulary import Vocabulary

ALL_ENGINES: tuple[str, ...] = ("triec", *ENGINES)
DEFAULT_K: tuple[int, ...] = (10, 100, 1_000, 10_000, 100_000)
DEFAULT_BATCH: tuple[int, ...] = (1, 8, 32, 128, 256)
DEFAULT_PATHS = 50
DEFAULT_TIMEOUT = 300.0
LONG_COMPILE = 5.0  # seconds: past this, a compile is not repeated

TIMED = {
    "triec": {
        "setup": "Vocabulary.load + vocabulary automaton built from an empty cache (fresh process)",
        "compile": "triec.compile(values, vocab), automaton in memory (warm)",
        "cold": "fresh process, empty cache: Vocabulary.load + automaton build + triec.compile",
        "step": "MaskWriter.fill([state]): a full row in the writer's buffer (writer built once per table, untimed)",
        "batch": "MaskWriter.fill(states): B full rows in the writer's buffer",
    },
    "llguidance": {
        "setup": "LLTokenizer over the decoded vocabulary",
        "compile": "grammar_from_lark(regex alternation) + LLMatcher(...) + first compute mask",
        "step": "LLMatcher.unsafe_compute_mask_ptr into the row",
        "batch": "LLExecutor.unsafe_compute_mask_ptr (fill_next_token_bitmask_par)",
    },
    "xgrammar": {
        "setup": "TokenizerInfo(RAW bytes) + GrammarCompiler(cache disabled)",
        "compile": "compile_grammar(EBNF alternation) + GrammarMatcher + first fill_next_token_bitmask",
        "step": "GrammarMatcher.fill_next_token_bitmask into the row",
        "batch": "BatchGrammarMatcher.batch_fill_next_token_bitmask",
    },
    "outlines-core": {
        "setup": "outlines_core.Vocabulary from the decoded vocabulary",
        "compile": "Index(anchored regex alternation) + Guide + first write_mask_into",
        "step": "Guide.write_mask_into the row",
        "batch": "a loop of Guide.write_mask_into (no batch API)",
    },
}


@dataclass(frozen=True)
class BenchProgress:
    """Where a run stands: told before each (K, engine) cell starts and after it ends."""

    done: int  # cells finished
    total: int  # cells in the run
    cell: str  # "K=1,000 xgrammar": the cell starting or just finished
    status: str | None = None  # None when starting; the cell's status when finished
    seconds: float = 0.0  # the finished cell's wall time


class BenchInterrupted(KeyboardInterrupt):
    """Ctrl-C during a run; ``result`` holds every cell measured before it (``interrupted: true``)."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__("interrupted")
        self.result = result


# ---------------------------------------------------------------- helpers


def summary(samples: Sequence[float]) -> dict[str, float | int]:
    """min / median / max / n of a list of seconds."""
    if not samples:
        return {"n": 0}
    return {"min": min(samples), "median": statistics.median(samples), "max": max(samples), "n": len(samples)}


MAX_K = 10_000_000
"""Largest set size ``triec bench`` builds (``triec.synthetic.sets``'s limit too)."""
MAX_BATCH = 65_536
"""Largest batch of mask rows (65,536 rows of a 151,936-wide vocabulary are 1.2 GB)."""


def parse_int_list(text: str, option: str, upper: int | None = None) -> list[int]:
    """``"10,100,1e3"`` -> [10, 100, 1000]; a clear error naming the option otherwise."""
    out = []
    for part in text.split(","):
        part = part.strip().replace("_", "")
        if not part:
            continue
        try:
            value = int(float(part)) if "e" in part.lower() else int(part)
        except (ValueError, OverflowError):
            raise TriecError(f"{option}: expected comma-separated integers, found {part!r}") from None
        if value < 1:
            raise TriecError(f"{option}: values must be >= 1, found {value}")
        if upper is not None and value > upper:
            raise TriecError(f"{option}: values must be <= {upper:,}, found {value:,}")
        out.append(value)
    if not out:
        raise TriecError(f"{option}: expected at least one integer")
    return out


def parse_engines(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    for n in names:
        if n not in ALL_ENGINES:
            raise TriecError(f"--engines: expected names from {', '.join(ALL_ENGINES)}, found {n!r}")
    return list(dict.fromkeys(names)) or list(ALL_ENGINES)


def value_set(name: str, k: int, seed: int = 0) -> list[str]:
    """``tools`` (synthetic tool names), ``products`` (product paths) or a values file (its first k)."""
    from triec.synthetic import sets as synthetic

    if name == "tools":
        return synthetic.tool_names(k, seed)
    if name == "products":
        return synthetic.product_names(k, seed)
    from triec.compiler.values import read_values
    from triec.keys import prepare_values

    keys, _ = prepare_values(read_values(name, "auto"))
    values = [b.decode("utf-8") for b in keys]
    return random.Random(seed).sample(values, k) if k < len(values) else values


# ---------------------------------------------------------------- decode paths


def decode_paths(
    spec: str, vocab: Vocabulary, values: Sequence[str], count: int, seed: int
) -> tuple[list[list[int]], int]:
    """Token ids of up to ``count`` values, as the model's own tokenizer encodes them (its canonical encoder:
    :func:`triec.tokenizer.encoder.encoder_from_json`, SentencePiece's dummy prefix off).

    Only encodings whose bytes spell the value exactly are kept. Returns (paths, values skipped).
    """
    from triec.tokenizer.encoder import encoder_from_json
    from triec.tokenizer.source import locate

    encoder = encoder_from_json(locate(spec).tokenizer_json, spec)
    chosen = random.Random(seed).sample(list(values), min(count, len(values)))
    paths, skipped = [], 0
    for v in chosen:
        ids = encoder.encode(v, add_special_tokens=False).ids
        if all(0 <= i < vocab.num_tokens for i in ids) and b"".join(vocab.token_bytes[i] for i in ids) == v.encode(
            "utf-8"
        ):
            paths.append(ids)
        else:
            skipped += 1
    return paths, skipped


def batch_prefixes(paths: Sequence[Sequence[int]], b: int, seed: int) -> list[list[int]]:
    """``b`` token prefixes at mixed depths along the decode paths (seeded)."""
    positions = [(i, j) for i, p in enumerate(paths) for j in range(len(p) + 1)]
    rng = random.Random(seed * 1_000_003 + b)
    picks = [rng.choice(positions) for _ in range(b)]
    return [list(paths[i][:j]) for i, j in picks]


# ---------------------------------------------------------------- worker (subprocess)


def _maxrss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def _timed(fn: Any, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


Steps = Callable[[], list[float]]
"""One pass over the paths: the time of each mask row."""
BatchOf = Callable[[list[list[int]]], Callable[[], Any]]
"""A batch's fill, given the token prefixes of its rows."""


def _worker(job: dict[str, Any], out: Out) -> None:
    """One cell in its own process: a cold compile (``triec-cold``), or one engine's compile, load, per-step rows
    and batched rows on the job's set."""
    from triec.tokenizer.vocabulary import Vocabulary

    load = dict(vocab_size=job["vocab_size"], eos_token_ids=job["eos"])
    if job["engine"] == "triec-cold":
        _cold_cell(job, out)
        return
    vocab = Vocabulary.load(job["tokenizer"], **load)
    if job["engine"] == "triec":
        steps_pass, make_batch = _triec_cell(job, vocab, out)
    else:
        steps_pass, make_batch = _engine_cell(job, vocab, out)
    _measure_rows(job, steps_pass, make_batch, out)


def _cold_cell(job: dict[str, Any], out: Out) -> None:
    """A fresh process's tokenizer, automaton and compile, each timed once."""
    from triec.compiler.entry import compile as compile_values
    from triec.tokenizer.vocabulary import Vocabulary

    t0 = time.perf_counter()
    vocab = Vocabulary.load(job["tokenizer"], vocab_size=job["vocab_size"], eos_token_ids=job["eos"])
    t1 = time.perf_counter()
    vocab.automaton  # noqa: B018
    t2 = time.perf_counter()
    compile_values(job["values"], vocab)
    t3 = time.perf_counter()
    out.put(
        status="ok",
        phase="done",
        cold_s=t3 - t0,
        tokenizer_s=t1 - t0,
        automaton_s=t2 - t1,
        compile_s=t3 - t2,
        peak_rss=_maxrss(),
    )


def _triec_cell(job: dict[str, Any], vocab: Any, out: Out) -> tuple[Steps, BatchOf]:
    """triec's compile, artifact and load timed; its rows through the mask writer."""
    from triec.artifact.formats import load as load_artifact
    from triec.compiler.entry import compile as compile_values

    values: list[str] = job["values"]
    repeat = int(job["repeat"])
    t0 = time.perf_counter()
    vocab.automaton  # noqa: B018 - from the disk cache when present
    setup = time.perf_counter() - t0
    rss0 = _maxrss()
    table = compile_values(values, vocab)  # warm-up
    compile_s = _timed(lambda: compile_values(values, vocab), repeat)
    out.put(phase="compile", setup_s=setup, compile_s=summary(compile_s), rss_before=rss0, peak_rss=_maxrss())
    with tempfile.TemporaryDirectory() as tmp:
        plain, packed = os.path.join(tmp, "a.triec"), os.path.join(tmp, "a.triec.zst")
        size, zsize = table.save(plain), table.save(packed)
        load_artifact(plain)
        load_s = _timed(lambda: load_artifact(plain), max(repeat, 5))
    out.put(artifact_bytes=size, artifact_zstd_bytes=zsize, load_s=summary(load_s), states=table.num_states)
    state_paths = [[table.walk(p[:j]) for j in range(len(p) + 1)] for p in job["paths"]]
    t0 = time.perf_counter()
    writer = table.mask_writer(max(job["batch"], default=1))
    out.put(writer_setup_s=time.perf_counter() - t0)

    def steps_pass() -> list[float]:
        times = []
        for states in state_paths:
            for s in states:
                one = [s]
                t = time.perf_counter()
                writer.fill(one)
                times.append(time.perf_counter() - t)
        return times

    def make_batch(prefixes: list[list[int]]) -> Callable[[], Any]:
        states = np.array([table.walk(p) for p in prefixes], dtype=np.int64)
        return lambda: writer.fill(states)

    return steps_pass, make_batch


def _engine_cell(job: dict[str, Any], vocab: Any, out: Out) -> tuple[Steps, BatchOf]:
    """A peer engine's compile timed (repeated unless the first took over :data:`LONG_COMPILE`); its rows through
    its own matchers, each path consumed token by token."""
    from triec.engines import make_engine

    engine_name = job["engine"]
    paths: list[list[int]] = job["paths"]
    repeat = int(job["repeat"])
    width = words_for(vocab.vocab_size)
    row = np.zeros((1, width), dtype=np.int32)
    engine = make_engine(engine_name, vocab)
    rss0 = _maxrss()
    compiled: list[Any] = []

    def compile_once() -> None:
        c = engine.compile(job["values"])
        m = engine.matcher(c)
        m.fill(row[0])
        compiled[:] = [c]

    first = _timed(compile_once, 1)
    more = _timed(compile_once, repeat - 1) if first[0] < LONG_COMPILE else []
    out.put(
        phase="compile",
        setup_s=engine.setup_seconds,
        compile_s=summary(first + more),
        rss_before=rss0,
        peak_rss=_maxrss(),
    )
    c = compiled[0]

    def steps_pass() -> list[float]:
        times = []
        for p in paths:
            m = engine.matcher(c)
            for j in range(len(p) + 1):
                t = time.perf_counter()
                m.fill(row[0])
                times.append(time.perf_counter() - t)
                if j < len(p) and not m.consume(p[j]):
                    raise TriecError(f"{engine_name} refused token {p[j]} of a value's own tokenization")
        return times

    def make_batch(prefixes: list[list[int]]) -> Callable[[], Any]:
        matchers = []
        for p in prefixes:
            m = engine.matcher(c)
            for t in p:
                m.consume(t)
            matchers.append(m)
        rows = np.zeros((len(matchers), width), dtype=np.int32)
        return lambda: engine.fill_batch(matchers, rows)

    return steps_pass, make_batch


def _measure_rows(job: dict[str, Any], steps_pass: Steps, make_batch: BatchOf, out: Out) -> None:
    """Per-step rows over every path (after a warm-up pass), then each batch size's fill."""
    repeat = int(job["repeat"])
    steps_pass()  # warm-up
    step_times: list[float] = []
    for _ in range(repeat):
        step_times += steps_pass()
    out.put(phase="step", step_s=summary(step_times))
    batch: dict[str, Any] = {}
    for b in job["batch"]:
        fill = make_batch(batch_prefixes(job["paths"], b, job["seed"]))
        fill()  # warm-up
        batch[str(b)] = summary(_timed(fill, max(repeat, 3)))
        out.put(phase="batch", batch_s=batch)
    out.put(status="ok", phase="done")


# ---------------------------------------------------------------- parent


def run_cell(job: dict[str, Any], timeout: float, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run one worker (:func:`triec.bench.runner.run_cell`); its results, status ``timeout`` past ``timeout`` s."""
    return runner.run_cell("triec.bench.peers:_worker", job, timeout=timeout, max_rss=None, env=env)


def run_bench(
    *,
    tokenizer: str | None,
    vocab_size: int | None,
    ks: Sequence[int],
    value_source: str,
    engines: Sequence[str],
    batches: Sequence[int],
    repeat: int,
    timeout: float,
    paths: int = DEFAULT_PATHS,
    seed: int = 0,
    progress: Callable[[BenchProgress], None] | None = None,
) -> dict[str, Any]:
    """Every (K, engine) cell; the result is what ``--json`` writes.

    Ctrl-C raises :class:`BenchInterrupted` carrying the cells measured so far
    (the row of the K in progress keeps its finished cells).
    """
    from triec.tokenizer.vocabulary import Vocabulary

    vocab = Vocabulary.load(tokenizer, vocab_size=vocab_size)
    spec = vocab.name
    result: dict[str, Any] = {
        "command": sys.argv,
        "machine": machine_info(),
        "versions": versions(),
        "settings": {
            "tokenizer": spec,
            "vocab_size": vocab.vocab_size,
            "tokenizer_tokens": vocab.num_tokens,
            "eos_token_ids": list(vocab.eos_token_ids),
            "set": value_source,
            "k": list(ks),
            "engines": list(engines),
            "batch": list(batches),
            "repeat": repeat,
            "timeout_s": timeout,
            "paths": paths,
            "seed": seed,
        },
        "timed": {e: TIMED[e] for e in engines},
        "results": [],
    }
    base = {
        "tokenizer": spec,
        "vocab_size": vocab.vocab_size,
        "eos": list(vocab.eos_token_ids),
        "repeat": repeat,
        "batch": list(batches),
        "seed": seed,
    }
    try:
        _run_cells(result, base, ks, value_source, engines, timeout, paths, seed, vocab, progress)
    except KeyboardInterrupt:
        if result["results"] and not result["results"][-1]["engines"]:
            result["results"].pop()  # interrupted before its first cell finished
        result["interrupted"] = True
        raise BenchInterrupted(result) from None
    return result


def _run_cells(
    result: dict[str, Any],
    base: dict[str, Any],
    ks: Sequence[int],
    value_source: str,
    engines: Sequence[str],
    timeout: float,
    paths: int,
    seed: int,
    vocab: Any,
    progress: Callable[[BenchProgress], None] | None,
) -> None:
    spec, total, done = vocab.name, len(ks) * len(engines), 0
    for k in ks:
        values = value_set(value_source, k, seed)
        decode, skipped = decode_paths(spec, vocab, values, paths, seed)
        row: dict[str, Any] = {
            "k": k,
            "values": len(values),
            "value_bytes": sum(len(v.encode("utf-8")) for v in values),
            "paths": len(decode),
            "paths_skipped": skipped,
            "steps": sum(len(p) + 1 for p in decode),
            "engines": {},
        }
        job = {**base, "values": values, "paths": decode}
        result["results"].append(row)  # filled cell by cell: an interrupted run keeps what finished
        for name in engines:
            label = f"K={k:,} {name}"
            if progress:
                progress(BenchProgress(done, total, label))
            t0 = time.perf_counter()
            if name != "triec" and not is_installed(name):
                cell: dict[str, Any] = {"status": "missing", "error": f"not installed; {install_hint(name)}"}
            else:
                cell = run_cell({**job, "engine": name}, timeout)
            if name == "triec":
                with tempfile.TemporaryDirectory(prefix="triec-cold-cache-") as cache:
                    cold = run_cell(
                        {**job, "engine": "triec-cold"}, timeout, env={**os.environ, "TRIEC_CACHE_DIR": cache}
                    )
                cell["cold"] = {
                    key: cold.get(key)
                    for key in ("status", "error", "cold_s", "tokenizer_s", "automaton_s", "compile_s", "peak_rss")
                }
                row["states"] = cell.get("states")
            row["engines"][name] = cell
            done += 1
            if progress:
                progress(BenchProgress(done, total, label, str(cell.get("status")), time.perf_counter() - t0))


# ---------------------------------------------------------------- presentation


def _median(cell: dict[str, Any], key: str, sub: str | None = None) -> float | None:
    v = cell.get(key)
    if sub is not None and isinstance(v, dict):
        v = v.get(sub)
    if isinstance(v, dict) and v.get("n"):
        return float(v["median"])
    return None


def _fmt_time(s: float | None) -> str:
    if s is None:
        return "-"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} µs"


def _ratio(x: float | None, base: float | None) -> str:
    if x is None or base is None or base <= 0:
        return ""
    r = x / base
    return f"{r:,.0f}×" if r >= 100 else f"{r:.1f}×" if r >= 10 else f"{r:.2f}×"


def table_rows(result: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the summary table (shared by the terminal and Markdown)."""
    batches = result["settings"]["batch"]
    bmax = str(max(batches)) if batches else None
    header = [
        "K",
        "engine",
        "setup",
        "compile",
        "× triec",
        "step (median)",
        "× triec",
        f"batch B={bmax}",
        "× triec",
        "peak RSS",
        "notes",
    ]
    rows = []
    for r in result["results"]:
        base = r["engines"].get("triec", {})
        bc, bs, bb = _median(base, "compile_s"), _median(base, "step_s"), _median(base, "batch_s", bmax)
        for name, cell in r["engines"].items():
            status = cell.get("status")
            notes = ""
            if status != "ok":
                notes = f"{status}: {cell.get('error', '')}"
            c, s, b = _median(cell, "compile_s"), _median(cell, "step_s"), _median(cell, "batch_s", bmax)
            rss = cell.get("peak_rss")
            if name == "triec":
                cold = cell.get("cold") or {}
                if cold.get("cold_s") is not None:
                    notes = (notes + " " if notes else "") + f"cold {_fmt_time(cold['cold_s'])}"
                if cell.get("artifact_bytes"):
                    notes += f"; artifact {cell['artifact_bytes']:,} B ({cell.get('artifact_zstd_bytes', 0):,} zstd); load {_fmt_time(_median(cell, 'load_s'))}"
            rows.append(
                [
                    f"{r['k']:,}",
                    name,
                    _fmt_time(cell.get("setup_s")),
                    _fmt_time(c),
                    "" if name == "triec" else _ratio(c, bc),
                    _fmt_time(s),
                    "" if name == "triec" else _ratio(s, bs),
                    _fmt_time(b),
                    "" if name == "triec" else _ratio(b, bb),
                    f"{rss / 2**20:,.0f} MiB" if isinstance(rss, int) else "-",
                    notes,
                ]
            )
    return header, rows


def markdown_table(result: dict[str, Any]) -> str:
    header, rows = table_rows(result)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def plot(result: dict[str, Any], path: str) -> None:
    """Compile time and per-step row time vs K, log-log, one line per engine."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise TriecError("--plot needs matplotlib: pip install matplotlib (or pip install 'triec[bench]')") from exc
    fig, axes = plt.subplots(1, 3, figsize=(16, 5))
    colors = {"triec": "#d62728", "llguidance": "#1f77b4", "xgrammar": "#2ca02c", "outlines-core": "#9467bd"}
    batches = result["settings"]["batch"]
    bmax = str(max(batches)) if batches else None
    panels: list[tuple[Any, str, Callable[[dict[str, Any]], float | None]]] = [  # (matplotlib Axes, title, y)
        (axes[0], "compile time", lambda c: _median(c, "compile_s")),
        (axes[1], "one mask row along decode paths (median)", lambda c: _median(c, "step_s")),
        (axes[2], f"batch of {bmax} rows at mixed states (median)", lambda c: _median(c, "batch_s", bmax)),
    ]
    for ax, title, get in panels:
        for name in result["settings"]["engines"]:
            pts = [(r["k"], get(r["engines"].get(name, {}))) for r in result["results"]]
            pts = [(k, v) for k, v in pts if v is not None]
            if pts:
                ax.plot(
                    *zip(*pts, strict=True),
                    marker="o",
                    label=name + (" (warm)" if name == "triec" and ax is axes[0] else ""),
                    color=colors.get(name),
                )
            timed_out = [r["k"] for r in result["results"] if r["engines"].get(name, {}).get("status") == "timeout"]
            for k in timed_out:
                ax.axvline(k, color=colors.get(name), linestyle=":", alpha=0.4)
        if ax is axes[0]:
            cold = [
                (r["k"], (r["engines"].get("triec", {}).get("cold") or {}).get("cold_s")) for r in result["results"]
            ]
            cold = [(k, v) for k, v in cold if v is not None]
            if cold:
                ax.plot(
                    *zip(*cold, strict=True),
                    marker="x",
                    linestyle="--",
                    color=colors["triec"],
                    alpha=0.6,
                    label="triec (cold, new tokenizer)",
                )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("K (values)")
        ax.set_ylabel("seconds")
        ax.set_title(title)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8)
    s = result["settings"]
    fig.suptitle(
        f"triec vs peers: {s['set']} values, {s['tokenizer']} ({s['vocab_size']:,} wide); dotted line = timed out",
        fontsize=11,
    )
    fig.tight_layout()
    import io

    from triec.artifact.container import atomic_write

    png = io.BytesIO()
    fig.savefig(png, dpi=110, format="png")
    atomic_write(path, png.getvalue())
    plt.close(fig)
