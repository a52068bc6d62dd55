"""`triec inspect` and the pure functions behind it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from triec.check import inspect as ins
from typer.testing import CliRunner

import triec
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
    assert rows[0] == {
        "depth": 0,
        "states": 1,
        "mean_allowed": len(table.allowed(0)),
        "max_allowed": len(table.allowed(0)),
    }


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
    assert set(doc["sections"]) == {
        "allowed_offsets",
        "allowed_tokens",
        "allowed_next",
        "value_state",
        "value_lcp",
        "state_byte",
    }
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


# ---------------------------------------------------------------- schema artifacts


GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "golden"


def test_schema_summary_of_slots_grammars_and_crossing_tokens(vocabs) -> None:
    codes = [f"C{i:02d}" for i in range(10)] + ['q"x']
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer"},
            "code": {"enum": codes},
            "alt": {"anyOf": [{"enum": codes}, {"type": "string"}]},
        },
        "required": ["n", "code"],
    }
    table = triec.compile_schema(schema, vocabs["qwen2"], threshold=5)
    s = ins.schema_summary(table)
    assert s["shape"] == "schema" and s["start"] == "grammar 0" and s["threshold"] == 5 and s["tail_offsets"] == []
    (slot,) = s["slots"]
    assert slot["pointer"] == "/properties/code" and slot["values"] == 11 and slot["entered_from_grammars"] == [0]
    assert slot["states"] == table.slots[0].num_states and not slot["start"] and not slot["value_grammar"]
    c = slot["crossing"]
    assert c["enters"]["trie"] > 0 and c["exits"]["dynamic"] > 0 and sum(c["tails"].values()) == 0
    total = sum(sum(v.values()) for v in c.values())
    assert total == ins.straddle_counts(table)["total"]
    assert s["engine_enums"] == [
        {
            "pointer": "/properties/alt/anyOf/0",
            "values": 11,
            "reason": "another alternative at its position may take a string",
        }
    ]
    (g,) = s["grammars"]
    assert g["slots"] == [0] and g["schema_bytes"] == len(table.grammars[0].spec.schema.encode()) and g["after"] == []


def test_tail_rows_of_a_tool_call(vocabs) -> None:
    table = triec.compile_schema(
        {
            "type": "object",
            "properties": {"name": {"enum": ["a", "b"]}, "arguments": {}},
            "required": ["name", "arguments"],
        },
        vocabs["gpt2"],
    )
    rows = ins.tail_rows(table.slots[0])
    assert [r["offset"] for r in rows] == list(range(len(b', "arguments": ')))
    assert all(r["tokens"] == r["inside_tail"] + r["handover"] + r["into_grammar"] for r in rows)
    assert rows[-1]["into_grammar"] > 0 and rows[0]["read"] == "" and rows[3]["read"] == ', "'


def test_inspect_schema_artifacts(tmp_path: Path) -> None:
    """Version 3 and the first layout: slots, grammars, the file's own sections, one slot's states."""
    path = GOLDEN / "extraction-gpt2.triec"
    r = json.loads(invoke("inspect", str(path), "--json", "--widest", "2").stdout)
    assert r["format_version"] == 3 and set(r["sections"]) >= {"slot_table", "group_tokens", "grammar_text", "info"}
    assert [s["pointer"] for s in r["schema"]["slots"]] == ["/properties/visit/properties/ward", "/$defs/code"]
    assert r["schema"]["shown_slot"] == 0 and r["values"] == 11
    r1 = json.loads(invoke("inspect", str(path), "--json", "--slot", "1", "--prefix", '"A0').stdout)
    assert r1["schema"]["shown_slot"] == 1 and r1["values"] == 39 and r1["state"]["values_below"] == 8
    text = invoke("inspect", str(path), "--widest", "0").stdout
    assert "enums left in the engine" in text and "/properties/note/anyOf/0" in text and "grammars" in text
    legacy = json.loads(
        invoke("inspect", str(GOLDEN / "d19-tools-gpt2-llguidance.triec"), "--json", "--widest", "0").stdout
    )
    assert legacy["format_version"] == 1 and legacy["schema"]["legacy_format"] == 1
    assert "straddle_offsets" in legacy["sections"] and legacy["schema"]["tail"] == ', "arguments": '
    bad = invoke("inspect", str(GOLDEN / "tiny-gpt2.triec"), "--slot", "0")
    assert bad.exit_code == 2 and "schema artifacts only" in bad.stderr


# ---------------------------------------------------------------- a schema of format slots (issue 49)

FORMAT_FIELDS = {
    "type": "object",
    "properties": {"d": {"type": "string", "format": "date"}, "u": {"type": "string", "format": "uuid"}},
    "required": ["d", "u"],
}


def test_a_schema_of_two_format_slots(tmp_path: Path) -> None:
    """inspect calls it a schema table and lists both slots; compile's summary calls them pattern/format fields
    served by a DFA table, not enums served by a trie."""
    (tmp_path / "s.json").write_text(json.dumps(FORMAT_FIELDS))
    out = tmp_path / "s.triec"
    made = invoke("compile", str(tmp_path / "s.json"), "-t", "gpt2", "-o", str(out))
    assert made.exit_code == 0, made.output
    said = " ".join(made.stdout.split())
    assert "pattern/format fields │ 2, each served by a DFA table" in said and "enums served by a trie" not in said
    assert "format date" in said and "format uuid" in said
    shown = invoke("inspect", str(out), "--slot", "1")
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.stdout.split())
    assert "schema table / v" in text and "slot 1 of 2: its DFA table" in text and "pattern table" not in text
    assert "states below: slot 1's DFA table" in text
    report = json.loads(invoke("inspect", str(out), "--json").stdout)
    assert report["kind"] == "tool-schema" and report["schema"]["shown_slot"] == 0
    assert [(s["pointer"], s["format"]) for s in report["schema"]["slots"]] == [
        ("/properties/d", "date"),
        ("/properties/u", "uuid"),
    ]
