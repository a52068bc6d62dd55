"""``triec bench`` end to end at tiny sizes: the JSON has its documented shape; nothing about speed is asserted."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

import triec.bench.peers
from triec.bench.peers import ALL_ENGINES, batch_prefixes, markdown_table, parse_int_list, run_cell, summary
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
        "bench",
        "-t",
        "gpt2",
        "--k",
        "10,100",
        "--repeat",
        "1",
        "--batch",
        "1,4",
        "--paths",
        "3",
        "--timeout",
        "120",
        "--json",
        str(out),
        "--engines",
        ",".join(ALL_ENGINES),
    )
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
    monkeypatch.setattr(triec.bench.peers, "is_installed", lambda name: False)
    out = tmp_path / "b.json"
    result = invoke(
        "bench",
        "-t",
        "gpt2",
        "--k",
        "10",
        "--repeat",
        "1",
        "--batch",
        "2",
        "--paths",
        "2",
        "--engines",
        "triec,xgrammar",
        "--json",
        str(out),
    )
    assert result.exit_code == 0, result.stdout + result.stderr
    cell = json.loads(out.read_text())["results"][0]["engines"]["xgrammar"]
    assert cell["status"] == "missing" and "pip install xgrammar" in cell["error"]
    assert "missing" in result.stdout


def test_a_cell_past_its_timeout_says_so() -> None:
    job = {
        "engine": "llguidance",
        "tokenizer": "gpt2",
        "vocab_size": None,
        "eos": [50256],
        "values": ["a", "b"],
        "paths": [],
        "repeat": 1,
        "batch": [1],
        "seed": 0,
    }
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


@pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None, reason="matplotlib is not installed (pip install 'triec[bench]')"
)
def test_plot_writes_a_png(tiny_run: dict, tmp_path: Path) -> None:
    path = tmp_path / "bench.png"
    triec.bench.peers.plot(tiny_run, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------- the tools and enums suites' tables

_PEERS_MISSING = not (is_installed("llguidance") and is_installed("xgrammar"))


def _cells(line: str) -> list[str]:
    import re

    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().removeprefix("|").removesuffix("|"))]


def _markdown_tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Every markdown table of a text as (header cells, body rows); each row has as many cells as its header."""
    tables: list[tuple[list[str], list[list[str]]]] = []
    lines = [line for line in text.splitlines()]
    i = 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            header = _cells(lines[i])
            assert lines[i + 1].count("---") == len(header), lines[i]
            rows = []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(_cells(lines[i]))
                assert len(rows[-1]) == len(header), (header, lines[i])
                i += 1
            tables.append((header, rows))
        else:
            i += 1
    return tables


def test_bench_tables_keep_their_columns_with_refusals_and_timeouts() -> None:
    """A refused, timed-out or failed cell is a row with its reason, as wide as the others (no engines needed)."""
    from benchmarks.suites import tools

    s = {"n": 3, "median": 2.0, "p99": 9.0, "mean": 3.0, "min": 1.0, "max": 9.0}
    ok = {
        "status": "ok",
        "k": 2000,
        "build_cold_s": 0.05,
        "build_warm_s": 0.02,
        "name_rows": s,
        "name_start_rows": s,
        "first_handover": s,
        "first_handover_compile": s,
        "cached_handover": s,
        "args_rows_first": s,
        "args_rows": s,
        "grammars_compiled": 3,
        "memory": {
            "per_grammar_bytes": 1e5,
            "cache_bound_grammars": 2048,
            "xgrammar_memory_size": None,
            "row_cache_entries": 1,
            "row_cache_bytes": 10,
            "row_cache_bound": 4096,
            "row_bytes": 4096,
        },
    }
    res = {
        "settings": {"registries": ["r"]},
        "cells": {
            "r|triec-llguidance": ok,
            "r|triec-xgrammar": {"status": "error", "error": "RuntimeError: a | b"},
            "r|llguidance": {"status": "refused", "error": "refused: schema too large"},
            "r|llguidance-lark": {
                "status": "ok",
                "compile_s": 0.5,
                "name_rows": s,
                "name_start_rows": s,
                "name_start_cold": s,
                "name_start_warm": s,
                "first_args_row": s,
                "args_rows": s,
            },
            "r|xgrammar": {"status": "timeout", "error": "> 600 s (stopped during compile)"},
        },
    }
    text = tools.tables_text(res)
    found = _markdown_tables(text)
    assert [h[0] for h, _ in found] == ["registry"] * 4 and [len(rows) for _, rows in found] == [1, 3, 2, 1]
    build = dict(zip(found[0][0], found[0][1][0], strict=True))
    assert build["llguidance"] == "refused: schema too large" and build["xgrammar"].startswith("> 600 s")
    assert build["llguidance lark"] == "500.0 ms" and build["triec+llg warm"] == "20.0 ms"
    assert "RuntimeError: a \\| b" in text

    from benchmarks.suites import enums

    ok = {
        "status": "ok",
        "build_cold_s": 0.05,
        "build_warm_s": 0.01,
        "engine_compile_s": 0.002,
        **{f"rows_{k}": s for k in ("start", "deeper", "judged", "outside", "outside_engine", "into", "out")},
    }
    res = {
        "settings": {"shapes": ["icd"], "k": [100000]},
        "cells": {
            "icd|100000|triec-llguidance": ok,
            "icd|100000|triec-xgrammar": {"status": "timeout", "error": "> 9 s"},
            "icd|100000|llguidance": {"status": "refused", "error": "refused: schema too large"},
            "icd|100000|xgrammar": {"status": "ok", "compile_s": 16.0, "rows_start": s},
        },
        "threshold": {
            "llguidance|64": {
                "k": 64,
                "engine": "llguidance",
                "status": "ok",
                "build_trie_s": 0.004,
                "build_engine_s": 0.002,
                "rows_trie": s,
                "rows_engine": s,
                "rows_trie_inside": s,
                "rows_engine_inside": s,
            },
            "xgrammar|64": {"k": 64, "engine": "xgrammar", "status": "error", "error": "boom"},
        },
    }
    found = _markdown_tables(enums.tables_text(res))
    assert [h[0] for h, _ in found] == ["shape", "shape", "K"] and [len(rows) for _, rows in found] == [1, 2, 2]
    build = dict(zip(found[0][0], found[0][1][0], strict=True))
    assert build["llguidance"] == "refused: schema too large" and build["xgrammar"] == "16.00 s"


@pytest.mark.engines
@pytest.mark.skipif(_PEERS_MISSING, reason="needs llguidance and xgrammar")
@pytest.mark.engines
@pytest.mark.skipif(_PEERS_MISSING, reason="needs llguidance and xgrammar")
@pytest.mark.parametrize("shape", ["icd", "nested", "two", "items", "anyof", "threshold"])
def test_bench_enums_shapes_put_each_large_enum_in_a_slot(shape: str) -> None:
    """Every benchmark shape is one the trie serves: each K-value enum is a slot where it stands (no engine)."""
    from benchmarks.suites import enums
    from triec.schema.locate import locate

    slots = locate(enums.make_schema(shape, 100), 100).slots  # the script compiles with threshold = K
    want = {
        "icd": ["/properties/codes/items"],
        "nested": ["/properties/encounter/properties/diagnosis"],
        "two": ["/properties/primary", "/properties/secondary"],
        "items": ["/properties/entries/items/properties/code"],
        "anyof": ["/properties/finding/anyOf/0/properties/diagnosis"],
        "threshold": ["/properties/code"],
    }[shape]
    assert sorted(s.pointer for s in slots) == want and all(len(s.values) == 100 for s in slots)


# ---------------------------------------------------------------- decoding speed against free, across suites


def test_decode_speed_series_are_the_result_files_ratios() -> None:
    from benchmarks import decode_speed, results

    docs_results = Path(__file__).resolve().parent.parent / "docs" / "results"
    found = {s: results.read(docs_results, s) for s in decode_speed.SUITES if results.path(docs_results, s).is_file()}
    data = decode_speed.series(found)
    if "mlx_outlines" in found:  # the suite's own ratio, per K
        mlx = {c["k"]: c["ratio"] for c in found["mlx_outlines"]["cells"] if c["table"] == "mlx" and c.get("ratio")}
        assert dict(data["mlx-lm: triec"]) == mlx
    if "vllm" in found:  # tokens/s over free decoding's at the same K and batch, recomputed from the rows
        rows = [c["row"] for c in found["vllm"]["cells"] if c["table"] == "processors" and c["status"] == "ok"]
        for k, ratio in data["vLLM (batch 64): triec"]:
            by = {r["method"]: float(r["tokens/s"]) for r in rows if r["K"] == f"{k:,}" and r["B"] == "64"}
            assert ratio == pytest.approx(by["triec"] / by["unconstrained:9"])
    assert all(points == sorted(points) and all(r > 0 for _, r in points) for points in data.values())


def test_decode_speed_series_read_llama_cpp_cells() -> None:
    from benchmarks import decode_speed

    cell = {"table": "gbnf", "status": "ok", "row": {"K": "1,000", "triec tok/s (free)": "150 (200)"}}
    timed_out = {"table": "gbnf", "status": "timeout", "row": {"K": "10,000", "GBNF tok/s (free)": "1 (2)"}}
    assert decode_speed.series({"llamacpp": {"cells": [cell, timed_out]}}) == {"llama.cpp: triec": [(1000, 0.75)]}


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="matplotlib is not installed")
def test_write_plots_draws_the_decode_speed_plot(tmp_path: Path) -> None:
    from benchmarks import decode_speed, docs

    docs_results = Path(__file__).resolve().parent.parent / "docs" / "results"
    written = docs.write_plots(tmp_path, docs_results, ["mlx_outlines"])
    target = tmp_path / decode_speed.TARGET
    assert target in written and target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_results_and_artifacts_get_the_usual_mode(tmp_path: Path, umask: int) -> None:
    """Results and artifacts are written through mkstemp (0o600) and a rename; they end with what open() gives,
    0o666 less the umask, and a replaced file keeps its own mode."""
    import os
    import stat

    import triec
    from benchmarks.results import write_text

    old = os.umask(umask)
    try:
        write_text(tmp_path / "r.json", "{}\n")
        triec.compile(["a", "b"], "gpt2").save(tmp_path / "a.triec")
        (tmp_path / "kept.json").write_text("")
        (tmp_path / "kept.json").chmod(0o600)
        write_text(tmp_path / "kept.json", "{}\n")
    finally:
        os.umask(old)
    for name in ("r.json", "a.triec"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o666 & ~umask, name
    assert stat.S_IMODE((tmp_path / "kept.json").stat().st_mode) == 0o600
