"""``triec bench`` end to end at tiny sizes: the JSON has its documented shape; nothing about speed is asserted."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

import triec.check.bench
from triec.check.bench import ALL_ENGINES, batch_prefixes, markdown_table, parse_int_list, run_cell, summary
from triec.cli import app
from triec.engines import ENGINES, is_installed
from triec.errors import TriecError

SUMMARY = {"min", "median", "max", "n"}


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    result = invoke(
        "bench", "-t", "gpt2", "--k", "10,100", "--repeat", "1", "--batch", "1,4", "--paths", "3",
        "--timeout", "120", "--json", str(out), "--engines", ",".join(ALL_ENGINES),
    )  # fmt: skip
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "time / triec" in " ".join(result.stdout.split())  # the ratio columns are explained in the title
    return json.loads(out.read_text())


def test_json_shape(tiny_run: dict) -> None:
    r = tiny_run
    assert {"command", "machine", "versions", "settings", "timed", "results"} <= set(r)
    assert r["machine"]["cores"] >= 1 and r["machine"]["python"]
    assert set(r["versions"]) == {"triec", *ENGINES}
    s = r["settings"]
    assert s["k"] == [10, 100] and s["batch"] == [1, 4] and s["repeat"] == 1 and s["tokenizer"] == "gpt2"
    assert s["vocab_size"] == 50257 and s["eos_token_ids"] == [50256]
    assert [row["k"] for row in r["results"]] == [10, 100]
    for row in r["results"]:
        assert row["values"] == row["k"] and row["paths"] == 3 and row["steps"] >= 6
        assert set(row["engines"]) == set(ALL_ENGINES)
        t = row["engines"]["triec"]
        assert t["status"] == "ok", t
        for key in ("compile_s", "step_s", "load_s"):
            assert set(t[key]) == SUMMARY and t[key]["min"] <= t[key]["median"] <= t[key]["max"]
        assert set(t["batch_s"]) == {"1", "4"} and all(set(v) == SUMMARY for v in t["batch_s"].values())
        assert t["artifact_bytes"] > t["artifact_zstd_bytes"] > 0 and t["states"] == row["states"] > row["k"]
        assert t["peak_rss"] >= t["rss_before"] > 0
        assert t["cold"]["status"] == "ok" and t["cold"]["cold_s"] >= t["cold"]["automaton_s"] > 0
        for name in ENGINES:
            cell = row["engines"][name]
            if not is_installed(name):
                assert cell["status"] == "missing" and "pip install" in cell["error"]
                continue
            assert cell["status"] == "ok", cell
            assert set(cell["compile_s"]) == SUMMARY and set(cell["step_s"]) == SUMMARY
            assert set(cell["batch_s"]) == {"1", "4"} and cell["setup_s"] > 0
            assert r["versions"][name] and r["timed"][name]["compile"]


def test_markdown_table_has_a_row_per_cell(tiny_run: dict) -> None:
    md = markdown_table(tiny_run).splitlines()
    assert md[0].startswith("| K | engine |") and len(md) == 2 + 2 * len(ALL_ENGINES)


def test_missing_engine_is_reported_not_a_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(triec.check.bench, "is_installed", lambda name: False)
    out = tmp_path / "b.json"
    result = invoke("bench", "-t", "gpt2", "--k", "10", "--repeat", "1", "--batch", "2", "--paths", "2", "--engines", "triec,xgrammar", "--json", str(out))
    assert result.exit_code == 0, result.stdout + result.stderr
    cell = json.loads(out.read_text())["results"][0]["engines"]["xgrammar"]
    assert cell["status"] == "missing" and "pip install xgrammar" in cell["error"]
    assert "missing" in result.stdout


def test_a_cell_past_its_timeout_says_so() -> None:
    job = {"engine": "llguidance", "tokenizer": "gpt2", "vocab_size": None, "eos": [50256], "values": ["a", "b"],
           "paths": [], "repeat": 1, "batch": [1], "seed": 0}  # fmt: skip
    cell = run_cell(job, timeout=0.2)  # importing triec alone takes longer
    assert cell["status"] == "timeout" and "0.2 s" in cell["error"]


def test_options_are_checked() -> None:
    assert parse_int_list("10, 1e3,100_000", "--k") == [10, 1000, 100000]
    assert parse_int_list("1e6,1000000", "--k") == [1_000_000, 1_000_000]
    with pytest.raises(TriecError, match="--k"):
        parse_int_list("10,x", "--k")
    result = invoke("bench", "--engines", "triec,vllm")
    assert result.exit_code == 2 and "--engines" in result.stderr
    result = invoke("bench", "--set", "no-such-file.txt")
    assert result.exit_code == 2 and "no-such-file.txt" in result.stderr
    assert summary([3.0, 1.0, 2.0]) == {"min": 1.0, "median": 2.0, "max": 3.0, "n": 3}
    prefixes = batch_prefixes([[1, 2, 3], [4]], 16, seed=0)
    assert len(prefixes) == 16 and all(p in ([], [1], [1, 2], [1, 2, 3], [4]) for p in prefixes)


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="matplotlib is not installed (pip install 'triec[bench]')")
def test_plot_writes_a_png(tiny_run: dict, tmp_path: Path) -> None:
    path = tmp_path / "bench.png"
    triec.check.bench.plot(tiny_run, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
