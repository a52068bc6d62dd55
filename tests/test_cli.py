"""``triec compile``: output paths, summaries, compression, tokenizer options, exit codes.

In-process runs use typer's CliRunner (stdout and stderr apart); a few runs go
through a real subprocess to check exit codes and what reaches stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import msgpack
import pytest
import zstandard
from typer.testing import CliRunner, Result

import triec
from triec.artifact.container import MAGIC, PREAMBLE, ZSTD_MAGIC
from triec.cli import app

ROOT = Path(__file__).resolve().parent.parent
PHI3_ZST = ROOT / "fixtures" / "tokenizers" / "phi3" / "tokenizer.json.zst"

SUMMARY_KEYS = {"output", "artifact_bytes", "values", "states", "sharing_ratio", "allowed_pairs", "seconds"}
SECONDS_KEYS = {"read_values", "tokenizer", "automaton", "values", "trie", "masks", "write", "total"}


def invoke(*args: str, input: bytes | str | None = None) -> Result:
    return CliRunner().invoke(app, list(args), input=input)


def header_of(path: Path) -> dict:
    raw = path.read_bytes()
    if raw.startswith(ZSTD_MAGIC):
        raw = zstandard.ZstdDecompressor().decompress(raw, max_output_size=1 << 30)
    _, _, head_len, _, _ = PREAMBLE.unpack_from(raw, 0)
    return msgpack.unpackb(raw[PREAMBLE.size : PREAMBLE.size + head_len], raw=False)


def assert_usage_error(result: Result, *fragments: str) -> str:
    """Exit code 2, nothing on stdout, exactly one line on stderr holding every fragment."""
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr, result.exception)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty current directory with tools.txt in a sibling folder."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    src = tmp_path / "src"
    src.mkdir()
    (src / "tools.txt").write_text("get_user\nlist_files\nget_user\nget\n", encoding="utf-8")
    monkeypatch.chdir(cwd)
    return cwd


TOOLS = str(Path("..") / "src" / "tools.txt")


# ----------------------------------------------------------------- output paths


def test_default_output_is_stem_in_current_directory(workdir: Path) -> None:
    result = invoke("compile", TOOLS, "-t", "gpt2", "-q")
    assert result.exit_code == 0, result.stderr
    assert sorted(p.name for p in workdir.iterdir()) == ["tools.triec"]
    assert not (workdir.parent / "src" / "tools.triec").exists()
    assert triec.load(workdir / "tools.triec").values == ["get", "get_user", "list_files"]


def test_default_output_for_stdin(workdir: Path) -> None:
    result = invoke("compile", "-", "-t", "gpt2", "-q", input="a\nb\n")
    assert result.exit_code == 0, result.stderr
    assert [p.name for p in workdir.iterdir()] == ["values.triec"]


def test_output_option(workdir: Path, tmp_path: Path) -> None:
    out = tmp_path / "elsewhere" / "tools-v2.bin"
    out.parent.mkdir()
    result = invoke("compile", TOOLS, "-t", "gpt2", "-o", str(out), "-q")
    assert result.exit_code == 0, result.stderr
    assert list(workdir.iterdir()) == []
    assert out.read_bytes().startswith(MAGIC)
    assert triec.load(out).num_values == 3


def test_output_replaces_existing_file(workdir: Path) -> None:
    (workdir / "tools.triec").write_bytes(b"x" * 100_000)
    assert invoke("compile", TOOLS, "-t", "gpt2", "-q").exit_code == 0
    data = (workdir / "tools.triec").read_bytes()
    assert data.startswith(MAGIC) and len(data) < 100_000
    assert triec.load(workdir / "tools.triec", verify=True).num_values == 3


def test_output_directory_missing(workdir: Path) -> None:
    result = invoke("compile", TOOLS, "-t", "gpt2", "-o", "nowhere/out.triec")
    assert_usage_error(result, "nowhere/out.triec", "does not exist")
    assert list(workdir.iterdir()) == []


def test_output_is_an_existing_directory(workdir: Path) -> None:
    """-o naming a directory is a user error: one line, exit 2 (not a traceback)."""
    (workdir / "out").mkdir()
    result = invoke("compile", TOOLS, "-t", "gpt2", "-o", "out")
    assert_usage_error(result, "out")
    assert list((workdir / "out").iterdir()) == []
    assert sorted(p.name for p in workdir.iterdir()) == ["out"]  # no temporary file left behind


def test_failed_compile_keeps_the_previous_artifact(workdir: Path) -> None:
    assert invoke("compile", TOOLS, "-t", "gpt2", "-q").exit_code == 0
    before = (workdir / "tools.triec").read_bytes()
    bad = workdir.parent / "src" / "tools.txt"
    bad.write_bytes(b"ok\n\xff\n")
    assert_usage_error(invoke("compile", TOOLS, "-t", "gpt2"), "tools.txt:2")
    assert (workdir / "tools.triec").read_bytes() == before
    assert sorted(p.name for p in workdir.iterdir()) == ["tools.triec"]


# ----------------------------------------------------------------- summaries


def test_json_summary(workdir: Path) -> None:
    result = invoke("compile", TOOLS, "-t", "gpt2", "--json")
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    summary = json.loads(result.stdout)  # the whole of stdout is one JSON object
    assert set(summary) >= SUMMARY_KEYS
    table = triec.load(workdir / "tools.triec")
    assert summary["output"] == "tools.triec"
    assert summary["artifact_bytes"] == (workdir / "tools.triec").stat().st_size
    assert summary["values"] == 3
    assert summary["duplicates_removed"] == 1
    assert summary["value_bytes"] == len("get") + len("get_user") + len("list_files")
    # Trie: "" + get (3) + _user (5) + list_files (10).
    assert summary["states"] == table.num_states == 1 + 3 + 5 + 10
    assert summary["sharing_ratio"] == round(19 / 21, 4)
    assert summary["allowed_pairs"] == table.num_allowed > 0
    assert summary["tokenizer"] == "gpt2"
    assert summary["tokenizer_fingerprint"] == table.tokenizer_fingerprint
    assert summary["vocab_size"] == 50257
    assert summary["eos_token_ids"] == [50256]
    assert summary["compressed"] is False
    seconds = summary["seconds"]
    assert set(seconds) == SECONDS_KEYS
    assert all(isinstance(v, float | int) and v >= 0 for v in seconds.values())
    parts = sum(v for k, v in seconds.items() if k != "total")
    assert seconds["total"] > 0 and parts <= seconds["total"] + 1e-4


def test_json_summary_survives_long_paths(workdir: Path, tmp_path: Path) -> None:
    out = tmp_path / ("d" * 150) / "artifact.triec"
    out.parent.mkdir()
    result = invoke("compile", TOOLS, "-t", "gpt2", "--json", "-o", str(out))
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["output"] == str(out)


def test_quiet_prints_nothing(workdir: Path) -> None:
    result = invoke("compile", TOOLS, "-t", "gpt2", "--quiet")
    assert result.exit_code == 0
    assert result.stdout == ""
    assert result.stderr == ""
    assert (workdir / "tools.triec").is_file()


def test_human_summary(workdir: Path) -> None:
    result = invoke("compile", TOOLS, "-t", "gpt2")
    assert result.exit_code == 0, result.stderr
    assert "tools.triec" in result.stdout
    assert "duplicates removed" in result.stdout
    assert "gpt2" in result.stdout


def test_version() -> None:
    result = invoke("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"triec {triec.__version__}"


# ----------------------------------------------------------------- zstd


def test_zstd_default_name(workdir: Path) -> None:
    result = invoke("compile", TOOLS, "-t", "gpt2", "--zstd", "--json")
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["output"] == "tools.triec.zst"
    assert summary["compressed"] is True
    path = workdir / "tools.triec.zst"
    data = path.read_bytes()
    assert data.startswith(ZSTD_MAGIC)
    assert summary["artifact_bytes"] == len(data)
    table = triec.load(path, verify=True)
    assert table.values == ["get", "get_user", "list_files"]


def test_zstd_matches_plain(workdir: Path) -> None:
    assert invoke("compile", TOOLS, "-t", "gpt2", "-q").exit_code == 0
    assert invoke("compile", TOOLS, "-t", "gpt2", "-q", "--zstd").exit_code == 0
    plain = (workdir / "tools.triec").read_bytes()
    packed = (workdir / "tools.triec.zst").read_bytes()
    assert zstandard.ZstdDecompressor().decompress(packed, max_output_size=1 << 24) == plain
    a, b = triec.load(workdir / "tools.triec"), triec.load(workdir / "tools.triec.zst")
    for s in range(a.num_states):
        assert a.allowed(s).tolist() == b.allowed(s).tolist()


def test_zstd_with_explicit_output_keeps_the_name(workdir: Path) -> None:
    assert invoke("compile", TOOLS, "-t", "gpt2", "-q", "--zstd", "-o", "shipped.triec").exit_code == 0
    assert [p.name for p in workdir.iterdir()] == ["shipped.triec"]
    assert (workdir / "shipped.triec").read_bytes().startswith(ZSTD_MAGIC)
    assert triec.load(workdir / "shipped.triec").num_values == 3


def test_zst_suffix_implies_compression(workdir: Path) -> None:
    result = invoke("compile", TOOLS, "-t", "gpt2", "--json", "-o", "a.triec.zst")
    assert json.loads(result.stdout)["compressed"] is True
    assert (workdir / "a.triec.zst").read_bytes().startswith(ZSTD_MAGIC)


# ----------------------------------------------------------------- determinism through the CLI


def test_cli_artifact_depends_only_on_the_set_of_values(workdir: Path) -> None:
    """Reordering the input or repeating a line must not change the artifact's bytes."""
    (workdir / "a.txt").write_text("get\nget_user\nlist_files\n")
    (workdir / "b.txt").write_text("list_files\nget\nget_user\nget\nlist_files\n")
    assert invoke("compile", "a.txt", "-t", "gpt2", "-q").exit_code == 0
    assert invoke("compile", "b.txt", "-t", "gpt2", "-q").exit_code == 0
    assert (workdir / "a.triec").read_bytes() == (workdir / "b.triec").read_bytes()


def test_cli_matches_the_python_api(workdir: Path, tmp_path: Path, vocabs: dict[str, triec.Vocabulary]) -> None:
    """The CLI's masks are the API's masks for the same values and tokenizer."""
    assert invoke("compile", TOOLS, "-t", "gpt2", "-q").exit_code == 0
    cli = triec.load(workdir / "tools.triec", verify=True)
    api = triec.compile(["get_user", "list_files", "get"], vocabs["gpt2"])
    for name in ("allowed_offsets", "allowed_tokens", "allowed_next", "value_state", "value_lcp", "state_byte"):
        assert getattr(cli, name).tobytes() == getattr(api, name).tobytes(), name


# ----------------------------------------------------------------- tokenizer options


def test_default_tokenizer_is_qwen2(workdir: Path) -> None:
    result = invoke("compile", TOOLS, "--json")
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["tokenizer"] == "qwen2"
    assert summary["vocab_size"] == 151646
    assert summary["eos_token_ids"] == [151643, 151645]


def test_tokenizer_path_and_directory(workdir: Path, tmp_path: Path) -> None:
    model = tmp_path / "phi3-model"
    model.mkdir()
    (model / "tokenizer.json.zst").write_bytes(PHI3_ZST.read_bytes())
    (model / "generation_config.json").write_text(json.dumps({"eos_token_id": [32000, 32007]}))
    by_dir = json.loads(invoke("compile", TOOLS, "-t", str(model), "--json", "-o", "dir.triec").stdout)
    assert by_dir["eos_token_ids"] == [32000, 32007]
    assert by_dir["vocab_size"] == 32064
    assert by_dir["tokenizer"] == str((model / "tokenizer.json.zst").resolve())
    by_file = json.loads(invoke("compile", TOOLS, "-t", str(PHI3_ZST), "--json", "-o", "file.triec").stdout)
    assert by_file["eos_token_ids"] == [32000]
    assert by_file["tokenizer_fingerprint"] == by_dir["tokenizer_fingerprint"]
    assert triec.load(workdir / "dir.triec").eos_token_ids == (32000, 32007)


def test_unknown_tokenizer(workdir: Path) -> None:
    result = invoke("compile", TOOLS, "-t", "no-such-tokenizer")
    assert_usage_error(result, "'no-such-tokenizer'", "not a bundled name (gpt2, qwen2)")
    assert list(workdir.iterdir()) == []


def test_hub_id_offline(workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    if "huggingface_hub.constants" in sys.modules:
        # huggingface_hub reads the environment once, at import; keep it offline if already imported.
        monkeypatch.setattr(sys.modules["huggingface_hub.constants"], "HF_HUB_OFFLINE", True)
    result = invoke("compile", TOOLS, "-t", "nonexistent-org/nonexistent-model")
    assert_usage_error(result, "nonexistent-org/nonexistent-model", "Hugging Face cache")
    assert list(workdir.iterdir()) == []


def test_vocab_size_smaller_is_an_error(workdir: Path) -> None:
    result = invoke("compile", TOOLS, "-t", "gpt2", "--vocab-size", "50000")
    assert_usage_error(result, "vocab_size 50000", "50257")
    assert list(workdir.iterdir()) == []


def test_vocab_size_larger_is_recorded(workdir: Path) -> None:
    result = invoke("compile", TOOLS, "-t", "gpt2", "--vocab-size", "50304", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["vocab_size"] == 50304
    assert header_of(workdir / "tools.triec")["vocab_size"] == 50304
    table = triec.load(workdir / "tools.triec", verify=True)
    assert table.vocab_size == 50304
    assert table.words_per_row == 50304 // 32


@pytest.mark.parametrize(
    ("eos_args", "expected"),
    [
        (["--eos", "13"], [13]),
        (["--eos", "13", "--eos", "50256"], [13, 50256]),
        (["--eos", "50256,13"], [13, 50256]),
        (["--eos", "198, 13", "--eos", "50256"], [13, 198, 50256]),
    ],
    ids=["one", "repeat", "comma", "both"],
)
def test_eos_override(workdir: Path, eos_args: list[str], expected: list[int]) -> None:
    result = invoke("compile", TOOLS, "-t", "gpt2", "--json", *eos_args)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["eos_token_ids"] == expected
    table = triec.load(workdir / "tools.triec")
    assert list(table.eos_token_ids) == expected
    assert header_of(workdir / "tools.triec")["eos_token_ids"] == expected
    end = table.state_for_prefix("get")
    assert end is not None and set(expected) <= set(table.allowed(end).tolist())


@pytest.mark.parametrize(
    ("eos", "fragments"),
    [
        ("50257", ("EOS token id 50257", "outside the vocabulary")),
        ("13,-1", ("EOS token id -1",)),
        ("abc", ("--eos", "'abc'")),
    ],
)
def test_eos_errors(workdir: Path, eos: str, fragments: tuple[str, ...]) -> None:
    assert_usage_error(invoke("compile", TOOLS, "-t", "gpt2", "--eos", eos), *fragments)
    assert list(workdir.iterdir()) == []


# ----------------------------------------------------------------- a real process


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    return subprocess.run(
        [sys.executable, "-m", "triec.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_subprocess_success_and_errors(tmp_path: Path) -> None:
    (tmp_path / "v.txt").write_text("alpha\nbeta\n")
    ok = _run("compile", "v.txt", "-t", "gpt2", "--json", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["values"] == 2
    assert triec.load(tmp_path / "v.triec").values == ["alpha", "beta"]

    (tmp_path / "bad.json").write_text('["a", 1]')
    bad = _run("compile", "bad.json", "-t", "gpt2", cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stdout == ""
    assert "Traceback" not in bad.stderr
    assert bad.stderr.strip() == "error: bad.json: top-level array index 1: expected a string, found 1"
    assert not (tmp_path / "bad.triec").exists()

    usage = _run("compile", cwd=tmp_path)  # missing argument: click's usage error
    assert usage.returncode == 2
    assert "Traceback" not in usage.stderr


def test_subprocess_debug_shows_traceback(tmp_path: Path) -> None:
    result = _run("--debug", "compile", "missing.txt", "-t", "gpt2", cwd=tmp_path)
    assert result.returncode == 2
    assert "Traceback" in result.stderr
    assert "error: missing.txt: cannot read" in result.stderr


def test_debug_in_process_then_plain_again(workdir: Path) -> None:
    debug = invoke("--debug", "compile", "missing.txt", "-t", "gpt2")
    assert debug.exit_code == 2
    assert "Traceback" in debug.stderr
    # --debug does not stick to later invocations in the same process.
    plain = invoke("compile", "missing.txt", "-t", "gpt2")
    assert_usage_error(plain, "missing.txt: cannot read")


def test_pattern_summary_prints_the_users_pattern(tmp_path: Path) -> None:
    """A string schema's pattern is compiled inside its JSON string's quotes; the summary shows it as written."""
    (tmp_path / "p.json").write_text(json.dumps({"type": "string", "pattern": "^[A-Z]{2}[0-9]{6}$"}))
    args = ("compile", str(tmp_path / "p.json"), "-t", "gpt2", "-o", str(tmp_path / "p.triec"))
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    assert "^[A-Z]{2}[0-9]{6}$" in result.stdout and "u0022" not in result.stdout
    summary = json.loads(invoke(*args, "--json").stdout)
    assert summary["pattern"] == "^[A-Z]{2}[0-9]{6}$" and summary["regex"] != summary["pattern"]
