"""Structural tags (vLLM's and SGLang's tool calls in xgrammar's format): the begins in a trie, exact against xgrammar
on the whole tag, state by state (every trie state, one step past each crossing token, random walks)."""

from __future__ import annotations

import json

import pytest
from shared import hermes_tags, needs_xgrammar, tags_with_separator

import triec
from triec.errors import SchemaShapeError
from triec.schema.compile import compile_structural_tag
from triec.synthetic.registries import make_registry
from triec.verify.schemas import compare_schema

pytestmark = [
    pytest.mark.engines,
    needs_xgrammar,
]


def hermes_tag(tools: list[dict], *, parallel: bool = True, strict: bool = True) -> dict:
    """The tag vLLM 0.32 builds for the hermes parser and tool_choice="required" (each tool with and without
    newlines; a non-strict tool's arguments are any JSON)."""
    tags = []
    for t in tools:
        fn = t["function"]
        name = json.dumps(fn["name"], ensure_ascii=False)
        content = {
            "type": "json_schema",
            "json_schema": fn.get("parameters", {"type": "object", "properties": {}}) if strict else True,
            "style": "json",
            "any_order": False,
            "max_whitespace_cnt": None,
            "excludes": [],
        }
        tags += hermes_tags(name, content)
    return tags_with_separator(tags, stop_after_first=not parallel)


def tools(k: int = 10) -> list[dict]:
    return [t for t in make_registry(k, seed=2, hard_names=0.2) if "x-refused-by" not in t]


@pytest.mark.parametrize("name", ["qwen2", "gpt2", "phi3"])
@pytest.mark.parametrize(("parallel", "strict"), [(True, True), (False, True), (True, False)])
def test_hermes_required_equals_xgrammar_on_the_whole_tag(vocabs, name, parallel, strict):
    table = compile_structural_tag(hermes_tag(tools(), parallel=parallel, strict=strict), vocabs[name])
    r = compare_schema(table, walks=5, max_walk_steps=80, max_states=300)
    assert r.mismatches == 0, r.examples
    assert r.states_checked > 0 and r.steps_past > 0 and r.walk_steps > 0


def test_a_call_then_the_next_one_then_eos(vocabs):
    """Two calls in one output, read with the matcher's own allowed tokens (longest first), then EOS."""
    vocab = vocabs["qwen2"]
    simple = [
        {
            "type": "function",
            "function": {
                "name": n,
                "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
            },
        }
        for n in ("add", "add_all", "sub")
    ]
    table = compile_structural_tag(hermes_tag(simple), vocab)
    text = '<tool_call>\n{"name": "add_all", "arguments": {"a": 1}}\n</tool_call><tool_call>{"name": "sub", "arguments": {"a": 2}}</tool_call>'
    m, tb, i, data = table.matcher(), vocab.token_bytes, 0, text.encode()
    assert m.jump_forward() == b"<tool_call>"  # every begin starts so, then a choice of newline or brace
    while i < len(data):
        fits = [t for t in m.allowed().tolist() if t < len(tb) and tb[t] and data.startswith(tb[t], i)]
        t = max(fits, key=lambda t: len(tb[t]))
        assert m.accept_token(t)
        i += len(tb[t])
    assert [v for _, v in m.values] == [
        '<tool_call>\n{"name": "add_all", "arguments": ',
        '<tool_call>{"name": "sub", "arguments": ',
    ]
    eos = vocab.eos_token_ids[0]
    assert eos in m.allowed().tolist() and m.accept_token(eos) and m.is_terminated()


@pytest.mark.parametrize(
    ("tag", "message"),
    [
        (
            {"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": ["<tool_call>"], "tags": []}},
            "triggered_tags",
        ),
        (
            {
                "type": "tags_with_separator",
                "tags": [{"type": "tag", "begin": "<a>", "content": {"type": "any_text"}, "end": "</a>"}],
                "separator": "",
                "at_least_one": False,
            },
            "at_least_one",
        ),
        (
            {
                "type": "tags_with_separator",
                "tags": [
                    {"begin": "<a>", "content": {"type": "any_text"}, "end": "</a>"},
                    {"begin": "[b]", "content": {"type": "any_text"}, "end": "[/b]"},
                ],
                "separator": "",
                "at_least_one": True,
            },
            "first byte",
        ),
        (
            {
                "type": "tags_with_separator",
                "tags": [
                    {"begin": "<a", "content": {"type": "any_text"}, "end": ">"},
                    {"begin": "<ab", "content": {"type": "any_text"}, "end": ">"},
                ],
                "separator": "",
                "at_least_one": True,
            },
            "prefix",
        ),
    ],
)
def test_shapes_left_to_the_engine(vocabs, tag, message):
    with pytest.raises(SchemaShapeError, match=message):
        compile_structural_tag(tag, vocabs["gpt2"])


def test_llguidance_is_refused(vocabs):
    with pytest.raises(SchemaShapeError, match="xgrammar"):
        compile_structural_tag(hermes_tag(tools(3)), vocabs["gpt2"], engine="llguidance")


def test_names_are_the_begins(vocabs):
    table = compile_structural_tag(hermes_tag(tools(3)), vocabs["gpt2"])
    assert all(isinstance(n, str) and n.startswith("<tool_call>") for n in table.names)
    assert isinstance(triec.SchemaTable, type)
