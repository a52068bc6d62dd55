"""Canonical-only tables (``tokenization="canonical"``) against the tokenizer's own encoder.

The oracle is the ``tokenizers`` library's ``Tokenizer.encode`` of each spelled value, one at a
time (the compiler batch-encodes through ``Vocabulary.encoder``), and the contract alone: the table's
language is exactly the set of those token sequences, each followed by EOS. Checked two ways: every
accepted token sequence enumerated from the table equals that set, and every state's row equals the
reference token trie's (states inside a token's bytes allow nothing).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cases import CASES
from conftest import TOKENIZERS

import triec
import triec.synthetic.sets
from triec.encoding import as_encoding
from triec.errors import TokenizerError, TokenNotAllowed, ValuesError
from triec.tokenizer.source import locate
from triec.verify.tables import compare_canonical

NAMES = ("gpt2", "phi3", "qwen2")
HARD = [
    # on GPT-2 "abc" is one token but "abd" is "ab" + "d": a byte trie of canonical rows would admit "ab" + "c"
    "abc",
    "abd",
    "ab",
    "a",
    "medical_billing",
    "med",
    "get_weather",
    "get_weather_forecast",
    "getWeather",
    "2024-12-31",
    "1234567",
    " x",
    "x ",
    "a  b",
    "Ünïcode 12",
    "日本語のテキスト",
    "tab\there",
    "new\nline",
    "",
    "don't",
    "I'll",
    "...",
    "a.b.c",
    "C++",
    "ICD-10: J45.901",
]
VALUE_SETS = {
    "hard": HARD,
    **CASES,  # the exactness suite's sets: prefix chains, unicode, whitespace, the empty value, edge bytes, 2 KB values
    "tools_300": random.Random(0).sample(triec.synthetic.sets.tool_names(5_000), 300),
}
SPELLINGS = {
    "raw": {},
    "json+affixes": {"encoding": "json", "prefix": '{"tool": ', "suffix": "}"},
}


def encoder_of(name: str):  # the reference: the tokenizers library, built from the tokenizer file directly
    from tokenizers import Tokenizer

    doc = locate(TOKENIZERS[name]).tokenizer_json
    norm = doc.get("normalizer")
    if norm and norm.get("type") == "Sequence":  # SentencePiece's dummy prefix: an answer is no document start
        doc = {**doc, "normalizer": {**norm, "normalizers": [n for n in norm["normalizers"] if n["type"] != "Prepend"]}}
    tok = Tokenizer.from_str(json.dumps(doc))
    tok.encode_special_tokens = True  # "<|endoftext|>" inside a value is text: the model cannot write the id there
    return tok


def encodings(table: triec.MaskTable, name: str) -> set[tuple[int, ...]]:
    enc = encoder_of(name)
    return {tuple(enc.encode(s, add_special_tokens=False).ids) for s in table.strings}


def language(table: triec.MaskTable) -> set[tuple[int, ...]]:
    """Every token sequence the table accepts (then EOS), by depth-first enumeration."""
    out: set[tuple[int, ...]] = set()
    eos = set(table.eos_token_ids)
    stack: list[tuple[int, tuple[int, ...]]] = [(0, ())]
    while stack:
        s, path = stack.pop()
        if table.is_accepting(s):
            assert path not in out
            out.add(path)
        assert eos.issubset(table.allowed(s).tolist()) == table.is_accepting(s)
        stack.extend((table.advance(s, int(t)), (*path, int(t))) for t in table.allowed(s) if int(t) not in eos)
    return out


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
@pytest.mark.parametrize("case", sorted(VALUE_SETS))
@pytest.mark.parametrize("name", NAMES)
def test_the_language_is_each_values_encoder_tokens(name, case, spelling, vocabs) -> None:
    values = VALUE_SETS[case]
    try:
        table = triec.compile(values, vocabs[name], tokenization="canonical", **SPELLINGS[spelling])
    except ValuesError as exc:  # only where the encoder itself writes an id that is never part of a value
        opts = SPELLINGS[spelling]
        spell = as_encoding(opts.get("encoding", "raw"), opts.get("prefix", ""), opts.get("suffix", "")).spell
        enc, tb = encoder_of(name), vocabs[name].token_bytes
        bad = [v for v in values if any(not tb[t] for t in enc.encode(spell(v), add_special_tokens=False).ids)]
        assert bad and "never part of a value" in str(exc), exc
        assert repr(spell(bad[0])) in str(exc) or any(repr(spell(v)) in str(exc) for v in bad)
        return
    assert table.canonical and table.tokenization == "canonical"
    expected = encodings(table, name)
    assert len(expected) == table.num_values == len(set(values))
    assert language(table) == expected
    # state by state: rows, next states and EOS equal the reference token trie; nothing unreachable
    result = compare_canonical(table, vocabs[name])
    assert result.mismatches == 0, result.examples
    assert result.states_checked == table.num_states


@pytest.mark.parametrize("name", NAMES)
def test_some_canonical_splits_are_not_the_longest_match(name, vocabs) -> None:
    """The set holds values where the encoder's split differs from greedy longest-match (else the test proves less)."""
    vocab = vocabs[name]
    by_bytes = {b: i for i, b in enumerate(vocab.token_bytes) if b}
    longest = max(map(len, by_bytes))

    def greedy(key: bytes) -> list[int]:
        out, i = [], 0
        while i < len(key):
            n = next(n for n in range(min(longest, len(key) - i), 0, -1) if key[i : i + n] in by_bytes)
            out.append(by_bytes[key[i : i + n]])
            i += n
        return out

    enc = encoder_of(name)
    values = HARD + VALUE_SETS["tools_300"]
    differ = [v for v in values if v and enc.encode(v, add_special_tokens=False).ids != greedy(v.encode())]
    assert len(differ) >= 3, differ
    table = triec.compile(values, vocab, tokenization="canonical")
    for v in differ:
        ids = enc.encode(v, add_special_tokens=False).ids
        assert table.is_accepting(table.walk(ids))
        with pytest.raises(TokenNotAllowed):
            table.walk([*greedy(v.encode()), *vocab.eos_token_ids[:1]])


def test_a_byte_prefix_is_not_a_state(vocabs) -> None:
    """GPT-2: "abc" = [abc], "abd" = [ab, d]. The any table allows [ab, c]; the canonical one must not."""
    gpt2 = vocabs["gpt2"]
    ab, c = (gpt2.token_bytes.index(b) for b in (b"ab", b"c"))
    any_table = triec.compile(["abc", "abd"], gpt2)
    canon = triec.compile(["abc", "abd"], gpt2, tokenization="canonical")
    assert any_table.is_accepting(any_table.walk([ab, c]))
    with pytest.raises(TokenNotAllowed):
        canon.walk([ab, c])
    assert canon.strings == ["abd", "abc"]  # token order: [ab, d] before [abc]
    with pytest.raises(ValueError, match="canonical"):
        canon.state_for_prefix("ab")


def test_a_flat_object_schema_is_canonical_as_a_whole(vocabs) -> None:
    schema = {
        "type": "object",
        "properties": {"label": {"enum": ["spam", "ham", "medical_billing"]}, "version": {"const": 1}},
        "required": ["label", "version"],
    }
    table = triec.compile_json_schema(schema, vocabs["qwen2"], tokenization="canonical")
    assert language(table) == encodings(table, "qwen2") and sorted(table.values) == ["ham", "medical_billing", "spam"]
    assert table.strings[0].startswith('{"label": ') and table.strings[0].endswith(', "version": 1}')


def test_the_artifact_records_it_and_loads_back(tmp_path: Path, qwen2) -> None:
    table = triec.compile(HARD, qwen2, tokenization="canonical", encoding="json")
    path = tmp_path / "c.triec"
    table.save(path)
    loaded = triec.load(path, verify=True)
    assert loaded.header["build_options"]["tokenization"] == "canonical"
    assert loaded.canonical and loaded.values == table.values
    for name in ("allowed_offsets", "allowed_tokens", "allowed_next", "value_state", "value_lcp", "state_byte"):
        assert np.array_equal(getattr(loaded, name), getattr(table, name)), name
    plain = triec.compile(HARD, qwen2)
    plain.save(tmp_path / "a.triec")
    assert "tokenization" not in triec.load(tmp_path / "a.triec").header["build_options"]  # absent means any
    assert triec.load(tmp_path / "a.triec").tokenization == "any"


def test_restrict_and_compact_equal_a_fresh_compile(vocabs) -> None:
    vocab = vocabs["gpt2"]
    values = HARD + VALUE_SETS["tools_300"]
    table = triec.compile(values, vocab, tokenization="canonical")
    subset = [*random.Random(1).sample(values, 40), "abc", "abd", "ab"]
    view = table.restrict(subset)
    fresh = triec.compile(subset, vocab, tokenization="canonical")
    assert sorted(view.values) == sorted(fresh.values)
    compact = view.compact()
    assert compact.canonical
    for name in ("allowed_offsets", "allowed_tokens", "allowed_next", "value_state", "value_lcp", "state_byte"):
        assert np.array_equal(getattr(compact, name), getattr(fresh, name)), name
    assert compact.values == fresh.values
    # a view is canonical too: no jump-forward (forced bytes are not forced tokens), triggers land at the start
    from triec.runtime.matcher import TableMatcher
    from triec.runtime.trigger import Triggered

    alone = table.restrict(["get_weather_forecast"])
    assert alone.canonical and alone.tokenization == "canonical"
    assert TableMatcher(alone.compact()).jump_forward() == b""  # matchers run on compacted views
    assert {s for lands in Triggered(alone, vocab, "Answer:").landing for s in lands.values()} == {0}
    narrower = view.restrict(["abc", "ab"])
    assert language(narrower.compact()) == language(triec.compile(["abc", "ab"], vocab, tokenization="canonical"))


def test_the_runtime_paths_agree(vocabs) -> None:
    """Bitmask rows from the table, its mask writer and (where installed) its torch twin, for every state."""
    table = triec.compile(HARD, vocabs["qwen2"], tokenization="canonical")
    states = np.arange(table.num_states)
    rows = np.zeros((table.num_states, table.words_per_row), dtype=np.int32)
    table.fill_bitmask(states, rows)
    for s in range(table.num_states):
        bits = np.unpackbits(rows[s].view(np.uint8), bitorder="little")[: table.vocab_size]
        expect = set(table.allowed(s).tolist())
        assert set(np.flatnonzero(bits).tolist()) == expect
    writer = table.mask_writer(4)
    out = writer.fill(states[:4])
    assert np.array_equal(out[:4], rows[:4])
    torch = pytest.importorskip("torch")
    tt = table.to_torch("cpu")
    assert np.array_equal(tt.fill(torch.arange(table.num_states)).numpy(), rows)
    owner = np.repeat(states, np.diff(table.allowed_offsets.astype(np.int64)))
    nxt = tt.advance(torch.from_numpy(owner), torch.from_numpy(table.allowed_tokens.astype(np.int64)))
    assert np.array_equal(nxt.numpy(), table.allowed_next)


def test_a_trigger_hands_over_at_a_token_boundary(vocabs) -> None:
    from triec.runtime.trigger import Triggered

    vocab = vocabs["gpt2"]
    table = triec.compile(["abc", "abd"], vocab, tokenization="canonical")
    trig = Triggered(table, vocab, "Answer:")
    landings = {t for lands in trig.landing for t in lands}
    # every landing token ends exactly with the trigger and lands at the start
    assert landings and all(vocab.token_bytes[t].endswith(b":") for t in landings)
    assert {s for lands in trig.landing for s in lands.values()} == {0}


def test_refusals(tmp_path: Path, vocabs) -> None:
    gpt2 = vocabs["gpt2"]
    bare = triec.Vocabulary(gpt2.token_bytes, eos_token_ids=gpt2.eos_token_ids, name="bare")
    with pytest.raises(TokenizerError, match="no encoder"):
        triec.compile(["a"], bare, tokenization="canonical")
    # special-token text is text: spelled with ordinary tokens, never with the special id
    eos_text = triec.compile(["x<|endoftext|>"], gpt2, tokenization="canonical")
    assert gpt2.eos_token_ids[0] not in eos_text.allowed_tokens and eos_text.num_allowed == 8
    sp = triec.Vocabulary.load(
        TOKENIZERS["phi3"]
    )  # SentencePiece's NFKC-free normalizer keeps text; a rewrite refuses:
    from triec.compiler.canonical import canonical_ids

    class Rewriting:  # an encoder whose output does not spell the value (what a normalizer like NFKC does)
        def encode_batch(self, texts, add_special_tokens=False):
            return [type("E", (), {"ids": sp.encoder().encode(t.upper(), add_special_tokens=False).ids}) for t in texts]

    with pytest.raises(ValuesError, match=r"'abc'.*spell 'ABC'"):
        canonical_ids([b"abc"], Rewriting(), sp)
    with pytest.raises(ValueError, match="tokenization must be"):
        triec.compile(["a"], gpt2, tokenization="shortest")
    from triec.tokenizer.encoder import encoder_from_json

    with pytest.raises(TokenizerError, match="GGUF"):
        encoder_from_json({"model": {"type": "gguf-gpt2"}}, "model.gguf")


def test_cli_compile_inspect_verify(tmp_path: Path) -> None:
    values = tmp_path / "v.txt"
    values.write_text("\n".join(HARD[:-6]) + "\n", encoding="utf-8")
    out = tmp_path / "v.triec"
    run = [sys.executable, "-m", "triec.cli"]
    r = subprocess.run(
        [*run, "compile", str(values), "-t", "gpt2", "--tokenization", "canonical", "-o", str(out), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(r.stdout)["tokenization"] == "canonical"
    r = subprocess.run([*run, "inspect", str(out), "--json"], capture_output=True, text=True, check=True)
    assert json.loads(r.stdout)["tokenization"] == "canonical"
    r = subprocess.run([*run, "inspect", str(out), "--prefix", "ab"], capture_output=True, text=True)
    assert r.returncode == 2 and "token paths" in r.stderr  # "ab" and "a"+"b..." are two states
    r = subprocess.run(
        [*run, "inspect", str(out), "--prefix", "medical_b", "--json"], capture_output=True, text=True, check=True
    )
    assert json.loads(r.stdout)["state"]["values_below"] == 1
    r = subprocess.run([*run, "verify", str(out), "--against", "reference,llguidance"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "larger language" in r.stdout
    schema = tmp_path / "s.json"
    schema.write_text(
        json.dumps(
            {"type": "object", "properties": {"x": {"enum": [f"v{i}" for i in range(300)]}, "y": {"type": "integer"}}}
        )
    )
    r = subprocess.run(
        [*run, "compile", str(schema), "--tokenization", "canonical", "-o", str(tmp_path / "s.triec")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "plain value sets" in r.stderr
    assert not (tmp_path / "s.triec").exists()


def _with(table: triec.MaskTable, **arrays: np.ndarray) -> triec.MaskTable:
    fields = {
        name: getattr(table, name)
        for name in ("allowed_offsets", "allowed_tokens", "allowed_next", "value_state", "value_lcp", "state_byte")
    }
    return triec.MaskTable(
        **{**fields, **arrays},
        vocab_size=table.vocab_size,
        eos_token_ids=table.eos_token_ids,
        tokenizer_fingerprint=table.tokenizer_fingerprint,
        build_options=table.build_options,
    )


def test_verify_catches_a_wrong_row(vocabs) -> None:
    table = triec.compile(HARD, vocabs["gpt2"], tokenization="canonical")
    assert compare_canonical(table, vocabs["gpt2"]).mismatches == 0
    wrong = table.allowed_tokens.copy()
    wrong[3] += 1  # one token id off
    assert compare_canonical(_with(table, allowed_tokens=wrong), vocabs["gpt2"]).mismatches >= 1
    # a token that leads one state too far: its chain overlaps the next one and a state is left unowned
    nxt = table.allowed_next.copy()
    i = int(np.flatnonzero(nxt < table.num_states - 1)[0])
    nxt[i] += 1
    assert compare_canonical(_with(table, allowed_next=nxt), vocabs["gpt2"]).mismatches >= 1
