"""Bounded work on hostile input (issue 37): a decompression bomb is refused before it is inflated.

Each test fails on the code before the fix: the bomb was inflated whole (1.09 GB RSS for 512 MiB) before the
loader looked at its first bytes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zstandard

import triec
from triec.errors import ArtifactError

ROOT = Path(__file__).resolve().parent.parent


def _bomb(path: Path, inflated: int) -> Path:
    """``inflated`` zero bytes in one zstd frame (streamed: the test itself never holds them)."""
    cctx = zstandard.ZstdCompressor(level=3)
    with open(path, "wb") as fh, cctx.stream_writer(fh, size=inflated) as w:
        block = bytes(1 << 20)
        for _ in range(inflated >> 20):
            w.write(block)
    return path


def _peak_rss_mb(code: str) -> tuple[float, str]:
    """Peak RSS (MB) of a fresh interpreter running ``code`` after importing triec, and its last output line."""
    probe = (
        "import resource, triec, triec.artifact.masks, zstandard, numpy, msgpack\n"
        "base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        + code
        + "\nprint(json.dumps((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024))"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run(
        [sys.executable, "-c", "import json\n" + probe], capture_output=True, text=True, env=env, check=True
    )
    lines = out.stdout.strip().splitlines()
    return float(lines[-1]), "\n".join(lines[:-1])


def test_a_decompression_bomb_is_refused_with_bounded_memory(tmp_path: Path) -> None:
    bomb = _bomb(tmp_path / "bomb.triec.zst", 512 << 20)
    assert bomb.stat().st_size < 64 << 10
    with pytest.raises(ArtifactError, match="not a triec artifact"):
        triec.load(bomb)
    code = (
        f"try:\n    triec.load({str(bomb)!r})\nexcept Exception as e:\n    print(type(e).__name__, e)\n"
        f"try:\n    triec.artifact.masks.load_buffer(open({str(bomb)!r}, 'rb').read(), 'x')\n"
        "except Exception as e:\n    print(type(e).__name__, e)"
    )
    grown, said = _peak_rss_mb(code)
    assert said.count("not a triec artifact") == 2, said
    assert grown < 100, grown  # MB over the interpreter's own, for a 512 MiB bomb


def test_a_stream_holding_more_than_its_header_declares_is_refused(tmp_path: Path, qwen2: triec.Vocabulary) -> None:
    table = triec.compile(["red", "green", "blue"], qwen2)
    good = tmp_path / "colors.triec.zst"
    table.save(good)
    assert triec.load(good).values == table.values  # the bounded reader reads what the writer writes
    plain = zstandard.ZstdDecompressor().decompress(good.read_bytes())
    padded = tmp_path / "padded.triec.zst"
    padded.write_bytes(zstandard.ZstdCompressor().compress(plain + bytes(1 << 20)))
    with pytest.raises(ArtifactError, match=r"holds more than the .* bytes its header declares"):
        triec.load(padded)
    short = tmp_path / "short.triec.zst"
    short.write_bytes(zstandard.ZstdCompressor().compress(plain[:-7]))
    with pytest.raises(ArtifactError, match="the zstd stream ends after"):
        triec.load(short)


def test_the_inflate_limit_is_checked_before_inflating(tmp_path: Path, qwen2: triec.Vocabulary, monkeypatch) -> None:
    table = triec.compile(["red", "green", "blue"], qwen2)
    path = tmp_path / "colors.triec.zst"
    table.save(path)
    monkeypatch.setenv("TRIEC_MAX_ARTIFACT_BYTES", "1000")
    with pytest.raises(ArtifactError, match=r"declares [\d,]+ bytes inflated; the limit is 1,000"):
        triec.load(path)
    with pytest.raises(ArtifactError, match="TRIEC_MAX_ARTIFACT_BYTES"):
        triec.artifact.masks.load_buffer(path.read_bytes(), str(path))


def test_cli_inspect_refuses_the_bomb_in_one_line(tmp_path: Path) -> None:
    bomb = _bomb(tmp_path / "bomb.triec.zst", 64 << 20)
    out = subprocess.run(
        [sys.executable, "-m", "triec.cli", "inspect", str(bomb)],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert out.returncode == 2 and "not a triec artifact" in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_bfcl_with_more_shots_than_questions_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    """Issue 37 item 4: ``triec bfcl multiple --shots 200`` ended in an IndexError traceback, exit 1, an empty file."""
    from typer.testing import CliRunner

    from triec.cli import app

    source = ROOT / "fixtures" / "eval" / "bfcl"
    out = tmp_path / "x.jsonl"
    res = CliRunner().invoke(app, ["bfcl", "multiple", "--source", str(source), "-o", str(out), "--shots", "200"])
    assert res.exit_code == 2, res.output
    assert "no question is left to ask" in res.output and "--shots 200" in res.output and "Traceback" not in res.output
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_bfcl_k_is_bounded_before_any_name_is_drawn(tmp_path: Path) -> None:
    """Issue 52: ``triec bfcl all --k N --distractors synthetic`` draws N names; past 1,000,000 (and past what
    the synthetic sets hold) it is refused in one line, exit 2, nothing written (it was a ValueError traceback)."""
    from typer.testing import CliRunner

    from triec.cli import app

    out = tmp_path / "x.jsonl"
    args = ["bfcl", "simple_python", "--candidates", "all", "--k", "20000000", "--distractors", "synthetic"]
    res = CliRunner().invoke(app, [*args, "--source", str(ROOT / "fixtures" / "eval" / "bfcl"), "-o", str(out)])
    assert res.exit_code == 2 and "--k must be in 1..1,000,000, not 20000000" in res.stderr, res.output
    assert "Traceback" not in res.output and list(tmp_path.iterdir()) == []


def test_cli_doc_verify_example_states_what_the_example_compiles_to(qwen2: triec.Vocabulary) -> None:
    """Issue 37 item 9: the README said "10,000 tool names: 48,189 states" of an example that holds 1,000 (the
    example is in docs/cli.md now)."""
    import re

    lines = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8").splitlines()
    line = next(x for x in lines if x.startswith("$ triec verify tools.triec"))
    k, states = (int(n.replace(",", "")) for n in re.search(r"([\d,]+) tool names, ([\d,]+) states", line).groups())
    values = (ROOT / "examples" / "tools.txt").read_text(encoding="utf-8").splitlines()
    table = triec.compile([v for v in values if v], qwen2)
    assert (k, states) == (table.num_values, table.num_states)


def test_verify_of_a_sampled_schema_says_sampled(tmp_path: Path, qwen2: triec.Vocabulary) -> None:
    """Issue 37 item 6: a schema artifact whose slots were sampled was reported as "states checked: all N"."""
    from typer.testing import CliRunner

    import triec.synthetic.sets
    from triec.cli import app
    from triec.verify.tables import verify

    names = triec.synthetic.sets.tool_names(300)
    schema = {
        "type": "object",
        "properties": {"name": {"enum": names}, "n": {"type": "integer"}},
        "required": ["name", "n"],
        "additionalProperties": False,
    }
    path = tmp_path / "s.triec"
    triec.compile_schema(schema, qwen2, threshold=8).save(path)
    report = verify(str(path), tokenizer="qwen2", against=("llguidance",), states=40, walks=2)
    assert report.ok and report.sampled and report.states_selected < report.num_states
    res = CliRunner().invoke(
        app, ["verify", str(path), "-t", "qwen2", "--against", "llguidance", "--states", "40", "--walks", "2"]
    )
    assert res.exit_code == 0, res.output
    assert "states checked: sample of" in res.output and "states checked: all" not in res.output


def test_an_artifact_without_eos_ids_is_refused(tmp_path: Path, qwen2: triec.Vocabulary) -> None:
    """Issue 37 item 7: an artifact edited to an empty EOS list (checksums fixed) loaded and verified OK."""
    from triec.artifact import container
    from triec.artifact.masks import SECTIONS, parse_artifact

    good = tmp_path / "good.triec"
    triec.compile(["red", "green"], qwen2).save(good)
    parsed = parse_artifact(good.read_bytes(), str(good))
    header = {k: v for k, v in parsed["header"].items() if k != "sections"}
    header["eos_token_ids"] = []
    bad = tmp_path / "bad.triec"
    bad.write_bytes(
        container.encode(header, [(n, d, parsed["arrays"][n]) for n, d in SECTIONS], parsed["format_version"])
    )
    with pytest.raises(ArtifactError, match="'eos_token_ids': empty"):
        triec.load(bad)


def test_an_eos_id_that_is_a_text_token_in_values_is_warned(tmp_path: Path) -> None:
    """Issue 37 item 7: ``--eos 0`` on GPT-2 (token 0 is ``!``) made ``hi!`` unwritable without a word."""
    from typer.testing import CliRunner

    from triec.cli import app
    from triec.errors import EosTextWarning

    vocab = triec.Vocabulary.load("gpt2", eos_token_ids=[0])
    assert vocab.eos_texts == {0: b"!"}
    with pytest.warns(EosTextWarning, match=r"EOS id 0 is the text token b'!'.*b'hi!'"):
        triec.compile(["hi!", "yo"], vocab)
    values = tmp_path / "v.txt"
    values.write_text("hi!\nyo\n")
    res = CliRunner().invoke(
        app, ["compile", str(values), "-t", "gpt2", "--eos", "0", "-o", str(tmp_path / "v.triec"), "-q"]
    )
    assert res.exit_code == 0 and "warning: EOS id 0 is the text token" in res.output, res.output
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", EosTextWarning)
        triec.compile(["hi!", "yo"], triec.Vocabulary.load("gpt2"))  # the real EOS (<|endoftext|>) is no text


def test_eval_refuses_an_item_without_candidates_before_loading_a_model(tmp_path: Path) -> None:
    """Issue 37 item 5: an item with no candidates and no --values was found only after converting the model (24 s
    cold). Here the model path does not even exist: the data is refused first, in one line, exit 2."""
    from typer.testing import CliRunner

    from triec.cli import app

    data = tmp_path / "d.jsonl"
    data.write_text(
        '{"prompt": "Pick a color:", "gold": "red", "candidates": ["red", "blue"]}\n'
        '{"id": "bare", "prompt": "Pick a fruit:", "gold": "fig"}\n'
    )
    res = CliRunner().invoke(
        app, ["eval", str(data), "--model", str(tmp_path / "no-such-model"), "--modes", "free,trie"]
    )
    assert res.exit_code == 2, res.output
    assert "item bare: no 'candidates' and no --values" in res.output and "no-such-model" not in res.output


def test_out_of_memory_is_one_line_exit_2_and_nothing_written(tmp_path: Path) -> None:
    """Issue 37 item 3: ``ulimit -v`` and one 30 MB line gave a raw numpy traceback and exit 1. A real address-space
    limit in a child process: the full layout's compile cannot get its arrays. (The tail layout, which ``auto``
    picks for such a value, compiles it within the limit: issue 43.)"""
    import resource  # noqa: F401  (POSIX; the child sets the limit)

    values = tmp_path / "big.txt"
    values.write_bytes(b"x" * (30 << 20) + b"\n")
    out = tmp_path / "big.triec"

    def compile_limited(layout: str) -> subprocess.CompletedProcess[str]:
        code = (
            "import resource, sys\n"
            "resource.setrlimit(resource.RLIMIT_AS, (2_000_000_000, 2_000_000_000))\n"
            f"sys.argv = ['triec', 'compile', {str(values)!r}, '-t', 'gpt2', '-o', {str(out)!r}, '-q', "
            f"'--layout', {layout!r}]\n"
            "from triec.cli import main\nmain()"
        )
        return subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT))
        )

    res = compile_limited("full")
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    assert "out of memory" in res.stderr and "Traceback" not in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.txt"]
    res = compile_limited("auto")
    assert res.returncode == 0, (res.returncode, res.stderr[-2000:])
    assert triec.load(out).tails is not None


def test_one_long_value_inspects_and_verifies_in_bounded_output_and_memory(tmp_path: Path) -> None:
    """Issue 37 item 2: a 20,000-byte value made ``triec inspect`` print 20,048 lines, and verify's reference kept
    every prefix (40,000 bytes: 1.74 GB). Now the depth table is summed into ranges and the reference keeps one
    path: a 40,000-byte value here."""
    from typer.testing import CliRunner

    from triec.cli import app

    values = tmp_path / "long.txt"
    values.write_text("".join("abcdefghij"[(i * 7 + i // 3) % 10] for i in range(40_000)) + "\n")
    art = tmp_path / "long.triec"
    res = CliRunner().invoke(app, ["compile", str(values), "-t", "gpt2", "-o", str(art), "-q"])
    assert res.exit_code == 0, res.output
    shown = CliRunner().invoke(app, ["inspect", str(art)])
    assert shown.exit_code == 0 and len(shown.output.splitlines()) < 200, len(shown.output.splitlines())
    assert len(shown.output) < 20_000  # long prefixes shown by their ends: the 40,000-byte value is not printed
    grown, said = _peak_rss_mb(
        f"from triec.verify.tables import verify\nr = verify({str(art)!r}, tokenizer='gpt2')\n"
        "print(r.ok, r.states_selected, r.num_states)"
    )
    ok, _selected, states = said.split()
    assert ok == "True" and states == "40001"
    assert grown < 400, grown  # MB; the prefix map alone held 1.74 GB


def test_odd_gguf_token_lists_and_eos_ids_are_refused_by_name() -> None:
    """Issue 37 item 7: a GGUF whose token list holds integers, whose byte tokens read ``<0xZZ>``, or whose EOS id
    is of another type, was accepted (the EOS key was skipped without a word)."""
    from triec.errors import TokenizerError
    from triec.tokenizer import gguf

    base = {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": ["<unk>", "a", "<0x41>"],
        "tokenizer.ggml.token_type": [gguf.UNKNOWN, gguf.NORMAL, gguf.BYTE],
    }
    assert gguf.tokenizer_json(base, "m.gguf")["model"]["vocab"][2] == ["<0x41>", 0.0]
    with pytest.raises(TokenizerError, match=r"m\.gguf: .*token 1 is 7 \(int\), expected a string"):
        gguf.tokenizer_json({**base, "tokenizer.ggml.tokens": ["<unk>", 7, "<0x41>"]}, "m.gguf")
    with pytest.raises(TokenizerError, match=r"m\.gguf: GGUF token 2 is of type byte but reads '<0xZZ>'"):
        gguf.tokenizer_json({**base, "tokenizer.ggml.tokens": ["<unk>", "a", "<0xZZ>"]}, "m.gguf")
    assert gguf.eos_ids({"tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.eot_token_id": 1}, "m.gguf") == [1, 2]
    with pytest.raises(TokenizerError, match=r"m\.gguf: GGUF field 'tokenizer.ggml.eos_token_id' is '2' \(str\)"):
        gguf.eos_ids({"tokenizer.ggml.eos_token_id": "2"}, "m.gguf")


def test_json_quiet_prints_nothing_on_success(tmp_path: Path) -> None:
    """Issue 37 item 8: ``--json --quiet`` printed the whole summary; --quiet means nothing on success."""
    from typer.testing import CliRunner

    from triec.cli import app

    values = tmp_path / "v.txt"
    values.write_text("red\ngreen\n")
    art = tmp_path / "v.triec"
    res = CliRunner().invoke(app, ["compile", str(values), "-t", "gpt2", "-o", str(art), "--json", "--quiet"])
    assert res.exit_code == 0 and res.output == "", res.output
    res = CliRunner().invoke(app, ["verify", str(art), "-t", "gpt2", "--json", "--quiet"])
    assert res.exit_code == 0 and res.output == "", res.output
    res = CliRunner().invoke(app, ["verify", str(art), "-t", "gpt2", "--json"])
    assert res.exit_code == 0 and '"num_values": 2' in res.output  # --json alone still prints the report


def test_an_unknown_hub_id_offline_fails_fast(tmp_path: Path) -> None:
    """Issue 37 item 8: an unknown Hugging Face id, offline, retried for 24 s before its clear error. The hub's
    address here is a closed local port: one connection probe says so, and the hub client is not asked."""
    values = tmp_path / "v.txt"
    values.write_text("red\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_ENDPOINT="http://127.0.0.1:9", HF_HOME=str(tmp_path / "hf"))
    env.pop("HF_HUB_OFFLINE", None)
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "triec.cli",
            "compile",
            str(values),
            "-t",
            "someorg/no-such-model",
            "-o",
            str(tmp_path / "o.triec"),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    # the probe's answer, not the client's after its retries (the old message named LocalEntryNotFoundError)
    assert res.returncode == 2 and "cannot reach the Hugging Face hub" in res.stderr, res.stderr[-500:]


def test_verify_warns_about_an_eos_id_the_values_hold_as_text(tmp_path: Path) -> None:
    """Issue 37 item 7: verify said OK without a word for a table compiled with ``--eos 0`` (``!``) over ``hi!``."""
    import warnings

    from typer.testing import CliRunner

    from triec.cli import app
    from triec.verify.tables import verify

    art = tmp_path / "v.triec"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        triec.compile(["hi!", "yo"], triec.Vocabulary.load("gpt2", eos_token_ids=[0])).save(art)
    report = verify(str(art), tokenizer="gpt2")
    assert report.ok and len(report.warnings) == 1 and "EOS id 0 is the text token b'!'" in report.warnings[0]
    res = CliRunner().invoke(app, ["verify", str(art), "-t", "gpt2"])
    assert res.exit_code == 0 and "warning: EOS id 0 is the text token" in res.output, res.output


def test_long_semantic_id_items_compile_inspect_and_verify_in_bounded_memory(tmp_path: Path) -> None:
    """Ids tables (issue 51): 300 items of 1,024 ids (the most a line holds), each sharing a different prefix with
    the one before, compile, inspect and verify without holding every prefix (that would be 300 x 1,024^2 / 2 ids:
    1.3 GB as tuples); a line of 1,025 ids is refused naming it."""
    from typer.testing import CliRunner

    from triec.cli import app

    rng = np.random.default_rng(5)
    base = rng.integers(0, 1000, size=1024)
    lines = []
    for i in range(300):
        item = base.copy()
        item[i * 3 :] = rng.integers(0, 1000, size=1024 - i * 3)
        lines.append(" ".join(map(str, item.tolist())))
    (tmp_path / "long.txt").write_text("\n".join(lines) + "\n")
    art = tmp_path / "long.triec"
    args = ["compile", "--ids", str(tmp_path / "long.txt"), "--vocab-size", "1001", "--eos", "1000", "-o", str(art)]
    res = CliRunner().invoke(app, [*args, "-q"])
    assert res.exit_code == 0, res.output
    shown = CliRunner().invoke(app, ["inspect", str(art)])
    assert shown.exit_code == 0 and len(shown.output) < 20_000
    grown, said = _peak_rss_mb(
        f"from triec.verify.tables import verify\nr = verify({str(art)!r})\nprint(r.ok, r.num_values)"
    )
    assert said.split() == ["True", "300"]
    assert grown < 300, grown  # MB
    (tmp_path / "longer.txt").write_text(" ".join(["1"] * 1025) + "\n")
    res = CliRunner().invoke(app, ["compile", "--ids", str(tmp_path / "longer.txt"), "--vocab-size", "9", "--eos", "8"])
    assert res.exit_code == 2 and "longer.txt:1: 1,025 ids on one line" in res.output


def test_rank_over_an_open_set_stops_at_its_bounds(qwen2: triec.Vocabulary) -> None:
    """A pattern's language is infinite and a flat model gives every path the same per-token price: the exact
    search stops at ``max_expansions`` rows (flagged) and the beam search at ``max_tokens`` steps, each returning
    only texts the pattern matches; --max-expansions and --beams of ``triec eval`` are these bounds."""
    import numpy as np

    table = triec.compile_pattern(pattern="[a-z]+", vocab=qwen2)

    class Flat:
        calls = 0

        def logprobs(self, paths):
            Flat.calls += len(paths)
            return np.full((len(paths), qwen2.vocab_size), -12.0)

    got = triec.rank(Flat(), None, table, 10**6, max_expansions=20)
    assert got.hit_bound and not got.exact and got.expansions <= 20 and Flat.calls <= 20
    assert got.values and all(table.matches(v) for v in got.values)
    Flat.calls = 0
    beams = triec.rank(Flat(), None, table, 5, method="beam", beams=4, max_tokens=6)
    assert Flat.calls <= 4 * 6 and all(table.matches(v) for v in beams.values)


def test_a_million_groups_read_and_spell_in_linear_work_and_kmeans_is_refused_before_its_vectors(
    tmp_path: Path,
) -> None:
    """Groups (issue 52): a groups file of 10^6 one-value groups is read and spelled in one pass each (no
    per-group scan of the values); k-means over 10^6 values is refused by its work bound before a vector is made
    (term vectors would be 256 MB, the clustering hours), in bounded memory."""
    from triec.compiler.groups import groups_from_file, spell_grouped

    path = tmp_path / "g.tsv"
    path.write_text("".join(f"v{i}\tg{i}\n" for i in range(1_000_000)))
    group_of = groups_from_file(path)
    assert len(group_of) == 1_000_000 and group_of["v999999"] == "g999999"
    spelled = spell_grouped(group_of, group_of)
    assert spelled[7] == "g7 > v7"
    values = tmp_path / "v.txt"
    values.write_text("".join(f"v{i}\n" for i in range(1_000_000)))
    grown, said = _peak_rss_mb(
        "from triec.cli.compile_groups import GroupOptions, group_values\n"
        "from triec.errors import ValuesError\n"
        f"vals = open({str(values)!r}).read().split()\n"
        "try:\n    group_values(GroupOptions(kmeans=1000), vals)\nexcept ValuesError as e:\n    print(e)"
    )
    assert "over the 2e+10 limit" in said, said
    assert grown < 200, grown  # MB: the values themselves, no vectors


def test_hostile_shortlists_are_refused_by_name(qwen2: triec.Vocabulary) -> None:
    """Issue 52: a cascade's k, ranked list and escape come from a request; each bad one is one clear error, found
    without building a view (a million-name ranked list stops at its first unknown name)."""
    from triec import shortlist
    from triec.errors import ValueNotInTable, ValuesError

    values = [f"tool_{i}" for i in range(50)]
    table = triec.compile([*values, shortlist.ESCAPE], qwen2)
    hostile = ["x" * 10_000, *(f"n{i}" for i in range(1_000_000))]
    with pytest.raises(ValueNotInTable, match="ranked value 'xxxx"):
        shortlist.Cascade(table, hostile, 5)
    for k in (0, -(2**63), 51, 2**63):
        with pytest.raises(ValuesError, match="k must be between 1 and the number of values other than the escape"):
            shortlist.Cascade(table, values, k)
    with pytest.raises(ValuesError, match="empty"):
        shortlist.Cascade(table, [], 1)
    with pytest.raises(ValueNotInTable, match="compile the set with it"):
        shortlist.Cascade(table, values, 5, escape="none_of_the_above")
