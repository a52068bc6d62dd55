"""Rows and steps on the serving side: the mask writer, batches, the torch table on CPU tensors, restrict.

One process per K (seeded synthetic tool names, Qwen2 at 151,936, random states of the table): the writer's
one-state fills (``fill([s])``, ``fill_one(s)``) and batches of 128 mixed states against the runtime's full-row
``fill_bitmask`` on the same states; the device table on CPU tensors (one torch thread): fill, apply, advance
and a whole step for B = 1, 32, 256 (:func:`benchmarks.gpu_check.time_step`; the ``gpu`` suite times CUDA);
``restrict`` to 50 and 1,000 values, and ``compact()``. Per-call figures are medians over rounds.
"""

from __future__ import annotations

import random
import time
from typing import Any

import numpy as np

from benchmarks import docs, results
from benchmarks.measure import per_call, stats
from triec.bench.runner import Out, run_cell

FULL: dict[str, Any] = {"ks": [1_000, 100_000], "rounds": 21, "batches": [1, 32, 256], "iters": 20}
QUICK: dict[str, Any] = {"ks": [1_000], "rounds": 2, "batches": [1, 8], "iters": 2}


def unavailable() -> str | None:
    return None


def cell(job: dict[str, Any], out: Out) -> None:
    import triec
    from triec.synthetic.sets import tool_names

    vocab = triec.Vocabulary.load("qwen2", vocab_size=151_936)
    values = tool_names(job["k"])
    table = triec.compile(values, vocab)
    rounds = job["rounds"]
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    writer = table.mask_writer(128)
    out.put(phase="writer", states=table.num_states, writer_create_s=time.perf_counter() - t0)
    singles = rng.integers(0, table.num_states, 1024).tolist()
    batches = [rng.integers(0, table.num_states, 128) for _ in range(16)]
    rows = np.zeros((128, table.words_per_row), dtype=np.int32)
    it = iter(range(1 << 62))

    def fill() -> None:
        writer.fill([singles[next(it) % len(singles)]])

    def fill_one() -> None:
        writer.fill_one(singles[next(it) % len(singles)])

    def fill_bitmask() -> None:
        table.fill_bitmask([singles[next(it) % len(singles)]], rows)

    def batch() -> None:
        writer.fill(batches[next(it) % len(batches)])

    def batch_bitmask() -> None:
        table.fill_bitmask(batches[next(it) % len(batches)], rows)

    out.put(
        phase="device",
        fill_s=stats(per_call(fill, 1000, rounds)),
        fill_one_s=stats(per_call(fill_one, 1000, rounds)),
        fill_bitmask_s=stats(per_call(fill_bitmask, 100, rounds)),
        batch128_s=stats(per_call(batch, 100, rounds)),
        batch128_bitmask_s=stats(per_call(batch_bitmask, 10, rounds)),
    )
    out.put(phase="restrict", device=_device(table, job), restrict=_restrict(table, values, rounds))
    out.put(status="ok", phase="done")


def _device(table: Any, job: dict[str, Any]) -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        return {"status": "missing", "error": "torch is not installed"}
    from benchmarks.gpu_check import time_step

    torch.set_num_threads(1)
    dev = table.to_torch(torch.device("cpu"))
    rng = np.random.default_rng(1)
    found: dict[str, Any] = {
        "bytes": int(
            sum(
                t.nbytes
                for t in (
                    dev.pair_keys,
                    dev.pair_next,
                    dev.word_index,
                    dev.word_bits,
                    dev.word_offsets,
                    dev.accepting,
                    dev.dense_rows,
                    dev.wide_states,
                )
            )
        )
    }
    for b in job["batches"]:
        states = torch.from_numpy(rng.integers(0, table.num_states, b))
        logits = torch.randn(b, table.vocab_size)
        fill, apply, advance, step = time_step(
            dev, states, logits, job["iters"], heavy_iters=max(2, job["iters"] // (b // 8 + 1))
        )
        found[str(b)] = {"fill_us": fill, "apply_us": apply, "advance_us": advance, "step_us": step}
    return found


def _restrict(table: Any, values: list[str], rounds: int) -> dict[str, Any]:
    rng = random.Random(1)
    t0 = time.perf_counter()
    table.restrict(rng.sample(values, min(50, len(values))))
    found: dict[str, Any] = {"first_s": time.perf_counter() - t0}
    for n in (50, 1000):
        if n > len(values) // 2:
            continue
        times, compacts = [], []
        for _ in range(rounds):
            sub = rng.sample(values, n)
            t0 = time.perf_counter()
            view = table.restrict(sub)
            t1 = time.perf_counter()
            view.compact()
            times.append(t1 - t0)
            compacts.append(time.perf_counter() - t1)
        found[str(n)] = {"restrict_s": stats(times), "compact_s": stats(compacts)}
    return found


def run(quick: bool) -> dict[str, Any]:
    size = QUICK if quick else FULL
    result = results.new("steps", {"quick": quick, **size}, extra_versions=("torch",))
    for k in size["ks"]:
        job = {"k": k, **size}
        result["cells"].append({"k": k, **run_cell("benchmarks.suites.steps:cell", job, timeout=1800.0)})
    return result


def tables(result: dict[str, Any]) -> dict[str, str]:
    writer, device, restrict = [], [], []
    for c in result["cells"]:
        k = f"{c['k']:,}"
        if c.get("status") != "ok":
            writer.append([k, docs.status_note(c), "", "", "", "", ""])
            continue
        writer.append(
            [
                k,
                docs.seconds(c["writer_create_s"]),
                *(
                    docs.spread(c[f])
                    for f in ("fill_s", "fill_one_s", "fill_bitmask_s", "batch128_s", "batch128_bitmask_s")
                ),
            ]
        )
        for b, d in c["device"].items():
            if isinstance(d, dict) and "step_us" in d:
                device.append([k, b, *(f"{d[f]:,.1f}" for f in ("fill_us", "apply_us", "advance_us", "step_us"))])
        for n, r in c["restrict"].items():
            if isinstance(r, dict):
                restrict.append(
                    [
                        k,
                        n,
                        docs.spread(r["restrict_s"]),
                        docs.spread(r["compact_s"]),
                        docs.seconds(c["restrict"]["first_s"]),
                    ]
                )
    return {
        "writer": docs.markdown(
            [
                "K",
                "writer created",
                "fill([s])",
                "fill_one(s)",
                "fill_bitmask, one state",
                "128 mixed states",
                "128 states, fill_bitmask",
            ],
            writer,
        ),
        "device": docs.markdown(["K", "B", "fill µs", "apply µs", "advance µs", "step µs (CPU tensors)"], device),
        "restrict": docs.markdown(
            ["K", "values kept", "restrict", "compact()", "first restrict (path index)"], restrict
        ),
    }
