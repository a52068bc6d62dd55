"""Values inside JSON: the spelling, the masks against xgrammar's and llguidance's own compilers, state by state.

Every comparison drives the real engines over the real tokenizers (gpt2, qwen2,
phi3): xgrammar's ``compile_json_schema(..., any_whitespace=False)`` for the
JSON forms (so a spelling that differed from the engines' by one escape would
show up as a mask mismatch), ``compile_regex`` / the literal alternation for
raw values with a prefix and suffix, and llguidance for both.
"""

from __future__ import annotations

import json
import re
import string

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_verify import NAMES, engine_or_skip

import triec
from triec.encoding import Encoding, json_string_literal
from triec.engines import Engine
from triec.runtime.bitmask import ids_of as row_ids
from triec.verify.paths import token_paths
from triec.verify.tables import compare_engine

# Every kind of character a JSON spelling treats specially, and a few it must leave alone.
pytestmark = pytest.mark.engines

ESCAPING = [
    "slack.get_user",
    'say "hi"',
    "back\\slash",
    '\\"',
    "tab\there",
    "nl\nx",
    "cr\r\x08\x0c",
    "\x00",
    "\x01\x1f",
    "del\x7f",
    "café",
    "日本語",
    "👩\u200d💻",
    "😀",
    "line\u2028sep\u2029",
    "/slash",
    "",
    " ",
    "\u0085\u00a0",
]

SCHEMA = {
    "type": "object",
    "properties": {
        "kind": {"const": "tool"},
        "name": {"type": "string", "enum": ESCAPING},
        "version": {"const": 2},
        "strict": {"const": True},
        "note": {"const": 'a "q"\n'},
        "nothing": {"const": None},
    },
    "required": ["kind", "name", "version", "strict", "note", "nothing"],
}


def agree(table: triec.MaskTable, vocab: triec.Vocabulary, engine: Engine, compiled: object, walks: int = 10) -> None:
    result = compare_engine(
        table, vocab, engine, np.arange(table.num_states), token_paths(table), walks=walks, seed=3, compiled=compiled
    )
    details = [(m.prefix, m.problem, m.only_triec, m.only_other) for m in result.examples]
    assert result.status == "ok", details
    assert result.states_checked == table.num_states and result.walks == walks


# ---------------------------------------------------------------- the spelling


def test_json_string_literal_spelling() -> None:
    assert json_string_literal('a"b\\c') == '"a\\"b\\\\c"'
    assert json_string_literal("\t\n\r\x08\x0c") == '"\\t\\n\\r\\b\\f"'
    assert json_string_literal("\x00\x1f\x7f") == '"\\u0000\\u001f\\u007f"'
    assert json_string_literal("café 日本 😀 \u2028 /") == '"café 日本 😀 \u2028 /"'  # raw, unescaped
    for v in ESCAPING:
        assert json.loads(json_string_literal(v)) == v


def test_encoding_round_trip_and_refusals() -> None:
    enc = Encoding("json", '{"tool": ', "}")
    assert enc.spell("slack.get_user") == '{"tool": "slack.get_user"}'
    for v in ESCAPING:
        assert enc.unspell(enc.spell(v)) == v
    for bad in ['{"tool": "a"', '"a"}', '{"tool": a}', '{"tool": "\\u0061"}', '{"tool": 1}']:
        with pytest.raises(ValueError):
            enc.unspell(bad)  # not what triec writes for any value (one spelling per value)
    assert Encoding("raw", "<", ">").unspell("<x>") == "x"
    with pytest.raises(triec.ValuesError, match="encoding: expected one of raw, json"):
        Encoding("yaml")


# ---------------------------------------------------------------- masks equal the engines'


@pytest.mark.parametrize("name", NAMES)
def test_json_encoding_equals_xgrammars_enum(vocabs: dict[str, triec.Vocabulary], name: str) -> None:
    """encoding="json" gives exactly the masks of xgrammar's own JSON schema {"enum": values}: the same spelling."""
    vocab = vocabs[name]
    engine = engine_or_skip("xgrammar", vocab)
    table = triec.compile(ESCAPING, vocab, encoding="json")
    assert table.strings == sorted((json_string_literal(v) for v in ESCAPING), key=str.encode)
    agree(table, vocab, engine, engine.compile_json_schema({"enum": ESCAPING}))


@pytest.mark.parametrize("name", NAMES)
def test_schema_equals_xgrammars_schema(vocabs: dict[str, triec.Vocabulary], name: str) -> None:
    vocab = vocabs[name]
    engine = engine_or_skip("xgrammar", vocab)
    table = triec.compile_json_schema(SCHEMA, vocab)
    assert sorted(table.values) == sorted(ESCAPING)
    s = table.strings[table.values.index("slack.get_user")]
    assert (
        s
        == '{"kind": "tool", "name": "slack.get_user", "version": 2, "strict": true, "note": "a \\"q\\"\\n", "nothing": null}'
    )
    agree(table, vocab, engine, engine.compile_json_schema(SCHEMA))


@pytest.mark.parametrize("engine_name", ["xgrammar", "llguidance"])
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("form", ["json", "schema"])
def test_json_forms_equal_the_engines_literals(
    vocabs: dict[str, triec.Vocabulary], name: str, engine_name: str, form: str
) -> None:
    """The JSON strings as literals: xgrammar's compile_regex and llguidance's regex give triec's masks."""
    vocab = vocabs[name]
    engine = engine_or_skip(engine_name, vocab)
    table = (
        triec.compile(ESCAPING, vocab, encoding="json") if form == "json" else triec.compile_json_schema(SCHEMA, vocab)
    )
    compiled = engine.compile_regex(table.strings) if engine_name == "xgrammar" else engine.compile(table.strings)
    agree(table, vocab, engine, compiled)


def canonical(text: bytes) -> bytes:
    """Rewrite every complete ``\\uXXXX`` escape as triec spells that character; drop an unfinished escape at the end."""
    out, i = bytearray(), 0
    while i < len(text):
        if text[i : i + 1] != b"\\":
            out += text[i : i + 1]
            i += 1
            continue
        m = re.match(rb"\\u([0-9a-fA-F]{4})", text[i:])
        if m:
            out += json_string_literal(chr(int(m.group(1), 16)))[1:-1].encode()
            i += 6
        elif re.fullmatch(rb"\\(u[0-9a-fA-F]{0,3})?", text[i:]):
            break
        else:
            out += text[i : i + 2]
            i += 2
    return bytes(out)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("form", ["json", "schema"])
def test_llguidance_json_schema_accepts_exactly_our_spelling_and_other_escapes(
    vocabs: dict[str, triec.Vocabulary], name: str, form: str
) -> None:
    """llguidance's own JSON schema grammar allows every token triec allows, in every state, and EOS where triec does;
    it allows more only inside an escape sequence, where it also takes ``\\u000a`` for ``\\n`` and upper-case hex
    (``\\u007F``): alternative spellings of the same control character. triec writes one spelling per value,
    xgrammar's, which llguidance accepts (docs/decisions.md D15)."""
    vocab = vocabs[name]
    engine = engine_or_skip("llguidance", vocab)
    if form == "json":
        table, schema = triec.compile(ESCAPING, vocab, encoding="json"), {"enum": ESCAPING}
    else:
        table, schema = triec.compile_json_schema(SCHEMA, vocab), SCHEMA
    compiled = engine.compile_json_schema(schema)
    parent, via = token_paths(table)
    children: dict[int, list[int]] = {}
    for s in range(1, table.num_states):
        if parent[s] >= 0:
            children.setdefault(int(parent[s]), []).append(s)
    m = engine.matcher(compiled)
    ours = np.empty((1, table.words_per_row), dtype=np.int32)
    theirs = np.empty(table.words_per_row, dtype=np.int32)
    checked = extra_states = 0
    stack: list[tuple[int, int]] = [(1, 0)]
    while stack:
        kind, s = stack.pop()
        if kind == 0:
            m.rollback(1)
            continue
        if s:
            assert m.consume(int(via[s])), f"llguidance refuses triec's path at {table.prefix(s)!r}"
            stack.append((0, s))
        table.fill_bitmask([s], ours)
        theirs.fill(0)
        m.fill(theirs)
        mine, other = set(row_ids(ours[0]).tolist()), set(row_ids(theirs).tolist())
        assert mine <= other, (table.prefix(s), sorted(mine - other)[:5])
        if other - mine:
            extra_states += 1
            prefix = table.prefix(s)
            for t in other - mine:
                assert t not in vocab.eos_token_ids, prefix
                spelled = canonical(prefix + vocab.token_bytes[t])  # another spelling of the same characters
                assert any(k.startswith(spelled) for k in table.value_bytes), (prefix, vocab.token_bytes[t])
        checked += 1
        stack.extend((1, c) for c in reversed(children.get(s, [])))
    assert checked == table.num_states
    assert extra_states > 0  # the values hold control characters: llguidance's alternative escapes are there


@pytest.mark.parametrize("engine_name", ["xgrammar", "llguidance"])
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("encoding", ["raw", "json"])
def test_prefix_and_suffix_equal_the_engines_literals(
    vocabs: dict[str, triec.Vocabulary], name: str, engine_name: str, encoding: str
) -> None:
    """Any prefix and suffix: the literal strings through xgrammar's compile_regex and llguidance's regex."""
    vocab = vocabs[name]
    engine = engine_or_skip(engine_name, vocab)
    table = triec.compile(ESCAPING, vocab, encoding=encoding, prefix='{"tool": ', suffix="}\n")
    assert table.values == [Encoding(encoding, '{"tool": ', "}\n").unspell(s) for s in table.strings]
    assert sorted(table.values) == sorted(ESCAPING)
    compiled = engine.compile_regex(table.strings) if engine_name == "xgrammar" else engine.compile(table.strings)
    agree(table, vocab, engine, compiled)


ALPHABET = string.ascii_letters[:4] + '"\\/\n\t\x00\x1f\x7f é日😀\u2028'


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.text(alphabet=ALPHABET, max_size=6), min_size=1, max_size=8))
def test_random_json_sets_equal_xgrammar(vocabs: dict[str, triec.Vocabulary], name: str, values: list[str]) -> None:
    vocab = vocabs[name]
    engine = engine_or_skip("xgrammar", vocab)
    table = triec.compile(values, vocab, encoding="json", prefix="[", suffix="]")
    schema = {"type": "array", "prefixItems": [{"enum": sorted(set(values))}], "items": False, "minItems": 1}
    agree(table, vocab, engine, engine.compile_json_schema(schema), walks=3)


# ---------------------------------------------------------------- the Python API


def test_compile_keywords_and_values(vocabs: dict[str, triec.Vocabulary]) -> None:
    vocab = vocabs["gpt2"]
    table = triec.compile(
        ["slack.get_user", "github.create_issue", "slack.get_user"],
        vocab,
        encoding="json",
        prefix='{"tool": ',
        suffix="}",
    )
    assert table.strings == ['{"tool": "github.create_issue"}', '{"tool": "slack.get_user"}']
    assert table.values == ["github.create_issue", "slack.get_user"]
    end = table.state_for_prefix('{"tool": "slack.get_user"}')
    assert end is not None and table.value(end) == "slack.get_user" and table.is_accepting(end)
    assert (
        table.state_for_prefix('{"tool": "slack.get_user"') is not None
        and table.value(table.state_for_prefix('{"tool": "slack.get_user"')) is None
    )
    same = triec.compile(["slack.get_user", "github.create_issue"], vocab, encoding=Encoding("json", '{"tool": ', "}"))
    assert np.array_equal(same.allowed_tokens, table.allowed_tokens)
    with pytest.raises(triec.ValuesError, match="not both"):
        triec.compile(["a"], vocab, encoding=Encoding("json"), prefix="x")
    with pytest.raises(triec.ValuesError, match="encoding"):
        triec.compile(["a"], vocab, encoding="xml")
    raw = triec.compile(["a"], vocab)
    assert raw.encoding.plain and raw.values == raw.strings == ["a"]


def test_restrict_takes_the_users_values(vocabs: dict[str, triec.Vocabulary]) -> None:
    vocab = vocabs["gpt2"]
    table = triec.compile(ESCAPING, vocab, encoding="json", prefix="<", suffix=">")
    subset = ['say "hi"', "del\x7f", ""]
    view = table.restrict(subset)
    assert sorted(view.values) == sorted(subset)
    alone = triec.compile(subset, vocab, encoding="json", prefix="<", suffix=">")
    compact = view.compact()
    assert compact.values == alone.values and compact.encoding == alone.encoding
    assert np.array_equal(compact.allowed_tokens, alone.allowed_tokens) and np.array_equal(
        compact.allowed_next, alone.allowed_next
    )
    with pytest.raises(triec.ValueNotInTable):
        table.restrict(['"say \\"hi\\""'])  # a spelling is not a value


def test_schema_errors_name_the_keyword(vocabs: dict[str, triec.Vocabulary]) -> None:
    from triec.compiler.json_schema import parse_schema

    def obj(props: dict, **extra: object) -> dict:
        return {"type": "object", "properties": props, "required": list(props), **extra}

    bad = {
        "nested object": (
            obj({"a": {"enum": ["x"]}, "b": {"type": "object", "properties": {}}}),
            r"properties\.b: unsupported keyword 'properties'",
        ),
        "two enums": (obj({"a": {"enum": ["x"]}, "b": {"enum": ["y"]}}), r"properties\.b: a second 'enum'"),
        "free string": (
            obj({"a": {"enum": ["x"]}, "b": {"type": "string"}}),
            r"properties\.b: 'type' \"string\" without 'enum' or 'const'",
        ),
        "number": (obj({"a": {"enum": ["x"]}, "n": {"type": "number"}}), r"properties\.n: 'type' \"number\" without"),
        "minLength": (obj({"a": {"enum": ["x"], "minLength": 2}}), r"properties\.a: unsupported keyword 'minLength'"),
        "optional": (
            {"type": "object", "properties": {"a": {"enum": ["x"]}}, "required": []},
            r"property 'a' is not in 'required'",
        ),
        "extra allowed": (obj({"a": {"enum": ["x"]}}, additionalProperties=True), r"'additionalProperties'"),
        "anyOf": (obj({"a": {"enum": ["x"]}}, anyOf=[]), r"unsupported keyword 'anyOf'"),
        "no enum": (obj({"a": {"const": 1}}), r"no property has an 'enum'"),
        "non-string member": (obj({"a": {"enum": ["x", 1]}}), r"properties\.a\.enum index 1: expected a string"),
        "float const": (
            obj({"a": {"enum": ["x"]}, "v": {"const": 1.5}}),
            r"properties\.v: unsupported 'const' value 1\.5",
        ),
        "array": ({"type": "array", "properties": {}}, r"unsupported 'type' \"array\""),
    }
    for label, (schema, message) in bad.items():
        with pytest.raises(triec.ValuesError, match=message):
            parse_schema(schema, "s.json")
        with pytest.raises(triec.ValuesError, match=message):
            triec.compile_json_schema(schema, vocabs["gpt2"])
        assert label  # every case names its keyword
