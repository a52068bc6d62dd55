"""Tool-call schemas: {"name": <one of K names>, "arguments": ARGS}, exactly as the engines on the whole schema.

Oracles: llguidance (CI installs it) and xgrammar (skipped when missing), each
compiled on the whole schema in the same compact convention. Every trie state,
one step past every token leaving the trie part, every tail offset (a few keys)
and random walks to EOS are compared row by row (triec.check.schema_verify).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import triec
from triec.check.schema_verify import compare_schema
from triec.errors import TriecError
from triec.schema import straddle
from triec.schema.shape import SchemaShapeError

pytestmark = pytest.mark.engines

ENGINES = ["llguidance", pytest.param("xgrammar", marks=pytest.mark.skipif(
    __import__("importlib").util.find_spec("xgrammar") is None, reason="xgrammar not installed"))]

# quotes, backslashes, '/', non-ASCII, emoji, U+2028, the empty name, names that are prefixes of each other
NAMES = ["get_user", "get", "get_users", "get_user_by_id", 'say "hi"', "back\\slash", "a/b", "café",
         "日本語", "👩\u200d💻", "\u2028", "", "x"]

ARGS = {
    "object": {"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
               "required": ["query"], "additionalProperties": False},
    "string": {"type": "string"},
    "any": {},
    "free_object": {"type": "object"},
}


def tool_schema(names: list[str], args: dict, **extra: object) -> dict:
    return {"type": "object", "properties": {"name": {"type": "string", "enum": names}, "arguments": args},
            "required": ["name", "arguments"], **extra}


def greedy(vocab: triec.Vocabulary, text: bytes) -> list[int]:
    """Longest-match token ids spelling ``text`` (any spelling is a valid decode path)."""
    ids = {b: i for i, b in enumerate(vocab.token_bytes) if b}
    out, i = [], 0
    while i < len(text):
        n = max(n for n in range(1, len(text) - i + 1) if text[i : i + n] in ids)
        out.append(ids[text[i : i + n]])
        i += n
    return out


def check(table: triec.SchemaTable, schema: dict, walks: int = 8, narrower_ok: bool = False) -> None:
    r = compare_schema(table, schema, walks=walks, max_walk_steps=40, full_tail_leaves=1)
    assert r.mismatches == 0, r.examples
    assert narrower_ok or r.engine_narrower == 0, r.narrower_examples
    assert r.states_checked == table.num_states
    assert r.steps_past > 0 and r.tail_checked == table.tail_len - 1 and r.walk_steps > 0


@pytest.mark.parametrize("engine", ENGINES)
def test_exact_on_every_tokenizer(vocab: triec.Vocabulary, engine: str) -> None:
    schema = tool_schema(NAMES, ARGS["object"])
    check(triec.compile_schema(schema, vocab, engine=engine), schema)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("args", ["string", "any", "free_object"])
def test_exact_for_each_kind_of_arguments(vocabs: dict[str, triec.Vocabulary], engine: str, args: str) -> None:
    schema = tool_schema(NAMES[:8], ARGS[args])
    check(triec.compile_schema(schema, vocabs["gpt2"], engine=engine), schema)


def test_three_properties_and_refs(vocabs: dict[str, triec.Vocabulary]) -> None:
    schema = {"type": "object", "$defs": {"id": {"type": "integer"}},
              "properties": {"tool": {"enum": ["a", "ab"]}, "id": {"$ref": "#/$defs/id"}, "args": {"type": "boolean"}},
              "required": ["tool", "id", "args"], "additionalProperties": False}
    table = triec.compile_schema(schema, vocabs["gpt2"])
    assert table.tail == b', "id": '
    check(table, schema)


# ---------------------------------------------------------------- synthetic tokens


def synthetic_vocab(extra: list[bytes]) -> triec.Vocabulary:
    """Every single byte, some ordinary pieces, tokens that straddle, then EOS (b"")."""
    pieces = [bytes([b]) for b in range(256)] + [b'{"', b'name', b'":', b' "', b'ge', b't_', b'user', b'",', b'", "',
                                                  b'arguments', b'": ', b'{}', b'}}', b'"}'] + extra
    tokens = list(dict.fromkeys(pieces))
    return triec.Vocabulary(tokens + [b""], eos_token_ids=[len(tokens)], name="synthetic")


SYNTHETIC = [
    b', "arguments": ',  # the whole tail
    b'", "arguments": {',  # closes the name, spans the tail, enters the continuation
    b'er", "arg',  # starts inside the name
    b'get_user", "arguments": {}}',  # a whole output after the prefix
    b'{"name": "get", "arguments": {}}',  # a whole output
    b'{"name": "',  # the prefix
    b'guments": {"q": "',  # from inside the tail into a string of the continuation
    b'": {}}', b'"arguments": {}',  # tail offset > 0 into the continuation
    b'r"', b'\\""', b's", ',
]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("args", ["free_object", "string"])
def test_synthetic_straddling_tokens(engine: str, args: str) -> None:
    vocab = synthetic_vocab(SYNTHETIC)
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
        assert m.value == "get" and m.phase == "continuation"
        eos = vocab.eos_token_ids[0]
        assert list(m.allowed()) == [eos] and m.accept_token(eos) and m.is_terminated()


def _brute_straddles(vocab: triec.Vocabulary, table: triec.SchemaTable, schema: dict, engine: str):
    """The definition, literally: token t straddles at prefix p iff p + t = KEY(v) + r, r non-empty,
    r a prefix of TAIL or TAIL + x with x viable after KEY(v) + TAIL in the whole schema's engine."""
    from triec.schema.continuation import driver

    drv = driver(engine, vocab)
    whole = drv.compile(schema)
    keys = table.trie.value_bytes
    tail = table.tail

    def viable(key: bytes, rest: bytes) -> bool:
        m = drv.start(whole)
        return drv.feed(m, key + tail) and drv.feed(m, rest)

    per_state: dict[int, set[int]] = {}
    for s in range(table.num_states):
        p = table.trie.prefix(s)
        found = set()
        for t, b in enumerate(vocab.token_bytes):
            if not b:
                continue
            for key in keys:
                if key.startswith(p) and len(key) > len(p) and (p + b).startswith(key) and len(p + b) > len(key):
                    r = (p + b)[len(key):]
                    if tail.startswith(r) or (r.startswith(tail) and viable(key, r[len(tail):])):
                        found.add(t)
        per_state[s] = found
    per_offset = {}
    for i in range(len(tail)):
        found = set()
        for t, b in enumerate(vocab.token_bytes):
            if b and (tail[i:].startswith(b) or (b.startswith(tail[i:]) and len(b) > len(tail) - i and viable(keys[0], b[len(tail) - i:]))):
                found.add(t)
        per_offset[i] = found
    return per_state, per_offset


@pytest.mark.parametrize("engine", ENGINES)
def test_straddle_sets_equal_brute_force(engine: str) -> None:
    vocab = synthetic_vocab(SYNTHETIC)
    schema = tool_schema(["get", "get_user", "x\\"], ARGS["free_object"])
    table = triec.compile_schema(schema, vocab, engine=engine)
    per_state, per_offset = _brute_straddles(vocab, table, schema, engine)
    st = table.straddles
    leaves = set(table.trie.value_state.tolist())
    for s in range(table.num_states):
        if s in leaves:
            continue
        ours = set()
        for e in table.entries_at(s):
            r = int(table.entry_row[e])
            ours |= set(st.tokens[st.offsets[r]:st.offsets[r + 1]].tolist())
        assert ours == per_state[s], (s, table.trie.prefix(s))
    for i in range(table.tail_len):
        assert set(st.tokens[st.offsets[i]:st.offsets[i + 1]].tolist()) == per_offset[i], i
    assert any(per_state.values())


# ---------------------------------------------------------------- names and shapes


def test_control_characters_refused_for_llguidance_and_exact_under_xgrammar(vocabs: dict[str, triec.Vocabulary]) -> None:
    schema = tool_schema(["a\nb", "del\x7f", "tab\there"], ARGS["string"])
    with pytest.raises(SchemaShapeError, match="control character U\\+000A.*several spellings"):
        triec.compile_schema(schema, vocabs["gpt2"])
    pytest.importorskip("xgrammar")
    table = triec.compile_schema(schema, vocabs["gpt2"], engine="xgrammar")
    assert b'"del\\u007f"' in b"".join(table.trie.value_bytes)
    check(table, schema)


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ([1], "expected a JSON object"),
        ({"type": "object", "properties": {"name": {"enum": ["a"]}}, "required": ["name"]}, "at least one more property"),
        (tool_schema(["a"], {}) | {"required": ["name"]}, '"required" must list every property'),
        (tool_schema(["a"], {}) | {"additionalProperties": True}, '"additionalProperties" must be false'),
        (tool_schema(["a"], {}) | {"allOf": []}, "keyword 'allOf' is not supported"),
        (tool_schema(["a"], {}) | {"type": "array"}, '"type" must be "object"'),
        ({"type": "object", "properties": {"name": {"type": "string"}, "a": {}}, "required": ["name", "a"]}, 'must be a string "enum"'),
        ({"type": "object", "properties": {"name": {"enum": ["a"], "minLength": 2}, "a": {}}, "required": ["name", "a"]}, "'minLength' is not supported"),
        (tool_schema([1], {}), '"enum"\\[0\\] is int'),
        (tool_schema([], {}), "non-empty array"),
    ],
)
def test_refused_shapes(vocabs: dict[str, triec.Vocabulary], schema: object, message: str) -> None:
    with pytest.raises(SchemaShapeError, match=message):
        triec.compile_schema(schema, vocabs["gpt2"])  # type: ignore[arg-type]


# ---------------------------------------------------------------- matcher API


def test_matcher_api(vocabs: dict[str, triec.Vocabulary]) -> None:
    vocab = vocabs["qwen2"]
    schema = tool_schema(["get_user", "get_users", "send"], ARGS["object"])
    table = triec.compile_schema(schema, vocab)
    m = table.matcher()
    ids = {b: i for i, b in enumerate(vocab.token_bytes) if b}
    assert m.value is None and m.phase == "name"
    assert not m.accept_token(ids[b"x"]) and m.phase == "name"  # refused, no change
    assert m.accept_token(ids[b'{"']) and m.accept_token(ids[b"name"]) and m.accept_token(ids[b'":']) and m.accept_token(ids[b' "'])
    assert m.accept_token(ids[b"send"]) and m.value is None
    row = np.zeros(table.words_per_row, dtype=np.int32)
    m.fill_bitmask(row)
    assert ids[b'",'] in m.allowed() and not set(vocab.eos_token_ids) & set(m.allowed().tolist())
    assert m.accept_token(ids[b'",']) and m.value == "send" and m.phase == "tail"
    for piece in [b' "', b"arguments", b'":', b' {"']:
        assert m.accept_token(ids[piece]), piece
    assert m.phase == "continuation" and m.value == "send"
    writer = table.mask_writer(2)
    other = table.matcher()
    rows = writer.fill([m, other])
    full = np.zeros((2, table.words_per_row), dtype=np.int32)
    table.fill_bitmask([m, other], full)
    assert np.array_equal(rows, full)
    m.reset()
    assert m.value is None and m.phase == "name"
    assert np.array_equal(writer.fill([m, other]), np.stack([full[1], full[1]]))


def test_straddle_cache_round_trip(vocabs: dict[str, triec.Vocabulary], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRIEC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(straddle, "_MEMORY", {})
    schema = tool_schema(["a", "b"], ARGS["string"])
    stats = triec.CompileStats()
    first = triec.compile_schema(schema, vocabs["gpt2"], stats=stats)
    assert any("built" in k for k in stats.phases)
    files = list((tmp_path / "straddles").glob("*.npz"))
    assert len(files) == 1
    monkeypatch.setattr(straddle, "_MEMORY", {})
    stats = triec.CompileStats()
    second = triec.compile_schema(schema, vocabs["gpt2"], stats=stats)
    assert any("disk" in k for k in stats.phases)
    assert np.array_equal(first.straddles.tokens, second.straddles.tokens)
    files[0].write_bytes(files[0].read_bytes()[:-40])  # truncated: rebuilt, not trusted
    monkeypatch.setattr(straddle, "_MEMORY", {})
    stats = triec.CompileStats()
    triec.compile_schema(schema, vocabs["gpt2"], stats=stats)
    assert any("built" in k for k in stats.phases)


def test_other_engine_at_matcher_time(vocabs: dict[str, triec.Vocabulary]) -> None:
    pytest.importorskip("xgrammar")
    schema = tool_schema(["a", "ab"], ARGS["free_object"])
    table = triec.compile_schema(schema, vocabs["gpt2"])
    twin = table.with_engine("xgrammar")
    assert twin.engine == "xgrammar" and twin.trie is table.trie and table.engine == "llguidance"
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


# ---------------------------------------------------------------- artifact


def test_artifact_round_trip(vocabs: dict[str, triec.Vocabulary], tmp_path: Path) -> None:
    vocab = vocabs["gpt2"]
    schema = tool_schema(NAMES, ARGS["object"])
    table = triec.compile_schema(schema, vocab)
    path = tmp_path / "tools.triec"
    table.save(path)
    assert path.read_bytes() == (table.save(tmp_path / "again.triec") and (tmp_path / "again.triec").read_bytes())
    loaded = triec.load(path, verify=True)
    assert isinstance(loaded, triec.SchemaTable)
    assert loaded.header["format"] == "triec-schema"
    s = loaded.header["schema"]
    assert s["engine"] == "llguidance" and s["tail"] == ', "arguments": ' and s["prefix"] == '{"name": '
    assert json.loads(s["continuation"])["properties"]["arguments"] == ARGS["object"]
    assert s["convention"]["item_separator"] == ", " and s["continuation_sha256"].startswith("sha256:")
    assert loaded.names == table.names
    loaded.bind(vocab)
    check(loaded, schema)
    a, b = table.matcher(), loaded.matcher()
    for t in greedy(vocab, b'{"name": "get_user", "arguments": {"'):
        ra, rb = np.zeros(table.words_per_row, np.int32), np.zeros(table.words_per_row, np.int32)
        a.fill_bitmask(ra)
        b.fill_bitmask(rb)
        assert np.array_equal(ra, rb)
        assert a.accept_token(t) and b.accept_token(t), t
    assert b.value == "get_user" and b.phase == "continuation"
    unbound = triec.load(path)  # no bind: the recorded tokenizer name (bundled gpt2) is decoded on first use
    assert unbound.vocab is None
    c = unbound.matcher()
    assert np.array_equal(c.allowed(), table.matcher().allowed()) and unbound.vocab.fingerprint == vocab.fingerprint


def test_artifact_corrupt_schema_sections_refused(vocabs: dict[str, triec.Vocabulary], tmp_path: Path) -> None:
    table = triec.compile_schema(tool_schema(["a", "b"], ARGS["string"]), vocabs["gpt2"])
    path = tmp_path / "t.triec"
    table.save(path)
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0xFF  # last byte of the last section (head_bytes)
    path.write_bytes(bytes(raw))
    triec.load(path)  # layout still fine
    with pytest.raises(triec.ArtifactChecksumError, match="head_bytes"):
        triec.load(path, verify=True)


@pytest.mark.parametrize("engine", ENGINES)
def test_writer_rows_equal_full_rows_along_random_batches(vocabs: dict[str, triec.Vocabulary], engine: str) -> None:
    """The writer clears only what it set (and batches the engine's rows): after names, tails,
    continuations and resets, rows equal each matcher's full row."""
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


def test_hostile_schema_headers_refused(vocabs: dict[str, triec.Vocabulary], tmp_path: Path) -> None:
    import msgpack

    from triec.artifact.masks import encode_artifact

    table = triec.compile_schema(tool_schema(["a", "b"], ARGS["string"]), vocabs["gpt2"])
    raw = encode_artifact(table)

    def with_schema(**changes: object) -> Path:
        import struct
        import zlib

        _, version, head_len, _, _ = struct.unpack_from("<8sIIII", raw, 0)
        header = msgpack.unpackb(raw[24 : 24 + head_len], raw=False)
        header["schema"].update(changes)
        head = msgpack.packb(header, use_bin_type=True)
        assert len(head) <= ((24 + head_len + 63) // 64) * 64 - 24, "keep the header within its padding"
        data_start = ((24 + head_len + 63) // 64) * 64
        out = struct.pack("<8sIIII", raw[:8], version, len(head), zlib.crc32(head), 0) + head
        out += bytes(data_start - len(out)) + raw[data_start:]
        path = tmp_path / f"h{len(list(tmp_path.iterdir()))}.triec"
        path.write_bytes(out)
        return path

    cases = {
        "does not match the continuation's text": {"continuation_sha256": "sha256:" + "0" * 64},
        "expected llguidance or xgrammar": {"engine": "outlines"},
        "'num_straddle_rows'": {"num_heads": 0},
        "'tail' is empty": {"tail": ""},
        "'num_entries': expected an integer": {"num_entries": -1},
    }
    for message, change in cases.items():
        with pytest.raises(triec.ArtifactError, match=message):
            triec.load(with_schema(**change))


@pytest.mark.parametrize("engine", ENGINES)
def test_non_ascii_and_quoted_property_names(vocabs: dict[str, triec.Vocabulary], engine: str) -> None:
    schema = {"type": "object", "properties": {"wérkzeug": {"enum": ["a", "é"]}, 'ar"g/s': {"type": "integer"}},
              "required": ["wérkzeug", 'ar"g/s']}
    table = triec.compile_schema(schema, vocabs["qwen2"], engine=engine)
    assert table.prefix == '{"wérkzeug": '.encode() and table.tail == b', "ar\\"g/s": '
    check(table, schema)


def test_cached_heads_from_another_automaton_are_rebuilt(vocabs: dict[str, triec.Vocabulary], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRIEC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(straddle, "_MEMORY", {})
    schema = tool_schema(["a", "b"], ARGS["string"])
    first = triec.compile_schema(schema, vocabs["gpt2"])
    st = first.straddles
    key = next((tmp_path / "straddles").glob("*.npz")).name[len("v1-"):-len(".npz")]
    wrong = straddle.StraddleTable(**{**st.__dict__, "head_node": st.head_node + 1})
    straddle.save_cached(wrong, key)  # a valid file whose head ids do not fit this automaton
    monkeypatch.setattr(straddle, "_MEMORY", {})
    stats = triec.CompileStats()
    again = triec.compile_schema(schema, vocabs["gpt2"], stats=stats)
    assert any("built" in k for k in stats.phases)
    assert np.array_equal(again.entry_row, first.entry_row)


def test_fuzzed_schema_artifacts_load_cleanly_or_fail_with_artifact_error(vocabs: dict[str, triec.Vocabulary], tmp_path: Path) -> None:
    """Bit flips and truncations: triec.load(verify=True) raises ArtifactError or gives a table whose rows build."""
    import random

    from triec.artifact.masks import encode_artifact
    from triec.schema.rows import source_words

    raw = encode_artifact(triec.compile_schema(tool_schema(["get", "get_user", "x"], ARGS["string"]), vocabs["gpt2"]))
    rng = random.Random(13)
    path = tmp_path / "f.triec"
    loaded = 0
    for _ in range(300):
        data = bytearray(raw)
        if rng.random() < 0.2:
            data = data[: rng.randrange(len(data))]
        else:
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(data))
        try:
            table = triec.load(path, verify=True)
        except triec.ArtifactError:
            continue
        loaded += 1
        sw = source_words(table)
        assert sw.offsets[-1] == sw.words.shape[0]
    assert loaded < 300


def test_plain_load_checks_schema_indices(vocabs: dict[str, triec.Vocabulary], tmp_path: Path) -> None:
    """An out-of-range index in a schema section (CRC recomputed) is refused by a plain load."""
    import struct
    import zlib

    import msgpack

    from triec.artifact.masks import encode_artifact

    raw = bytearray(encode_artifact(triec.compile_schema(tool_schema(["a", "b"], ARGS["string"]), vocabs["gpt2"])))
    _, _, head_len, _, _ = struct.unpack_from("<8sIIII", raw, 0)
    header = msgpack.unpackb(bytes(raw[24 : 24 + head_len]), raw=False)
    data_start = ((24 + head_len + 63) // 64) * 64
    for name, value, message in [("entry_leaf", 0, "entry_leaf"), ("straddle_target", 99, "straddle_target"),
                                 ("entry_row", 0, "entry_row")]:
        data = bytearray(raw)
        sec = next(s for s in header["sections"] if s["name"] == name)
        struct.pack_into("<i", data, data_start + sec["offset"], value)
        h = dict(header, sections=[dict(s, crc32=zlib.crc32(bytes(data[data_start + s["offset"]: data_start + s["offset"] + s["length"]])))
                                   for s in header["sections"]])
        head = msgpack.packb(h, use_bin_type=True)
        assert len(head) == head_len
        data[24 : 24 + head_len] = head
        struct.pack_into("<I", data, 16, zlib.crc32(head))
        path = tmp_path / f"{name}.triec"
        path.write_bytes(bytes(data))
        with pytest.raises(triec.ArtifactContentError, match=message):
            triec.load(path)
