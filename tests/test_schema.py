"""Tool-call schemas: {"name": <one of K names>, "arguments": ARGS}, exactly as the engines on the whole schema.

The D19 shape is the special case of the slot machinery where a slot starts the
output: its keys hold the literal prefix, its tail the literal text up to the
arguments. Oracles: llguidance (CI installs it) and xgrammar (skipped when
missing), each compiled on the whole schema in the same compact convention.
Every trie state, one step past every token leaving the trie part, every tail
offset (a few keys) and random walks to EOS are compared row by row
(triec.verify.schemas).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from shared import ENGINES, synthetic_vocab

import triec
from triec.errors import TriecError
from triec.schema.shape import SchemaShapeError, parse_tool_schema
from triec.verify.schemas import compare_schema

pytestmark = pytest.mark.engines


# quotes, backslashes, '/', non-ASCII, emoji, U+2028, the empty name, names that are prefixes of each other
NAMES = [
    "get_user",
    "get",
    "get_users",
    "get_user_by_id",
    'say "hi"',
    "back\\slash",
    "a/b",
    "café",
    "日本語",
    "👩\u200d💻",
    "\u2028",
    "",
    "x",
]

ARGS = {
    "object": {
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["query"],
        "additionalProperties": False,
    },
    "string": {"type": "string"},
    "any": {},
    "free_object": {"type": "object"},
}


def tool_schema(names: list[str], args: dict, **extra: object) -> dict:
    return {
        "type": "object",
        "properties": {"name": {"type": "string", "enum": names}, "arguments": args},
        "required": ["name", "arguments"],
        **extra,
    }


def greedy(vocab: triec.Vocabulary, text: bytes) -> list[int]:
    """Longest-match token ids spelling ``text`` (any spelling is a valid decode path)."""
    ids = {b: i for i, b in enumerate(vocab.token_bytes) if b}
    out, i = [], 0
    while i < len(text):
        n = max(n for n in range(1, len(text) - i + 1) if text[i : i + n] in ids)
        out.append(ids[text[i : i + n]])
        i += n
    return out


def check(table: triec.SchemaTable, schema: dict | None = None, walks: int = 8, narrower_ok: bool = False) -> None:
    r = compare_schema(table, schema, walks=walks, max_walk_steps=40, full_tail_leaves=1)
    assert r.mismatches == 0, r.examples
    assert narrower_ok or r.engine_narrower == 0, r.narrower_examples
    assert r.slots_unreached == [] and r.states_checked == table.num_states
    assert r.steps_past > 0 and r.tail_checked == table.tail_len - 1 and r.walk_steps > 0


@pytest.mark.parametrize("engine", ENGINES)
def test_exact_on_every_tokenizer(vocab: triec.Vocabulary, engine: str) -> None:
    schema = tool_schema(NAMES, ARGS["object"])
    table = triec.compile_schema(schema, vocab, engine=engine)
    assert table.info["shape"] == "tool-call" and table.start_slot == 0 and len(table.slots) == 1
    check(table, schema)
    check(table)  # the default oracle: the table's own record of the whole schema


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("args", ["string", "any", "free_object"])
def test_exact_for_each_kind_of_arguments(vocabs: dict[str, triec.Vocabulary], engine: str, args: str) -> None:
    schema = tool_schema(NAMES[:8], ARGS[args])
    check(triec.compile_schema(schema, vocabs["gpt2"], engine=engine), schema)


def test_three_properties_and_refs(vocabs: dict[str, triec.Vocabulary]) -> None:
    schema = {
        "type": "object",
        "$defs": {"id": {"type": "integer"}},
        "properties": {"tool": {"enum": ["a", "ab"]}, "id": {"$ref": "#/$defs/id"}, "args": {"type": "boolean"}},
        "required": ["tool", "id", "args"],
        "additionalProperties": False,
    }
    table = triec.compile_schema(schema, vocabs["gpt2"])
    assert table.tail == b', "id": '
    check(table, schema)


# ---------------------------------------------------------------- synthetic tokens


# ordinary pieces, between every single byte and the straddling tokens in the synthetic vocabulary
PIECES = [b'{"', b"name", b'":', b' "', b"ge", b"t_", b"user"]  # the call's opening and the name's pieces
PIECES += [b'",', b'", "', b"arguments", b'": ', b"{}", b"}}", b'"}']  # the tail's and the arguments'


SYNTHETIC = [
    b', "arguments": ',  # the whole tail
    b'", "arguments": {',  # closes the name, spans the tail, enters the arguments
    b'er", "arg',  # starts inside the name
    b'get_user", "arguments": {}}',  # a whole output after the prefix
    b'{"name": "get", "arguments": {}}',  # a whole output
    b'{"name": "',  # the prefix
    b'guments": {"q": "',  # from inside the tail into a string of the arguments
    b'": {}}',
    b'"arguments": {}',  # tail offset > 0 into the arguments
    b'r"',
    b'\\""',
    b's", ',
]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("args", ["free_object", "string"])
def test_synthetic_straddling_tokens(engine: str, args: str) -> None:
    vocab = synthetic_vocab(PIECES, SYNTHETIC)
    schema = tool_schema(["get", "get_user", "get_users", 'q"s', "x\\"], ARGS[args])
    table = triec.compile_schema(schema, vocab, engine=engine)
    # xgrammar's mask omits a few long straddling tokens that its own accept_token accepts
    # (docs/verify.md); every other row must be equal
    check(table, schema, walks=20, narrower_ok=engine == "xgrammar")
    # the synthetic tokens are really used as straddles
    ids = {b: vocab.token_bytes.index(b) for b in SYNTHETIC}
    m = table.matcher()
    assert m.accept_token(ids[b'{"name": "get", "arguments": {}}']) == (args == "free_object")
    if args == "free_object":
        assert m.value == "get" and m.phase == "engine"
        eos = vocab.eos_token_ids[0]
        assert list(m.allowed()) == [eos] and m.accept_token(eos) and m.is_terminated()


def _brute_crossings(vocab: triec.Vocabulary, table: triec.SchemaTable, schema: dict, engine: str):
    """The definition, literally: token t crosses at prefix p iff p + t = KEY(v) + r, r non-empty,
    r a prefix of TAIL or TAIL + x with x viable after KEY(v) + TAIL in the whole schema's engine."""
    from triec.schema.grammar import driver

    drv = driver(engine, vocab)
    whole = drv.compile(schema)
    slot = table.slots[0]
    keys = slot.keys
    tail = table.tail

    def viable(key: bytes, rest: bytes) -> bool:
        m = drv.start(whole)
        return drv.feed(m, key + tail) and drv.feed(m, rest)

    per_state: dict[int, set[int]] = {}
    for s in range(slot.num_states):
        p = slot.trie.prefix(s)
        found = set()
        for t, b in enumerate(vocab.token_bytes):
            if not b:
                continue
            for key in keys:
                if key.startswith(p) and len(key) > len(p) and (p + b).startswith(key) and len(p + b) > len(key):
                    r = (p + b)[len(key) :]
                    if tail.startswith(r) or (r.startswith(tail) and viable(key, r[len(tail) :])):
                        found.add(t)
        per_state[s] = found
    per_offset = {}
    for i in range(len(tail)):
        found = set()
        for t, b in enumerate(vocab.token_bytes):
            if b and (
                tail[i:].startswith(b)
                or (b.startswith(tail[i:]) and len(b) > len(tail) - i and viable(keys[0], b[len(tail) - i :]))
            ):
                found.add(t)
        per_offset[i] = found
    return per_state, per_offset


@pytest.mark.parametrize("engine", ENGINES)
def test_crossing_sets_equal_brute_force(engine: str) -> None:
    """Each trie state's row minus the trie's own tokens, and each tail offset's row, are exactly the
    crossing tokens the definition gives (what the D19 straddle tables held; now the slot's groups,
    those reading past the tail judged by the engine)."""
    vocab = synthetic_vocab(PIECES, SYNTHETIC)
    schema = tool_schema(["get", "get_user", "x\\"], ARGS["free_object"])
    table = triec.compile_schema(schema, vocab, engine=engine)
    per_state, per_offset = _brute_crossings(vocab, table, schema, engine)
    slot = table.slots[0]
    leaves = set(slot.trie.value_state.tolist())
    for s in range(slot.num_states):
        if s in leaves:
            continue
        m = table.matcher()
        for t in greedy(vocab, slot.trie.prefix(s)):
            assert m.accept_token(t)
        assert m.phase == "slot" and m.st.pos == s
        ours = set(m.allowed().tolist()) - set(slot.trie.allowed(s).tolist())
        assert ours == per_state[s], (s, slot.trie.prefix(s))
    key = slot.keys[0]
    for i in range(table.tail_len):
        m = table.matcher()
        for t in greedy(vocab, key) + [vocab.token_bytes.index(bytes([c])) for c in table.tail[:i]]:
            assert m.accept_token(t)
        assert m.phase == "tail" and m.st.pos == i
        assert set(m.allowed().tolist()) == per_offset[i], i
    assert any(per_state.values())


# ---------------------------------------------------------------- names and shapes


def test_control_characters_refused_for_llguidance_and_exact_under_xgrammar(
    vocabs: dict[str, triec.Vocabulary],
) -> None:
    schema = tool_schema(["a\nb", "del\x7f", "tab\there"], ARGS["string"])
    with pytest.raises(SchemaShapeError, match="control character.*several ways"):
        triec.compile_schema(schema, vocabs["gpt2"])
    with pytest.raises(SchemaShapeError, match="control character U\\+000A.*several spellings"):
        parse_tool_schema(schema)
    pytest.importorskip("xgrammar")
    table = triec.compile_schema(schema, vocabs["gpt2"], engine="xgrammar")
    assert b'"del\\u007f"' in b"".join(table.trie.value_bytes)
    check(table, schema)
    with pytest.raises(TriecError, match="slot 0: a value holds a control character.*xgrammar"):
        table.with_engine("llguidance")  # it would also take \u000a for \n: not served loosely
    plain = triec.compile_schema(
        tool_schema(["back\\nslash", "tab\\\\t"], ARGS["string"]), vocabs["gpt2"], engine="xgrammar"
    )  # a backslash and a letter: no control character
    assert plain.with_engine("llguidance").engine == "llguidance"


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ([1], "expected a JSON object"),
        (
            {"type": "object", "properties": {"name": {"enum": ["a"]}}, "required": ["name"]},
            "at least one more property",
        ),
        (tool_schema(["a"], {}) | {"required": ["name"]}, '"required" must list every property'),
        (tool_schema(["a"], {}) | {"additionalProperties": True}, '"additionalProperties" must be false'),
        (tool_schema(["a"], {}) | {"allOf": []}, "keyword 'allOf' is not supported"),
        (tool_schema(["a"], {}) | {"type": "array"}, '"type" must be "object"'),
        (
            {"type": "object", "properties": {"name": {"type": "string"}, "a": {}}, "required": ["name", "a"]},
            'must be a string "enum"',
        ),
        (
            {
                "type": "object",
                "properties": {"name": {"enum": ["a"], "minLength": 2}, "a": {}},
                "required": ["name", "a"],
            },
            "'minLength' is not supported",
        ),
        (tool_schema([1], {}), '"enum"\\[0\\] is int'),
        (tool_schema([], {}), "non-empty array"),
    ],
)
def test_shapes_that_are_not_a_tool_call(vocabs: dict[str, triec.Vocabulary], schema: object, message: str) -> None:
    """Not the tool-call shape (parse_tool_schema says why); with a small enum nothing is left for a trie
    (one line naming each enum's reason or the threshold), while a large enum in the same places is served
    by an entered slot (tests/test_schema_placements.py)."""
    with pytest.raises(SchemaShapeError, match=message):
        parse_tool_schema(schema)
    with pytest.raises(SchemaShapeError, match="nothing for a trie to serve|expected a JSON object"):
        triec.compile_schema(schema, vocabs["gpt2"])  # type: ignore[arg-type]


def test_a_shape_once_refused_is_served_when_its_enum_is_large(vocabs: dict[str, triec.Vocabulary]) -> None:
    """An optional property after the name (D19 refused it: the text after the name is not literal) is now an
    entered slot in the engine's structure, exactly as the engine on the whole schema."""
    names = [f"tool_{i}" for i in range(12)] + ['q"s']
    schema = tool_schema(names, ARGS["string"]) | {"required": ["name"]}
    table = triec.compile_schema(schema, vocabs["gpt2"], threshold=8)
    assert table.info["shape"] == "schema" and table.start_grammar == 0 and table.slots[0].enter_state == 0
    r = compare_schema(table, walks=10, max_walk_steps=40)
    assert r.mismatches == 0 and r.slots_unreached == [] and r.states_checked == table.num_states, r.examples


# ---------------------------------------------------------------- matcher API


def test_matcher_api(vocabs: dict[str, triec.Vocabulary]) -> None:
    vocab = vocabs["qwen2"]
    schema = tool_schema(["get_user", "get_users", "send"], ARGS["object"])
    table = triec.compile_schema(schema, vocab)
    m = table.matcher()
    ids = {b: i for i, b in enumerate(vocab.token_bytes) if b}
    assert m.value is None and m.phase == "slot"
    assert not m.accept_token(ids[b"x"]) and m.phase == "slot"  # refused, no change
    assert (
        m.accept_token(ids[b'{"'])
        and m.accept_token(ids[b"name"])
        and m.accept_token(ids[b'":'])
        and m.accept_token(ids[b' "'])
    )
    assert m.accept_token(ids[b"send"]) and m.value is None
    row = np.zeros(table.words_per_row, dtype=np.int32)
    m.fill_bitmask(row)
    assert ids[b'",'] in m.allowed() and not set(vocab.eos_token_ids) & set(m.allowed().tolist())
    assert m.static_source() is not None  # a slot row: precomputed, no engine
    assert m.accept_token(ids[b'",']) and m.value == "send" and m.phase == "tail"
    assert m.values == [(0, "send")] and m.value_index == table.names.index("send")
    for piece in [b' "', b"arguments", b'":', b' {"']:
        assert m.accept_token(ids[piece]), piece
    assert m.phase == "engine" and m.value == "send" and m.static_source() is None
    writer = table.mask_writer(2)
    other = table.matcher()
    rows = writer.fill([m, other])
    full = np.zeros((2, table.words_per_row), dtype=np.int32)
    table.fill_bitmask([m, other], full)
    assert np.array_equal(rows, full)
    n = m.num_accepted
    m.rollback(4)  # back into the tail
    assert m.phase == "tail" and m.num_accepted == n - 4
    m.reset()
    assert m.value is None and m.phase == "slot"
    assert np.array_equal(writer.fill([m, other]), np.stack([full[1], full[1]]))
    assert m.jump_forward() == b'{"name": "'  # forced text up to the first byte that differs between names
    with pytest.raises(ValueError, match="cannot roll back"):
        m.rollback(1)


def test_grammar_cache_replaces_the_straddle_cache(
    vocabs: dict[str, triec.Vocabulary], monkeypatch: pytest.MonkeyPatch
) -> None:
    """D19 cached its straddle tables on disk; the crossing tokens are now classified per slot at compile
    time and the engine work lives in caches in memory: each driver compiles a grammar once (least recently
    used out past ``TRIEC_GRAMMAR_CACHE``), a table makes each grammar's template once, and the rows judged
    after a value are cached on the table (bounded by ``row_cache_size``)."""
    from triec.schema.grammar import GrammarSpec, driver

    vocab = vocabs["gpt2"]
    drv = driver("llguidance", vocab)
    assert driver("llguidance", vocab) is drv  # one driver per (engine, vocabulary) in a process
    monkeypatch.setattr(drv, "cache_size", 2)
    monkeypatch.setattr(drv, "_grammars", type(drv._grammars)())
    before = drv.compiles
    specs = [GrammarSpec(json.dumps({"type": "string", "maxLength": n})) for n in (1, 2, 3)]
    for spec in specs + specs[2:]:
        drv.compile_spec(spec)
    assert drv.compiles == before + 3 and drv.cached_grammars() == 2  # the repeat was a hit; the first was evicted
    drv.compile_spec(specs[0])
    assert drv.compiles == before + 4
    schema = tool_schema(["a", "b"], ARGS["free_object"])
    table = triec.compile_schema(schema, vocab)
    assert not table.is_compiled(0)
    m = table.matcher()
    for t in greedy(vocab, b'{"name": "a", "arguments": {"'):
        assert m.accept_token(t)
    assert table.is_compiled(0)
    # tokens reading past the tail (here '", "arguments": {') are judged once per (group, grammar) and cached
    syn = synthetic_vocab(PIECES, SYNTHETIC)
    small = triec.compile_schema(tool_schema(["get", "x"], ARGS["free_object"]), syn)

    def visit() -> None:
        for text in (b'{"name": "get', b'{"name": "x'):
            m = small.matcher()
            assert m.accept_tokens(greedy(syn, text)) == len(greedy(syn, text))
            m.allowed()

    visit()
    assert len(small.row_cache) >= 2
    small.row_cache.clear()
    small.row_cache_size = 1
    visit()
    assert len(small.row_cache) == 1


def test_other_engine_at_matcher_time(vocabs: dict[str, triec.Vocabulary]) -> None:
    pytest.importorskip("xgrammar")
    schema = tool_schema(["a", "ab"], ARGS["free_object"])
    table = triec.compile_schema(schema, vocabs["gpt2"])
    twin = table.with_engine("xgrammar")
    assert twin.engine == "xgrammar" and twin.trie is table.trie and table.engine == "llguidance"
    assert twin.slots is table.slots  # the slots do not depend on the engine: tokens past a tail are judged per engine
    assert table.matcher("xgrammar").table is twin
    check(twin, schema)
    with pytest.raises(TriecError, match="unknown continuation engine"):
        table.matcher("nope")


def test_schema_json_round_trip_of_names(vocabs: dict[str, triec.Vocabulary]) -> None:
    table = triec.compile_schema(json.dumps(tool_schema(NAMES, {})), vocabs["gpt2"])  # JSON text works too
    with pytest.raises(SchemaShapeError, match="not valid JSON"):
        triec.compile_schema("{", vocabs["gpt2"])
    assert sorted(table.names) == sorted(NAMES)
    n = len(table.prefix)
    assert [json.loads(k[n:]) for k in table.trie.value_bytes] == table.names


@pytest.mark.parametrize("engine", ENGINES)
def test_writer_rows_equal_full_rows_along_random_batches(vocabs: dict[str, triec.Vocabulary], engine: str) -> None:
    """The writer clears only what it set (and batches the engine's rows): after names, tails,
    arguments and resets, rows equal each matcher's full row."""
    import random

    vocab = vocabs["gpt2"]
    table = triec.compile_schema(tool_schema(NAMES, ARGS["string"]), vocab, engine=engine)
    rng = random.Random(3)
    matchers = [table.matcher() for _ in range(4)]
    writer = table.mask_writer(4)
    full = np.zeros((4, table.words_per_row), dtype=np.int32)
    for step in range(120):
        n = rng.randint(1, 4)
        batch = rng.sample(matchers, n)  # rows change owners between fills
        rows = writer.fill(batch)
        table.fill_bitmask(batch, full)
        assert np.array_equal(rows, full[:n]), step
        for m in batch:
            if m.is_terminated() or rng.random() < 0.05:
                m.reset()
                continue
            ids = m.allowed()
            assert m.accept_token(int(rng.choice(ids.tolist())))


@pytest.mark.parametrize("engine", ENGINES)
def test_non_ascii_and_quoted_property_names(vocabs: dict[str, triec.Vocabulary], engine: str) -> None:
    schema = {
        "type": "object",
        "properties": {"wérkzeug": {"enum": ["a", "é"]}, 'ar"g/s': {"type": "integer"}},
        "required": ["wérkzeug", 'ar"g/s'],
    }
    table = triec.compile_schema(schema, vocabs["qwen2"], engine=engine)
    assert table.prefix == '{"wérkzeug": '.encode() and table.tail == b', "ar\\"g/s": '
    check(table, schema)


DATE = {"type": "string", "format": "date"}
WRONG_TYPES = [
    ({"type": "string", "pattern": 123}, "pattern", "/properties/p/pattern", "a string"),
    ({"type": "string", "format": 5}, "format", "/properties/p/format", "a string"),
    ({"type": "string", "pattern": None}, "pattern", "/properties/p/pattern", "found null"),
    ({"enum": "abc"}, "enum", "/properties/p/enum", "an array"),
    ({"type": 7}, "type", "/properties/p/type", "a string or an array of strings"),
    ({"type": "string", "minLength": -1}, "minLength", "/properties/p/minLength", "a non-negative integer"),
    ({"type": "object", "properties": []}, "properties", "/properties/p/properties", "an object of schemas"),
    ({"type": "object", "properties": {"q": 3}}, "properties", "/properties/p/properties/q", "a schema"),
    ({"type": "array", "items": "x"}, "items", "/properties/p/items", "a schema"),
    ({"anyOf": {"type": "string"}}, "anyOf", "/properties/p/anyOf", "an array of schemas"),
    ({"type": "object", "required": "q"}, "required", "/properties/p/required", "an array of strings"),
]


@pytest.mark.parametrize(("field", "keyword", "pointer", "expected"), WRONG_TYPES)
def test_a_keyword_of_the_wrong_type_is_refused_naming_it(
    vocabs: dict[str, triec.Vocabulary], field: dict, keyword: str, pointer: str, expected: str
) -> None:
    """Issue 49: ``"pattern": 123`` beside a date field compiled (the field silently the engine's), ``"format": 5``
    was refused for ``required`` and ``"pattern": null`` for a missing ``enum``. Each wrong type is now refused as
    itself, with the keyword and its JSON pointer, by every door a schema comes in."""
    schema = {"type": "object", "properties": {"day": DATE, "p": field}, "required": ["day", "p"]}
    with pytest.raises(SchemaShapeError, match=f"keyword '{keyword}' at {pointer} must be .*") as info:
        triec.compile_schema(schema, vocabs["gpt2"], engine="xgrammar")
    assert expected in str(info.value)
    with pytest.raises(SchemaShapeError, match=f"'{keyword}' at {pointer} "):
        triec.compile_schema(schema, vocabs["gpt2"], engine="llguidance")


def test_a_string_schema_of_the_wrong_type_is_refused_naming_it(vocabs: dict[str, triec.Vocabulary]) -> None:
    for schema, keyword in (
        ({"type": "string", "pattern": None}, "pattern"),
        ({"type": "string", "format": 5}, "format"),
        ({"type": "string", "pattern": ["a"]}, "pattern"),
    ):
        with pytest.raises(SchemaShapeError, match=f"keyword '{keyword}' at /{keyword} must be a string"):
            triec.compile_string_schema(schema, vocabs["gpt2"])


def test_keywords_of_the_right_type_pass_and_values_are_not_looked_into() -> None:
    """The check reads keywords where schemas stand, not inside values, names or unknown keywords."""
    from triec.compiler.schema_keywords import check_keywords

    check_keywords(
        {
            "type": ["object", "null"],
            "properties": {"pattern": {"type": "string", "minLength": 2.0}, "format": True},
            "required": ["pattern"],
            "enum": [{"pattern": 1}],
            "const": {"format": 5},
            "examples": [{"type": 3}],
            "x-vendor": {"pattern": 1},
            "items": [{"type": "string"}],
            "$defs": {"d": {"anyOf": [{"format": "date"}, False]}},
        }
    )
