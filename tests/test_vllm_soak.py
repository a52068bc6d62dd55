"""The short soak (``tools/soak.py --quick``) inside the ``vllm`` session: about 40 s of mixed, hostile and
fault requests against the OpenAI server after its start; ``nox -s soak`` runs the long one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm

pytest.importorskip("vllm")
pytest.importorskip("openai")
pytest.importorskip("psutil")

ROOT = Path(__file__).resolve().parent.parent


def test_quick_soak(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"))
    # the tool imports triec: this checkout's, whether or not it is installed in the running environment
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "soak.py"),
            "--quick",
            "--json",
            str(out),
            "--workdir",
            str(tmp_path / "work"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    figures = json.loads(out.read_text())
    assert figures["invalid"] == 0 and not figures["hostile_not_400"] and not figures["died"]
    assert figures["kinds"]["hostile"]["n"] > 0 and sum(figures["faults"].values()) >= 5
