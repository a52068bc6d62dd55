"""One cell of the MLX and Outlines decoding benchmark (:mod:`benchmarks.suites.mlx_outlines` runs each in its
own process): ``python -m triec.eval.speed '{"bench": "mlx", "k": 1000}'`` prints one JSON object.

The model is the trained-model fixture (SmolLM2-135M, the GGUF converted once, float32), greedy, on this
machine's CPU; the values are :func:`triec.synthetic.sets.tool_names` (K of them); the questions ask for a
tool. Every timing is a median over questions and rounds, free decoding of the same prompt measured next to
each constrained one.

* ``mlx``: mlx-lm's own ``generate_step`` with triec's processor against none: time to the first token, then
  tokens a second over the rest (free decoding runs as many steps).
* ``outlines``: an Outlines generator on ``transformers`` or ``mlx``, built with ``Choice(values)`` (outlines-core
  compiles the alternation; ``method="outlines-core"``) or with triec's processor (``method="triec"``): the
  build, the first token (a one-token generation), tokens a second (transformers: steps counted by a stopping
  criterion, free decoding forced to as many with ``min_new_tokens``; mlx: the stream's steps).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

PRODUCT_QUESTIONS = (
    "Which product is a red Acme toy?",
    "Name a compact Globex kitchen product.",
    "Which product is a silver Stark electronics item?",
)
QUESTIONS = (
    "Which tool sends a slack message?",
    "Which tool lists the github issues?",
    "Which tool creates a stripe invoice?",
)
LIMIT = 64
"""Most tokens a constrained answer may take."""


def chat(question: str) -> str:
    return f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"


def median_ms(xs: list[float]) -> float:
    return round(1000 * statistics.median(xs), 1)


def rate(steps: int, seconds: float) -> float:
    return steps / seconds if seconds > 0 else float("nan")


def now() -> tuple[float, float]:
    """(wall clock, this process's CPU time over all its threads): on a shared machine the second is what the
    process itself spent, the first what it waited for too."""
    return time.perf_counter(), time.process_time()


class Speeds:
    """Per method: first tokens (wall), and tokens a second by wall clock and by the process's CPU time."""

    def __init__(self, *names: str) -> None:
        self.first: dict[str, list[float]] = {n: [] for n in names}
        self.wall: dict[str, list[float]] = {n: [] for n in names}
        self.cpu: dict[str, list[float]] = {n: [] for n in names}

    def add(self, name: str, at: list[tuple[float, float]], steps: int | None = None) -> None:
        """``at``: (wall, cpu) since the call at each token (or at the first and the last of ``steps``)."""
        self.first[name].append(at[0][0])
        n = (len(at) if steps is None else steps) - 1
        wall, cpu = at[-1][0] - at[0][0], at[-1][1] - at[0][1]
        if n > 0 and wall > 0 and cpu > 0:
            self.wall[name].append(n / wall)
            self.cpu[name].append(n / cpu)

    def summary(self, name: str, free: str) -> dict[str, Any]:
        w, fw = statistics.median(self.wall[name]), statistics.median(self.wall[free])
        c, fc = statistics.median(self.cpu[name]), statistics.median(self.cpu[free])
        return {
            "ttft_ms": median_ms(self.first[name]),
            "ttft_free_ms": median_ms(self.first[free]),
            "tok_s": round(w, 2),
            "free_tok_s": round(fw, 2),
            "ratio": round(w / fw, 3),
            "cpu_tok_s": round(c, 2),
            "free_cpu_tok_s": round(fc, 2),
            "cpu_ratio": round(c / fc, 3),
        }


# ----------------------------------------------------------------------------- mlx-lm


def bench_mlx(k: int, rounds: int) -> dict[str, Any]:
    import mlx.core as mx
    from mlx_lm import load
    from mlx_lm.generate import generate_step

    from triec.compiler.entry import compile as compile_values
    from triec.eval.gguf_model import prepare
    from triec.integrations.mlx import MLXConstraint
    from triec.synthetic.sets import tool_names
    from triec.tokenizer.vocabulary import Vocabulary

    where = prepare()
    model, tok = load(str(where))
    vocab = Vocabulary.load(where)
    MLXConstraint(model, tok, compile_values(["a", "b"], vocab))  # the vocabulary check: once per tokenizer
    for _ in generate_step(mx.array(tok.encode(chat("Hello"), add_special_tokens=False)), model, max_tokens=2):
        pass  # mlx's first call (its kernels), not the constraint's
    values = tool_names(k)
    t0 = time.perf_counter()
    constraint = MLXConstraint(model, tok, compile_values(values, vocab))
    build = time.perf_counter() - t0
    eos = set(tok.eos_token_ids)

    def run(prompt: list[int], processors: list[Any], steps: int) -> tuple[list[int], list[tuple[float, float]]]:
        ids, at = [], []
        w0, c0 = now()
        for token, _ in generate_step(mx.array(prompt), model, max_tokens=steps, logits_processors=processors):
            w, c = now()
            at.append((w - w0, c - c0))
            ids.append(int(token))
            if processors and token in eos:
                break
        return ids, at

    speeds = Speeds("free", "triec")
    valid = total = 0
    for _ in range(rounds):
        for q in QUESTIONS:
            prompt = tok.encode(chat(q), add_special_tokens=False)
            ids, at = run(prompt, [constraint.processor()], LIMIT)
            total += 1
            valid += ids[-1] in eos and tok.decode(ids[:-1]) in values
            speeds.add("triec", at)
            speeds.add("free", run(prompt, [], len(ids))[1])
    cell = {"table": "mlx", "k": k, "status": "ok", "build_ms": round(1000 * build, 1)}
    return {**cell, **speeds.summary("triec", "free"), "valid": f"{valid}/{total}"}


def bench_steps(k: int, values: int = 50) -> dict[str, Any]:
    """The mlx processor's own cost per step, no forward pass: calls following the tokens of ``values`` values
    (their encoder's tokenization) on fixed logits, each output evaluated; next to it one trivial mlx op."""
    import mlx.core as mx
    import numpy as np
    from mlx_lm import load

    from triec.compiler.entry import compile as compile_values
    from triec.eval.gguf_model import prepare
    from triec.integrations.mlx import MLXConstraint
    from triec.synthetic.sets import tool_names
    from triec.tokenizer.vocabulary import Vocabulary

    where = prepare()
    model, tok = load(str(where))
    names = tool_names(k)
    constraint = MLXConstraint(model, tok, compile_values(names, Vocabulary.load(where)))
    logits = mx.array(np.random.default_rng(0).standard_normal((1, len(tok))).astype(np.float32))
    mx.eval(logits)
    prompt = tok.encode(chat(QUESTIONS[0]), add_special_tokens=False)
    per: list[float] = []
    for name in names[:values]:
        ids = tok.encode(name, add_special_tokens=False)
        p, seq = constraint.processor(), list(prompt)
        for n in range(len(ids) + 1):
            t = time.perf_counter()
            mx.eval(p(mx.array(seq, dtype=mx.int32), logits))
            per.append(time.perf_counter() - t)
            seq += ids[n : n + 1]
    trivial = []
    for _ in range(200):
        t = time.perf_counter()
        mx.eval(logits * 1.0)
        trivial.append(time.perf_counter() - t)
    return {
        "table": "steps",
        "k": k,
        "status": "ok",
        "calls": len(per),
        "step_us": round(1e6 * statistics.median(per)),
        "step_p90_us": round(1e6 * float(np.percentile(per, 90))),
        "trivial_op_us": round(1e6 * statistics.median(trivial)),
    }


# ----------------------------------------------------------------------------- Outlines


def _outlines_model(engine: str) -> tuple[Any, Any]:
    """(Outlines model, a function from text to the engine's prompt), chat text passed through as written."""
    import outlines

    from triec.eval.gguf_model import prepare

    where = prepare()
    if engine == "mlx":
        import mlx_lm

        m, tok = mlx_lm.load(str(where))
        model = outlines.from_mlxlm(m, tok)
    else:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(2)
        hf = AutoModelForCausalLM.from_pretrained(where, dtype=torch.float32).eval()
        model = outlines.from_transformers(hf, AutoTokenizer.from_pretrained(where))
    model.type_adapter.has_chat_template = False  # the prompts are chat text already
    return model, where


def _make(model: Any, method: str, values: list[str]) -> Any:
    import outlines
    from outlines.types import Choice

    if method == "outlines-core":
        return outlines.Generator(model, Choice(values))
    from triec.integrations.outlines import processor

    return outlines.Generator(model, processor=processor(model, values))


class _Steps:
    """A transformers stopping criterion that only counts the generation's steps."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        self.n += 1
        return torch.zeros(input_ids.shape[0], dtype=torch.bool)


def _timed_transformers(gen: Any, prompt: str, steps: int, forced: bool) -> tuple[str, tuple[float, float], int]:
    from transformers import StoppingCriteriaList

    counter = _Steps()
    kw: dict[str, Any] = {"max_new_tokens": steps, "stopping_criteria": StoppingCriteriaList([counter])}
    if forced:
        kw["min_new_tokens"] = steps
    w0, c0 = now()
    out = gen(prompt, **kw)
    w, c = now()
    return out, (w - w0, c - c0), counter.n


def _timed_mlx(gen: Any, prompt: str, steps: int) -> tuple[str, list[tuple[float, float]]]:
    at, text = [], []
    w0, c0 = now()
    for chunk in gen.stream(prompt, max_tokens=steps):
        w, c = now()
        at.append((w - w0, c - c0))
        text.append(chunk)
    return "".join(text), at


SETS = ("tools", "products")
"""The value sets: :func:`~triec.synthetic.sets.tool_names` (``stripe.delete_issue``, then ``aws.get_user_4821``:
digit tails, which SmolLM2 writes one digit a token) and :func:`~triec.synthetic.sets.product_names`
(``Automotive > Wayne > Classic 4242 > Pink``). outlines-core's index costs far more on the second."""


def values_for(name: str, k: int) -> list[str]:
    from triec.synthetic.sets import product_names, tool_names

    if name not in SETS:
        raise ValueError(f"value set {name!r}: one of {', '.join(SETS)}")
    return tool_names(k) if name == "tools" else product_names(k)


def bench_outlines(engine: str, method: str, k: int, rounds: int, values_set: str = "tools") -> dict[str, Any]:
    import outlines

    cell: dict[str, Any] = {"table": "outlines", "engine": engine, "set": values_set, "method": method, "k": k}
    model, _ = _outlines_model(engine)
    free = outlines.Generator(model)
    values = values_for(values_set, k)
    questions = QUESTIONS if values_set == "tools" else PRODUCT_QUESTIONS
    kw = {"max_new_tokens": 2} if engine == "transformers" else {"max_tokens": 2}
    warm = chat("Hello")
    try:
        free(warm, **kw)  # the engine's first call (graphs, buffers), not the constraint's
        _make(model, method, ["a", "b"])(warm, **kw)  # per-process work on the tokenizer, both methods alike
        t0 = time.perf_counter()
        gen = _make(model, method, values)
        cell["build_ms"] = round(1000 * (time.perf_counter() - t0), 1)
        t0 = time.perf_counter()
        gen(chat(questions[0]), **{name: 1 for name in kw})  # the first request's first token, lazy work included
        cell["first_request_ttft_ms"] = round(1000 * (time.perf_counter() - t0), 1)
    except Exception as exc:  # noqa: BLE001 - outlines-core's mlx kernel on a machine without Metal
        cell.update(status="missing", error=f"{type(exc).__name__}: {str(exc)[:200]}")
        return cell
    speeds = Speeds("free", "c")
    valid = total = 0
    for _ in range(rounds):
        for q in questions:
            prompt = chat(q)
            if engine == "transformers":  # the rest after a one-token generation: (n - 1) steps
                _, t1, _ = _timed_transformers(gen, prompt, 1, False)
                out, tn, n = _timed_transformers(gen, prompt, LIMIT, False)
                _, f1, _ = _timed_transformers(free, prompt, 1, True)
                _, fn, m = _timed_transformers(free, prompt, n, True)
                speeds.add("c", [t1, tn], n)
                speeds.add("free", [f1, fn], m)
            else:
                try:
                    out, at = _timed_mlx(gen, prompt, LIMIT)
                except Exception as exc:  # noqa: BLE001 - a cell's failure is its result; the others still run
                    cell.update(status="missing", error=f"{type(exc).__name__}: {str(exc)[:200]}")
                    return cell
                speeds.add("c", at)
                speeds.add("free", _timed_mlx(free, prompt, max(len(at), 8))[1])
            total += 1
            valid += out in values
    cell.update(status="ok", **speeds.summary("c", "free"), valid=f"{valid}/{total}")
    cell["first_token_after_free_ms"] = round(cell["build_ms"] + cell["ttft_ms"] - cell["ttft_free_ms"], 1)
    return cell


BENCHES: dict[str, Callable[..., dict[str, Any]]] = {"mlx": bench_mlx, "steps": bench_steps, "outlines": bench_outlines}


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    bench = BENCHES[spec.pop("bench")]
    print(json.dumps(bench(**spec)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
