"""The GPU check: the torch table and the fused Triton kernels on a CUDA device, checked and timed.

Runs :mod:`benchmarks.gpu_check` (``python -m benchmarks.gpu_check``; ``--device cpu --triton-interpret``
checks the kernels without a GPU) in its own process: the synthetic tool names at K = 1,000 and 100,000 for
Qwen2 (151,936 wide), every table checked against the numpy runtime, no host synchronisation in a step, then
per-step times (medians in µs) for the torch path and the kernels at B = 1, 32, 256, xgrammar's
``apply_token_bitmask_inplace`` on the same bitmask, and two tables in one launch. The suite keeps the log and
reads its figures from it (:func:`parse_log`), so a log from a machine elsewhere is a result in the same form.
"""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

from benchmarks import docs, results

FULL = ["--ks", "1000,100000", "--batches", "1,32,256", "--vllm", "off"]
QUICK = ["--ks", "1000", "--batches", "1,32", "--iters", "20", "--vllm", "off"]

_TABLE = re.compile(r"^(?P<tok>\S+) K=(?P<k>\d+): (?P<states>\d+) states, (?P<pairs>\d+) pairs")
_STEP = re.compile(
    r"^\s+B=(?P<b>\d+)\s+\| (?P<path>torch|kernels)\s*\|\s*(?P<fill>[\d.]+) \|\s*(?P<apply>[\d.]+) \|\s*(?P<advance>[\d.]+)"
    r" \|\s*(?P<step>[\d.]+) \|\s*(?P<bits>[\d.]+) /\s*(?P<gather>[\d.]+)\s+no host sync: (?P<sync>\S+)"
)
_XGR = re.compile(r"^\s+B=(?P<b>\d+)\s+\| xgrammar's apply_token_bitmask_inplace: (?P<us>[\d.]+) us")
_GRAPH = re.compile(r"^\s+B=(?P<b>\d+)\s+\| CUDA graph capture and replay of a kernel step: (?P<graph>\S+)")
_TWO = re.compile(r"^\s+two tables, B=(?P<b>\d+)\s*: per table\s+(?P<per>[\d.]+) us, one launch\s+(?P<one>[\d.]+) us")


def unavailable() -> str | None:
    try:
        import torch
    except ImportError:
        return "needs torch with CUDA"
    return None if torch.cuda.is_available() else "needs a CUDA device (python -m benchmarks.gpu_check --device cpu)"


def parse_log(text: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """gpu_check's output as (facts about the device, one cell per (tokenizer, K, B))."""
    lines = text.splitlines()
    facts: dict[str, Any] = {"device": lines[0] if lines else "", "equal": []}
    cells: dict[tuple[str, int, int], dict[str, Any]] = {}
    table: dict[str, Any] = {}
    for line in lines:
        if m := _TABLE.match(line):
            table = {"tokenizer": m["tok"], "k": int(m["k"]), "states": int(m["states"]), "pairs": int(m["pairs"])}
            continue
        if "equal to the numpy runtime" in line or "differs" in line.lower():
            facts["equal"].append(f"{table.get('tokenizer')} K={table.get('k')}: {line.strip()}")
        m = _STEP.match(line) or _XGR.match(line) or _GRAPH.match(line) or _TWO.match(line)
        if not m or not table:
            continue
        key = (table["tokenizer"], table["k"], int(m["b"]))
        cell = cells.setdefault(key, {**table, "b": int(m["b"]), "status": "ok"})
        fields = m.groupdict()
        if "path" in fields:
            p = fields["path"]
            cell.update(
                {f"{p}_{f}_us": float(fields[f]) for f in ("fill", "apply", "advance", "step", "bits", "gather")}
            )
            cell[f"{p}_no_host_sync"] = fields["sync"]
        elif "us" in fields:
            cell["xgrammar_apply_us"] = float(fields["us"])
        elif "graph" in fields:
            cell["cuda_graph"] = fields["graph"]
        else:
            cell.update(two_tables_per_table_us=float(fields["per"]), two_tables_one_launch_us=float(fields["one"]))
    return facts, list(cells.values())


def run(quick: bool) -> dict[str, Any]:
    args = [sys.executable, "-m", "benchmarks.gpu_check", "--device", "cuda", *(QUICK if quick else FULL)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=3600)
    facts, cells = parse_log(proc.stdout)
    result = results.new(
        "gpu",
        {"quick": quick, "args": args[3:], **facts, "exit_code": proc.returncode},
        extra_versions=("torch", "triton"),
    )
    result["log"] = proc.stdout
    if proc.returncode != 0:
        cells.append({"status": "error", "error": f"gpu_check exited {proc.returncode}: {proc.stderr.strip()[-300:]}"})
    result["cells"] = cells
    return result


def _pair(c: dict[str, Any], field: str) -> str:
    a, b = c.get(f"torch_{field}_us"), c.get(f"kernels_{field}_us")
    return f"{a:.0f} / {b:.0f}" if a is not None and b is not None else "-"


def tables(result: dict[str, Any]) -> dict[str, str]:
    rows = []
    for c in result["cells"]:
        if c.get("status") != "ok":
            rows.append([docs.status_note(c), *[""] * 7])
            continue
        ratio = docs.ratio(c.get("torch_step_us"), c.get("kernels_step_us"))
        xgr = c.get("xgrammar_apply_us")
        two = docs.ratio(c.get("two_tables_per_table_us"), c.get("two_tables_one_launch_us"))
        rows.append(
            [
                f"{c['k']:,}",
                str(c["b"]),
                _pair(c, "fill"),
                _pair(c, "advance"),
                _pair(c, "step"),
                ratio,
                f"{c.get('kernels_apply_us', 0):.0f} / {xgr:.0f}" if xgr is not None else "-",
                two,
            ]
        )
    header = [
        "K",
        "B",
        "fill torch / kernel",
        "advance torch / kernel",
        "step torch / kernel",
        "step ratio",
        "apply (kernel) / xgrammar's apply",
        "two tables: one launch",
    ]
    return {"kernels": docs.markdown(header, rows)}
