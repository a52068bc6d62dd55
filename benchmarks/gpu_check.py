"""Device check: the torch table equals the numpy runtime, and what one decode step costs.

On a CUDA machine (the default ``--device cuda``) this compiles the synthetic tool
names at K = 1,000 and 100,000 for the bundled Qwen2 tokenizer (width 151,936),
uploads each table, checks it against the numpy runtime (bitmask rows of sampled
states, every allowed transition, EOS, random disallowed tokens, masked logits,
and xgrammar's kernel when installed), proves a step makes no host
synchronisation (``torch.cuda.set_sync_debug_mode("error")``), and prints the
median per-step time for B = 1, 32 and 256. ``--device cpu`` runs the same
script on CPU tensors (the tests do, with small sizes). Exit code 1 on any
mismatch.

With the fused Triton kernels (triec.runtime.kernels: on CUDA with triton, or anywhere under Triton's
interpreter with ``--triton-interpret``) each table is checked and timed twice, the torch path and the
kernels side by side, plus xgrammar's ``apply_token_bitmask_inplace`` (when installed), a two-table step
(``TorchTableSet``: one launch for rows of two tables, against a launch sequence per table, as
``BatchState`` serves two artifacts) and, on CUDA, a CUDA-graph capture and replay of a kernel step
(equal to the eager step).

    python -m benchmarks.gpu_check --device cpu --triton-interpret --tokenizers gpt2,qwen2,phi3 --ks 1000 --batches 4

Then, on CUDA when vLLM is importable, the vLLM checks (:mod:`benchmarks.vllm_processors`,
each engine in its own process): the end-to-end check with the default Model
Runner V2 (``TriecLogitsProcessorV2``) and with ``VLLM_USE_V2_MODEL_RUNNER=0``
(``TriecLogitsProcessor``, async scheduling), then the throughput bench of triec
against xgrammar and unconstrained at ``--vllm-ks`` x ``--vllm-batches``.
Without vLLM this part is skipped with a message.

    python -m benchmarks.gpu_check                       # CUDA, the issue's sizes, then vLLM
    python -m benchmarks.gpu_check --device cpu --ks 1000 --iters 20
    python -m benchmarks.gpu_check --vllm only           # just the vLLM checks and bench
    python -m benchmarks.gpu_check --tokenizer shared/tokenizers/qwen2/tokenizer.json   # no zstandard needed
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

import triec
from benchmarks import ROOT
from triec.runtime.torch import INVALID, TorchMaskTable
from triec.synthetic.sets import tool_names

BENCH_VLLM = ["-m", "benchmarks.vllm_processors"]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def check(table: triec.MaskTable, dev: TorchMaskTable, sample: int, rng: np.random.Generator) -> list[str]:
    """Compare the device table with the numpy runtime; returns the mismatches found."""
    errors: list[str] = []
    device = dev.device
    n = table.num_states
    states = np.arange(n) if n <= sample else np.unique(np.concatenate([[0], rng.integers(0, n, sample)]))
    for lo in range(0, states.size, 256):
        chunk = states[lo : lo + 256]
        want = table.fill_bitmask(chunk, np.zeros((chunk.size, table.words_per_row), dtype=np.int32))
        got = dev.fill(torch.from_numpy(chunk).to(device)).cpu().numpy()
        if not np.array_equal(got, want):
            errors.append(f"bitmask rows differ among states {chunk[0]}..{chunk[-1]}")
    pair_state = np.repeat(np.arange(n), np.asarray(np.diff(table.allowed_offsets.astype(np.int64)), dtype=np.int64))
    nxt = dev.advance(
        torch.from_numpy(pair_state).to(device), torch.from_numpy(np.asarray(table.allowed_tokens)).to(device)
    )
    if not np.array_equal(nxt.cpu().numpy(), table.allowed_next):
        errors.append("advance differs on allowed transitions")
    st_dev = torch.from_numpy(states).to(device)
    accepting = np.array([table.is_accepting(int(s)) for s in states])
    for eos in table.eos_token_ids:
        got = dev.advance(st_dev, torch.full((states.size,), eos, device=device)).cpu().numpy()
        if not np.array_equal(got, np.where(accepting, triec.FINISHED, INVALID)):
            errors.append(f"advance differs on EOS {eos}")
    probe = rng.integers(0, table.vocab_size, states.size)
    want_next = []
    for s, t in zip(states.tolist(), probe.tolist(), strict=True):
        try:
            want_next.append(table.advance(s, t))
        except triec.TokenNotAllowed:
            want_next.append(INVALID)
    if dev.advance(st_dev, torch.from_numpy(probe).to(device)).cpu().tolist() != want_next:
        errors.append("advance differs on random tokens")
    chunk = states[:64]
    logits = torch.randn(chunk.size, table.vocab_size, device=device)
    masked = dev.mask_logits(logits.clone(), torch.from_numpy(chunk).to(device))
    finite = torch.isfinite(masked).cpu().numpy()
    for i, s in enumerate(chunk.tolist()):
        if not np.array_equal(np.flatnonzero(finite[i]), table.allowed(s)):
            errors.append(f"masked logits differ at state {s}")
            break
    try:
        import xgrammar
    except ImportError:
        return errors
    theirs = logits.clone()
    xgrammar.apply_token_bitmask_inplace(theirs, dev.fill(torch.from_numpy(chunk).to(device)))
    if not torch.equal(theirs, masked):
        errors.append("xgrammar's apply_token_bitmask_inplace disagrees with mask_logits")
    return errors


def no_host_sync(dev: TorchMaskTable, states: torch.Tensor, logits: torch.Tensor) -> str:
    """Run one step under CUDA's sync debug mode; 'yes', or the error raised."""
    if dev.device.type != "cuda":
        return "n/a on cpu"
    torch.cuda.set_sync_debug_mode("error")
    try:
        dev.advance(states, dev.mask_logits(logits, states).argmax(1))
        return "yes"
    except RuntimeError as exc:
        return f"NO ({exc})"
    finally:
        torch.cuda.set_sync_debug_mode("default")


def time_us(fn: Callable[[], object], device: torch.device, iters: int, rounds: int = 5) -> float:
    """Median over ``rounds`` of the mean time of ``iters`` back-to-back calls, in microseconds."""
    fn()
    _sync(device)
    means = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        _sync(device)
        means.append((time.perf_counter() - t0) / iters * 1e6)
    return statistics.median(means)


def time_step(
    dev: TorchMaskTable, states: torch.Tensor, logits: torch.Tensor, iters: int, heavy_iters: int | None = None
) -> tuple[float, float, float, float]:
    """Per-call microseconds of fill, apply, advance, and a whole step (fill + apply + argmax + advance)."""
    device = dev.device
    heavy = heavy_iters or iters
    rows = dev.fill(states)
    tokens = logits.argmax(1)
    fill = time_us(lambda: dev.fill(states, out=rows), device, iters)
    apply = time_us(lambda: dev.apply_bitmask(logits, rows), device, heavy)
    adv = time_us(lambda: dev.advance(states, tokens), device, iters)
    step = time_us(lambda: dev.advance(states, dev.mask_logits(logits, states).argmax(1)), device, heavy)
    return fill, apply, adv, step


def time_mask_rows(dev: TorchMaskTable, states: torch.Tensor, logits: torch.Tensor, iters: int) -> tuple[float, float]:
    """Per-call microseconds of ``mask_rows`` over every row: the bitmask path, then the gather path."""
    rows = torch.arange(states.numel(), device=dev.device)
    bits = time_us(lambda: dev.mask_rows(logits, rows, states, max_gather=0), dev.device, iters)
    gather = time_us(lambda: dev.mask_rows(logits, rows, states, max_gather=1 << 20), dev.device, iters)
    return bits, gather


def graph_step(dev: TorchMaskTable, states: torch.Tensor, logits: torch.Tensor) -> str:
    """Capture one kernel step (fill and apply, argmax, advance) in a CUDA graph and replay it: equal to eager?"""
    if dev.device.type != "cuda" or dev.packed is None:
        return "n/a"
    s, lg = states.clone(), logits.clone()
    want = dev.advance(s, dev.mask_logits(lg.clone(), s).argmax(1))
    work = lg.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up outside the capture, as CUDA graphs require
        dev.advance(s, dev.mask_logits(work, s).argmax(1))
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        work.copy_(lg)
        out = dev.advance(s, dev.mask_logits(work, s).argmax(1))
    graph.replay()
    torch.cuda.synchronize()
    return "equal" if torch.equal(out, want) else "DIFFERS"


def two_tables(
    vocab: triec.Vocabulary,
    k: int,
    device: torch.device,
    batches: list[int],
    iters: int,
    rng: np.random.Generator,
    timed: bool = True,
) -> bool:
    """Rows of two artifacts in one batch: one launch per operation (TorchTableSet) against a launch sequence
    per table (two TorchMaskTables, each over its rows). Checks they agree; prints medians."""
    from triec.runtime.torch import TorchTableSet

    a, b = triec.compile(tool_names(k), vocab), triec.compile(tool_names(k // 2, seed=7), vocab, prefix=" ")
    fused = TorchTableSet([a, b], device)
    if fused.packed is None:
        print("  two tables: the kernels do not run here; skipped")
        return False
    da, db = a.to_torch(device, kernels=False), b.to_torch(device, kernels=False)
    failed = False
    for n in batches:
        ids = torch.from_numpy(rng.integers(0, 2, n)).to(device)
        states = torch.where(
            ids == 0,
            torch.from_numpy(rng.integers(0, a.num_states, n)).to(device),
            torch.from_numpy(rng.integers(0, b.num_states, n)).to(device),
        )
        logits = torch.randn(n, a.vocab_size, device=device)
        rows_a, rows_b = (ids == 0).nonzero().reshape(-1), (ids == 1).nonzero().reshape(-1)

        def per_table(
            logits: torch.Tensor = logits,
            rows_a: torch.Tensor = rows_a,
            rows_b: torch.Tensor = rows_b,
            states: torch.Tensor = states,
        ) -> torch.Tensor:
            lg = logits.clone()
            da.mask_rows(lg, rows_a, states[rows_a], max_gather=0)
            db.mask_rows(lg, rows_b, states[rows_b], max_gather=0)
            tok = lg.argmax(1)
            nxt = torch.empty_like(states)
            nxt[rows_a] = da.advance(states[rows_a], tok[rows_a])
            nxt[rows_b] = db.advance(states[rows_b], tok[rows_b])
            return nxt

        def one_launch(
            ids: torch.Tensor = ids, states: torch.Tensor = states, logits: torch.Tensor = logits
        ) -> torch.Tensor:
            return fused.advance(ids, states, fused.mask_logits(logits.clone(), ids, states).argmax(1))

        same = torch.equal(per_table(), one_launch())
        failed |= not same
        if not timed:
            print(f"  two tables, B={n:<4}: one launch {'equal to' if same else 'DIFFERS from'} a step per table")
            continue
        t_per, t_one = time_us(per_table, device, iters), time_us(one_launch, device, iters)
        print(
            f"  two tables, B={n:<4}: per table {t_per:8.1f} us, one launch {t_one:8.1f} us ({t_per / t_one:.1f}x)"
            f"{'' if same else '   DIFFER'}"
        )
    return failed


def other_kinds(
    vocab: triec.Vocabulary, name: str, device: torch.device, kernels: bool, args: argparse.Namespace, rng: Any
) -> bool:
    """The tables that are not a full-layout set: titles in the tail layout (issue 43) and the named formats'
    pattern tables (issue 44), each checked on the torch path and the kernels against the numpy runtime."""
    from triec.synthetic.sets import titles

    tables: list[tuple[str, Any]] = []
    if args.tails_k:
        tables.append(
            (f"titles K={args.tails_k} (tail layout)", triec.compile(titles(args.tails_k), vocab, layout="tails"))
        )
    tables += [(f"pattern {f}", triec.compile_pattern(format=f, vocab=vocab)) for f in triec.FORMATS]
    failed = False
    for label, table in tables:
        paths = [("torch", table.to_torch(device, kernels=False))]
        paths += [("kernels", table.to_torch(device, kernels=True))] if kernels else []
        for path, dev in paths:
            errors = check(table, dev, args.sample, rng)
            failed |= bool(errors)
            print(f"{name} {label}: {path}: " + ("; ".join(errors) if errors else "equal to the numpy runtime"))
    return failed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--ks", default="1000,100000", help="comma-separated value counts")
    ap.add_argument("--batches", default="1,32,256", help="comma-separated batch sizes")
    ap.add_argument("--iters", type=int, default=200, help="steps per timing round")
    ap.add_argument("--sample", type=int, default=8192, help="states whose rows are checked (all if fewer)")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument(
        "--tokenizer", default="qwen2", help="tokenizer (default: the bundled Qwen2; a path needs no zstandard)"
    )
    ap.add_argument(
        "--vocab-size", type=int, default=None, help="mask width (default: 151,936 for qwen2, else the tokenizer's)"
    )
    ap.add_argument(
        "--tokenizers",
        default="",
        help="comma-separated tokenizers, each checked in turn (overrides --tokenizer); phi3 names the fixture",
    )
    ap.add_argument(
        "--triton-interpret",
        action="store_true",
        help="run the Triton kernels under Triton's interpreter (CPU tensors; checks, not speed)",
    )
    ap.add_argument("--kernels", choices=("auto", "off"), default="auto", help="check and time the fused kernels too")
    ap.add_argument(
        "--vllm",
        choices=("auto", "on", "off", "only"),
        default="auto",
        help="vLLM end-to-end checks and bench (auto: on CUDA when vLLM is importable)",
    )
    ap.add_argument("--tails-k", type=int, default=100000, help="titles in the tail layout checked (0: none)")
    ap.add_argument("--vllm-ks", default="1000,10000")
    ap.add_argument("--vllm-batches", default="256")
    ap.add_argument("--vllm-methods", default="triec,xgrammar,unconstrained")
    ap.add_argument("--vllm-timeout", type=int, default=300, help="seconds per vLLM engine process")
    args = ap.parse_args(argv)
    if args.triton_interpret:
        if args.device != "cpu":
            print("--triton-interpret runs on CPU tensors: use --device cpu", file=sys.stderr)
            return 2
        os.environ["TRITON_INTERPRET"] = "1"  # read when the kernels are first made
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device here; use --device cpu", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device {device} ({name}), torch {torch.__version__}")
    if args.vllm == "only":
        return vllm_checks(args)
    from triec.runtime.torch import use_kernels

    kernels = args.kernels == "auto" and use_kernels(device)
    print(f"fused kernels: {'on' if kernels else 'off'}{' (Triton interpreter)' if args.triton_interpret else ''}")
    if args.triton_interpret and not kernels:
        print("--triton-interpret: triton is not importable here (pip install triton)", file=sys.stderr)
        return 2
    rng = np.random.default_rng(0)
    failed = False
    names = [t for t in args.tokenizers.split(",") if t] or [args.tokenizer]
    for tok_name in names:
        spec = str(ROOT / "fixtures/tokenizers/phi3/tokenizer.json.zst") if tok_name == "phi3" else tok_name
        vocab = triec.Vocabulary.load(spec, vocab_size=args.vocab_size or (151936 if tok_name == "qwen2" else None))
        for k in (int(x) for x in args.ks.split(",")):
            table = triec.compile(tool_names(k), vocab)
            t0 = time.perf_counter()
            dev = table.to_torch(device, kernels=False)
            _sync(device)
            upload_ms = (time.perf_counter() - t0) * 1e3
            print(
                f"\n{tok_name} K={k}: {table.num_states} states, {table.num_allowed} pairs; {dev!r}; upload {upload_ms:.1f} ms"
            )
            paths = [("torch", dev)] + ([("kernels", table.to_torch(device, kernels=True))] if kernels else [])
            for label, d in paths:
                errors = check(table, d, args.sample, rng)
                failed |= bool(errors)
                print(f"  {label}: " + ("; ".join(errors) if errors else "equal to the numpy runtime"))
            if args.triton_interpret:  # the interpreter checks, it does not time
                failed |= two_tables(vocab, k, device, [int(x) for x in args.batches.split(",")], 1, rng, timed=False)
                continue
            print(
                "      B | path    |  fill us | apply us | advance us | step us (fill+apply+argmax+advance) | mask_rows us bitmask / gather"
            )
            for b in (int(x) for x in args.batches.split(",")):
                states = torch.from_numpy(rng.integers(0, table.num_states, b)).to(device)
                logits = torch.randn(b, table.vocab_size, device=device)
                for label, d in paths:
                    fill, apply, adv, step = time_step(d, states, logits, args.iters)
                    by_bits, by_gather = time_mask_rows(d, states, logits, args.iters)
                    sync = no_host_sync(d, states, logits)
                    print(
                        f"  B={b:<4} | {label:<7} | {fill:8.1f} | {apply:8.1f} | {adv:10.1f} | {step:7.1f} | "
                        f"{by_bits:9.1f} / {by_gather:9.1f}   no host sync: {sync}"
                    )
                    failed |= sync.startswith("NO")
                if kernels:
                    graph = graph_step(paths[1][1], states, logits)
                    failed |= graph == "DIFFERS"
                    print(f"  B={b:<4} | CUDA graph capture and replay of a kernel step: {graph}")
                try:
                    import xgrammar

                    rows = dev.fill(states)
                    xg = time_us(lambda: xgrammar.apply_token_bitmask_inplace(logits, rows), device, args.iters)  # noqa: B023
                    print(f"  B={b:<4} | xgrammar's apply_token_bitmask_inplace: {xg:.1f} us")
                except ImportError:
                    pass
            if kernels:
                failed |= two_tables(vocab, k, device, [int(x) for x in args.batches.split(",")], args.iters, rng)
        failed |= other_kinds(vocab, tok_name, device, kernels, args, rng)
    if args.vllm == "on" or (args.vllm == "auto" and device.type == "cuda"):
        failed |= bool(vllm_checks(args))
    return 1 if failed else 0


def vllm_checks(args: argparse.Namespace) -> int:
    """The vLLM end-to-end check on both model runners, then the throughput bench; 1 when a check fails."""
    try:
        import vllm
    except ImportError as exc:
        print(f"\nvLLM checks skipped: vLLM is not importable here ({exc}); install vllm to run them")
        return 0
    print(f"\nvLLM {vllm.__version__}: end-to-end checks (tiny random-weight Llama, Qwen2 tokenizer)", flush=True)
    env = dict(os.environ)
    root = str(Path(triec.__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")  # the engine processes import triec
    failed = 0
    work = Path(os.environ.get("TMPDIR", "/tmp")) / "triec-gpu-check-vllm"
    timeout = str(args.vllm_timeout)
    runs = [
        ("Model Runner V2 (default)", "v2", {}),
        ("V1 runner, async scheduling", "v1", {"VLLM_USE_V2_MODEL_RUNNER": "0"}),
    ]
    for label, runner, extra in runs:
        cmd = [sys.executable, *BENCH_VLLM, "--check", "--runner", runner, "--workdir", str(work), "--timeout", timeout]
        print(f"- {label}:", flush=True)
        failed |= subprocess.run(cmd, env={**env, **extra}).returncode != 0
    cmd = [
        sys.executable,
        *BENCH_VLLM,
        "--runner",
        "v2",
        "--workdir",
        str(work),
        "--ks",
        args.vllm_ks,
        "--batches",
        args.vllm_batches,
        "--methods",
        args.vllm_methods,
        "--timeout",
        timeout,
    ]
    print("- throughput (Model Runner V2, one engine per cell):", flush=True)
    failed |= subprocess.run(cmd, env=env).returncode != 0
    return int(failed)


if __name__ == "__main__":
    sys.exit(main())
