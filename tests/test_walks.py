"""Decode-time behaviour end to end: random constrained walks, and real tokenizations.

* Random walks play the model: from ``table.start`` pick any allowed token,
  advance, and stop at EOS. Whatever the walk emits must be one of the values,
  and no walk may get stuck (an empty mask) or run forever.
* Real tokenizations come from the ``tokenizers`` library, which shares no code
  with triec's byte decoding: encoding a value and walking its ids must reach
  the state of that value.
"""

from __future__ import annotations

import json
import random
from functools import cache

import pytest
from cases import CASES, LONG
from tokenizers import Tokenizer

import triec
import triec.synthetic.sets
from triec.tokenizer.source import locate

NAMES = ("gpt2", "phi3", "qwen2")

TOOL_NAMES = triec.synthetic.sets.tool_names(10_000)
UNICODE = CASES["unicode"]
WHITESPACE = CASES["whitespace"]
PREFIXES = CASES["prefix_chain"]
assert len(LONG.encode("utf-8")) > 2048

WALK_SETS = {"tool_names": TOOL_NAMES, "unicode": [*UNICODE, "", "日"]}


@cache
def _table(vocab: triec.Vocabulary, key: str) -> triec.MaskTable:
    return triec.compile(WALK_SETS[key], vocab)


# ---------------------------------------------------------------- random walks


def random_walk(
    table: triec.MaskTable, vocab: triec.Vocabulary, values: set[bytes], rng: random.Random, stats: dict
) -> bytes:
    """One constrained decode; returns the bytes emitted before EOS."""
    eos = set(vocab.eos_token_ids)
    max_len = max(map(len, values))
    state, out = table.start, b""
    # every content token adds at least one byte, so max_len + 1 steps must suffice
    for _ in range(max_len + 1):
        allowed = table.allowed(state).tolist()
        assert allowed, f"empty mask at state {state} (prefix {out!r})"
        assert allowed == sorted(allowed)
        ends = [t for t in allowed if t in eos]
        content = [t for t in allowed if t not in eos]
        assert bool(ends) == (out in values), f"EOS offered wrongly at {out!r}"
        if ends and (not content or rng.random() < 0.25):
            assert table.advance(state, rng.choice(ends)) == triec.FINISHED
            return out
        for t in content:
            assert vocab.token_bytes[t] and t < vocab.num_tokens
        r = rng.random()
        if r < 0.3:  # prefer the longest tokens: multi-byte pieces, whole words
            longest = max(len(vocab.token_bytes[t]) for t in content)
            pick = rng.choice([t for t in content if len(vocab.token_bytes[t]) == longest])
        elif r < 0.5:  # and sometimes the shortest: single bytes, partial characters
            shortest = min(len(vocab.token_bytes[t]) for t in content)
            pick = rng.choice([t for t in content if len(vocab.token_bytes[t]) == shortest])
        else:
            pick = rng.choice(content)
        piece = vocab.token_bytes[pick]
        stats["multi_byte"] += len(piece) > 1
        state = table.advance(state, pick)
        out += piece
        assert table.prefix(state) == out
        try:
            out.decode("utf-8")
        except UnicodeDecodeError:
            stats["mid_character"] += 1
    pytest.fail(f"walk did not finish within {max_len + 1} steps (at {out!r})")


@pytest.mark.parametrize("key", sorted(WALK_SETS))
def test_random_walks_emit_values(vocab: triec.Vocabulary, key: str) -> None:
    table = _table(vocab, key)
    values = set(WALK_SETS[key])
    rng = random.Random(f"{vocab.name}-{key}")
    stats = {"multi_byte": 0, "mid_character": 0}
    finished = []
    encoded = {v.encode("utf-8") for v in values}
    for _ in range(200):
        out = random_walk(table, vocab, encoded, rng, stats)
        assert out.decode("utf-8") in values
        finished.append(out)
    # the walks were not trivial: they used multi-byte tokens and reached many values
    assert stats["multi_byte"] > 0
    assert len(set(finished)) >= (100 if key == "tool_names" else 8)
    if key == "unicode":
        assert stats["mid_character"] > 0, "no walk stopped inside a multi-byte character"


# ---------------------------------------------------------------- real tokenizations


@cache
def hf_tokenizer(spec: str, prepend: bool = True) -> Tokenizer:
    doc = locate(spec).tokenizer_json
    if not prepend:
        norm = doc["normalizer"]
        assert norm["type"] == "Sequence"
        kept = [n for n in norm["normalizers"] if n["type"] != "Prepend"]
        assert len(kept) == len(norm["normalizers"]) - 1
        doc = {**doc, "normalizer": {**norm, "normalizers": kept}}
    return Tokenizer.from_str(json.dumps(doc))


def _spec(vocabs: dict[str, triec.Vocabulary], name: str) -> str:
    return name if name in ("gpt2", "qwen2") else vocabs[name].name  # phi3: the fixture's resolved path


VALUE_SETS = {
    "tool_names": TOOL_NAMES,
    "unicode": UNICODE,
    "whitespace": WHITESPACE,
    "prefixes": PREFIXES,
    "long": [LONG, LONG[:700], "short"],
}


def assert_tokenizations_reach_values(
    table: triec.MaskTable, vocab: triec.Vocabulary, ids_per_value: list[list[int]], emitted: list[str]
) -> None:
    problems = []
    for ids, value in zip(ids_per_value, emitted, strict=False):
        # the tokenizer's own ids decode, through triec's byte table, to exactly the value
        assert b"".join(vocab.token_bytes[i] for i in ids) == value.encode("utf-8"), (value, ids)
        state = table.walk(ids)
        if table.value(state) != value:
            problems.append(f"{value!r}: walk({ids}) ended at {state} ({table.value(state)!r})")
        elif table.advance(state, vocab.eos_token_ids[0]) != triec.FINISHED:
            problems.append(f"{value!r}: EOS refused at its own state")
    assert not problems, "\n".join(problems[:10])


@pytest.mark.parametrize("name", ["gpt2", "qwen2"])
@pytest.mark.parametrize("key", sorted(VALUE_SETS))
def test_byte_level_tokenization_reaches_value(vocabs: dict[str, triec.Vocabulary], name: str, key: str) -> None:
    """Byte-level BPE adds nothing to the text: a value's encoding spells exactly the value."""
    vocab = vocabs[name]
    values = VALUE_SETS[key]
    table = triec.compile(values, vocab)
    encodings = hf_tokenizer(_spec(vocabs, name)).encode_batch(values, add_special_tokens=False)
    assert_tokenizations_reach_values(table, vocab, [e.ids for e in encodings], values)


@pytest.mark.parametrize("key", sorted(VALUE_SETS))
def test_sentencepiece_tokenization_reaches_value(vocabs: dict[str, triec.Vocabulary], key: str) -> None:
    """phi3's normalizer prepends "▁" to every non-empty input, so ``encode(v)`` spells " " + v.

    triec is byte-exact and does not strip that space (it belongs to the
    tokens: "▁get" is b" get"), so the set compiled here is the values with the
    leading space the tokenizer really emits. The round trip is then exact:
    the ids' bytes equal " " + v, and walking them reaches the value " " + v.
    """
    vocab = vocabs["phi3"]
    values = VALUE_SETS[key]
    emitted = [" " + v for v in values]
    table = triec.compile(emitted, vocab)
    encodings = hf_tokenizer(_spec(vocabs, "phi3")).encode_batch(values, add_special_tokens=False)
    assert all(e.ids and vocab.token_bytes[e.ids[0]].startswith(b" ") for e in encodings)
    assert_tokenizations_reach_values(table, vocab, [e.ids for e in encodings], emitted)


@pytest.mark.parametrize("key", sorted(VALUE_SETS))
def test_sentencepiece_mid_text_tokenization_reaches_value(vocabs: dict[str, triec.Vocabulary], key: str) -> None:
    """The other honest reading for phi3: a value generated mid-text gets no prepended "▁".

    Dropping only the Prepend normalizer (spaces still become "▁") gives the
    ids SentencePiece uses for the value itself; those must walk the table
    compiled from the plain values to each value's accepting state.
    """
    vocab = vocabs["phi3"]
    values = VALUE_SETS[key]
    table = triec.compile(values, vocab)
    encodings = hf_tokenizer(_spec(vocabs, "phi3"), prepend=False).encode_batch(values, add_special_tokens=False)
    assert_tokenizations_reach_values(table, vocab, [e.ids for e in encodings], values)


def test_empty_value_tokenizes_to_nothing(vocabs: dict[str, triec.Vocabulary]) -> None:
    """ "" encodes to no ids in every family (phi3 prepends nothing to empty input); start must accept."""
    for name in NAMES:
        vocab = vocabs[name]
        table = triec.compile(["", "a"], vocab)
        ids = hf_tokenizer(_spec(vocabs, name)).encode("", add_special_tokens=False).ids
        assert ids == []
        assert table.value(table.walk(ids)) == ""
        assert set(vocab.eos_token_ids) <= set(table.allowed(table.start).tolist())
