"""Host bitmask application on the installed vLLM: vLLM's own against triec's sparse hook, side by side.

    python -m benchmarks.vllm_apply [--rounds 15] [--json OUT]

Whichever host path the installed release has (:func:`triec.integrations.vllm.internals.sparse_site`):
0.32 and 0.33's ``apply_grammar_bitmask`` through ``structured_output.utils.xgr`` (xgrammar's CPU kernel), or
0.34's ``CPUStructuredOutputsWorker.apply_grammar_bitmask`` (torch, CPUs without Triton). Rows are what a
trie state writes (40 allowed tokens of Qwen2's 151,936) or dense (every other token); B requests, one row each.
Both run on copies of the same logits in interleaved rounds; medians in milliseconds, and their ratio. The
sparse hook is worth keeping on a release while ``own / triec`` stays above 1 for trie rows.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from triec.runtime.bitmask import set_bits, words_for

V = 151_936
WORDS = words_for(V)


def rows(kind: str, b: int, rng: np.random.Generator) -> np.ndarray:
    bm = np.zeros((b, WORDS), dtype=np.int32)
    if kind == "dense":
        bm[:] = 0x55555555
        return bm
    for row in bm:
        ids = rng.choice(V, size=40, replace=False)
        set_bits(row, ids)
    return bm


Apply = Callable[[torch.Tensor, np.ndarray], Any]
"""One way to apply a bitmask row block to logits: (logits, bitmask)."""


def pair(site: str) -> tuple[Apply, Apply]:
    """(vLLM's own application, triec's) as functions of (logits, bitmask)."""
    from triec.integrations.vllm import internals, patches

    if site == "cpu_worker":
        cls = internals.cpu_worker_class()
        own = getattr(cls.apply_grammar_bitmask, "__wrapped__", cls.apply_grammar_bitmask)
        hooked = patches.cpu_worker_hook(own)
        worker = cls(256, V, torch.device("cpu"), 1)

        def call(fn: Callable[..., Any]) -> Apply:
            def run(logits: torch.Tensor, bm: np.ndarray) -> None:
                ids = [f"r{i}" for i in range(bm.shape[0])]
                batch = SimpleNamespace(req_ids=ids, cu_num_logits=torch.arange(len(ids) + 1, dtype=torch.int32))
                fn(worker, logits, batch, ids, bm)

            return run

        return call(own), call(hooked)
    import xgrammar

    sparse = patches.SparseXgrammar(xgrammar)
    return (
        lambda lg, bm: xgrammar.apply_token_bitmask_inplace(lg, torch.from_numpy(bm)),
        lambda lg, bm: sparse.apply_token_bitmask_inplace(lg, torch.from_numpy(bm)),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--batches", default="1,8,32,64")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    import vllm

    from triec.integrations.vllm import internals

    site = internals.sparse_site()
    own, ours = pair(site)
    rng = np.random.default_rng(0)
    results = []
    print(f"vLLM {vllm.__version__}, host path {site}, V = {V:,}, torch threads {torch.get_num_threads()}")
    print(f"{'rows':>6} {'B':>4} {'own ms':>9} {'triec ms':>9} {'own/triec':>9}")
    for kind in ("trie", "dense"):
        for b in (int(x) for x in args.batches.split(",")):
            bm = rows(kind, b, rng)
            base = torch.from_numpy(rng.standard_normal((b, V)).astype(np.float32))
            a_out, b_out = base.clone(), base.clone()
            own(a_out, bm.copy())
            ours(b_out, bm.copy())
            assert torch.equal(torch.isinf(a_out), torch.isinf(b_out)), (kind, b)  # the same masked logits
            times: dict[str, list[float]] = {"own": [], "triec": []}
            for _ in range(args.rounds):
                for name, fn in (("own", own), ("triec", ours)):
                    lg = base.clone()
                    t = time.perf_counter()
                    fn(lg, bm)
                    times[name].append((time.perf_counter() - t) * 1e3)
            m_own, m_ours = statistics.median(times["own"]), statistics.median(times["triec"])
            results.append(
                {
                    "rows": kind,
                    "B": b,
                    "own_ms": round(m_own, 3),
                    "triec_ms": round(m_ours, 3),
                    "ratio": round(m_own / m_ours, 2),
                }
            )
            print(f"{kind:>6} {b:>4} {m_own:>9.3f} {m_ours:>9.3f} {m_own / m_ours:>9.2f}")
    if args.json is not None:
        from triec.artifact.container import atomic_write

        atomic_write(
            args.json,
            (
                json.dumps(
                    {"vllm": vllm.__version__, "site": site, "rounds": args.rounds, "results": results}, indent=2
                )
                + "\n"
            ).encode(),
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
