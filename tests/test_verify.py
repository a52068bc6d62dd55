"""``triec verify``: artifacts equal real finite-state engines state by state, and broken ones fail loudly.

The engine tests drive the actual engines (no mocks) over the fixture
tokenizers: llguidance always (CI installs it), xgrammar and outlines-core
where installed, otherwise skipped with the reason.
"""

from __future__ import annotations

import json
import string
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner, Result

import triec
import triec.synthetic.sets
from triec.artifact.container import PREAMBLE
from triec.cli import app
from triec.engines import ENGINES, Engine, install_hint, is_installed, make_engine
from triec.errors import EngineUnavailable
from triec.runtime.bitmask import ids_of as row_ids
from triec.verify.paths import escape_bytes, token_paths
from triec.verify.tables import compare_engine, select_states, state_depths, verify

pytestmark = pytest.mark.engines

NAMES = ("gpt2", "phi3", "qwen2")

CASES: dict[str, list[str]] = {
    # values that are prefixes of other values: EOS and continuations in one state
    "prefixes": ["g", "get", "get_user", "get_user_by_id", "get_users", "getaway"],
    # multi-byte characters split across tokens: states inside a character
    "unicode": ["café", "naïve", "日本", "日本語", "👩\u200d💻", "e\u0301", "Ωmega", "привет", "中文字符"],
    # whitespace, newlines and regex/grammar metacharacters must be byte-exact literals
    "whitespace": [
        " leading",
        "trailing ",
        "\ttab",
        "a\nb",
        "a  b",
        "\u00a0nbsp",
        "...",
        " ",
        "\n",
        'q"\\x',
        "$^.*+?()[]{}|/",
        "a\x00b",
    ],
    # the empty value: EOS allowed at the start
    "empty": ["", "a", "ab", "日"],
    "tools": triec.synthetic.sets.tool_names(60),
}


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


@cache
def _engine(name: str, vocab: triec.Vocabulary) -> Engine:
    return make_engine(name, vocab)


def engine_or_skip(name: str, vocab: triec.Vocabulary) -> Engine:
    if not is_installed(name):
        pytest.skip(f"{name} is not installed ({install_hint(name)})")
    return _engine(name, vocab)


def assert_engine_agrees(table: triec.MaskTable, vocab: triec.Vocabulary, engine: Engine, walks: int = 20) -> None:
    states = np.arange(table.num_states)
    result = compare_engine(table, vocab, engine, states, token_paths(table), walks=walks, seed=1)
    details = [(m.prefix, m.problem, m.only_triec, m.only_other) for m in result.examples]
    assert result.status == "ok", details
    assert result.states_checked == table.num_states  # every state was reached and compared
    assert result.walks == walks and result.walk_steps >= walks


# ---------------------------------------------------------------- equality with the engines


@pytest.mark.parametrize("engine_name", ENGINES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_engine_masks_equal_triec(vocab: triec.Vocabulary, engine_name: str, case: str) -> None:
    engine = engine_or_skip(engine_name, vocab)
    values = CASES[case]
    if engine_name == "outlines-core" and "" in values:
        pytest.skip("outlines-core cannot express the empty value exactly (docs/verify.md)")
    assert_engine_agrees(triec.compile(values, vocab), vocab, engine)


ALPHABET = string.ascii_letters[:6] + "_. é日👩\u200d\n"
random_sets = st.lists(
    st.one_of(st.text(alphabet=ALPHABET, min_size=1, max_size=8), st.just("")), min_size=1, max_size=12
)


@pytest.mark.parametrize("engine_name", ["llguidance", "xgrammar"])
@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=random_sets)
def test_random_sets_equal_engine(
    vocabs: dict[str, triec.Vocabulary], name: str, engine_name: str, values: list[str]
) -> None:
    vocab = vocabs[name]
    engine = engine_or_skip(engine_name, vocab)
    assert_engine_agrees(triec.compile(values, vocab), vocab, engine, walks=5)


def test_outlines_core_refuses_the_empty_value(qwen2: triec.Vocabulary) -> None:
    engine = engine_or_skip("outlines-core", qwen2)
    with pytest.raises(triec.TriecError, match="empty value"):
        engine.compile(["", "a"])


def test_engine_rows_use_the_shared_layout(qwen2: triec.Vocabulary) -> None:
    """Row width = ceil(vocab_size / 32) even when the mask is padded past the tokenizer's ids."""
    vocab = triec.Vocabulary(qwen2.token_bytes, eos_token_ids=qwen2.eos_token_ids, vocab_size=151_936, name="qwen2")
    table = triec.compile(["yes", "no"], vocab)
    engine = _engine("llguidance", vocab)
    m = engine.matcher(engine.compile(table.values))
    row = np.zeros(table.words_per_row, dtype=np.int32)
    m.fill(row)
    assert row.shape == (4748,)
    assert row_ids(row).tolist() == table.allowed(table.start).tolist()


# ---------------------------------------------------------------- states and paths


def test_depths_sample_and_paths(qwen2: triec.Vocabulary) -> None:
    table = triec.compile(triec.synthetic.sets.tool_names(300), qwen2)
    depth = state_depths(table)
    assert [int(d) for d in depth] == [len(table.prefix(s)) for s in range(table.num_states)]
    everything, sampled = select_states(table, table.num_states, seed=0)
    assert not sampled and everything.tolist() == list(range(table.num_states))
    sample, sampled = select_states(table, 200, seed=3)
    assert sampled and sample.size == 200 and 0 in sample
    assert set(np.flatnonzero(depth <= 2).tolist()) <= set(sample.tolist())
    assert np.array_equal(sample, select_states(table, 200, seed=3)[0])  # seeded
    assert not np.array_equal(sample, select_states(table, 200, seed=4)[0])
    parent, via = token_paths(table)
    for s in range(1, table.num_states):  # every path spells its state's prefix
        ids, p = [], s
        while p > 0:
            ids.append(int(via[p]))
            p = int(parent[p])
        assert b"".join(qwen2.token_bytes[t] for t in reversed(ids)) == table.prefix(s)


def test_escape_bytes() -> None:
    assert escape_bytes(b"get") == "get"
    assert escape_bytes("日本".encode()) == "\\u65e5\\u672c"
    assert escape_bytes(b"a\nb\xe6") == "a\\nb\\xe6"


# ---------------------------------------------------------------- the command


@pytest.fixture(scope="module")
def tools_artifact(tmp_path_factory: pytest.TempPathFactory, vocabs: dict[str, triec.Vocabulary]) -> Path:
    path = tmp_path_factory.mktemp("verify") / "tools.triec"
    triec.compile([*triec.synthetic.sets.tool_names(200), "get", "get_user"], vocabs["gpt2"]).save(path)
    return path


def test_verify_passes_and_reports_json(tools_artifact: Path) -> None:
    result = invoke("verify", str(tools_artifact), "--against", "reference,llguidance", "--walks", "10", "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] and report["integrity_ok"] and report["tokenizer"] == "gpt2"  # resolved from the artifact
    assert report["states_selected"] == report["num_states"] and not report["sampled"]
    checks = {c["against"]: c for c in report["checks"]}
    assert set(checks) == {"reference", "llguidance"}
    for c in checks.values():
        assert c["status"] == "ok" and c["mismatches"] == 0 and c["states_checked"] == report["num_states"]
    assert checks["llguidance"]["walks"] == 10 and checks["llguidance"]["version"]


def test_verify_samples_when_asked(tools_artifact: Path) -> None:
    result = invoke("verify", str(tools_artifact), "--states", "50", "--seed", "7", "--json")
    report = json.loads(result.stdout)
    assert result.exit_code == 0 and report["sampled"] and report["states_selected"] >= 50


def _section(path: Path, name: str) -> tuple[int, int]:
    import msgpack

    raw = path.read_bytes()
    _, _, head_len, _, _ = PREAMBLE.unpack_from(raw, 0)
    header = msgpack.unpackb(raw[PREAMBLE.size : PREAMBLE.size + head_len], raw=False)
    data_start = (PREAMBLE.size + head_len + 63) // 64 * 64
    sec = next(s for s in header["sections"] if s["name"] == name)
    return data_start + sec["offset"], sec["length"]


def test_flipped_bit_in_a_mask_section_fails(tools_artifact: Path, tmp_path: Path) -> None:
    start, length = _section(tools_artifact, "allowed_tokens")
    raw = bytearray(tools_artifact.read_bytes())
    raw[start + length // 2] ^= 0x04
    bad = tmp_path / "flipped.triec"
    bad.write_bytes(bytes(raw))
    result = invoke("verify", str(bad))
    assert result.exit_code == 1
    assert "allowed_tokens" in result.stderr and "CRC-32 mismatch" in result.stderr
    report = json.loads(invoke("verify", str(bad), "--json").stdout)
    assert not report["ok"] and not report["integrity_ok"] and "allowed_tokens" in report["integrity_problems"][0]


def test_wrong_tokenizer_fails(tools_artifact: Path) -> None:
    result = invoke("verify", str(tools_artifact), "-t", "qwen2")
    assert result.exit_code == 1
    text = " ".join(result.stderr.split())
    assert "wrong tokenizer 'qwen2'" in text and "plausible but wrong masks" in text


def test_tokenizer_narrower_than_the_artifact_is_an_integrity_failure(tmp_path: Path, qwen2: triec.Vocabulary) -> None:
    """The issue's reproducer: a 151,936-wide Qwen2 artifact verified with gpt2 (EOS ids past gpt2's ids)."""
    padded = triec.Vocabulary(qwen2.token_bytes, eos_token_ids=qwen2.eos_token_ids, vocab_size=151_936, name="qwen2")
    path = tmp_path / "qwen2.triec"
    table = triec.compile(["get", "get_user", "list_files"], padded)
    table.save(path)
    gpt2 = triec.Vocabulary.load("gpt2", eos_token_ids=table.eos_token_ids, vocab_size=table.vocab_size)
    result = invoke("verify", str(path), "-t", "gpt2", "--against", "reference")
    assert result.exit_code == 1, result.output
    text = " ".join(result.stderr.split())
    assert "wrong tokenizer 'gpt2'" in text and "Traceback" not in result.output
    assert table.tokenizer_fingerprint in text and gpt2.fingerprint in text, "both fingerprints are named"
    assert "masks 151,936 wide" in text and "50,257 token ids" in text, "both widths are named"
    assert "EOS ids [151643, 151645] are not token ids of this tokenizer (0..50,256)" in text
    report = json.loads(invoke("verify", str(path), "-t", "gpt2", "--json").stdout)
    assert not report["ok"] and not report["integrity_ok"] and "widths differ" in report["integrity_problems"][0]


def test_tokenizer_wider_than_the_artifact_is_an_integrity_failure(tools_artifact: Path) -> None:
    result = invoke("verify", str(tools_artifact), "-t", "qwen2")
    assert result.exit_code == 1
    text = " ".join(result.stderr.split())
    assert "widths differ: 151,646 token ids do not fit the artifact's 50,257-wide masks" in text


def test_unknown_tokenizer_is_bad_usage(tools_artifact: Path, tmp_path: Path) -> None:
    result = invoke("verify", str(tools_artifact), "-t", str(tmp_path / "nope" / "tokenizer.json"))
    assert result.exit_code == 2 and "not found" in result.stderr


def test_consistent_but_wrong_masks_are_found(tmp_path: Path, vocabs: dict[str, triec.Vocabulary]) -> None:
    """Checksums cannot catch a writer bug: swap one allowed token for another and re-save."""
    vocab = vocabs["gpt2"]
    good = triec.compile(["get", "get_user", "list_files"], vocab)
    tokens = np.array(good.allowed_tokens)
    hi = int(good.allowed_offsets[1])
    victim = int(tokens[hi - 1])
    intruder = next(t for t in range(victim + 1, vocab.num_tokens) if vocab.token_bytes[t])
    tokens[hi - 1] = intruder
    bad = triec.MaskTable(
        allowed_offsets=good.allowed_offsets,
        allowed_tokens=tokens,
        allowed_next=good.allowed_next,
        value_state=good.value_state,
        value_lcp=good.value_lcp,
        state_byte=good.state_byte,
        vocab_size=good.vocab_size,
        eos_token_ids=good.eos_token_ids,
        tokenizer_fingerprint=good.tokenizer_fingerprint,
        tokenizer_name="gpt2",
    )
    path = tmp_path / "wrong.triec"
    bad.save(path)
    report = verify(str(path), against=["reference", "llguidance"], walks=0)
    assert report.integrity_ok and not report.ok
    for check in report.checks:
        assert check.status == "mismatch"
        first = check.examples[0]
        assert first.state == 0 and first.prefix == ""
        assert first.only_triec[0]["id"] == intruder and first.only_other[0]["id"] == victim
        assert first.only_other[0]["bytes"] == escape_bytes(vocab.token_bytes[victim])
    result = invoke("verify", str(path), "--against", "llguidance", "--walks", "0")
    assert result.exit_code == 1 and "only triec allows" in result.stdout and "FAILED" in result.stdout


def test_usage_errors_exit_2(tools_artifact: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = invoke("verify", str(tools_artifact), "--against", "nonsense")
    assert result.exit_code == 2 and "--against" in result.stderr
    missing = invoke("verify", str(tmp_path / "missing.triec"))
    assert missing.exit_code == 2 and "missing.triec" in missing.stderr and "no such artifact" in missing.stderr
    import triec.engines

    monkeypatch.setattr(triec.engines, "is_installed", lambda name: name != "xgrammar")
    result = invoke("verify", str(tools_artifact), "--against", "xgrammar")
    assert result.exit_code == 2 and "pip install xgrammar" in result.stderr
    report = json.loads(
        invoke("verify", str(tools_artifact), "--against", "all", "--walks", "0", "--states", "300", "--json").stdout
    )
    skipped = {c["against"]: c for c in report["checks"] if c["status"] == "skipped"}
    assert "pip install xgrammar" in skipped["xgrammar"]["reason"]


def test_make_engine_names_the_install_command(monkeypatch: pytest.MonkeyPatch, qwen2: triec.Vocabulary) -> None:
    import triec.engines

    monkeypatch.setattr(triec.engines, "is_installed", lambda name: False)
    with pytest.raises(EngineUnavailable, match=r"pip install outlines-core"):
        make_engine("outlines-core", qwen2)


# ---------------------------------------------------------------- schema artifacts

GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "golden"


@pytest.mark.engines
@pytest.mark.parametrize("name", ["extraction-gpt2.triec", "d19-tools-gpt2-llguidance.triec"])
def test_verify_a_schema_artifact(name: str) -> None:
    """Each slot's trie against the reference, the whole output against each engine on the whole schema."""
    report = verify(str(GOLDEN / name), against=["reference", "llguidance", "xgrammar", "outlines-core"], walks=4)
    assert report.ok and report.integrity_ok and report.schema is not None
    checks = {c.against: c for c in report.checks}
    assert checks["outlines-core"].status == "skipped"
    assert checks["reference"].status == "ok" and checks["reference"].states_checked == report.num_states
    for engine in ("llguidance", "xgrammar"):
        c = checks[engine]
        if c.status == "skipped":  # xgrammar not installed
            continue
        assert c.status == "ok" and c.mismatches == 0 and c.walks == 4 and c.states_checked >= report.num_states
        assert "slots no walk reached" not in c.reason
    result = invoke("verify", str(GOLDEN / name), "--against", "llguidance", "--walks", "2")
    assert result.exit_code == 0 and "each engine compared with itself compiled on the whole schema" in result.stdout


@pytest.mark.engines
def test_verify_reports_a_schema_mismatch(tmp_path: Path) -> None:
    """A slot row that allows a token the engine refuses (in range, CRCs fixed): verify finds it and exits 1."""
    import struct
    import zlib

    import msgpack

    raw = bytearray((GOLDEN / "extraction-gpt2.triec").read_bytes())
    _, _, head_len, _, _ = struct.unpack_from("<8sIIII", raw, 0)
    header = msgpack.unpackb(bytes(raw[24 : 24 + head_len]), raw=False)
    data_start = ((24 + head_len + 63) // 64) * 64
    sec = next(s for s in header["sections"] if s["name"] == "allowed_tokens")
    at = data_start + sec["offset"] + 4 * (sec["count"] - 1)  # the last trie token of the last slot
    old = struct.unpack_from("<i", raw, at)[0]
    struct.pack_into("<i", raw, at, old + 1 if old + 1 < 50256 else old - 1)
    sections = [
        dict(s, crc32=zlib.crc32(bytes(raw[data_start + s["offset"] : data_start + s["offset"] + s["length"]])))
        for s in header["sections"]
    ]
    head = msgpack.packb(dict(header, sections=sections), use_bin_type=True)
    out = bytes(raw[: 24 + 0])[:8] + struct.pack("<IIII", 3, len(head), zlib.crc32(head), 0) + head
    out += bytes(((24 + len(head) + 63) // 64) * 64 - len(out)) + bytes(raw[data_start:])
    path = tmp_path / "bad.triec"
    path.write_bytes(out)
    report = verify(str(path), against=["llguidance"], walks=2)
    assert report.integrity_ok and not report.ok and report.checks[0].mismatches > 0
    assert invoke("verify", str(path), "--against", "llguidance", "--walks", "0").exit_code == 1


# ---------------------------------------------------------------- pattern artifacts: what the report says (issue 49)


def test_verify_a_pattern_table_reports_its_dfa(tmp_path: Path, vocabs: dict[str, triec.Vocabulary]) -> None:
    """A pattern table has no values: the report gives its DFA (states, accepting states, edges) and rows checked,
    and the reference, which compares rows, shows no walk steps."""
    path = tmp_path / "date.triec"
    table = triec.compile_pattern(format="date", vocab=vocabs["gpt2"])
    table.save(path)
    result = invoke("verify", str(path))
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    edges = int(table.dfa_bytes.shape[0])
    assert f"pattern table (format date): {table.num_states} DFA states (1 accepting), {edges} DFA edges" in text
    assert f"rows checked: all {table.num_states}" in text and " values," not in text
    row = next(line for line in result.stdout.splitlines() if "reference" in line)
    assert row.split("│")[5].strip() == "-"  # walk steps
    report = json.loads(invoke("verify", str(path), "--json").stdout)
    assert report["num_values"] == 0
    assert report["pattern"] == {
        "regex": table.pattern,
        "format": "date",
        "states": table.num_states,
        "accepting_states": 1,
        "dfa_edges": edges,
    }


def test_verify_names_the_extra_for_a_missing_engine(tmp_path: Path, vocabs: dict[str, triec.Vocabulary]) -> None:
    """On an install without the engines (their imports blocked, as Python blocks a module set to None): an engine
    named explicitly is one line naming the pip extra; ``all`` skips what is missing and still checks the rest."""
    import subprocess
    import sys

    path = tmp_path / "uuid.triec"
    triec.compile_pattern(format="uuid", vocab=vocabs["gpt2"]).save(path)
    blocked = "import sys; sys.modules.update(llguidance=None, xgrammar=None); from triec.cli import main; main()"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", blocked, "verify", str(path), *args], capture_output=True, text=True, timeout=300
        )

    named = run("--against", "reference,xgrammar")
    assert named.returncode == 2 and "Traceback" not in named.stderr, named.stderr
    assert len(named.stderr.strip().splitlines()) == 1 and "pip install 'triec[verify]'" in named.stderr
    every = run("--against", "all", "--json")
    assert every.returncode == 0, every.stderr
    status = {c["against"]: c["status"] for c in json.loads(every.stdout)["checks"]}
    assert status == {
        "regex": "ok",  # the stored DFA against its regex compiled again: needs no engine
        "reference": "ok",
        "llguidance": "skipped",
        "xgrammar": "skipped",
        "outlines-core": "skipped",
    }
