"""The CLI on tool-call schemas: compile detects them, verify checks them against both engines, inspect shows them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

import triec
from triec.cli import app

pytestmark = pytest.mark.engines

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "enum": ["slack.send_message", "slack.get_user", "github.create_issue", "a/b", 'say "hi"']},
        "arguments": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"],
                      "additionalProperties": False},
    },
    "required": ["name", "arguments"],
    "additionalProperties": False,
}


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("schema-cli")
    (d / "tools.json").write_text(json.dumps(SCHEMA))
    out = d / "tools.triec"
    result = invoke("compile", str(d / "tools.json"), "-t", "gpt2", "-o", str(out), "--json")
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["kind"] == "tool-schema" and summary["names"] == 5 and summary["engine"] == "llguidance"
    assert len(summary["straddles_per_tail_offset"]) == len(', "arguments": ')
    return out


def test_compiled_artifact_loads_as_a_schema_table(artifact: Path) -> None:
    table = triec.load(artifact, verify=True)
    assert isinstance(table, triec.SchemaTable) and sorted(table.names) == sorted(SCHEMA["properties"]["name"]["enum"])


def test_verify_against_both_engines(artifact: Path) -> None:
    pytest.importorskip("xgrammar")
    result = invoke("verify", str(artifact), "-t", "gpt2", "--against", "reference,llguidance,xgrammar", "--walks", "5", "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] and report["schema"]["engine"] == "llguidance"
    checks = {c["against"]: c for c in report["checks"]}
    assert set(checks) == {"reference", "llguidance", "xgrammar"}
    assert all(c["status"] == "ok" and c["states_checked"] > 0 for c in checks.values())
    assert checks["llguidance"]["walks"] == 5


def test_inspect_shows_the_schema(artifact: Path) -> None:
    result = invoke("inspect", str(artifact), "--json", "--widest", "0")
    assert result.exit_code == 0, result.stderr
    s = json.loads(result.stdout)["schema"]
    assert s["tail"] == ', "arguments": ' and s["engine"] == "llguidance"
    assert s["convention"]["key_separator"] == ": "
    assert [row["offset"] for row in s["straddles"]["tail"]] == list(range(15))
    assert s["straddles"]["tail"][-1]["into_continuation"] > 0  # ' {' style tokens enter the arguments
    text = invoke("inspect", str(artifact), "--widest", "0").stdout
    assert "straddling tokens per tail offset" in text and "continuation engine" in text


def test_bad_schema_exits_2_naming_the_problem(tmp_path: Path) -> None:
    bad = dict(SCHEMA, required=["name"])
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    result = invoke("compile", str(tmp_path / "bad.json"), "-t", "gpt2", "-o", str(tmp_path / "x.triec"))
    assert result.exit_code == 2
    assert "bad.json" in result.stderr and '"required" must list every property' in result.stderr
    assert not (tmp_path / "x.triec").exists()


def test_engine_option_only_for_schemas(tmp_path: Path) -> None:
    (tmp_path / "v.txt").write_text("a\nb\n")
    result = invoke("compile", str(tmp_path / "v.txt"), "-t", "gpt2", "-o", str(tmp_path / "v.triec"), "--engine", "xgrammar")
    assert result.exit_code == 2 and "tool-call schemas only" in result.stderr


def test_enum_first_then_structure_is_a_tool_schema_and_flat_schemas_stay_flat(tmp_path: Path) -> None:
    """An enum followed by a structured property compiles as a tool schema; enum + consts stays a flat finite set."""
    tool = {"type": "object", "properties": {"a": {"enum": ["x", "y"]}, "b": {"type": "object", "properties": {}}},
            "required": ["a", "b"]}
    (tmp_path / "tool.json").write_text(json.dumps(tool))
    result = invoke("compile", str(tmp_path / "tool.json"), "-t", "gpt2", "-o", str(tmp_path / "tool.triec"), "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["kind"] == "tool-schema"
    assert isinstance(triec.load(tmp_path / "tool.triec"), triec.SchemaTable)
    flat = {"type": "object", "properties": {"a": {"enum": ["x", "y"]}, "v": {"const": 1}}, "required": ["a", "v"]}
    (tmp_path / "flat.json").write_text(json.dumps(flat))
    result = invoke("compile", str(tmp_path / "flat.json"), "-t", "gpt2", "-o", str(tmp_path / "flat.triec"), "--json")
    assert result.exit_code == 0, result.stderr
    table = triec.load(tmp_path / "flat.triec")
    assert not isinstance(table, triec.SchemaTable) and sorted(table.values) == ["x", "y"]


def test_spelling_flags_refused_for_tool_schemas(tmp_path: Path) -> None:
    (tmp_path / "tools.json").write_text(json.dumps(SCHEMA))
    result = invoke("compile", str(tmp_path / "tools.json"), "-t", "gpt2", "-o", str(tmp_path / "t.triec"), "--prefix", "x")
    assert result.exit_code == 2 and "fixes its own spelling" in result.stderr and "--prefix" in result.stderr
