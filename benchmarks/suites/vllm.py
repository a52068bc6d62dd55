"""triec inside vLLM: the logits processors, the structured-outputs backend, and the host bitmask path.

Three drivers, each running every engine in a process of its own (vLLM's CPU wheel here, the tiny
random-weight Llama of :mod:`benchmarks.tiny_llama` with the Qwen2 tokenizer, greedy):

* ``processors`` (:mod:`benchmarks.vllm_processors`): triec's processor against vLLM's own structured outputs
  (``choice``; xgrammar, guidance) and unconstrained requests: req/s, tokens/s, validity, first-request cost;
* ``backend`` (:mod:`benchmarks.vllm_backend`): vLLM's standard requests served by triec's backend
  (``TRIEC_VLLM_BACKEND=1``) against stock xgrammar: a new list's overhead, distinct and repeated lists,
  tools, speculative decoding;
* ``apply`` (:mod:`benchmarks.vllm_apply`): the worker's host bitmask path, vLLM's own against triec's hook.

``--quick`` runs the processors at K = 100, B = 4 (triec alone: one engine start), to prove the suite runs.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import results, table_cells

FULL = {
    "processors": [
        "--ks",
        "1000,10000",
        "--batches",
        "64",
        "--methods",
        "triec,xgrammar,unconstrained:9,unconstrained",
    ],
    "backend": [],
}
QUICK = {"processors": ["--ks", "100", "--batches", "4", "--methods", "triec", "--max-tokens", "8"]}  # one engine start


def unavailable() -> str | None:
    try:
        import vllm  # noqa: F401
    except ImportError:
        return "needs vLLM (nox -s vllm installs its CPU wheel)"
    return None


def run(quick: bool) -> dict[str, Any]:
    drivers = QUICK if quick else FULL
    result = results.new("vllm", {"quick": quick, "drivers": drivers}, extra_versions=("vllm", "torch"))
    with tempfile.TemporaryDirectory(prefix="triec-bench-vllm-") as tmp:
        for name, args in drivers.items():
            md = Path(tmp) / f"{name}.md"
            cmd = [sys.executable, "-m", f"benchmarks.vllm_{name}", *args, "--md", str(md)]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0 or not md.is_file():
                tail = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
                result["cells"].append({"table": name, "status": "error", "error": tail[:300]})
                continue
            for header, rows in table_cells.parse_markdown(md.read_text())[:1]:
                result["cells"] += table_cells.cells(name, header, rows)
    return result


def tables(result: dict[str, Any]) -> dict[str, str]:
    return table_cells.render(result)
