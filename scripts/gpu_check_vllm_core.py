"""The vLLM processors' shared batched step on a CUDA device, without vLLM.

vLLM's CUDA wheel cannot be brought to every GPU machine (the device machines
here have no network), but the step both processors run is triec's own
(:class:`triec.integrations.vllm._core.BatchState`): per-slot tables and states on
the device, masking grouped by table, advance. This drives it through random
batches (two artifacts, unconstrained and EOS-only rows, non-contiguous rows,
moves and swaps), checks every row against the numpy runtime, proves a step
makes no host synchronisation, and times a step for B = 64 and 256.

    python scripts/gpu_check_vllm_core.py            # CUDA
    python scripts/gpu_check_vllm_core.py --device cpu --steps 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import triec
from triec.check.synthetic import tool_names
from triec.integrations.vllm import _core


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=20, help="checked decode steps per batch size")
    ap.add_argument("--iters", type=int, default=100, help="timed steps per batch size")
    ap.add_argument("--tokenizer", default="qwen2")
    args = ap.parse_args()
    device = torch.device(args.device)
    vocab = triec.Vocabulary.load(args.tokenizer, vocab_size=151936 if args.tokenizer == "qwen2" else None)
    tmp = Path(tempfile.mkdtemp())
    tables = {
        "tools": triec.compile(tool_names(1000), vocab),
        "codes": triec.compile([f"{c}{i:02d}.{j}" for c in "ABCDEFGH" for i in range(100) for j in range(10)], vocab),
    }
    for name, t in tables.items():
        t.save(tmp / f"{name}.triec")
    store = _core.ArtifactStore(tmp)
    eos = list(tables["tools"].eos_token_ids)
    rng = np.random.default_rng(0)
    errors = 0
    print(f"device {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}), torch {torch.__version__}")
    for b in (64, 256):
        batch = _core.BatchState(store, device, b, eos)
        kinds = rng.choice(["tools", "codes", None], size=b, p=[0.45, 0.45, 0.1])
        host_state: dict[int, tuple[str, int]] = {}
        for slot, kind in enumerate(kinds):
            batch.assign(slot, _core.TriecRequest(str(kind)) if kind else None)
            if kind:
                host_state[slot] = (str(kind), tables[str(kind)].start)
        # a swap and a one-way move, as vLLM's batch reordering does
        batch.move(0, 1, swap=True)
        host_state[0], host_state[1] = host_state.get(1), host_state.get(0)  # type: ignore[assignment]
        host_state = {k: v for k, v in host_state.items() if v is not None}
        slots = np.arange(b)
        rows = rng.permutation(b)  # rows of the logits are not in slot order
        rows_t = torch.from_numpy(rows).to(device)  # the harness's own gather index, uploaded once
        for step in range(args.steps):
            logits = torch.randn((b, 151936), device=device)
            if device.type == "cuda":
                torch.cuda.synchronize()
                torch.cuda.set_sync_debug_mode("error")
            try:
                batch.mask(logits, rows, slots)
                tokens = logits.argmax(1)[rows_t]
            finally:
                if device.type == "cuda":
                    torch.cuda.set_sync_debug_mode("default")
            masked = torch.isfinite(logits).cpu().numpy()
            tok = tokens.cpu().numpy()
            for slot in range(b):
                kind_state = host_state.get(slot)
                row = masked[rows[slot]]
                if kind_state is None:
                    if not row.all():
                        errors += 1
                        print(f"  B={b} step {step}: unconstrained slot {slot} was masked")
                    continue
                kind, s = kind_state
                t = tables[kind]
                want = np.zeros(151936, dtype=bool)
                if s >= 0:
                    want[t.allowed(s)] = True
                else:
                    want[list(t.eos_token_ids)] = True
                if not np.array_equal(row, want):
                    errors += 1
                    print(f"  B={b} step {step}: slot {slot} ({kind}, state {s}) mask differs")
            if device.type == "cuda":
                torch.cuda.set_sync_debug_mode("error")
            try:
                batch.advance(slots, tokens)
            finally:
                if device.type == "cuda":
                    torch.cuda.set_sync_debug_mode("default")
            got = batch.states.cpu().numpy()
            for slot, (kind, s) in list(host_state.items()):
                t = tables[kind]
                nxt = triec.FINISHED if s < 0 else (
                    triec.FINISHED if int(tok[slot]) in t.eos_token_ids else t.advance(s, int(tok[slot]))
                )
                if int(got[slot]) != nxt:
                    errors += 1
                    print(f"  B={b} step {step}: slot {slot} state {got[slot]} != {nxt}")
                host_state[slot] = (kind, nxt)
        times = []
        for _ in range(args.iters):
            logits = torch.randn((b, 151936), device=device)
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            batch.mask(logits, rows, slots)
            batch.advance(slots, logits.argmax(1)[rows_t])
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        print(f"  B={b}: {args.steps} steps checked, no host sync in mask/advance; "
              f"step (mask + argmax + advance) median {statistics.median(times) * 1e6:.1f} us")
    print("all rows equal the numpy runtime" if not errors else f"{errors} MISMATCHES")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
