"""A trained model (SmolLM2-135M-Instruct): triec's vLLM backend against vLLM's xgrammar, and ``triec eval``.

:mod:`benchmarks.trained_driver`: vLLM's CPU engine, greedy, one engine per (cell, method): ``choice`` over
BFCL's 1,998 function names, the same with ngram speculative decoding, ``tool_choice`` required and auto over
500 strict tools; validity, outputs equal between methods, req/s, draft acceptance. The ``triec eval`` tables
(BFCL ``multiple`` questions: free, the trie, think-then-answer) are carried results of ``triec eval``.
``--quick`` runs the ``choice`` cell alone, triec's side alone (one engine start).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import results, table_cells


def unavailable() -> str | None:
    try:
        import vllm  # noqa: F401
    except ImportError:
        return "needs vLLM and the trained model (nox -s vllm)"
    return None


def run(quick: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="triec-bench-eval-") as tmp:
        md = Path(tmp) / "trained.md"
        cmd = [
            sys.executable,
            "-m",
            "benchmarks.trained_driver",
            *(["--cells", "choice", "--methods", "triec"] if quick else []),  # quick: one engine start
            "--md",
            str(md),
        ]
        result = results.new("eval", {"quick": quick, "args": cmd[3:-2]}, extra_versions=("vllm", "torch"))
        proc = subprocess.run(cmd, capture_output=True, text=True)
        found = table_cells.parse_markdown(md.read_text()) if md.is_file() else []
    if proc.returncode != 0 or not found:
        tail = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
        result["cells"].append({"table": "vllm", "status": "error", "error": tail[:300]})
        return result
    result["cells"] += table_cells.cells("vllm", *found[0])
    return result


def tables(result: dict[str, Any]) -> dict[str, str]:
    return table_cells.render(result)
