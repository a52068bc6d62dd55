"""The CLI on schemas: compile detects them (tool calls, large enums anywhere), verify checks them against both
engines, inspect shows them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from shared import hermes_tags, tags_with_separator
from typer.testing import CliRunner, Result

import triec
from triec.cli import app

pytestmark = pytest.mark.engines

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {
            "type": "string",
            "enum": ["slack.send_message", "slack.get_user", "github.create_issue", "a/b", 'say "hi"'],
        },
        "arguments": {
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
            "additionalProperties": False,
        },
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
    assert summary["shape"] == "tool-call" and [s["pointer"] for s in summary["slots"]] == ["/properties/name"]
    assert len(summary["straddles_per_tail_offset"]) == len(', "arguments": ')
    return out


def test_compiled_artifact_loads_as_a_schema_table(artifact: Path) -> None:
    table = triec.load(artifact, verify=True)
    assert isinstance(table, triec.SchemaTable) and sorted(table.names) == sorted(SCHEMA["properties"]["name"]["enum"])


def test_verify_against_both_engines(artifact: Path) -> None:
    pytest.importorskip("xgrammar")
    result = invoke(
        "verify", str(artifact), "-t", "gpt2", "--against", "reference,llguidance,xgrammar", "--walks", "5", "--json"
    )
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
    assert s["tail"] == ', "arguments": ' and s["engine"] == "llguidance" and s["start"] == "slot 0"
    assert s["convention"]["key_separator"] == ": "
    assert [row["offset"] for row in s["tail_offsets"]] == list(range(15))
    assert s["tail_offsets"][-1]["into_grammar"] > 0  # ' {' style tokens enter the arguments
    assert [row["offset"] for row in s["straddles"]["tail"]] == list(range(15))
    slot = s["slots"][0]
    assert slot["pointer"] == "/properties/name" and slot["values"] == 5 and slot["start"]
    assert slot["crossing"]["tails"]["dynamic"] > 0 and slot["crossing"]["exits"]["tail"] > 0
    assert s["num_grammars"] == 1 and s["grammars"][0]["slots"] == []
    text = invoke("inspect", str(artifact), "--widest", "0").stdout
    assert "crossing tokens per tail offset" in text and "slots (enums served by a trie, format" in text


def test_bad_schema_exits_2_naming_the_problem(tmp_path: Path) -> None:
    """Not the tool-call shape (an optional property), and its enum too small for a trie: one line, exit 2."""
    bad = dict(SCHEMA, required=["name"])
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    result = invoke("compile", str(tmp_path / "bad.json"), "-t", "gpt2", "-o", str(tmp_path / "x.triec"))
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "bad.json" in result.stderr and "nothing for a trie to serve" in result.stderr
    assert "10000 or more members" in result.stderr and "lower the threshold" in result.stderr
    assert not (tmp_path / "x.triec").exists()
    # the same schema with a lower threshold: the enum is served by a slot the engine enters
    result = invoke(
        "compile",
        str(tmp_path / "bad.json"),
        "-t",
        "gpt2",
        "-o",
        str(tmp_path / "x.triec"),
        "--enum-threshold",
        "5",
        "--json",
    )
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["shape"] == "schema" and summary["enum_threshold"] == 5 and summary["slots"][0]["values"] == 5


def test_no_servable_enum_exits_2_with_each_reason(tmp_path: Path) -> None:
    values = [f"v{i}" for i in range(70)]
    doc = {
        "type": "object",
        "properties": {"a": {"anyOf": [{"enum": values}, {"type": "string"}]}, "b": {"enum": values, "pattern": "v.*"}},
        "required": ["a", "b"],
    }
    (tmp_path / "s.json").write_text(json.dumps(doc))
    result = invoke(
        "compile", str(tmp_path / "s.json"), "-t", "gpt2", "-o", str(tmp_path / "x.triec"), "--enum-threshold", "64"
    )
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "/properties/a/anyOf/0: another alternative at its position may take a string" in result.stderr
    assert "/properties/b: keyword 'pattern' next to the enum" in result.stderr


def test_engine_option_only_for_schemas(tmp_path: Path) -> None:
    (tmp_path / "v.txt").write_text("a\nb\n")
    result = invoke(
        "compile", str(tmp_path / "v.txt"), "-t", "gpt2", "-o", str(tmp_path / "v.triec"), "--engine", "xgrammar"
    )
    assert result.exit_code == 2 and "v.triec" not in result.stderr
    assert "v.txt is a plain value set: --engine does not apply (for JSON Schemas" in result.stderr


def test_enum_first_then_structure_is_a_tool_schema_and_flat_schemas_stay_flat(tmp_path: Path) -> None:
    """An enum followed by a structured property compiles as a tool schema; enum + consts stays a flat finite set."""
    tool = {
        "type": "object",
        "properties": {"a": {"enum": ["x", "y"]}, "b": {"type": "object", "properties": {}}},
        "required": ["a", "b"],
    }
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
    result = invoke(
        "compile", str(tmp_path / "tools.json"), "-t", "gpt2", "-o", str(tmp_path / "t.triec"), "--prefix", "x"
    )
    assert result.exit_code == 2 and "is a JSON Schema: --prefix does not apply" in result.stderr


# ---------------------------------------------------------------- large enums anywhere (issue 20)

CODES = [f"{c}{n:02d}.{d}" for c in "ABC" for n in range(4) for d in range(6)]  # 72 codes
EXTRACTION = {
    "type": "object",
    "properties": {
        "patient": {"type": "string", "maxLength": 12},
        "codes": {"type": "array", "items": {"enum": CODES}, "minItems": 1, "maxItems": 3},
        "severity": {"enum": ["low", "high"]},
        "alt": {"anyOf": [{"enum": CODES}, {"type": "string", "maxLength": 3}]},
    },
    "required": ["patient", "codes", "severity"],
}


@pytest.fixture(scope="module")
def extraction(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    d = tmp_path_factory.mktemp("extraction")
    (d / "icd.json").write_text(json.dumps(EXTRACTION))
    out = d / "icd.triec"
    result = invoke("compile", str(d / "icd.json"), "-t", "gpt2", "-o", str(out), "--json", "--enum-threshold", "64")
    assert result.exit_code == 0, result.stderr
    return out, json.loads(result.stdout)


def test_summary_says_which_enums_became_tries(extraction: tuple[Path, dict], tmp_path: Path) -> None:
    _, s = extraction
    assert s["shape"] == "schema" and s["enum_threshold"] == 64 and s["grammars"] == 1
    assert [(x["pointer"], x["values"]) for x in s["slots"]] == [("/properties/codes/items", 72)]
    assert s["engine_enums"] == [
        {
            "pointer": "/properties/alt/anyOf/0",
            "values": 72,
            "reason": "another alternative at its position may take a string",
        }
    ]
    (tmp_path / "icd.json").write_text(json.dumps(EXTRACTION))
    text = invoke(
        "compile", str(tmp_path / "icd.json"), "-t", "gpt2", "-o", str(tmp_path / "x.triec"), "--enum-threshold", "64"
    ).stdout
    assert "enums served by a trie" in text and "/properties/codes/items" in text and "left in the engine" in text


def test_extraction_artifact_verifies_and_inspects(extraction: tuple[Path, dict]) -> None:
    path, _ = extraction
    table = triec.load(path, verify=True)
    assert isinstance(table, triec.SchemaTable) and table.header["schema"]["num_slots"] == 1
    pytest.importorskip("xgrammar")
    result = invoke("verify", str(path), "--against", "reference,llguidance,xgrammar", "--walks", "4", "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] and report["schema"]["shape"] == "schema"
    assert {c["against"]: c["mismatches"] for c in report["checks"]} == {"reference": 0, "llguidance": 0, "xgrammar": 0}
    s = json.loads(invoke("inspect", str(path), "--json", "--widest", "0").stdout)["schema"]
    assert s["start"] == "grammar 0" and s["slots"][0]["entered_from_grammars"] == [0]
    assert (
        s["slots"][0]["crossing"]["enters"]["trie"] > 0 and s["engine_enums"][0]["pointer"] == "/properties/alt/anyOf/0"
    )
    bad = invoke("inspect", str(path), "--slot", "3")
    assert bad.exit_code == 2 and "slots 0..0" in bad.stderr


# ---------------------------------------------------------------- tool registries and structural tags

REGISTRY = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    },
    {
        "name": "send_alert",
        "inputSchema": {"type": "object", "properties": {"level": {"enum": ["low", "high"]}}, "required": ["level"]},
    },  # MCP's spelling in the same list
    {"type": "function", "function": {"name": "ping"}},
]


@pytest.mark.parametrize(
    ("fmt", "flags"), [("vllm", []), ("vllm", ["--single-call"]), ("hermes", []), ("llama3", []), ("object", [])]
)
def test_compile_inspect_verify_a_tool_registry(tmp_path: Path, fmt: str, flags: list[str]) -> None:
    src = tmp_path / "tools.json"
    src.write_text(json.dumps(REGISTRY))
    out = tmp_path / "tools.triec"
    result = invoke("compile", str(src), "-t", "gpt2", "--tool-format", fmt, *flags, "-o", str(out), "--json")
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["shape"] == "tools" and summary["tool_format"] == fmt and summary["names"] == 3
    assert summary["parallel"] is (not flags) and summary["grammars"] == 3
    table = triec.load(out)
    assert sorted(table.names) == ["get_weather", "ping", "send_alert"] and table.info["format"] == fmt
    inspected = invoke("inspect", str(out))
    assert inspected.exit_code == 0 and "tools" in inspected.stdout
    checked = invoke("verify", str(out), "--against", "llguidance", "--quiet")
    assert checked.exit_code == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([{"name": "a"}, {"name": "a"}], "tools[1].name: 'a' is already the name of tools[0]"),
        ([{"name": "a", "parameters": 3}], "tools[0].parameters: expected a JSON Schema object"),
        ({"tools": [{"function": {"name": ""}}]}, "tools[0].function.name: expected a non-empty string"),
    ],
)
def test_bad_registries_are_one_line_exit_2(tmp_path: Path, doc: object, message: str) -> None:
    src = tmp_path / "tools.json"
    src.write_text(json.dumps(doc))
    result = invoke("compile", str(src), "-o", str(tmp_path / "x.triec"))
    assert result.exit_code == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.triec").exists()


def test_a_structural_tag_compiles_with_xgrammar(tmp_path: Path) -> None:
    pytest.importorskip("xgrammar")
    content = {"type": "json_schema", "json_schema": {"type": "object"}}
    tags = [hermes_tags(f'"{n}"', content)[0] for n in ("get_weather", "send_alert")]  # the spelling with newlines
    tag = tags_with_separator(tags, stop_after_first=False)
    src = tmp_path / "tag.json"
    src.write_text(json.dumps(tag))
    result = invoke("compile", str(src), "-t", "gpt2", "-o", str(tmp_path / "tag.triec"), "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["shape"] == "structural-tag" and json.loads(result.stdout)["engine"] == "xgrammar"
    checked = invoke("verify", str(tmp_path / "tag.triec"), "--against", "xgrammar", "--quiet")
    assert checked.exit_code == 0, checked.stdout + checked.stderr


@pytest.mark.engines
def test_tool_choice_auto_compiles_vllms_hermes_tag(tmp_path: Path) -> None:
    """A registry with --tool-format hermes --tool-choice auto: free text, then calls after <tool_call>; its
    artifact serves the same rows as compile_structural_tag on the tag vLLM sends."""
    import numpy as np

    from triec.schema.compile import compile_structural_tag
    from triec.schema.tags import hermes_tag

    pytest.importorskip("xgrammar")
    params = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    tools = [{"type": "function", "function": {"name": n, "parameters": params}} for n in ("search", "send", "sum")]
    (tmp_path / "tools.json").write_text(json.dumps(tools))
    out = tmp_path / "auto.triec"
    result = invoke(
        "compile",
        str(tmp_path / "tools.json"),
        "-t",
        "gpt2",
        "-o",
        str(out),
        "--tool-format",
        "hermes",
        "--tool-choice",
        "auto",
        "--json",
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["shape"] == "structural-tag" and summary["trigger"] == "<tool_call>" and summary["names"] == 6
    vocab = triec.Vocabulary.load("gpt2")
    loaded = triec.load(out)
    loaded.bind(vocab)
    direct = compile_structural_tag(hermes_tag([(t["function"]["name"], params) for t in tools], "auto"), vocab)
    a, b = (np.zeros(loaded.words_per_row, dtype=np.int32) for _ in range(2))
    ids = {tb: i for i, tb in enumerate(vocab.token_bytes) if tb}
    ms = [loaded.matcher(), direct.matcher()]
    for piece in (b"Hi", b" <", b"tool", b"_", b"call", b">", b'{"', b"name", b'":', b' "', b"se"):
        ms[0].fill_bitmask(a)
        ms[1].fill_bitmask(b)
        assert np.array_equal(a, b), piece
        assert all(m.accept_token(ids[piece]) for m in ms), piece
    bad = invoke(
        "compile", str(tmp_path / "tools.json"), "-t", "gpt2", "-o", str(tmp_path / "x.triec"), "--tool-choice", "auto"
    )
    assert bad.exit_code == 2 and "--tool-format hermes" in bad.output


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            {
                "type": "object",
                "properties": {"d": {"type": "string", "format": "date"}, "p": {"type": "string", "pattern": 123}},
            },
            "keyword 'pattern' at /properties/p/pattern must be a string, found a number (123)",
        ),
        (
            {"type": "object", "properties": {"a": {"enum": ["x", "y"]}, "p": {"type": "string", "format": 5}}},
            "keyword 'format' at /properties/p/format must be a string",
        ),
        ({"type": "string", "pattern": None}, "keyword 'pattern' at /pattern must be a string, found null"),
        ({"type": "string", "format": 5}, "keyword 'format' at /format must be a string"),
        ({"type": "string", "pattern": 123}, "keyword 'pattern' at /pattern must be a string"),
        ({"enum": ["a", "b"], "type": 3}, "keyword 'type' at /type must be a string or an array of strings"),
    ],
)
def test_a_keyword_of_the_wrong_type_is_one_line_exit_2(tmp_path: Path, doc: dict, message: str) -> None:
    """Issue 49: these compiled, or were refused for ``required`` or a missing ``enum``; each now names itself."""
    (tmp_path / "s.json").write_text(json.dumps(doc))
    result = invoke("compile", str(tmp_path / "s.json"), "-t", "gpt2", "-o", str(tmp_path / "x.triec"))
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.output
    assert result.stderr.startswith("error: ") and f"s.json: {message}" in result.stderr
    assert not (tmp_path / "x.triec").exists()
