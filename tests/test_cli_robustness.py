"""The CLI under interruption: nothing half-written on disk, whatever the moment of Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import triec
import triec.synthetic.sets


@pytest.mark.parametrize("delay", [0.3, 0.8, 1.5])
def test_ctrl_c_leaves_nothing_partial(tmp_path: Path, delay: float) -> None:
    values = tmp_path / "values.txt"
    values.write_text("\n".join(triec.synthetic.sets.tool_names(200_000)) + "\n", encoding="utf-8")
    out = tmp_path / "out.triec"
    env = dict(os.environ, TRIEC_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "triec.cli", "compile", str(values), "-o", str(out), "-q"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp") or p.name.startswith(".out.triec")]
    assert leftovers == [], f"temporary files left behind: {leftovers}"
    # Whenever the signal lands (before, during or after the rename), an artifact that
    # exists is whole, and nothing else is left on disk.
    if out.exists():
        assert triec.load(out, verify=True).num_values == 200_000
    else:
        assert proc.returncode != 0
    assert proc.returncode in (0, 130, -signal.SIGINT, 1), proc.returncode
    if proc.returncode == 130:
        assert "interrupted" in stderr and "Traceback" not in stderr
