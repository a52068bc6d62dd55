"""Every input a user can get wrong is one line on stderr and exit 2, through the real CLI, and nothing is written.

Most cases run the command in process (``CliRunner``); usage errors that the
argument parser raises go through the console entry point ``triec.cli.main``,
which is what the ``triec`` script runs.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

import triec
import triec.compiler.entry
import triec.compiler.values
from triec.cli import app, main

DEEP = b"[" * 100_000


def invoke(*args: str, input: bytes | None = None) -> Result:
    return CliRunner().invoke(app, list(args), input=input)


def assert_one_line_error(result: Result, *fragments: str) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith("error: "), line
    for fragment in fragments:
        assert fragment in line, line
    return line


def run_main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """The console entry point, in process: (exit code, stderr)."""
    monkeypatch.setattr(sys, "argv", ["triec", *args])
    with pytest.raises(SystemExit) as info:
        main()
    return int(info.value.code or 0), capsys.readouterr().err


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "v.txt").write_text("get\nget_user\né\n", encoding="utf-8")
    return tmp_path


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory, vocabs: dict[str, triec.Vocabulary]) -> Path:
    path = tmp_path_factory.mktemp("inputs") / "small.triec"
    triec.compile(["get", "get_user", "é", "x"], vocabs["gpt2"]).save(path)
    return path


def listing(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


# ---------------------------------------------------------------- compile: the values file


@pytest.mark.parametrize(
    ("name", "raw", "fmt"),
    [
        ("deep.json", DEEP, "auto"),  # the reproducer
        ("deep", b'{"enum": ' * 100_000, "auto"),  # no extension: detected as JSON
        ("deep.txt", b"[" * 100_000 + b"]" * 100_000, "json"),
    ],
)
def test_deeply_nested_json(workdir: Path, name: str, raw: bytes, fmt: str) -> None:
    (workdir / name).write_bytes(raw)
    before = listing(workdir)
    assert_one_line_error(invoke("compile", name, "-t", "gpt2", "--format", fmt), f"{name}: JSON nested too deeply")
    assert listing(workdir) == before


def test_deeply_nested_json_on_stdin(workdir: Path) -> None:
    assert_one_line_error(invoke("compile", "-", "-t", "gpt2", input=DEEP), "<stdin>: JSON nested too deeply")
    assert not (workdir / "values.triec").exists()


def test_values_file_over_the_size_limit(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(triec.compiler.values, "MAX_VALUES_BYTES", 100)
    (workdir / "big.txt").write_bytes(b"abc\n" * 50)
    assert_one_line_error(invoke("compile", "big.txt", "-t", "gpt2"), "big.txt: 200 bytes, over the 100-byte limit")
    assert_one_line_error(
        invoke("compile", "-", "-t", "gpt2", input=b"abc\n" * 50), "<stdin>: more than the 100-byte limit"
    )
    assert not (workdir / "big.triec").exists() and not (workdir / "values.triec").exists()


def test_values_over_the_format_limit(vocabs: dict[str, triec.Vocabulary], monkeypatch: pytest.MonkeyPatch) -> None:
    """Value bytes bound the state ids (int32); the limit is checked before anything is built."""
    monkeypatch.setattr(triec.compiler.entry, "MAX_VALUE_BYTES", 10)
    with pytest.raises(triec.ValuesError, match="2 values of 11 bytes: over the 10-byte limit"):
        triec.compile(["abcdef", "ghijk"], vocabs["gpt2"])


# ---------------------------------------------------------------- compile: tokenizer, EOS, width


def _tokenizer(path: Path, doc: object | bytes) -> Path:
    path.write_bytes(doc if isinstance(doc, bytes) else json.dumps(doc).encode())
    return path


@pytest.mark.parametrize(
    ("doc", "fragment"),
    [
        (b"not json", "not valid JSON"),
        (b"[" * 100_000, "JSON nested too deeply"),
        (
            {"model": {"type": "BPE", "vocab": {"a": "x"}}, "decoder": {"type": "ByteLevel"}},
            "malformed model.vocab entry",
        ),
        (
            {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1 << 30}}, "decoder": {"type": "ByteLevel"}},
            "past the 16,777,216-id limit",
        ),
        ({"model": {"type": "Unigram", "vocab": [7]}, "decoder": {"type": "Metaspace"}}, "malformed model.vocab entry"),
    ],
)
def test_bad_tokenizer_files(workdir: Path, doc: object | bytes, fragment: str) -> None:
    tok = _tokenizer(workdir / "tokenizer.json", doc)
    before = listing(workdir)
    assert_one_line_error(invoke("compile", "v.txt", "-t", str(tok), "--eos", "0"), "tokenizer.json", fragment)
    assert listing(workdir) == before


def test_tokenizer_that_is_not_a_regular_file(workdir: Path) -> None:
    os.mkfifo(workdir / "tokenizer.json")  # opening it would block forever
    assert_one_line_error(invoke("compile", "v.txt", "-t", "./tokenizer.json"), "not a regular file")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--eos", "99999999"], "EOS token id 99999999 is outside the vocabulary (0..50256)"),
        (["--eos", "-3"], "EOS token id -3 is outside the vocabulary"),
        (["--eos", "x"], "--eos: expected integer token ids, found 'x'"),
        (["--vocab-size", str(2**31)], "does not fit in int32"),
        (["--vocab-size", "100"], "vocab_size 100 is smaller than the tokenizer's 50257 tokens"),
        (["--format", "yaml"], "--format: expected one of auto, lines, json"),
    ],
)
def test_eos_width_and_format(workdir: Path, args: list[str], fragment: str) -> None:
    assert_one_line_error(invoke("compile", "v.txt", "-t", "gpt2", *args), fragment)
    assert not (workdir / "v.triec").exists()


# ---------------------------------------------------------------- compile: the output path


def test_output_that_is_not_a_regular_file(workdir: Path) -> None:
    os.mkfifo(workdir / "out.triec")  # stands in for /dev/null: as root, a rename over it replaces the device
    assert_one_line_error(
        invoke("compile", "v.txt", "-t", "gpt2", "-o", "out.triec"), "out.triec: exists and is not a regular file"
    )
    assert (workdir / "out.triec").is_fifo()


def test_output_would_overwrite_the_values_file(workdir: Path) -> None:
    (workdir / "names.triec").write_text("a\nb\n")  # a values file that happens to end in .triec
    assert_one_line_error(
        invoke("compile", "names.triec", "-t", "gpt2", "--format", "lines"), "is the values file itself"
    )
    assert (workdir / "names.triec").read_text() == "a\nb\n"
    assert_one_line_error(invoke("compile", "v.txt", "-t", "gpt2", "-o", "./v.txt"), "is the values file itself")
    assert (workdir / "v.txt").read_text(encoding="utf-8") == "get\nget_user\né\n"


# ---------------------------------------------------------------- usage errors through the console entry


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["compile", "v.txt", "--vocab-size", "0"], "Invalid value for '--vocab-size'"),
        (["compile", "v.txt", "--no-such-option"], "No such option: --no-such-option"),
        (["compile"], "Missing argument"),
        (["inspect"], "Missing argument 'ARTIFACT'"),
        (["verify", "x.triec", "--seed", "-1"], "Invalid value for '--seed'"),
        (["verify", "x.triec", "--states", "0"], "Invalid value for '--states'"),
        (["bench", "--repeat", "0"], "Invalid value for '--repeat'"),
        (["frobnicate"], "No such command 'frobnicate'"),
    ],
)
def test_usage_errors_are_one_line(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str], fragment: str
) -> None:
    code, stderr = run_main(monkeypatch, capsys, *args)
    assert code == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], stderr
    assert "--help" in lines[0]  # where to look next


def test_console_entry_success_and_check_failure_codes(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_main(monkeypatch, capsys, "compile", "v.txt", "-t", "gpt2", "-q")[0] == 0
    code, stderr = run_main(monkeypatch, capsys, "verify", "v.triec", "-t", "qwen2")
    assert code == 1 and "wrong tokenizer 'qwen2'" in stderr


# ---------------------------------------------------------------- inspect and verify: the artifact path


@pytest.mark.parametrize("command", ["inspect", "verify"])
def test_artifact_paths(workdir: Path, command: str) -> None:
    os.mkfifo(workdir / "pipe.triec")  # opening it would block forever
    (workdir / "dir.triec").mkdir()
    (workdir / "empty.triec").write_bytes(b"")
    missing = "no such artifact file" if command == "verify" else "cannot read artifact"
    assert_one_line_error(invoke(command, "missing.triec"), "missing.triec", missing)
    assert_one_line_error(invoke(command, "pipe.triec"), "pipe.triec", "not a regular file")
    assert_one_line_error(invoke(command, "dir.triec"), "dir.triec", "not a regular file")
    empty = invoke(command, "empty.triec")
    if command == "inspect":
        assert_one_line_error(empty, "empty.triec: file is empty")
    else:  # verify: a file that is not an artifact is a failed check (exit 1), reported with its verdict
        assert empty.exit_code == 1 and "Traceback" not in empty.output
        assert empty.stderr.splitlines()[0] == "integrity: empty.triec: file is empty"
        assert empty.stderr.splitlines()[1].startswith("FAILED")


def test_inspect_prefix_and_state(artifact: Path) -> None:
    table = triec.load(artifact)
    ok = invoke("inspect", str(artifact), "--prefix", "\udcc3", "--json")  # argv byte 0xC3: half of 'é'
    assert ok.exit_code == 0, ok.output
    state = json.loads(ok.stdout)["state"]
    assert state["depth"] == 1 and state["prefix"] == "\\xc3" and state["first_values"] == ["é"]
    assert_one_line_error(
        invoke("inspect", str(artifact), "--prefix", "\udcff"), "--prefix: no value starts with '\\\\xff'"
    )
    assert_one_line_error(invoke("inspect", str(artifact), "--prefix", "zz"), "--prefix: no value starts with 'zz'")
    for bad in (-1, table.num_states, 10**30):
        assert_one_line_error(
            invoke("inspect", str(artifact), "--state", str(bad)), f"--state {bad}: expected 0..{table.num_states - 1}"
        )
    assert_one_line_error(
        invoke("inspect", str(artifact), "--state", "0", "--prefix", "g"), "pass --prefix or --state, not both"
    )


def test_verify_unknown_engine_and_tokenizer(artifact: Path, workdir: Path) -> None:
    assert_one_line_error(invoke("verify", str(artifact), "--against", "magic"), "--against: expected reference")
    assert_one_line_error(invoke("verify", str(artifact), "-t", "./nope/tokenizer.json"), "not found")


# ---------------------------------------------------------------- bench: arguments are checked before any work


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--k", "1e400"], "--k: expected comma-separated integers, found '1e400'"),
        (["--k", "10,x"], "--k: expected comma-separated integers, found 'x'"),
        (["--k", "0"], "--k: values must be >= 1, found 0"),
        (["--k", "20000000"], "--k: values must be <= 10,000,000, found 20,000,000"),
        (["--batch", "100000"], "--batch: values must be <= 65,536, found 100,000"),
        (["--engines", "triec,magic"], "--engines: expected names from"),
        (["--set", "missing.txt"], "--set: expected tools, products or a values file"),
        (["--json", "nodir/out.json"], "--json: nodir/out.json is a directory or its directory does not exist"),
        (["--plot", "."], "--plot: . is a directory"),
    ],
)
def test_bench_arguments(workdir: Path, args: list[str], fragment: str) -> None:
    assert_one_line_error(invoke("bench", "--engines", "triec", *args), fragment)
    assert listing(workdir) == ["v.txt"]


# ---------------------------------------------------------------- compile: options that do not apply (issue 49)

STRING_SCHEMA = {"type": "string", "pattern": "^[A-Z]{2}$"}
DATE_SCHEMA = {"type": "object", "properties": {"d": {"type": "string", "format": "date"}}, "required": ["d"]}
REGISTRY = [{"type": "function", "function": {"name": f"tool_{i}", "parameters": {"type": "object"}}} for i in range(3)]
TAG = {"type": "structural_tag", "format": {"type": "const_string", "value": "x"}}


@pytest.fixture
def modes(workdir: Path) -> Path:
    """One file per mode of ``triec compile``, beside ``v.txt`` (a plain value set)."""
    for name, doc in (("p.json", STRING_SCHEMA), ("s.json", DATE_SCHEMA), ("tools.json", REGISTRY), ("tag.json", TAG)):
        (workdir / name).write_text(json.dumps(doc))
    return workdir


def options_named(line: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", line))


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--pattern", "a+", "--format", "json"], {"--pattern", "--format"}),
        (["--pattern", "a+", "--layout", "tails"], {"--pattern", "--layout"}),
        (["--pattern", "a+", "--tokenization", "canonical"], {"--pattern", "--tokenization"}),
        (["--pattern", "a+", "--tokenization", "any"], {"--pattern", "--tokenization"}),  # a default, but given
        (["--string-format", "uuid", "--encoding", "json", "--prefix", "x"], {"--encoding", "--prefix"}),
        (["--pattern", "a+", "--string-format", "date"], {"--pattern", "--string-format"}),
        (["v.txt", "--pattern", "a+"], {"--pattern"}),
        (["v.txt", "--string-format", "date"], {"--string-format"}),
        (["v.txt", "--engine", "xgrammar", "--whitespace", "any"], {"--engine", "--whitespace"}),
        (["v.txt", "--engine", "llguidance"], {"--engine"}),
        (["v.txt", "--max-states", "5", "--tool-format", "hermes", "--single-call"], None),
        (["p.json", "--engine", "xgrammar", "--enum-threshold", "3"], {"--engine", "--enum-threshold"}),
        (["p.json", "--layout", "full"], {"--layout"}),
        (["s.json", "--tokenization", "canonical", "--layout", "tails"], {"--tokenization", "--layout"}),
        (["s.json", "--prefix", "x"], {"--prefix"}),
        (["s.json", "--tool-choice", "auto"], {"--tool-choice"}),
        (["tools.json", "--max-states", "9", "--encoding", "json"], {"--max-states", "--encoding"}),
        (["tag.json", "--whitespace", "any", "--tool-format", "hermes"], {"--whitespace", "--tool-format"}),
    ],
)
def test_options_that_do_not_apply_are_named(modes: Path, args: list[str], named: set[str] | None) -> None:
    """Exit 2, one line naming exactly the options given that do not apply (the mode's own may be named too)."""
    line = assert_one_line_error(invoke("compile", *args, "-t", "gpt2", "-o", "out.triec"))
    given = {a for a in args if a.startswith("--")}
    expected = named if named is not None else given
    assert expected <= options_named(line) <= given, line
    assert not (modes / "out.triec").exists()


@pytest.mark.parametrize("values", [[], ["v.txt"]])
@pytest.mark.parametrize("name", ["date", "uuid"])
def test_named_format_old_spelling(workdir: Path, values: list[str], name: str) -> None:
    """``--format NAME`` (a named string format, before it had its own option) says where it went."""
    line = assert_one_line_error(invoke("compile", *values, "--format", name, "-t", "gpt2", "-o", "out.triec"))
    assert f"--format {name}" in line and f"use --string-format {name}" in line
    assert not (workdir / "out.triec").exists()


def test_string_format_and_schema_max_states(modes: Path) -> None:
    """``--string-format`` compiles a named format; ``--max-states`` reaches a schema's pattern fields."""
    result = invoke("compile", "--string-format", "date", "-t", "gpt2", "-o", "date.triec", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["format"] == "date" and triec.load("date.triec").matches("2024-01-31")
    small = invoke("compile", "s.json", "-t", "gpt2", "-o", "s.triec", "--max-states", "5")  # the date DFA has 16
    assert_one_line_error(small, "/properties/d", "more than the bound of 5")
    result = invoke("compile", "s.json", "-t", "gpt2", "-o", "s.triec", "--json", "--max-states", "16")
    assert result.exit_code == 0, result.output
    assert [s["format"] for s in json.loads(result.stdout)["slots"]] == ["date"]
