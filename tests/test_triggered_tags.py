"""Triggered tags (vLLM's ``tool_choice="auto"`` with strict tools; SGLang's ``structures``/``triggers``): free text,
a trigger, one call whose name a trie serves, free text again, exact against xgrammar on the whole tag.

Outputs that go through free text, the trigger, a call, free text and a second call, then EOS, are cut into
tokens at random (any allowed token spelling a prefix of the rest, so tokens that span free text and the
trigger, the trigger and the begin, the end and the free text are taken), every row compared with xgrammar's
on the whole structural tag, and at each step two other allowed tokens followed one step
(:func:`~triec.verify.schemas.compare_texts`). Three tokenizers, and the Qwen2 vocabulary with
Qwen2.5's added ``<tool_call>`` token, where the trigger is one token id.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from shared import hermes_tags, needs_xgrammar

import triec
from triec.errors import SchemaShapeError
from triec.schema.compile import compile_structural_tag
from triec.verify.schemas import compare_texts

pytestmark = [
    pytest.mark.engines,
    needs_xgrammar,
]

PARAMS = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "n": {"type": "integer"}},
    "required": ["city", "n"],
    "additionalProperties": False,
}
NAMES = ["get_weather", "get_weather_now", "send_email", "search", "add"]
CALL1 = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "n": 3}}\n</tool_call>'
CALL2 = '<tool_call>{"name": "search", "arguments": {"city": "a<b", "n": 10}}</tool_call>'
TEXTS = {
    "free, call, free, call, free": "Let me check the weather. " + CALL1 + "\nAnd search too: " + CALL2 + " Done.",
    "two calls back to back": CALL1 + CALL2,
    "a partial trigger in free text": "No tools needed <tool but text.",
    "nothing": "",
}


def auto_tag(names: list[str], *, stop_after_first: bool = False, at_least_one: bool = False) -> dict:
    """What vLLM builds for the hermes parser, strict tools and ``tool_choice="auto"`` (each tool in two spellings)."""
    tags = []
    for n in names:
        content = {"type": "json_schema", "json_schema": PARAMS}
        tags += hermes_tags('"' + n + '"', content)
    return {
        "type": "structural_tag",
        "format": {
            "type": "triggered_tags",
            "triggers": ["<tool_call>"],
            "tags": tags,
            "at_least_one": at_least_one,
            "stop_after_first": stop_after_first,
        },
    }


def qwen25_like(qwen2: triec.Vocabulary) -> triec.Vocabulary:
    """Qwen2's vocabulary with Qwen2.5's added tokens ``<tool_call>`` (151657) and ``</tool_call>`` (151658)."""
    base = list(qwen2.token_bytes)
    tb = base + [b""] * (151657 - len(base)) + [b"<tool_call>", b"</tool_call>"]
    return triec.Vocabulary(tb, eos_token_ids=[151643, 151645], vocab_size=151936, name="qwen2.5-like")


@pytest.mark.parametrize("name", ["gpt2", "qwen2", "phi3", "qwen2.5-like"])
def test_auto_mode_equals_xgrammar_through_free_text_and_two_calls(vocabs, name: str) -> None:
    vocab = qwen25_like(vocabs["qwen2"]) if name == "qwen2.5-like" else vocabs[name]
    table = compile_structural_tag(auto_tag(NAMES), vocab)
    r = compare_texts(table, list(TEXTS.values()), splits=2, past=2, seed=len(name))
    assert r.mismatches == 0, r.examples
    assert r.walks_ended == 2 * len(TEXTS) and r.walk_steps > 200 and r.steps_past > 200
    if name == "qwen2.5-like":  # the trigger as one token id enters the names' slot
        m = table.matcher()
        assert m.accept_token(151657) and m.phase == "slot"


@pytest.mark.parametrize(("stop_after_first", "at_least_one"), [(True, False), (False, True)])
def test_one_call_and_at_least_one(vocabs, stop_after_first: bool, at_least_one: bool) -> None:
    """stop_after_first: after the call only EOS; at_least_one: the output starts with a call (xgrammar's reading)."""
    vocab = vocabs["gpt2"]
    table = compile_structural_tag(auto_tag(NAMES, stop_after_first=stop_after_first, at_least_one=at_least_one), vocab)
    texts = ["Sure. " + CALL1] if stop_after_first else [CALL1 + " then " + CALL2 + " end", CALL1]
    r = compare_texts(table, texts, splits=2, past=3)
    assert r.mismatches == 0 and r.walks_ended == 2 * len(texts), r.examples
    m = table.matcher()
    tb = vocab.token_bytes
    free = next(i for i, b in enumerate(tb) if b == b"Sure")
    assert m.accept_token(free) is (not at_least_one)


def test_saved_and_loaded_serves_the_same(vocabs, tmp_path: Path) -> None:
    vocab = vocabs["qwen2"]
    table = compile_structural_tag(auto_tag(NAMES), vocab)
    table.save(tmp_path / "auto.triec")
    loaded = triec.load(tmp_path / "auto.triec")
    loaded.bind(vocab)
    assert loaded.info["trigger"] == "<tool_call>" and loaded.start_grammar == 0
    r = compare_texts(loaded, [TEXTS["free, call, free, call, free"]], splits=1, past=1)
    assert r.mismatches == 0 and r.walks_ended == 1


def test_the_legacy_structures_shape_is_the_same_language(vocabs) -> None:
    """SGLang's ``{"structures": [...], "triggers": [...]}`` is xgrammar's triggered tags: the same rows."""
    vocab = vocabs["gpt2"]
    legacy = {
        "structures": [{"begin": f"<function={n}>", "schema": PARAMS, "end": "</function>"} for n in NAMES],
        "triggers": ["<function="],
    }
    table = compile_structural_tag(legacy, vocab)
    text = 'Calling. <function=search>{"city": "x", "n": 1}</function> ok <function=add>{"city": "", "n": 2}</function>'
    r = compare_texts(table, [text, "just text"], splits=2, past=2)
    assert r.mismatches == 0 and r.walks_ended == 4, r.examples


@pytest.mark.parametrize(
    ("fmt", "message"),
    [
        (
            {
                "type": "triggered_tags",
                "triggers": ["<a", "<b"],
                "tags": [{"begin": "<a1", "content": {"type": "any_text"}, "end": ">"}],
            },
            "several triggers",
        ),
        (
            {
                "type": "triggered_tags",
                "triggers": ["<a"],
                "tags": [{"begin": "<b1", "content": {"type": "any_text"}, "end": ">"}],
            },
            "does not start with the trigger",
        ),
        (
            {
                "type": "triggered_tags",
                "triggers": ["<a"],
                "tags": [{"begin": "<a", "content": {"type": "any_text"}, "end": ">"}],
            },
            "the trigger",
        ),
        ({"type": "token_triggered_tags", "trigger_tokens": [5], "tags": []}, "token_triggered_tags"),
    ],
)
def test_shapes_left_to_the_engine(vocabs, fmt: dict, message: str) -> None:
    with pytest.raises(SchemaShapeError, match=message):
        compile_structural_tag({"type": "structural_tag", "format": fmt}, vocabs["gpt2"])


def test_build_is_fast_where_xgrammar_compiles_the_whole_registry(vocabs) -> None:
    """200 tools: the build is the begins' trie (the per-tool grammars are compiled when a call picks them)."""
    vocab = vocabs["qwen2"]
    names = [f"tool_{i:03d}_{'x' * (i % 7)}" for i in range(200)]
    table = compile_structural_tag(auto_tag(names), vocab)
    assert table.slots[0].num_values == 2 * len(names)
    before = table.driver().compiles
    row = np.zeros(table.words_per_row, dtype=np.int32)
    table.matcher().fill_bitmask(row)
    assert table.driver().compiles - before <= 1  # the free text's grammar at most: no tool's grammar yet
    assert int(np.unpackbits(row.view(np.uint8)).sum()) > 0.99 * vocab.num_tokens  # free text: nearly every token
    assert json.loads(table.info["tag"])["format"]["type"] == "triggered_tags"
