"""The vLLM processors' shared batched step on a CUDA device, without vLLM.

vLLM's CUDA wheel cannot be brought to every GPU machine (the device machines
here have no network), but the step both processors run is triec's own
(:class:`triec.integrations.vllm.batch.BatchState`): per-slot tables and states on
the device, masking grouped by table, advance. This drives it through random
batches (two artifacts, unconstrained and EOS-only rows, non-contiguous rows,
moves and swaps), checks every row against the numpy runtime, proves a step
makes no host synchronisation, and times a step for B = 64 and 256. Then the
speculative-decoding rows of Model Runner V2 (``BatchState.draft_positions``):
per request up to k = 3 drafts (mostly tokens the table allows, sometimes not),
one row each plus the bonus row, every row checked against the numpy runtime
walked over the drafts before it, and the step timed.

    python -m benchmarks.gpu_vllm_core            # CUDA
    python -m benchmarks.gpu_vllm_core --device cpu --steps 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

import triec
from triec.integrations import serving
from triec.integrations.vllm import batch as vllm_batch
from triec.synthetic.sets import tool_names


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
    store = serving.ArtifactStore(tmp)
    eos = list(tables["tools"].eos_token_ids)
    rng = np.random.default_rng(0)
    errors = 0
    print(
        f"device {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}), torch {torch.__version__}"
    )
    for b in (64, 256):
        batch = vllm_batch.BatchState(store, device, b, eos)
        kinds = rng.choice(np.array(["tools", "codes", None], dtype=object), size=b, p=[0.45, 0.45, 0.1])
        host_state: dict[int, tuple[str, int]] = {}
        for slot, kind in enumerate(kinds):
            batch.assign(slot, serving.TriecRequest(str(kind)) if kind else None)
            if kind:
                host_state[slot] = (str(kind), tables[str(kind)].start)
        # a swap and a one-way move, as vLLM's batch reordering does
        batch.move(0, 1, swap=True)
        host_state[0], host_state[1] = host_state.get(1), host_state.get(0)  # type: ignore[assignment]  # None marks an emptied slot, dropped below
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
                nxt = (
                    triec.FINISHED
                    if s < 0
                    else (triec.FINISHED if int(tok[slot]) in t.eos_token_ids else t.advance(s, int(tok[slot])))
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
        print(
            f"  B={b}: {args.steps} steps checked, no host sync in mask/advance; "
            f"step (mask + argmax + advance) median {statistics.median(times) * 1e6:.1f} us"
        )
    errors += check_spec(store, tables, device, eos, rng, args.steps)
    print("all rows equal the numpy runtime" if not errors else f"{errors} MISMATCHES")
    return 1 if errors else 0


def check_spec(
    store: serving.ArtifactStore,
    tables: dict[str, Any],
    device: torch.device,
    eos: list[int],
    rng: np.random.Generator,
    steps: int,
    b: int = 64,
    k: int = 3,
) -> int:
    """Draft rows on the device: each masked at the state after its drafts; returns the number of mismatches."""
    batch = vllm_batch.BatchState(store, device, b, eos)
    kinds = rng.choice(np.array(["tools", "codes", None], dtype=object), size=b, p=[0.45, 0.45, 0.1])
    host: dict[int, tuple[str, int]] = {}
    for slot, kind in enumerate(kinds):
        batch.assign(slot, serving.TriecRequest(str(kind)) if kind else None)
        if kind:
            host[slot] = (str(kind), tables[str(kind)].start)
    errors, checked, times = 0, 0, []

    def walk(kind: str, s: int, drafts: list[int]) -> int | None:
        t = tables[kind]
        for d in drafts:
            if s == triec.FINISHED:
                return s
            if d not in t.allowed(s).tolist():
                return None
            s = t.advance(s, d)
        return s

    for step in range(steps):
        order = rng.permutation([s for s in host])
        row_slot, local, inputs, drafts = [], [], [], {}
        for slot in order.tolist():
            kind, s = host[slot]
            ds: list[int] = []
            for _ in range(int(rng.integers(0, k + 1))):
                st = walk(kind, s, ds)
                pool = tables[kind].allowed(st) if st is not None and st >= 0 else np.array(eos)
                ds.append(int(rng.choice(pool)) if rng.random() < 0.85 else int(rng.integers(0, 5000)))
            drafts[slot] = ds
            for j, tkn in enumerate([0, *ds]):
                row_slot.append(slot)
                local.append(j)
                inputs.append(tkn)
        rs, lp, tk = (np.asarray(x, dtype=np.int64) for x in (row_slot, local, inputs))
        logits = torch.randn((rs.size, 151936), device=device)
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        states, matchers = batch.draft_positions(rs, lp, tk)
        batch.mask(logits, np.arange(rs.size), rs, states=states, matchers=matchers)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        masked = torch.isfinite(logits).cpu().numpy()
        for r in range(rs.size):
            kind, s = host[int(rs[r])]
            st = walk(kind, s, drafts[int(rs[r])][: int(lp[r])])
            want = np.zeros(151936, dtype=bool)
            if st is None or st < 0:
                want[list(tables[kind].eos_token_ids)] = True
            else:
                want[tables[kind].allowed(st)] = True
            checked += 1
            if not np.array_equal(masked[r], want):
                errors += 1
                print(f"  spec step {step}: row {r} (slot {rs[r]}, draft {lp[r]}) mask differs")
        # commit a valid prefix of the drafts and a bonus token from the next row, as the rejection sampler does
        commit_slots, commit_tokens = [], []
        r0 = 0
        for slot in order.tolist():
            kind, s = host[slot]
            ds = drafts[slot]
            n = 0
            while n < len(ds) and masked[r0 + n, ds[n]] and rng.random() < 0.8:
                n += 1
            allowed = np.flatnonzero(masked[r0 + n])
            for tkn in [*ds[:n], int(rng.choice(allowed))]:
                commit_slots.append(slot)
                commit_tokens.append(tkn)
                s = triec.FINISHED if s < 0 or tkn in tables[kind].eos_token_ids else tables[kind].advance(s, tkn)
            host[slot] = (kind, s)
            r0 += len(ds) + 1
        cs, ct = np.asarray(commit_slots), np.asarray(commit_tokens)
        for j in range(k + 1):  # one advance per committed position, as the V2 processor folds them
            sel = [np.flatnonzero(cs == slot)[j] for slot in order.tolist() if (cs == slot).sum() > j]
            if sel:
                sel_a = np.asarray(sel)
                batch.advance(cs[sel_a], torch.from_numpy(ct[sel_a]).to(device))
    print(
        f"  spec B={b} k={k}: {checked} rows checked over {steps} steps; "
        f"step (draft states + mask) median {statistics.median(times) * 1e6:.1f} us"
    )
    return errors


if __name__ == "__main__":
    sys.exit(main())
