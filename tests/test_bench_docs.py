"""docs/benchmarks.md against docs/results/: every table is what its suite renders from its result file, and
every suite that can run here still runs at its smallest size (``python -m benchmarks all --quick``; figures
unchecked)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import docs, results
from benchmarks.suites import NAMES, load

ROOT = Path(__file__).resolve().parent.parent
DOCUMENT = ROOT / "docs" / "benchmarks.md"
RESULTS = ROOT / "docs" / "results"


def test_every_table_equals_its_result_file() -> None:
    text = DOCUMENT.read_text(encoding="utf-8")
    found = docs.blocks(text)
    assert found, "docs/benchmarks.md has no generated tables"
    assert docs.mismatches(text, RESULTS) == [], "rewrite them: python -m benchmarks docs"
    assert docs.render(text, RESULTS) == text


def test_result_files_are_one_per_suite_and_well_formed() -> None:
    files = sorted(p.stem for p in RESULTS.glob("*"))
    assert set(files) <= set(NAMES), f"result files not named by a suite: {set(files) - set(NAMES)}"
    for suite in files:
        result = results.read(RESULTS, suite)
        assert result["settings"].get("quick") is False, f"{suite}: quick results are not timings"
        assert isinstance(load(suite).tables(result), dict)
    used = {s for s, _, _ in docs.blocks(DOCUMENT.read_text(encoding="utf-8"))}
    assert used <= set(files)


def test_a_changed_result_shows_as_a_mismatch(tmp_path: Path) -> None:
    import shutil

    shutil.copytree(RESULTS, tmp_path, dirs_exist_ok=True)
    suite = "compile_load"
    result = results.read(RESULTS, suite)
    result["cells"][0]["states"] = 1
    results.write(result, tmp_path)
    text = DOCUMENT.read_text(encoding="utf-8")
    assert f"{suite}:compile" in docs.mismatches(text, tmp_path)


def test_bench_docs_rewrites_a_stale_table(tmp_path: Path) -> None:
    """`python -m benchmarks docs` alone is the rewrite: a table emptied by hand comes back from its result file."""
    from benchmarks import command

    document = tmp_path / "benchmarks.md"
    text = DOCUMENT.read_text(encoding="utf-8")
    suite, table, body = docs.blocks(text)[0]
    document.write_text(text.replace(body, "", 1), encoding="utf-8")
    assert f"{suite}:{table}" in docs.mismatches(document.read_text(encoding="utf-8"), RESULTS)
    assert command.run("docs", quick=False, out=RESULTS, write_docs=False, document=document, say=lambda _: None) == 0
    assert document.read_text(encoding="utf-8") == text


@pytest.mark.engines
def test_every_suite_runs_quick(tmp_path: Path) -> None:
    """``python -m benchmarks all --quick``: each suite runs or says why it is skipped; each result file is well-formed."""
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "all", "--quick", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for suite in NAMES:
        line = next(
            line for line in proc.stderr.splitlines() if line.startswith(f"{suite}: ") and "running" not in line
        )
        assert line.startswith((f"{suite}: ok", f"{suite}: skipped")), line
        if line.startswith(f"{suite}: ok"):
            result = results.read(tmp_path, suite)
            assert result["settings"]["quick"] is True and result["cells"]
            assert all(c.get("status") in ("ok", "missing") for c in result["cells"]), result["cells"]
            assert isinstance(load(suite).tables(json.loads(results.path(tmp_path, suite).read_text())), dict)


def test_a_suite_named_alone_that_cannot_run_is_an_error() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "sglang", "--quick"], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 2 and "sglang: skipped" in proc.stderr


def test_the_command_checks_its_arguments() -> None:
    """An unknown suite, and --write-docs with --quick, are errors (exit 2) before anything runs."""
    from benchmarks.__main__ import main

    assert main(["nosuch", "--quick"]) == 2
    assert main(["peers", "--quick", "--write-docs"]) == 2


def test_the_package_command_points_at_the_suites() -> None:
    """The wheel has no suites: ``triec bench SUITE`` says where they are instead of running one."""
    from typer.testing import CliRunner

    from triec.cli import app

    result = CliRunner().invoke(app, ["bench", "vllm"])
    assert result.exit_code == 2 and "python -m benchmarks vllm" in result.output


def test_a_suite_whose_cells_broke_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cell with status "error" is a measurement that broke, not a result: under --quick (what CI runs) one
    fails the suite, in a full run only all of them do (timeouts and refusals stay results)."""
    import types

    from benchmarks import command

    cells: list[dict] = []

    def run(quick: bool) -> dict:
        result = results.new("peers", {"quick": quick})
        result["cells"] = list(cells)
        return result

    monkeypatch.setattr(command, "load", lambda name: types.SimpleNamespace(unavailable=lambda: None, run=run))
    say = lambda _: None  # noqa: E731
    cells[:] = [{"status": "ok"}, {"status": "error", "error": "no table in the driver's output"}]
    quick = command.run_one("peers", quick=True, out=None, alone=False, say=say)
    assert quick.status == "failed" and "1 cells broke: no table" in quick.detail
    assert command.run_one("peers", quick=False, out=None, alone=False, say=say).status == "ok"
    cells[:] = [{"status": "error", "error": "x"}]
    assert command.run_one("peers", quick=False, out=None, alone=False, say=say).status == "failed"
    cells[:] = [{"status": "timeout"}, {"status": "ok"}]
    assert command.run_one("peers", quick=True, out=None, alone=False, say=say).status == "ok"
