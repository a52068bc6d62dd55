"""Progress on long commands: drawn on a terminal's stderr, absent from JSON, --quiet, pipes and logs.

"A terminal" is rich's ``force_terminal`` console swapped in for the CLI's stderr
console, writing into the CliRunner's captured stderr; without it the runner's
stderr is not a terminal, as in CI. One test also runs the real command with its
stderr on a pipe. The work underneath is real: real tokenizers, real engines.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console
from typer.testing import CliRunner, Result

import triec
import triec.bench.peers
import triec.synthetic.sets
from triec.cli import _common, _progress, app
from triec.compiler.walk import walk
from triec.keys import prepare_values
from triec.trie import build_trie

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
ROOT = Path(__file__).resolve().parent.parent


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "150"})


def plain(text: str) -> str:
    """The text of a terminal stream: escape codes dropped, redraws split onto lines."""
    return ANSI.sub("", text).replace("\r", "\n")


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """stderr is a terminal: a console that draws, writing to whatever sys.stderr is when it writes."""
    monkeypatch.setattr(_common, "err", Console(stderr=True, force_terminal=True, width=150))


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory, vocabs: dict[str, triec.Vocabulary]) -> tuple[Path, int]:
    path = tmp_path_factory.mktemp("progress") / "tools.triec"
    table = triec.compile(triec.synthetic.sets.tool_names(150), vocabs["gpt2"])
    table.save(path)
    return path, table.num_states


# ---------------------------------------------------------------- verify


def test_verify_draws_a_bar_per_engine_on_a_terminal(terminal: None, artifact: tuple[Path, int]) -> None:
    path, states = artifact
    result = invoke("verify", str(path), "--against", "reference,llguidance", "--walks", "7")
    assert result.exit_code == 0, result.stdout + result.stderr
    err = plain(result.stderr)
    assert "\x1b[" in result.stderr  # drawn with terminal control codes
    bars = [line for line in err.splitlines() if line.startswith(("reference", "llguidance"))]
    assert any(line.startswith("reference") and f"states {states:,}/{states:,}" in line for line in bars), err
    assert any(
        line.startswith("llguidance") and "walks 7/7" in line and f"states {states:,}/{states:,}" in line
        for line in bars
    ), err
    assert "━" in err and re.search(r"\d:\d\d:\d\d", err)  # a bar, elapsed time and ETA
    assert "OK" in result.stdout and "eta" not in result.stdout  # the report stays on stdout, the bars on stderr


@pytest.mark.parametrize("flag", ["--json", "--quiet"])
def test_verify_json_and_quiet_draw_nothing_even_on_a_terminal(
    terminal: None, artifact: tuple[Path, int], flag: str
) -> None:
    result = invoke("verify", str(artifact[0]), "--walks", "3", flag)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert result.stderr == ""
    if flag == "--json":
        assert json.loads(result.stdout)["ok"]
    else:
        assert result.stdout == ""


def test_verify_quiet_still_reports_a_failure(terminal: None, tmp_path: Path, artifact: tuple[Path, int]) -> None:
    broken = tmp_path / "broken.triec"
    raw = bytearray(artifact[0].read_bytes())
    raw[-100] ^= 0xFF  # inside the last section: its CRC-32 no longer matches
    broken.write_bytes(bytes(raw))
    result = invoke("verify", str(broken), "--quiet")
    assert result.exit_code == 1 and "integrity" in result.stderr


def test_verify_without_a_terminal_prints_no_progress(artifact: tuple[Path, int]) -> None:
    result = invoke("verify", str(artifact[0]), "--against", "reference,llguidance", "--walks", "3")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert result.stderr == "" and "\x1b[" not in result.stdout and "OK" in result.stdout


def test_progress_callback_follows_the_work(artifact: tuple[Path, int]) -> None:
    from triec.verify.tables import CheckProgress, verify

    seen: list[CheckProgress] = []
    report = verify(str(artifact[0]), against=["reference", "llguidance"], walks=4, progress=seen.append)
    assert report.ok
    for name in ("reference", "llguidance"):
        mine = [p for p in seen if p.against == name]
        assert mine[-1].phase == "done" and mine[-1].states == artifact[1] == mine[-1].states_total
        assert [p.states for p in mine] == sorted(p.states for p in mine)  # never goes back
        assert any(p.phase == "states" and 0 < p.states < p.states_total for p in mine)  # reports along the way
    eng = [p for p in seen if p.against == "llguidance"]
    assert [p.phase for p in eng][:2] == ["loading", "compiling"] and eng[-1].walks == 4 == eng[-1].walks_total


def test_verify_through_a_pipe_has_a_clean_stderr(artifact: tuple[Path, int]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "triec.cli", "verify", str(artifact[0]), "--walks", "3"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and "OK" in proc.stdout and "\x1b[" not in proc.stdout


# ---------------------------------------------------------------- compile


def test_walk_reports_monotone_progress_and_the_same_result(vocabs: dict[str, triec.Vocabulary]) -> None:
    vocab = vocabs["gpt2"]
    trie = build_trie(prepare_values(triec.synthetic.sets.tool_names(300))[0])
    calls: list[tuple[int, int]] = []
    with_progress = walk(trie, vocab.automaton, vocab.vocab_size, lambda d, t: calls.append((d, t)))
    without = walk(trie, vocab.automaton, vocab.vocab_size)
    for a, b in zip(
        (with_progress.offsets, with_progress.tokens, with_progress.next_state),
        (without.offsets, without.tokens, without.next_state),
        strict=True,
    ):
        assert np.array_equal(a, b)
    done = [d for d, _ in calls]
    assert done == sorted(done) and calls[-1][0] == calls[-1][1] and len({t for _, t in calls}) == 1
    # once per slice of ``chunk`` nodes walked (the walk runs in rounds, not levels), then twice for the CSR
    fine: list[tuple[int, int]] = []
    walk(trie, vocab.automaton, vocab.vocab_size, lambda d, t: fine.append((d, t)), chunk=256)
    assert len(fine) >= -(-(trie.num_nodes - 1) // 256) + 2 > 4
    assert [d for d, _ in fine] == sorted(d for d, _ in fine) and fine[-1][0] == fine[-1][1]


def test_compile_grows_a_bar_on_a_terminal(terminal: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(_progress, "SHOW_AFTER_S", 0.0)  # a tiny compile is never a second long
    values = tmp_path / "tools.txt"
    values.write_text("\n".join(triec.synthetic.sets.tool_names(500)) + "\n")
    result = invoke("compile", str(values), "-t", "gpt2", "-o", str(tmp_path / "t.triec"))
    assert result.exit_code == 0, result.stdout + result.stderr
    err = plain(result.stderr)
    assert "compiling 500 values" in err and "100%" in err and "━" in err
    assert "reading" in err and "writing" in err  # the spinner of each phase


def test_compile_shows_no_bar_in_its_first_second(
    terminal: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(_progress, "SHOW_AFTER_S", 3600.0)
    values = tmp_path / "tools.txt"
    values.write_text("\n".join(triec.synthetic.sets.tool_names(500)) + "\n")
    result = invoke("compile", str(values), "-t", "gpt2", "-o", str(tmp_path / "t.triec"))
    assert result.exit_code == 0
    assert "compiling 500 values" in plain(result.stderr) and "%" not in plain(result.stderr)


@pytest.mark.parametrize("flag", ["--json", "--quiet", None])
def test_compile_is_silent_on_stderr_unless_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: str | None
) -> None:
    monkeypatch.setattr(_progress, "SHOW_AFTER_S", 0.0)
    if flag is not None:  # JSON and --quiet: nothing even on a terminal; otherwise: no terminal at all
        monkeypatch.setattr(_common, "err", Console(stderr=True, force_terminal=True, width=150))
    values = tmp_path / "tools.txt"
    values.write_text("\n".join(triec.synthetic.sets.tool_names(200)) + "\n")
    result = invoke("compile", str(values), "-t", "gpt2", "-o", str(tmp_path / "t.triec"), *([flag] if flag else []))
    assert result.exit_code == 0 and result.stderr == ""


# ---------------------------------------------------------------- bench

BENCH = ("bench", "-t", "gpt2", "--k", "10", "--repeat", "1", "--batch", "2", "--paths", "2", "--timeout", "120")


def test_bench_bar_names_the_cell_on_a_terminal(terminal: None) -> None:
    result = invoke(*BENCH, "--engines", "triec,llguidance")
    assert result.exit_code == 0, result.stdout + result.stderr
    err = plain(result.stderr)
    assert "K=10 triec..." in err and "K=10 llguidance..." in err  # the cell being measured
    assert "2/2 cells" in err and "━" in err


def test_bench_logs_a_line_per_cell_without_a_terminal_and_nothing_quiet() -> None:
    result = invoke(*BENCH, "--engines", "triec")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert re.fullmatch(r"K=10 triec: ok \(\d+\.\d s\)\n", result.stderr), result.stderr
    quiet = invoke(*BENCH, "--engines", "triec", "--quiet")
    assert quiet.exit_code == 0 and quiet.stderr == "" and "K" in quiet.stdout


def test_bench_ctrl_c_keeps_the_cells_measured(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real = triec.bench.peers.run_cell

    def interrupted_at_llguidance(job: dict, timeout: float, env: dict | None = None) -> dict:
        if job["engine"] == "llguidance":
            raise KeyboardInterrupt  # what SIGINT raises inside subprocess.run
        return real(job, timeout, env)

    monkeypatch.setattr(triec.bench.peers, "run_cell", interrupted_at_llguidance)
    out = tmp_path / "partial.json"
    result = invoke(*BENCH, "--engines", "triec,llguidance,xgrammar", "--json", str(out))
    assert result.exit_code == 130, result.stdout + result.stderr
    text = " ".join(result.stdout.split())
    assert "INTERRUPTED" in text and "│ 10 │ triec" in result.stdout and "llguidance" not in result.stdout
    assert "interrupted" in result.stderr and "1 cell" in result.stderr
    data = json.loads(out.read_text())
    assert data["interrupted"] is True
    assert [list(r["engines"]) for r in data["results"]] == [["triec"]] and data["results"][0]["engines"]["triec"][
        "status"
    ] == "ok"
