"""Large enums anywhere in a JSON Schema (issue 20): each served by its own trie, exactly as the engine on the whole schema.

Placements: an object property at depth, array items (each item a fresh pass,
min/maxItems), an ``anyOf`` branch next to a non-string branch (served) and next
to a string branch (left in the engine, still exact), two large enums in one
object, one enum referenced twice through ``$ref``, optional properties around
an enum. Values need JSON escapes (quotes, backslashes, non-ASCII, the empty
string). The oracle is the same engine compiled on the user's whole schema in
the same convention; every row is compared along random walks to EOS and, for
each slot, at every trie state from its entry with one step past every
crossing token (triec.verify.schemas). Synthetic vocabularies add long
tokens that straddle each boundary: entering (structure text + opening quote +
value bytes), leaving (closing quote + ``, "next": ``, ``]``, ``}``) and
between two array items.
"""

from __future__ import annotations

import pytest
from shared import ENGINES, synthetic_vocab

import triec
from triec.verify.schemas import compare_schema

pytestmark = pytest.mark.engines

THRESHOLD = 8

CODES = ["A00.1", "A00.9", "A01", "B20.3", "C34.10", "C34.9", "J45", "Z99.89"]
HARD = ['say "hi"', "back\\slash", "café", "日本語", "a/b", ""]
ENUM = {"type": "string", "enum": CODES + HARD}
OTHER = {"enum": [f"user_{i}" for i in range(9)] + ["ünïcode", 'q"t']}


def obj(props: dict, required: list[str] | None = None, **extra: object) -> dict:
    return {"type": "object", "properties": props, "required": list(props) if required is None else required, **extra}


PLACEMENTS: dict[str, dict] = {
    "nested": obj(
        {
            "note": {"type": "string", "maxLength": 6},
            "info": obj({"meta": obj({"code": ENUM, "n": {"type": "integer"}})}),
        }
    ),
    "array_items": obj(
        {"codes": {"type": "array", "items": ENUM, "minItems": 1, "maxItems": 3}, "done": {"type": "boolean"}}
    ),
    "top_level_array": {"type": "array", "items": ENUM, "minItems": 2, "maxItems": 4},
    "anyof_with_integer": obj({"v": {"anyOf": [ENUM, {"type": "integer"}]}, "w": {"type": "null"}}),
    "two_enums": obj({"c": {"type": "boolean"}, "a": ENUM, "b": OTHER}),
    # the first property an enum: a start slot (the tool-call shape), the second entered from the grammar
    "enum_first_and_nested": obj({"a": OTHER, "args": obj({"code": ENUM})}),
    "ref_twice": {
        "$defs": {"code": ENUM},
        **obj(
            {
                "primary": {"$ref": "#/$defs/code"},
                "rest": {"type": "array", "items": {"$ref": "#/$defs/code"}, "maxItems": 2},
            }
        ),
    },
    "optional_around": obj(
        {"x": {"type": "integer"}, "code": ENUM, "y": {"type": "string", "maxLength": 3}}, required=["code"]
    ),
}


def check(table: triec.SchemaTable, walks: int = 8, narrower_ok: bool = False) -> None:
    r = compare_schema(table, walks=walks, max_walk_steps=60, full_tail_leaves=1)
    assert r.mismatches == 0, r.examples
    assert narrower_ok or r.engine_narrower == 0, r.narrower_examples
    assert r.slots_unreached == [] and r.slots_checked == len(table.slots)
    assert r.states_checked == table.num_states and r.walks_ended > 0


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("placement", sorted(PLACEMENTS))
def test_each_placement_exact(vocab: triec.Vocabulary, engine: str, placement: str) -> None:
    table = triec.compile_schema(PLACEMENTS[placement], vocab, engine=engine, threshold=THRESHOLD)
    entered = table.slots
    if placement == "enum_first_and_nested":
        assert table.info["shape"] == "tool-call" and table.start_slot == 0 and table.tail == b', "args": '
        entered = table.slots[1:]
    else:
        assert table.info["shape"] == "schema" and table.start_grammar == 0
    assert all(s.enter_state == 0 and s.value_grammar is None for s in entered)  # entered, the engine resumes
    check(table)


def test_where_the_slots_are(vocabs: dict[str, triec.Vocabulary]) -> None:
    v = vocabs["gpt2"]

    def slots(name: str) -> list[str]:
        t = triec.compile_schema(PLACEMENTS[name], v, threshold=THRESHOLD)
        return [s["pointer"] for s in t.info["slots"]]

    assert slots("nested") == ["/properties/info/properties/meta/properties/code"]
    assert slots("array_items") == ["/properties/codes/items"]
    assert slots("anyof_with_integer") == ["/properties/v/anyOf/0"]
    assert slots("two_enums") == ["/properties/a", "/properties/b"]
    assert slots("ref_twice") == ["/$defs/code"]  # one slot however many references
    t = triec.compile_schema(PLACEMENTS["two_enums"], v, threshold=THRESHOLD)
    assert len(t.slots) == 2 and t.grammars[0].slots == (0, 1)
    assert sorted(t.values_of(1)) == sorted(OTHER["enum"])


@pytest.mark.parametrize("engine", ENGINES)
def test_anyof_next_to_a_string_stays_in_the_engine_and_is_exact(vocab: triec.Vocabulary, engine: str) -> None:
    """A branch that may take a string could start like a value: that enum is the engine's (and said so);
    the schema's other large enum is still a slot, and the whole stays exact."""
    schema = obj({"s": {"anyOf": [ENUM, {"type": "string", "maxLength": 4}]}, "t": OTHER})
    table = triec.compile_schema(schema, vocab, engine=engine, threshold=THRESHOLD)
    assert [s["pointer"] for s in table.info["slots"]] == ["/properties/t"]
    assert table.info["engine_enums"] == [
        {
            "pointer": "/properties/s/anyOf/0",
            "values": len(ENUM["enum"]),
            "reason": "another alternative at its position may take a string",
        }
    ]
    check(table)


@pytest.mark.parametrize("engine", ENGINES)
def test_array_items_are_fresh_passes(vocabs: dict[str, triec.Vocabulary], engine: str) -> None:
    """Every item of an array of codes enters the slot again; minItems and maxItems come from the engine."""
    vocab = vocabs["qwen2"]
    table = triec.compile_schema(PLACEMENTS["top_level_array"], vocab, engine=engine, threshold=THRESHOLD)
    ids = {b: i for i, b in enumerate(vocab.token_bytes) if b}
    m = table.matcher()
    text = b'["A00.1", "J45", "A00.1", "Z99.89"]'
    from triec.verify.schemas import _spell

    toks = _spell(vocab, text)
    assert m.accept_tokens(toks) == len(toks), text
    assert m.values == [(0, "A00.1"), (0, "J45"), (0, "A00.1"), (0, "Z99.89")]
    assert sorted(m.allowed().tolist()) == sorted(vocab.eos_token_ids)  # maxItems 4 reached, array closed
    m2 = table.matcher()
    assert m2.accept_tokens(_spell(vocab, b'["A01"')) == len(_spell(vocab, b'["A01"'))
    assert ids[b"]"] not in m2.allowed().tolist()  # minItems 2: not yet
    assert m2.accept_tokens(_spell(vocab, b', "a/b", "')) == len(_spell(vocab, b', "a/b", "'))
    assert m2.phase == "slot" and m2.st.visit == 3


# ---------------------------------------------------------------- tokens across every boundary


# ordinary pieces, between every single byte and the straddling tokens in the synthetic vocabulary
PIECES = [b'{"', b'":', b'": ', b', "', b'"]', b'"}', b"A0", b"C34"]


ENTERING = [b'": "A0', b'code": "C3', b', "code": "', b'["A', b'[""', b' "J45"', b': "say \\"']
LEAVING = [b'1", "n": ', b'9", "n', b'"]', b'"}', b'"}}', b'45"}}', b'9"]', b'"], "done": ', b'", "t": "us']
BETWEEN = [b'", "', b'", "A0', b'1", "J4', b'", ""']
SYNTHETIC = ENTERING + LEAVING + BETWEEN

SYNTHETIC_SCHEMAS = {
    "nested": PLACEMENTS["nested"],
    "arrays": obj(
        {"codes": {"type": "array", "items": ENUM, "minItems": 1, "maxItems": 3}, "done": {"type": "boolean"}}
    ),
    "two_enums": obj({"code": ENUM, "t": OTHER}),
}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", sorted(SYNTHETIC_SCHEMAS))
def test_synthetic_tokens_straddle_each_boundary(engine: str, name: str) -> None:
    vocab = synthetic_vocab(PIECES, SYNTHETIC)
    table = triec.compile_schema(SYNTHETIC_SCHEMAS[name], vocab, engine=engine, threshold=THRESHOLD)
    # xgrammar's mask omits a few long straddling tokens its own accept_token accepts (docs/verify.md)
    check(table, walks=25, narrower_ok=engine == "xgrammar")


def test_straddling_tokens_are_really_used(vocabs: dict[str, triec.Vocabulary]) -> None:
    """One decode through every kind of boundary with the long tokens, against the engine on the whole schema."""
    from triec.schema.grammar import driver

    vocab = synthetic_vocab(PIECES, SYNTHETIC)
    schema = SYNTHETIC_SCHEMAS["arrays"]
    table = triec.compile_schema(schema, vocab, threshold=THRESHOLD)
    ids = {b: i for i, b in enumerate(vocab.token_bytes) if b}
    drv = driver("llguidance", vocab)
    o = drv.start(drv.compile(schema))
    m = table.matcher()
    path = [
        b'{"',
        b"c",
        b"o",
        b"d",
        b"e",
        b"s",
        b'":',
        b" ",
        b'["A',
        b"0",
        b"0",
        b".",
        b'1", "J4',
        b"5",
        b'", "',
        b"a",
        b"/",
        b"b",
        b'"], "done": ',
        b"t",
        b"r",
        b"u",
        b"e",
        b"}",
    ]
    for piece in path:
        t = ids[piece]
        assert t in m.allowed().tolist(), piece
        assert m.accept_token(t) and drv.accept(o, t), piece
    assert m.values == [(0, "A00.1"), (0, "J45"), (0, "a/b")]
    eos = vocab.eos_token_ids[0]
    assert m.allowed().tolist() == [eos] and m.accept_token(eos) and m.is_terminated()
