"""Reading values: line files, JSON arrays, JSON Schema enums, stdin, and the errors of each.

Every input error is checked twice: through the Python API (``triec.ValuesError``
naming the file and the line or index) and through ``triec compile`` (exit code
2, one line on stderr, no traceback, no artifact written).
"""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import triec
from triec.cli import app
from triec.compiler.values import parse_values, read_values

BOM = b"\xef\xbb\xbf"


@pytest.fixture(scope="module")
def gpt2(vocabs: dict[str, triec.Vocabulary]) -> triec.Vocabulary:
    return vocabs["gpt2"]


def write(tmp_path: Path, name: str, raw: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(raw)
    return path


def gpt2_ids(vocab: triec.Vocabulary, *pieces: bytes) -> list[int]:
    """The gpt2 id whose bytes are exactly each piece (first such id)."""
    return [vocab.token_bytes.index(p) for p in pieces]


# ----------------------------------------------------------------- line files


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"], ids=["lf", "crlf"])
def test_one_value_per_line(tmp_path: Path, newline: bytes) -> None:
    raw = newline.join([b"get_user", b"list_files", "h\u00e9llo".encode()]) + newline
    path = write(tmp_path, "values.txt", raw)
    assert read_values(path) == ["get_user", "list_files", "h\u00e9llo"]


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"], ids=["lf", "crlf"])
def test_last_line_needs_no_newline(tmp_path: Path, newline: bytes) -> None:
    path = write(tmp_path, "values.txt", b"a" + newline + b"b")
    assert read_values(path) == ["a", "b"]


def test_carriage_return_kept_when_not_part_of_crlf(tmp_path: Path) -> None:
    # Only the \r of a \r\n line ending is dropped; a \r inside a value stays.
    path = write(tmp_path, "values.txt", b"a\rb\nc\r\r\n")
    assert read_values(path) == ["a\rb", "c\r"]


@pytest.mark.parametrize("name", ["values.txt", "values.json", "values"])
def test_utf8_bom_is_dropped(tmp_path: Path, name: str) -> None:
    raw = b'["x", "y"]' if name.endswith(".json") else b"x\ny\n"
    path = write(tmp_path, name, BOM + raw)
    values = read_values(path)
    assert values == ["x", "y"]
    assert not values[0].startswith("\ufeff")


def test_bom_is_dropped_only_at_the_start(tmp_path: Path) -> None:
    path = write(tmp_path, "values.txt", BOM + b"a\n" + BOM + b"b\n")
    assert read_values(path) == ["a", "\ufeffb"]


def test_spaces_belong_to_the_value(tmp_path: Path) -> None:
    raw = b"  leading\ntrailing  \nin side\n\t tab \n \n"
    path = write(tmp_path, "values.txt", raw)
    assert read_values(path) == ["  leading", "trailing  ", "in side", "\t tab ", " "]


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"], ids=["lf", "crlf"])
def test_blank_lines_hold_no_value(tmp_path: Path, newline: bytes) -> None:
    raw = newline * 2 + b"a" + newline * 3 + b"b" + newline * 2
    path = write(tmp_path, "values.txt", raw)
    assert read_values(path) == ["a", "b"]


def test_duplicates_are_kept_by_the_reader(tmp_path: Path) -> None:
    # The reader returns what the file says; compile removes duplicates (below).
    path = write(tmp_path, "values.txt", b"b\na\nb\nb\n")
    assert read_values(path) == ["b", "a", "b", "b"]


# ----------------------------------------------------------------- JSON


def test_json_array(tmp_path: Path) -> None:
    path = write(tmp_path, "values.json", json.dumps(["a", " b ", "c\u00e9", ""]).encode())
    assert read_values(path) == ["a", " b ", "c\u00e9", ""]


def test_json_schema_enum(tmp_path: Path) -> None:
    doc = {"type": "string", "enum": ["get_user", "list_files"], "description": "a tool"}
    path = write(tmp_path, "schema.json", json.dumps(doc, indent=2).encode())
    assert read_values(path) == ["get_user", "list_files"]


def test_json_detected_without_json_extension(tmp_path: Path) -> None:
    path = write(tmp_path, "values", b'  \n["a", "b"]\n')
    assert read_values(path) == ["a", "b"]


def test_bracketed_lines_that_are_not_json_are_lines(tmp_path: Path) -> None:
    path = write(tmp_path, "values", b"[a]\n[b]\n")
    assert read_values(path) == ["[a]", "[b]"]


def test_txt_extension_is_always_lines(tmp_path: Path) -> None:
    path = write(tmp_path, "values.txt", b'["a", "b"]\n')
    assert read_values(path) == ['["a", "b"]']


def test_explicit_format_overrides_the_name(tmp_path: Path) -> None:
    as_json = write(tmp_path, "a.txt", b'["x"]')
    as_lines = write(tmp_path, "b.json", b'["x"]\n')
    assert read_values(as_json, fmt="json") == ["x"]
    assert read_values(as_lines, fmt="lines") == ['["x"]']
    with pytest.raises(ValueError, match="fmt must be one of"):
        parse_values(b"x", "x.txt", fmt="xml")


def test_json_values_with_newlines_and_empty_string(tmp_path: Path) -> None:
    path = write(tmp_path, "values.json", json.dumps(["a\nb", "", "c\r\n"]).encode())
    assert read_values(path) == ["a\nb", "", "c\r\n"]


# ----------------------------------------------------------------- stdin


def test_dash_reads_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(BOM + b"x\r\ny\n")))
    assert read_values("-") == ["x", "y"]


def test_dash_reads_json_from_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b'{"enum": ["p", "q"]}')))
    assert read_values("-") == ["p", "q"]


def test_empty_stdin_names_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\n")))
    with pytest.raises(triec.ValuesError, match=r"^<stdin>: no values"):
        read_values("-")


# ----------------------------------------------------------------- compiling what was read


def test_duplicates_removed_by_compile(gpt2: triec.Vocabulary) -> None:
    stats = triec.CompileStats()
    table = triec.compile(["b", "a", "b", "b", "a"], gpt2, stats=stats)
    assert table.values == ["a", "b"]
    assert stats.duplicates == 3
    assert stats.num_values == 2


def test_empty_string_is_a_value_through_json(tmp_path: Path, gpt2: triec.Vocabulary) -> None:
    path = write(tmp_path, "values.json", b'[""]')
    table = triec.compile(read_values(path), gpt2)
    assert table.values == [""]
    assert table.num_states == 1
    assert table.is_accepting(table.start)
    # Only EOS may follow the empty prefix, and it finishes the value.
    assert table.allowed(table.start).tolist() == [50256]
    assert table.advance(table.start, 50256) == triec.FINISHED


def test_empty_string_beside_other_values(tmp_path: Path, gpt2: triec.Vocabulary) -> None:
    path = write(tmp_path, "values.json", b'["", "a"]')
    table = triec.compile(read_values(path), gpt2)
    assert table.is_accepting(table.start)
    (a,) = gpt2_ids(gpt2, b"a")
    assert table.allowed(table.start).tolist() == sorted([a, 50256])


def test_value_with_newline_through_json(tmp_path: Path, gpt2: triec.Vocabulary) -> None:
    path = write(tmp_path, "values.json", json.dumps(["a\nb", "a"]).encode())
    table = triec.compile(read_values(path), gpt2)
    assert table.values == ["a", "a\nb"]
    a, nl, b = gpt2_ids(gpt2, b"a", b"\n", b"b")
    end = table.walk([a, nl, b])
    assert table.value(end) == "a\nb"
    assert table.advance(end, 50256) == triec.FINISHED
    assert table.state_for_prefix("a\n") == table.walk([a, nl])


# ----------------------------------------------------------------- errors: API and CLI

# (case id, file name or None for a path made by the test, bytes, regex the message must match)
# {path} in the regex is replaced by the escaped path.
ERROR_CASES = [
    (
        "invalid-utf8-line-3",
        "values.txt",
        b"ok\nfine\nbad\xff\nlater\n",
        r"^{path}:3: invalid UTF-8 at byte 4 of the line$",
    ),
    ("invalid-utf8-crlf-line-2", "values.txt", b"ok\r\n\xc3(\r\n", r"^{path}:2: invalid UTF-8 at byte 1 of the line$"),
    ("invalid-utf8-after-blank-lines", "values", b"a\n\n\nb\xe9\n", r"^{path}:4: invalid UTF-8"),
    ("json-invalid-utf8-line-2", "values.json", b'[\n"\xff"\n]', r"^{path}:2: invalid UTF-8"),
    ("json-syntax-error-line-3", "values.json", b'[\n"a",\n"b" "c"\n]', r"^{path}:3: invalid JSON"),
    (
        "json-non-string-index-2",
        "values.json",
        b'["a", "b", 3, "d"]',
        r"^{path}: top-level array index 2: expected a string, found 3$",
    ),
    (
        "json-null-index-0",
        "values.json",
        b"[null]",
        r"^{path}: top-level array index 0: expected a string, found null$",
    ),
    (
        "json-enum-non-string-index-1",
        "schema.json",
        b'{"enum": ["a", {"b": 1}]}',
        r'^{path}: "enum" index 1: expected a string',
    ),
    (
        "json-lone-surrogate-index-1",
        "values.json",
        b'["a", "\\ud800"]',
        r"^{path}: top-level array index 1: lone surrogate",
    ),
    ("json-object-without-enum", "schema.json", b'{"type": "string"}', r'^{path}: JSON object has no "enum" array'),
    (
        "json-enum-not-array",
        "schema.json",
        b'{"enum": "a"}',
        r"^{path}: keyword 'enum' at /enum must be an array, found a string \(\"a\"\)$",
    ),
    (
        "json-top-level-string",
        "values.json",
        b'"a"',
        r"^{path}: top-level array must be an array of strings, found str$",
    ),
    ("empty-file", "values.txt", b"", r"^{path}: no values \(empty set\)$"),
    ("bom-only", "values.txt", BOM, r"^{path}: no values \(empty set\)$"),
    ("blank-lines-only", "values.txt", b"\n\r\n\n", r"^{path}: no values \(empty set\)$"),
    ("empty-json-array", "values.json", b"[]", r"^{path}: no values \(empty set\)$"),
    ("empty-json-array-no-extension", "values", b" [ ] ", r"^{path}: no values \(empty set\)$"),
    ("empty-enum", "schema.json", b'{"enum": []}', r"^{path}: no values \(empty set\)$"),
    ("missing-file", None, b"", r"^{path}: cannot read \(No such file or directory\)$"),
    ("directory", None, b"", r"^{path}: is a directory, expected a values file$"),
]


def _make_input(tmp_path: Path, case: str, name: str | None, raw: bytes) -> Path:
    if case == "missing-file":
        return tmp_path / "missing.txt"
    if case == "directory":
        path = tmp_path / "values_dir"
        path.mkdir()
        return path
    assert name is not None
    return write(tmp_path, name, raw)


@pytest.mark.parametrize(("case", "name", "raw", "pattern"), ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
def test_values_error_api(tmp_path: Path, case: str, name: str | None, raw: bytes, pattern: str) -> None:
    path = _make_input(tmp_path, case, name, raw)
    with pytest.raises(triec.ValuesError) as info:
        read_values(path)
    assert re.search(pattern.format(path=re.escape(str(path))), str(info.value)), str(info.value)
    assert isinstance(info.value, triec.TriecError)


@pytest.mark.parametrize(("case", "name", "raw", "pattern"), ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
def test_values_error_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str, name: str | None, raw: bytes, pattern: str
) -> None:
    monkeypatch.chdir(tmp_path)
    path = _make_input(tmp_path, case, name, raw)
    before = sorted(p.name for p in tmp_path.iterdir())
    result = CliRunner().invoke(app, ["compile", path.name, "-t", "gpt2"])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    message = lines[0]
    assert message.startswith("error: ")
    assert re.search(pattern.format(path=re.escape(path.name)), message[len("error: ") :]), message
    # Nothing was written: no artifact, no temporary file.
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert not (tmp_path / (Path(path.name).stem + ".triec")).exists()


def test_values_error_cli_stdin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["compile", "-", "-t", "gpt2"], input=b'["a", 7]')
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: <stdin>: top-level array index 1: expected a string, found 7"
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------- CLI: reading inputs


def _compile_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], **kw: object) -> dict:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["compile", *args, "-t", "gpt2", "--json"], **kw)  # type: ignore[arg-type]
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_cli_stdin_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = _compile_json(tmp_path, monkeypatch, ["-"], input=b"b\r\na\r\nb\r\n\r\n")
    assert summary["output"] == "values.triec"
    assert summary["values"] == 2
    assert summary["duplicates_removed"] == 1
    assert triec.load(tmp_path / "values.triec").values == ["a", "b"]


def test_cli_stdin_json_enum_with_bom(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = _compile_json(tmp_path, monkeypatch, ["-"], input=BOM + b'{"enum": ["a b", "", "a b"]}')
    assert summary["values"] == 2
    assert summary["duplicates_removed"] == 1
    table = triec.load(tmp_path / "values.triec")
    assert table.values == ["", "a b"]
    assert table.is_accepting(table.start)


def test_cli_duplicates_removed_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "tools.txt", b"x\ny\nx\nx\nz\ny\n")
    summary = _compile_json(tmp_path, monkeypatch, ["tools.txt"])
    assert summary["values"] == 3
    assert summary["duplicates_removed"] == 3
    assert summary["value_bytes"] == 3


def test_cli_empty_string_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "empty.json", b'[""]')
    summary = _compile_json(tmp_path, monkeypatch, ["empty.json"])
    assert summary["values"] == 1
    assert summary["states"] == 1
    assert summary["allowed_pairs"] == 0
    table = triec.load(tmp_path / "empty.triec", verify=True)
    assert table.values == [""]
    assert table.is_accepting(table.start)
    assert table.allowed(table.start).tolist() == [50256]


def test_cli_value_with_newline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "nl.json", json.dumps(["line one\nline two"]).encode())
    _compile_json(tmp_path, monkeypatch, ["nl.json"])
    assert triec.load(tmp_path / "nl.triec", verify=True).values == ["line one\nline two"]


def test_cli_spaces_and_crlf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "sp.txt", BOM + b" a\r\nb \r\n\r\n")
    _compile_json(tmp_path, monkeypatch, ["sp.txt"])
    assert triec.load(tmp_path / "sp.triec").values == [" a", "b "]


def test_cli_format_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "v.txt", b'["x", "y"]')
    summary = _compile_json(tmp_path, monkeypatch, ["v.txt", "--format", "json"])
    assert summary["values"] == 2
    summary = _compile_json(tmp_path, monkeypatch, ["v.txt", "--format", "lines", "-o", "lines.triec"])
    assert summary["values"] == 1
    assert triec.load(tmp_path / "lines.triec").values == ['["x", "y"]']
    result = CliRunner().invoke(app, ["compile", "v.txt", "-t", "gpt2", "--format", "xml"])
    assert result.exit_code == 2
    assert "--format" in result.stderr and "'xml'" in result.stderr
