"""Values inside JSON from the command line and in the artifact: flags, schema files, the header, old files."""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest
from typer.testing import CliRunner, Result

import triec
from triec.artifact.container import ENCODED_FORMAT_VERSION, MAGIC, PLAIN_FORMAT_VERSION, PREAMBLE
from triec.cli import app
from triec.encoding import Encoding

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "fixtures" / "golden" / "tiny-gpt2.triec"
TOOLS = ["slack.get_user", "slack.send_message", 'quote"d', "del\x7f", "日本"]
SCHEMA = {
    "type": "object",
    "properties": {"label": {"type": "string", "enum": ["spam", "ham", 'say "hi"']}, "version": {"const": 1}},
    "required": ["label", "version"],
}


def invoke(*args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(app, list(args), input=input)


def usage_error(result: Result, *fragments: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    line = " ".join(result.stderr.split())
    assert line.startswith("error: ") and "Traceback" not in line
    for f in fragments:
        assert f in line, (f, line)


@pytest.fixture
def tools_json(tmp_path: Path) -> Path:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(TOOLS))
    return path


def test_compile_json_with_prefix_and_suffix(tmp_path: Path, tools_json: Path) -> None:
    out = tmp_path / "tools.triec"
    result = invoke(
        "compile",
        str(tools_json),
        "-t",
        "gpt2",
        "-o",
        str(out),
        "--encoding",
        "json",
        "--prefix",
        '{"tool": ',
        "--suffix",
        "}",
        "--json",
    )
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["encoding"] == {"name": "json", "prefix": '{"tool": ', "suffix": "}"}
    table = triec.load(out, verify=True)
    assert table.format_version == ENCODED_FORMAT_VERSION == 2
    assert table.encoding == Encoding("json", '{"tool": ', "}")
    assert '{"tool": "slack.get_user"}' in table.strings and '{"tool": "del\\u007f"}' in table.strings
    assert '{"tool": "quote\\"d"}' in table.strings
    assert sorted(table.values) == sorted(TOOLS)
    state = table.state_for_prefix('{"tool": "slack.get_user"}')
    assert state is not None and table.value(state) == "slack.get_user"
    text = invoke("compile", str(tools_json), "-t", "gpt2", "-o", str(out), "--encoding", "json")
    assert text.exit_code == 0 and "encoding" in text.stdout and "json" in text.stdout


def test_inspect_and_verify_an_encoded_artifact(tmp_path: Path, tools_json: Path) -> None:
    out = tmp_path / "tools.triec"
    assert (
        invoke(
            "compile",
            str(tools_json),
            "-t",
            "gpt2",
            "-o",
            str(out),
            "--encoding",
            "json",
            "--prefix",
            "<",
            "--suffix",
            ">",
            "-q",
        ).exit_code
        == 0
    )
    report = json.loads(invoke("inspect", str(out), "--json", "--prefix", '<"slack.').stdout)
    assert report["format_version"] == 2 and report["encoding"] == {"name": "json", "prefix": "<", "suffix": ">"}
    assert report["state"]["first_values"] == ["slack.get_user", "slack.send_message"]  # the user's values
    text = invoke("inspect", str(out))
    assert text.exit_code == 0
    flat = " ".join(text.stdout.split())
    assert "encoding / prefix / suffix" in flat and "json / '<' / '>'" in flat
    plain = tmp_path / "plain.triec"
    assert invoke("compile", str(tools_json), "-t", "gpt2", "-o", str(plain), "-q").exit_code == 0
    assert "(values as they are)" in " ".join(invoke("inspect", str(plain)).stdout.split())
    result = invoke("verify", str(out), "--against", "reference,llguidance", "--walks", "10", "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] and {c["against"] for c in report["checks"]} == {"reference", "llguidance"}
    assert all(c["states_checked"] == report["num_states"] for c in report["checks"])


def test_schema_file(tmp_path: Path) -> None:
    path = tmp_path / "label.json"
    path.write_text(json.dumps(SCHEMA))
    out = tmp_path / "label.triec"
    assert invoke("compile", str(path), "-t", "gpt2", "-o", str(out), "-q").exit_code == 0
    table = triec.load(out, verify=True)
    assert table.strings == sorted(
        [
            '{"label": "spam", "version": 1}',
            '{"label": "ham", "version": 1}',
            '{"label": "say \\"hi\\"", "version": 1}',
        ],
        key=str.encode,
    )
    assert sorted(table.values) == sorted(SCHEMA["properties"]["label"]["enum"])
    usage_error(
        invoke("compile", str(path), "-t", "gpt2", "-o", str(out), "--encoding", "json"),
        "sets its own encoding",
        "--encoding",
    )
    fragment = tmp_path / "enum.json"
    fragment.write_text(json.dumps({"type": "string", "enum": ["a", "b"]}))  # an enum fragment: raw values, as before
    assert invoke("compile", str(fragment), "-t", "gpt2", "-o", str(out), "-q").exit_code == 0
    assert triec.load(out).strings == ["a", "b"] and triec.load(out).format_version == 1


# An enum *first* followed by other properties is a tool-call schema (tests/test_schema_cli.py), so
# the flat-schema refusals are exercised with the enum elsewhere or alone.
@pytest.mark.parametrize(
    ("schema", "fragments"),
    [
        (
            {
                "type": "object",
                "properties": {"b": {"type": "object", "properties": {}}, "a": {"enum": ["x"]}},
                "required": ["a", "b"],
            },
            ["properties.b", "'properties'"],
        ),
        (
            {
                "type": "object",
                "properties": {"c": {"const": 1}, "a": {"enum": ["x"]}, "b": {"enum": ["y"]}},
                "required": ["a", "b", "c"],
            },
            ["properties.b", "second 'enum'"],
        ),
        (
            {"type": "object", "properties": {"n": {"type": "integer"}, "a": {"enum": ["x"]}}, "required": ["a", "n"]},
            ["properties.n", "'type'"],
        ),
        (
            {"type": "object", "properties": {"a": {"enum": ["x"], "pattern": "x"}}, "required": ["a"]},
            ["properties.a", "'pattern'"],
        ),
    ],
)
def test_unsupported_schema_exits_2(tmp_path: Path, schema: dict, fragments: list[str]) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(schema))
    usage_error(invoke("compile", str(path), "-t", "gpt2", "-o", str(tmp_path / "x.triec")), str(path), *fragments)
    assert not (tmp_path / "x.triec").exists()


def test_bad_encoding_flag_exits_2(tmp_path: Path, tools_json: Path) -> None:
    usage_error(
        invoke("compile", str(tools_json), "-t", "gpt2", "-o", str(tmp_path / "x.triec"), "--encoding", "yaml"),
        "--encoding",
        "raw, json",
        "'yaml'",
    )


def test_raw_prefix_and_suffix_from_stdin(tmp_path: Path) -> None:
    out = tmp_path / "colors.triec"
    result = invoke(
        "compile",
        "-",
        "-t",
        "gpt2",
        "-o",
        str(out),
        "--prefix",
        "color: ",
        "--suffix",
        "\n",
        "-q",
        input="red\ngreen\n",
    )
    assert result.exit_code == 0, result.stderr
    table = triec.load(out, verify=True)
    assert table.strings == ["color: green\n", "color: red\n"] and table.values == ["green", "red"]
    assert table.encoding == Encoding("raw", "color: ", "\n") and table.format_version == 2


# ---------------------------------------------------------------- the header


def reheader(data: bytes, mutate: Callable[[dict[str, Any]], None], version: int) -> bytes:
    """The same sections under an edited header (CRC recomputed, sections moved to the new data start)."""
    _, _, head_len, _, _ = PREAMBLE.unpack_from(data, 0)
    header = msgpack.unpackb(data[PREAMBLE.size : PREAMBLE.size + head_len], raw=False)
    old_start = (PREAMBLE.size + head_len + 63) // 64 * 64
    mutate(header)
    head = msgpack.packb(header, use_bin_type=True)
    out = PREAMBLE.pack(MAGIC, version, len(head), zlib.crc32(head), 0) + head
    out += bytes((PREAMBLE.size + len(head) + 63) // 64 * 64 - len(out))
    return out + data[old_start:]


def test_old_artifacts_keep_loading() -> None:
    table = triec.load(GOLDEN, verify=True)
    assert struct.unpack_from("<I", GOLDEN.read_bytes(), 8)[0] == PLAIN_FORMAT_VERSION == 1
    assert table.format_version == 1 and table.encoding.plain and table.values == table.strings


def test_header_encoding_checks(tmp_path: Path, vocabs: dict[str, triec.Vocabulary]) -> None:
    good = tmp_path / "good.triec"
    triec.compile(TOOLS, vocabs["gpt2"], encoding="json", prefix="[", suffix="]").save(good)
    data = good.read_bytes()
    assert triec.load(good, verify=True).values == sorted(
        TOOLS, key=lambda v: Encoding("json", "[", "]").spell(v).encode()
    )

    def load(raw: bytes, verify: bool = False) -> triec.MaskTable:
        path = tmp_path / "forged.triec"
        path.write_bytes(raw)
        return triec.load(path, verify=verify)

    cases: list[tuple[Callable[[dict[str, Any]], None], int, str]] = [
        (lambda h: None, PLAIN_FORMAT_VERSION, "'encoding': needs format version 2"),
        (lambda h: h.pop("encoding"), ENCODED_FORMAT_VERSION, "header field 'encoding': expected a map"),
        (
            lambda h: h.__setitem__("encoding", {"name": "yaml", "prefix": "", "suffix": ""}),
            ENCODED_FORMAT_VERSION,
            "expected one of raw, json",
        ),
        (
            lambda h: h.__setitem__("encoding", {"name": "json", "prefix": 1, "suffix": ""}),
            ENCODED_FORMAT_VERSION,
            "expected strings",
        ),
        (
            lambda h: h.__setitem__("encoding", {"name": "raw", "prefix": "", "suffix": ""}),
            ENCODED_FORMAT_VERSION,
            "written as version 1",
        ),
    ]
    for mutate, version, message in cases:
        with pytest.raises(triec.ArtifactError, match=message):
            load(reheader(data, mutate, version))
    # A header whose encoding does not spell the stored strings: refused by the full check.
    lying = reheader(
        data,
        lambda h: h.__setitem__("encoding", {"name": "json", "prefix": "(", "suffix": "]"}),
        ENCODED_FORMAT_VERSION,
    )
    with pytest.raises(triec.ArtifactError, match="not spelled as header field 'encoding' says"):
        load(lying, verify=True)
    raw_strings = tmp_path / "raw.triec"
    lie = triec.compile(["plain", "text"], vocabs["gpt2"])
    lie.encoding = Encoding("json")
    lie.save(raw_strings)
    with pytest.raises(triec.ArtifactError, match="not spelled"):
        triec.load(raw_strings, verify=True)
