"""`triec inspect` and the pure functions behind it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import triec
from triec.check import inspect as ins
from triec.cli import app

VALUES = ["get", "get_user", "get_users", "list_files", "héllo", "日本", ""]


@pytest.fixture(scope="module")
def table(vocabs: dict[str, triec.Vocabulary]) -> triec.MaskTable:
    return triec.compile(VALUES, vocabs["qwen2"])


@pytest.fixture(scope="module")
def artifact(table: triec.MaskTable, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("inspect") / "t.triec"
    table.save(path)
    return path


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def test_depths_match_prefix_lengths(table: triec.MaskTable) -> None:
    depth = ins.state_depths(table)
    assert depth.tolist() == [len(table.prefix(s)) for s in range(table.num_states)]


def test_depth_distribution_adds_up(table: triec.MaskTable) -> None:
    rows = ins.depth_distribution(table)
    assert sum(r["states"] for r in rows) == table.num_states
    total = sum(r["mean_allowed"] * r["states"] for r in rows)
    assert total == pytest.approx(sum(len(table.allowed(s)) for s in range(table.num_states)))
    assert rows[0] == {"depth": 0, "states": 1, "mean_allowed": len(table.allowed(0)), "max_allowed": len(table.allowed(0))}


def test_describe_state_decodes_tokens_from_the_table(table: triec.MaskTable, vocabs) -> None:
    s = table.state_for_prefix("get")
    d = ins.describe_state(table, s)
    assert d["accepting"] and d["value"] == "get" and d["values_below"] == 3
    assert d["first_values"] == ["get", "get_user", "get_users"]
    vocab = vocabs["qwen2"]
    for tok in d["tokens"]:
        assert ins.escape_bytes(vocab.token_bytes[tok["id"]]) == tok["bytes"]
        assert table.advance(s, tok["id"]) == tok["next_state"]
    assert d["eos_allowed"] == list(table.eos_token_ids)


def test_escape_bytes_is_unambiguous() -> None:
    assert ins.escape_bytes("a\n\t\\é".encode()) == "a\\n\\t\\\\é"
    assert ins.escape_bytes("日".encode()[:2]) == "\\xe6\\x97"
    assert ins.escape_bytes(b"\x00\x7f") == "\\x00\\x7f"


def test_inspect_json(artifact: Path, table: triec.MaskTable) -> None:
    result = invoke("inspect", str(artifact), "--prefix", "get_", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["values"] == len(VALUES) and doc["states"] == table.num_states
    assert doc["tokenizer"]["fingerprint"] == table.tokenizer_fingerprint
    assert doc["format_version"] == 1 and doc["triec_version"] == triec.__version__
    assert set(doc["sections"]) == {"allowed_offsets", "allowed_tokens", "allowed_next", "value_state", "value_lcp", "state_byte"}
    assert all(v["bytes"] >= 0 and v["zstd_bytes"] > 0 for v in doc["sections"].values())
    assert doc["state"]["prefix"] == "get_" and not doc["state"]["accepting"]
    assert doc["state"]["values_below"] == 2
    assert doc["widest_states"][0]["state"] == 0  # the root is the widest state here
    assert [d["depth"] for d in doc["depths"]] == sorted(d["depth"] for d in doc["depths"])


def test_inspect_state_and_text_output(artifact: Path, table: triec.MaskTable) -> None:
    s = table.state_for_prefix("日")
    result = invoke("inspect", str(artifact), "--state", str(s))
    assert result.exit_code == 0, result.output
    assert "allowed tokens by depth" in result.output
    assert f"state {s}" in result.output


@pytest.mark.parametrize(
    "args, text",
    [
        (["--prefix", "zzz"], "no value starts with"),
        (["--state", "100000"], "--state 100000"),
        (["--state", "1", "--prefix", "g"], "not both"),
    ],
)
def test_inspect_bad_queries(artifact: Path, args: list[str], text: str) -> None:
    result = invoke("inspect", str(artifact), *args)
    assert result.exit_code == 2
    assert text in result.output
    assert "Traceback" not in result.output


def test_inspect_missing_file_subprocess(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "triec.cli", "inspect", str(tmp_path / "nope.triec")], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "nope.triec" in proc.stderr and "Traceback" not in proc.stderr


def test_inspect_zstd_artifact(table: triec.MaskTable, tmp_path: Path) -> None:
    path = tmp_path / "t.triec.zst"
    table.save(path)
    result = invoke("inspect", str(path), "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["allowed_pairs"] == table.num_allowed


def test_allowed_counts_include_eos(table: triec.MaskTable) -> None:
    counts = ins.allowed_counts(table)
    assert np.array_equal(counts, [len(table.allowed(s)) for s in range(table.num_states)])
