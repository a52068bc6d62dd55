"""Schema artifacts on disk: the version-3 layout (slots and grammars), the first layout (D19, read only), golden
files of both, and hostile input (every index checked at load, contents with verify=True, fuzzed files).

fixtures/golden/schemas.json lists the golden schema artifacts: version-3 files that this triec writes byte for
byte again, and files of the first layout that it must keep loading, serving and verifying (docs/format.md).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from shared import ENGINES, needs_xgrammar

import triec
from triec.artifact import container
from triec.artifact.masks import encode_artifact
from triec.schema.artifact.layout import GRAMMAR_KINDS, SLOT_FIELDS
from triec.schema.artifact.legacy import ConvertedSchemaTable
from triec.schema.artifact.load import load_schema_artifact
from triec.verify.schemas import compare_schema

pytestmark = pytest.mark.engines

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "fixtures" / "golden"
MANIFEST = json.loads((GOLDEN / "schemas.json").read_text(encoding="utf-8"))
HAS_XGRAMMAR = __import__("importlib").util.find_spec("xgrammar") is not None


def artifact_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    if path.name.endswith(".zst"):
        import zstandard

        data = zstandard.ZstdDecompressor().decompress(data)
    return data


def schema_of(entry: dict[str, Any]) -> dict[str, Any]:
    return json.loads((GOLDEN / entry["schema"]).read_text(encoding="utf-8"))


def exact(table: triec.SchemaTable, schema: dict | None = None, walks: int = 6) -> None:
    r = compare_schema(table, schema, walks=walks, max_walk_steps=50, full_tail_leaves=1)
    assert r.mismatches == 0, r.examples
    assert r.engine_narrower == 0 and r.slots_unreached == [] and r.states_checked == table.num_states


def walk_alike(a_table: Any, b_table: Any, rng: random.Random, walks: int, steps: int) -> None:
    """Random walks fed to both tables' matchers at once: equal rows at every step, the same values chosen."""
    for _ in range(walks):
        a, b = a_table.matcher(), b_table.matcher()
        for _ in range(steps):
            ra, rb = a.allowed(), b.allowed()
            assert np.array_equal(ra, rb)
            t = int(rng.choice(ra.tolist()))
            assert a.accept_token(t) and b.accept_token(t)
            if a.is_terminated():
                break
        assert a.values == b.values


def decode(data: bytes) -> tuple[dict[str, Any], dict[str, np.ndarray], int]:
    """An artifact's header (without its section table), a copy of every section, and the format version."""
    header, data_start, version = container.read_header(data, "x")
    arrays = {}
    for sec in header.pop("sections"):
        start = data_start + sec["offset"]
        arrays[sec["name"]] = np.frombuffer(data, dtype=np.dtype(sec["dtype"]), count=sec["count"], offset=start).copy()
    return header, arrays, version


def encode(header: dict[str, Any], arrays: dict[str, np.ndarray], version: int) -> bytes:
    """Bytes again, every offset and CRC recomputed (so only the content rule under test is broken)."""
    return container.encode(dict(header), [(n, a.dtype.str, a) for n, a in arrays.items()], version)


@pytest.fixture(scope="module")
def extraction(vocabs: dict[str, triec.Vocabulary]) -> tuple[triec.SchemaTable, bytes]:
    entry = MANIFEST["schema"][0]
    table = triec.compile_schema(schema_of(entry), vocabs["gpt2"], engine=entry["engine"], threshold=entry["threshold"])
    return table, encode_artifact(table)


# ---------------------------------------------------------------- golden files


@pytest.mark.parametrize("entry", MANIFEST["schema"], ids=lambda e: e["artifact"])
def test_golden_schema_artifacts_recompile_byte_for_byte(
    entry: dict[str, Any], vocabs: dict[str, triec.Vocabulary]
) -> None:
    if entry["engine"] == "xgrammar" and not HAS_XGRAMMAR:
        pytest.skip("xgrammar not installed")
    golden = artifact_bytes(GOLDEN / entry["artifact"])
    table = triec.compile_schema(
        schema_of(entry), vocabs[entry["tokenizer"]], engine=entry["engine"], threshold=entry["threshold"]
    )
    table.engine_version = decode(golden)[0]["schema"]["engine_version"] or None  # the installed one may differ
    assert encode_artifact(table) == golden, "schema artifact bytes changed: see fixtures/golden/README.md"
    assert struct_version(golden) == 3


def struct_version(data: bytes) -> int:
    return int.from_bytes(data[8:12], "little")


@pytest.mark.parametrize("entry", MANIFEST["schema"], ids=lambda e: e["artifact"])
def test_golden_schema_artifacts_load_serve_and_verify(
    entry: dict[str, Any], vocabs: dict[str, triec.Vocabulary]
) -> None:
    if entry["engine"] == "xgrammar" and not HAS_XGRAMMAR:
        pytest.skip("xgrammar not installed")
    table = triec.load(GOLDEN / entry["artifact"], verify=True, expect_fingerprint=vocabs["gpt2"].fingerprint)
    assert isinstance(table, triec.SchemaTable) and not isinstance(table, ConvertedSchemaTable)
    assert table.info["schema"] == json.dumps(schema_of(entry), ensure_ascii=False, separators=(",", ":"))
    exact(table)
    readme = (GOLDEN / "README.md").read_text(encoding="utf-8")
    assert (
        entry["artifact"] in readme
        and __import__("hashlib").sha256(artifact_bytes(GOLDEN / entry["artifact"])).hexdigest() in readme
    )


@pytest.mark.parametrize("entry", MANIFEST["tools"], ids=lambda e: e["artifact"])
def test_golden_registry_recompiles_and_verifies(entry: dict[str, Any], vocabs: dict[str, triec.Vocabulary]) -> None:
    """A tool registry's table: every grammar's spec recorded (made for the file, compiled only when picked)."""
    from triec.schema.compile import compile_tools

    tools = json.loads((GOLDEN / entry["tools"]).read_text(encoding="utf-8"))
    golden = artifact_bytes(GOLDEN / entry["artifact"])
    table = compile_tools(
        tools, vocabs[entry["tokenizer"]], format=entry["format"], engine=entry["engine"], parallel=entry["parallel"]
    )
    table.engine_version = decode(golden)[0]["schema"]["engine_version"] or None
    assert encode_artifact(table) == golden, "schema artifact bytes changed: see fixtures/golden/README.md"
    loaded = triec.load(GOLDEN / entry["artifact"], verify=True)
    assert loaded.info["shape"] == "tools" and len(loaded.grammars) == len(tools)
    assert not any(loaded.is_compiled(g) for g in range(len(loaded.grammars)))
    exact(loaded)  # the registered oracle: the engine on the whole format over every tool


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("entry", MANIFEST["legacy"], ids=lambda e: e["artifact"])
def test_first_layout_files_load_serve_and_verify(entry: dict[str, Any], engine: str) -> None:
    """D19 files: one start slot (the recorded tail) and one grammar (the continuation with the placeholder name);
    exact against the recorded engine and, with the crossing tokens judged again, against the other."""
    path = GOLDEN / entry["artifact"]
    assert struct_version(path.read_bytes()) == 1
    table = triec.load(path, verify=True)
    assert isinstance(table, ConvertedSchemaTable) and table.info["legacy_format"] == 1
    schema = schema_of(entry)
    names = schema["properties"][next(iter(schema["properties"]))]["enum"]
    assert sorted(table.names) == sorted(names) and table.start_slot == 0 and len(table.grammars) == 1
    slot = table.slots[0]
    assert slot.value_grammar is not None and not slot.value_grammar.any() and slot.enters.num_groups == 0
    g = table.grammars[0]
    assert g.template == table.prefix + b'""' + table.tail and g.slots == ()
    twin = table.with_engine(engine)
    if engine != entry["engine"]:
        assert twin.slots[0].trie is slot.trie and twin.slots[0].exits.labels == slot.exits.labels
        assert (twin.slots[0].tails.kind == 3).any()  # reading past the tail: judged by this engine
    exact(twin, schema)
    exact(twin)  # the default oracle: the recorded continuation with every name
    readme = (GOLDEN / "README.md").read_text(encoding="utf-8")
    assert __import__("hashlib").sha256(path.read_bytes()).hexdigest() in readme


def test_first_layout_serves_what_a_fresh_compile_serves(vocabs: dict[str, triec.Vocabulary]) -> None:
    """Row by row along random walks, a converted D19 file and the same schema compiled now answer alike."""
    entry = MANIFEST["legacy"][0]
    old = triec.load(GOLDEN / entry["artifact"])
    new = triec.compile_schema(schema_of(entry), vocabs["gpt2"], engine=entry["engine"])
    walk_alike(old, new, random.Random(5), walks=10, steps=40)


def test_a_converted_table_saved_again_is_version_3_and_still_converted(tmp_path: Path) -> None:
    entry = MANIFEST["legacy"][0]
    old = triec.load(GOLDEN / entry["artifact"])
    old.save(tmp_path / "again.triec")
    again = triec.load(tmp_path / "again.triec", verify=True)
    assert struct_version((tmp_path / "again.triec").read_bytes()) == 3
    assert isinstance(again, ConvertedSchemaTable) and again.info == old.info
    m1, m2 = old.matcher(), again.matcher()
    assert np.array_equal(m1.allowed(), m2.allowed())


def test_the_loader_imports_no_engine(tmp_path: Path) -> None:
    code = (
        f"import sys, triec\nt = triec.load({str(GOLDEN / MANIFEST['schema'][0]['artifact'])!r}, verify=True)\n"
        "print(sorted(m for m in ('llguidance', 'xgrammar', 'torch') if m in sys.modules))\n"
        "t.matcher()\nprint('llguidance' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)},
    ).stdout.split()
    assert out == ["[]", "True"]


# ---------------------------------------------------------------- version 3


def test_round_trip_is_byte_stable_and_answers_alike(
    extraction: tuple[triec.SchemaTable, bytes], tmp_path: Path, vocabs: dict[str, triec.Vocabulary]
) -> None:
    table, raw = extraction
    path = tmp_path / "t.triec"
    table.save(path)
    assert path.read_bytes() == raw
    loaded = triec.load(path, verify=True)
    loaded.save(tmp_path / "u.triec")
    assert (tmp_path / "u.triec").read_bytes() == raw
    h = loaded.header["schema"]
    assert loaded.header["format"] == "triec-schema" and h["num_slots"] == len(table.slots) == 2
    assert h["num_grammars"] == 1 and h["start_grammar"] == 0 and h["start_slot"] == -1
    assert len(raw) - len(h) < 1 << 20 and len(container.read_header(raw, "x")[0].__repr__()) < 4096  # totals only
    assert all(s.tails is None for s in loaded.slots)  # a tail's groups are not in the file
    loaded.bind(table.vocab)  # they are derived from the vocabulary, equal to the compile's
    for a, b in zip(table.slots, loaded.slots, strict=True):
        assert a.keys == b.keys and a.tail == b.tail and a.marker == b.marker and a.enter_state == b.enter_state
        assert a.open == b.open == 0x22
        for ga, gb in ((a.exits, b.exits), (a.tails, b.tails), (a.enters, b.enters)):
            assert ga.labels == gb.labels and np.array_equal(ga.tokens, gb.tokens) and np.array_equal(ga.rest, gb.rest)
        assert np.array_equal(a.words.words, b.words.words)
    assert [g.spec for g in loaded.grammars] == [g.spec for g in table.grammars]
    assert loaded.grammars[0].slots == table.grammars[0].slots and loaded.info == table.info
    rng = random.Random(2)
    loaded.bind(vocabs["gpt2"])
    walk_alike(table, loaded, rng, walks=6, steps=60)


@needs_xgrammar
def test_grammar_kinds_and_whitespace_round_trip(vocabs: dict[str, triec.Vocabulary], tmp_path: Path) -> None:
    """A structural tag's grammars and flexible-whitespace JSON come back as they were written, and serve alike."""
    from triec.schema.compile import compile_structural_tag

    vocab = vocabs["gpt2"]
    entry = MANIFEST["schema"][0]
    flexible = triec.compile_schema(
        schema_of(entry), vocab, engine="xgrammar", threshold=entry["threshold"], whitespace="any"
    )
    tools = json.loads((GOLDEN / MANIFEST["tools"][0]["tools"]).read_text(encoding="utf-8"))
    tag = {
        "type": "structural_tag",
        "format": {
            "type": "tags_with_separator",
            "separator": "\n",
            "at_least_one": True,
            "stop_after_first": False,
            "tags": [
                {
                    "type": "tag",
                    "begin": f'<tool_call>\n{{"name": {json.dumps(t["function"]["name"])}, "arguments": ',
                    "end": "}\n</tool_call>",
                    "content": {
                        "type": "json_schema",
                        "json_schema": t["function"].get("parameters", {"type": "object"}),
                    },
                }
                for t in tools
                if "function" in t
            ],
        },
    }
    tagged = compile_structural_tag(tag, vocab)
    for table in (flexible, tagged):
        table.save(tmp_path / "t.triec")
        back = triec.load(tmp_path / "t.triec", verify=True)
        assert [g.spec for g in back.grammars] == [g.spec for g in table.grammars]
        assert [x.open for x in back.slots] == [x.open for x in table.slots]
        assert {g.spec.kind for g in back.grammars} | {g.spec.whitespace for g in back.grammars} >= (
            {"any"} if table is flexible else {"structural_tag"}
        )
        back.bind(vocab)
        walk_alike(table, back, random.Random(4), walks=4, steps=30)


def test_registry_sized_header_stays_small(vocabs: dict[str, triec.Vocabulary]) -> None:
    """Counts per slot and per grammar live in sections: 3,000 grammars keep the header a few hundred bytes."""
    from triec.schema.grammar import GrammarSpec
    from triec.schema.table import Grammar, SchemaTable

    base = triec.compile_schema(
        {"type": "object", "properties": {"n": {"enum": ["a", "b"]}, "x": {}}, "required": ["n", "x"]}, vocabs["gpt2"]
    )
    grammars = [
        Grammar(GrammarSpec(json.dumps({"type": "integer", "maximum": i}), ("}",)), b"{", ()) for i in range(3000)
    ]
    slot = base.slots[0]
    slot.value_grammar = np.array([0, 2999], dtype=np.int32)
    big = SchemaTable(
        slots=[slot],
        grammars=grammars,
        start_slot=0,
        engine="llguidance",
        engine_version=None,
        convention=base.convention,
        info={"shape": "test", "prefix": base.info["prefix"]},  # the start slot's keys begin with it
    )
    raw = encode_artifact(big)
    header, _, _ = container.read_header(raw, "x")
    assert int.from_bytes(raw[12:16], "little") < 4096 and header["schema"]["num_grammars"] == 3000
    back = triec.artifact.masks.parse_artifact(raw, "x")
    loaded = load_schema_artifact(back["header"], back["arrays"], "x", verify=True)
    assert [g.spec for g in loaded.grammars] == [g.spec for g in grammars] and loaded.grammars[7].template == b"{"
    assert loaded.slots[0].value_grammar.tolist() == [0, 2999]


# ---------------------------------------------------------------- hostile input


def write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / f"h{len(list(tmp_path.iterdir()))}.triec"
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: s.update(engine="outlines"), "'engine': expected llguidance or xgrammar"),
        (lambda s: s.update(engine_version=3), "'engine_version': expected a string"),
        (lambda s: s.update(convention=[]), "'convention': expected {"),
        (lambda s: s["convention"].update(property_order=2**32), "'convention': expected {"),
        (lambda s: s.update(num_slots=0), "'num_slots'"),
        (lambda s: s.update(num_states=-1), "'num_states': expected an integer"),
        (lambda s: s.update(num_groups=True), "'num_groups': expected an integer"),
        (lambda s: s.update(start_slot=0), "exactly one of 'start_slot' and 'start_grammar'"),
        (lambda s: s.update(start_grammar=-1), "exactly one of 'start_slot' and 'start_grammar'"),
        (lambda s: s.update(start_grammar=5), "'start_grammar': expected an integer in -1..0"),
        (lambda s: s.pop("num_info_bytes"), "'num_info_bytes'"),
        (lambda s: s.update(num_allowed=s["num_allowed"] + 1), "section allowed_tokens: count expected"),
    ],
)
def test_hostile_headers_refused(
    extraction: tuple[triec.SchemaTable, bytes], tmp_path: Path, change: Any, message: str
) -> None:
    header, arrays, version = decode(extraction[1])
    change(header["schema"])
    with pytest.raises(triec.ArtifactError, match=message):
        triec.load(write(tmp_path, encode(header, arrays, version)))


def test_version_3_is_for_schema_tables_only(extraction: tuple[triec.SchemaTable, bytes], tmp_path: Path) -> None:
    header, arrays, version = decode(extraction[1])
    header["format"] = "triec-masks"
    with pytest.raises(triec.ArtifactError, match="format version 3 holds 'triec-schema' only"):
        triec.load(write(tmp_path, encode(header, arrays, version)))


def _set(arrays: dict[str, np.ndarray], name: str, i: int, value: int) -> None:
    arrays[name][i] = value


FIELDS = {name: i for i, name in enumerate(SLOT_FIELDS)}
SLOT_ROW = len(FIELDS)


@pytest.mark.parametrize(
    ("mutate", "section"),
    [
        (lambda a: _set(a, "entry_leaf", 0, 10_000), "entry_leaf"),
        (lambda a: _set(a, "entry_state", 0, -1), "entry_state"),
        (lambda a: _set(a, "entry_group", 0, 99_999), "entry_group"),
        (lambda a: _set(a, "group_tokens", 0, 50_256), "group_tokens"),  # the EOS id
        (lambda a: _set(a, "group_tokens", 0, 1 << 30), "group_tokens"),
        (lambda a: _set(a, "group_kind", 0, 7), "group_kind"),
        (lambda a: a["group_target"].__setitem__(a["group_kind"] == 0, 1 << 20), "group_target"),
        (lambda a: _set(a, "group_leaf", 0, -2), "group_leaf"),
        (lambda a: _set(a, "group_rest_token", 0, 1 << 30), "group_rest_token"),
        (lambda a: _set(a, "group_offsets", 1, 1 << 31), "group_offsets"),
        (lambda a: _set(a, "group_rest_offsets", 1, 1 << 31), "group_rest_offsets"),
        (lambda a: _set(a, "label_offsets", 1, 1 << 31), "label_offsets"),
        (lambda a: _set(a, "allowed_next", 0, 1 << 20), "allowed_next"),
        (lambda a: _set(a, "grammar_slots", 0, 5), "grammar_slots"),
        (lambda a: _set(a, "slot_table", FIELDS["enter_state"], -3), "slot_table"),
        (lambda a: _set(a, "slot_table", FIELDS["value_grammar"], 2), "slot_table"),
        (lambda a: _set(a, "slot_table", FIELDS["tail_bytes"], 1), "slot_table"),
        (lambda a: _set(a, "slot_table", FIELDS["open"], 256), "slot_table"),  # an opening byte that is not a byte
        (
            lambda a: _set(
                a, "slot_table", SLOT_ROW + FIELDS["num_entries"], a["slot_table"][SLOT_ROW + FIELDS["num_entries"]] + 1
            ),
            "slot_table",
        ),  # the slots' counts no longer add up to the header's totals
        (lambda a: _set(a, "grammar_table", 0, 1 << 40), "grammar_table"),
        (lambda a: _set(a, "grammar_table", 4, 2), "grammar_table"),  # a grammar kind that does not exist
        (lambda a: _set(a, "grammar_table", 5, 7), "grammar_table"),  # nor a whitespace
        (lambda a: _set(a, "grammar_text", 0, 0xFF), "grammar_text"),
        (lambda a: _set(a, "info", 0, 0xC1), "info"),  # never used in msgpack
        (lambda a: _set(a, "slot_text", a["slot_text"].shape[0] - 1, 0xFF), "slot_text"),  # a marker that is not UTF-8
    ],
)
def test_plain_load_checks_every_index(
    extraction: tuple[triec.SchemaTable, bytes], tmp_path: Path, mutate: Any, section: str
) -> None:
    """One index out of range (every CRC recomputed): a plain load refuses it, naming the section."""
    header, arrays, version = decode(extraction[1])
    mutate(arrays)
    with pytest.raises(triec.ArtifactContentError, match=f"section {section}"):
        triec.load(write(tmp_path, encode(header, arrays, version)))


@pytest.mark.parametrize(
    ("mutate", "section"),
    [
        (lambda a: a["group_tokens"].__setitem__(slice(0, 2), a["group_tokens"][:2][::-1].copy()), "group_tokens"),
        (lambda a: a["grammar_text"].__setitem__(0, ord("[")), "grammar_text"),
        (lambda a: a["entry_state"].__setitem__(slice(-3, None), a["entry_state"][-3:][::-1].copy()), "entry_state"),
    ],
)
def test_verify_checks_contents(
    extraction: tuple[triec.SchemaTable, bytes], tmp_path: Path, mutate: Any, section: str
) -> None:
    header, arrays, version = decode(extraction[1])
    mutate(arrays)
    path = write(tmp_path, encode(header, arrays, version))
    triec.load(path)  # every index still in range
    with pytest.raises(triec.ArtifactContentError, match=f"section {section}"):
        triec.load(path, verify=True)


def test_corrupt_section_refused_by_its_crc(extraction: tuple[triec.SchemaTable, bytes], tmp_path: Path) -> None:
    raw = bytearray(extraction[1])
    header, data_start, _ = container.read_header(bytes(raw), "x")
    sec = next(s for s in header["sections"] if s["name"] == "grammar_text")
    raw[data_start + sec["offset"] + sec["length"] - 1] ^= (
        0x01  # the schema's closing brace: still UTF-8, no longer JSON
    )
    path = write(tmp_path, bytes(raw))
    triec.load(path)  # the layout and every index are fine
    with pytest.raises(triec.ArtifactChecksumError, match="grammar_text"):
        triec.load(path, verify=True)


def test_fuzzed_schema_artifacts_load_cleanly_or_fail_with_artifact_error(
    extraction: tuple[triec.SchemaTable, bytes], tmp_path: Path
) -> None:
    """Bit flips, overwritten words and truncations: a load raises ArtifactError, or gives a table whose rows and
    queries answer (plain loads of a few of them also drive a matcher, which may only raise TriecError)."""
    raw = extraction[1]
    header, data_start, _ = container.read_header(raw, "x")
    rng = random.Random(13)
    path = tmp_path / "f.triec"
    loaded = driven = 0
    for i in range(400):
        data = bytearray(raw)
        r = rng.random()
        if r < 0.15:
            data = data[: rng.randrange(len(data))]
        elif r < 0.6:
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        else:  # overwrite an int32 word inside the sections and fix the CRCs: the content checks must catch it
            h, arrays, version = decode(raw)
            name = rng.choice([n for n, a in arrays.items() if a.dtype.itemsize == 4 and a.size])
            a = arrays[name].view(arrays[name].dtype.str.replace("u", "i"))  # the same words, signed
            a[rng.randrange(a.size)] = rng.choice([-1, -2, 0, 1, 2**31 - 1, 50_256, 50_257, 99])
            data = bytearray(encode(h, arrays, version))
        path.write_bytes(bytes(data))
        verify = i % 2 == 0
        try:
            table = triec.load(path, verify=verify)
        except triec.ArtifactError:
            continue
        loaded += 1
        try:
            table.vocabulary()  # binds the slots: a tail's rows are derived from the vocabulary
        except triec.TriecError:
            continue  # a flipped fingerprint or tokenizer name: refused at bind, never served
        for s in table.slots:
            assert s.words.offsets[-1] == s.words.words.shape[0]
            for st in range(min(s.num_states, 20)):
                s.trie.allowed(st)
                s.entries_at(st)
        if not verify and driven < 25:
            driven += 1
            try:
                m = table.matcher()
                for _ in range(12):
                    ids = m.allowed()
                    if not ids.size:
                        break
                    m.accept_token(int(rng.choice(ids.tolist())))
            except triec.TriecError:
                pass
    assert 0 < loaded < 400


# ---------------------------------------------------------------- the first layout, hostile


def _legacy() -> bytes:
    return (GOLDEN / MANIFEST["legacy"][0]["artifact"]).read_bytes()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"continuation_sha256": "sha256:" + "0" * 64}, "does not match the continuation's text"),
        ({"engine": "outlines"}, "expected llguidance or xgrammar"),
        ({"num_heads": 0}, "'num_straddle_rows'"),
        ({"tail": ""}, "'tail' is empty"),
        ({"num_entries": -1}, "'num_entries': expected an integer"),
    ],
)
def test_first_layout_hostile_headers_refused(tmp_path: Path, change: dict, message: str) -> None:
    header, arrays, version = decode(_legacy())
    header["schema"].update(change)
    with pytest.raises(triec.ArtifactError, match=message):
        triec.load(write(tmp_path, encode(header, arrays, version)))


@pytest.mark.parametrize(("name", "value"), [("entry_leaf", 0), ("straddle_target", 99), ("entry_row", 0)])
def test_first_layout_plain_load_checks_indices(tmp_path: Path, name: str, value: int) -> None:
    header, arrays, version = decode(_legacy())
    arrays[name][0] = value
    with pytest.raises(triec.ArtifactContentError, match=name):
        triec.load(write(tmp_path, encode(header, arrays, version)))


def test_first_layout_corrupt_section_refused(tmp_path: Path) -> None:
    raw = bytearray(_legacy())
    raw[-1] ^= 0xFF  # last byte of the last section (head_bytes)
    path = write(tmp_path, bytes(raw))
    triec.load(path)  # layout still fine
    with pytest.raises(triec.ArtifactChecksumError, match="head_bytes"):
        triec.load(path, verify=True)


def test_first_layout_fuzzed(tmp_path: Path) -> None:
    raw = _legacy()
    rng = random.Random(7)
    path = tmp_path / "f.triec"
    loaded = 0
    for _ in range(200):
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
        try:
            table.vocabulary()  # binds the slots: a tail's rows are derived from the vocabulary
        except triec.TriecError:
            continue  # a flipped fingerprint or name: refused at bind, never served
        s = table.slots[0]
        assert s.words.offsets[-1] == s.words.words.shape[0]
    assert loaded < 200


def test_the_layout_knows_every_field_of_a_slot_and_a_grammar() -> None:
    """A field added to Slot, GrammarSpec or Grammar must be written too (schema/artifact/encode.py, docs/format.md):
    this fails until it is, rather than a saved table quietly losing it."""
    import dataclasses
    import inspect

    from triec.schema.grammar import GrammarSpec
    from triec.schema.slot import Slot
    from triec.schema.table import Grammar

    assert {f.name for f in dataclasses.fields(Slot) if f.init} == {
        "trie",
        "tail",
        "enter_state",
        "marker",
        "exits",
        "entry_state",
        "entry_group",
        "entry_leaf",
        "tails",
        "enters",
        "value_grammar",
        "open",
    }
    assert {f.name for f in dataclasses.fields(GrammarSpec)} == {"schema", "after", "kind", "whitespace"}
    assert set(inspect.signature(Grammar).parameters) == {"spec", "template", "slots", "make"}
    assert set(GRAMMAR_KINDS) >= {"json", "structural_tag"}
