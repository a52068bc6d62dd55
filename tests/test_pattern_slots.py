"""Format and pattern fields inside schemas (issue 44, item 3): each served by its DFA's table, exactly as xgrammar
serves the whole schema.

The oracle is xgrammar compiled on the user's whole schema in the same convention (it writes each ``format`` as
the grammar triec's regexes spell, docs/patterns.md); every row is compared along random walks to EOS, at every
DFA state of each slot from its entry with one step past every crossing token (triec.verify.schemas), and along
outputs that spell real dates, times, UUIDs and addresses. Synthetic vocabularies add long tokens that straddle
each boundary of a field: entering (``": "20``), leaving (``5", "n": ``, ``Z"}``) and between array items.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from shared import needs_xgrammar, synthetic_vocab

import triec
from triec.artifact import container
from triec.errors import ArtifactContentError, SchemaShapeError
from triec.schema.pattern_slot import PatternSlot
from triec.verify.schemas import compare_schema, compare_texts

pytestmark = [
    pytest.mark.engines,
    needs_xgrammar,
]


def obj(props: dict, required: list[str] | None = None, **extra: object) -> dict:
    return {"type": "object", "properties": props, "required": list(props) if required is None else required, **extra}


FIELDS = {
    "when": {"type": "string", "format": "date-time"},
    "day": {"type": "string", "format": "date"},
    "at": {"type": "string", "format": "time", "description": "local time"},
    "id": {"type": "string", "format": "uuid"},
    "ip": {"type": "string", "format": "ipv4"},
    "code": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{6}$"},
}
SCHEMAS = {
    "formats": obj(FIELDS),
    "optional": obj(FIELDS, required=["id"]),
    "nested": obj({"n": {"type": "integer"}, "event": obj({"day": FIELDS["day"], "ips": obj({"ip": FIELDS["ip"]})})}),
    "arrays": obj({"days": {"type": "array", "items": FIELDS["day"], "minItems": 1, "maxItems": 3}}),
    "with_enum": obj({"status": {"enum": [f"state_{i}" for i in range(12)]}, "day": FIELDS["day"]}),
}
TEXTS = {
    "formats": [
        '{"when": "2024-02-29T23:59:60.125Z", "day": "1999-12-31", "at": "08:30:00+05:30", '
        '"id": "123e4567-E89b-12d3-a456-426614174000", "ip": "192.168.0.255", "code": "AB123456"}'
    ],
    "arrays": ['{"days": ["2024-01-01", "0001-10-31", "9999-12-09"]}'],
}


def spell(vocab: triec.Vocabulary, text: str) -> list[int]:
    """Longest tokens first (a table of tokenization "any" takes every spelling)."""
    from triec.verify.schemas import _spell

    return _spell(vocab, text.encode("utf-8"))


def check(table: triec.SchemaTable, walks: int = 12) -> None:
    r = compare_schema(table, walks=walks, max_walk_steps=80, full_tail_leaves=1)
    assert r.mismatches == 0, r.examples
    assert r.slots_unreached == [] and r.slots_checked == len(table.slots)
    assert r.states_checked == table.num_states


@pytest.mark.parametrize("whitespace", ["compact", "any"])
@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_each_schema_equals_xgrammar_state_by_state(vocab: triec.Vocabulary, name: str, whitespace: str) -> None:
    table = triec.compile_schema(SCHEMAS[name], vocab, engine="xgrammar", threshold=10, whitespace=whitespace)
    patterns = [s for s in table.slots if isinstance(s, PatternSlot)]
    assert patterns and all(s.enter_state == 0 and s.value_grammar is None for s in patterns)
    check(table)
    for text in TEXTS.get(name, []):
        if whitespace == "compact":
            r = compare_texts(table, [text], splits=2)
            assert r.mismatches == 0 and r.walks_ended == r.walks, r.examples


def test_the_slots_follow_their_dfas(qwen2: triec.Vocabulary) -> None:
    """Each field's slot holds the table compile_string_schema builds for the field alone (same rows)."""
    table = triec.compile_schema(SCHEMAS["formats"], qwen2, engine="xgrammar")
    by_pointer = {w["pointer"]: s for w, s in zip(table.info["slots"], table.slots, strict=True)}
    assert sorted(by_pointer) == sorted(f"/properties/{k}" for k in FIELDS)
    for key, field in FIELDS.items():
        slot = by_pointer[f"/properties/{key}"]
        alone = triec.compile_string_schema(field, qwen2)
        assert isinstance(slot, PatternSlot) and slot.format_name == field.get("format")
        for name in ("allowed_offsets", "allowed_tokens", "allowed_next", "value_state"):
            assert np.array_equal(getattr(slot.trie, name), getattr(alone, name)), (key, name)
        assert slot.walk_bytes(0, b'"AB123456", "x') == ((0, -1, b', "x') if key == "code" else None)


def test_a_decode_records_enum_values_but_not_pattern_strings(qwen2: triec.Vocabulary) -> None:
    table = triec.compile_schema(SCHEMAS["with_enum"], qwen2, engine="xgrammar", threshold=10)
    m = table.matcher()
    text = '{"status": "state_7", "day": "2024-05-06"}'
    assert m.accept_tokens(spell(qwen2, text)) == len(spell(qwen2, text))
    assert m.values == [(0, "state_7")] and m.value == "state_7"
    assert set(m.allowed().tolist()) == set(qwen2.eos_token_ids)


# ---------------------------------------------------------------- which fields are served


def test_fields_with_other_constraints_or_alternatives_stay_in_the_engine(qwen2: triec.Vocabulary) -> None:
    schema = obj(
        {
            "a": {"type": "string", "format": "date", "minLength": 10},
            "b": {"anyOf": [{"type": "string", "format": "uuid"}, {"type": "string", "maxLength": 3}]},
            "c": {"anyOf": [{"type": "string", "format": "ipv4"}, {"type": "integer"}]},
            "d": {"type": "string", "format": "email"},
            "e": {"type": "string", "pattern": 'a"b'},
            "f": {"type": "string", "pattern": "(a|b)*a(a|b){14}"},
        }
    )
    table = triec.compile_schema(schema, qwen2, engine="xgrammar")
    assert [w["pointer"] for w in table.info["slots"]] == ["/properties/c/anyOf/0"]  # beside a non-string branch
    kept = {w["pointer"]: w["reason"] for w in table.info["engine_patterns"]}
    assert set(kept) == {"/properties/a", "/properties/b/anyOf/0", "/properties/e", "/properties/f"}
    assert "minLength" in kept["/properties/a"] and "alternative" in kept["/properties/b/anyOf/0"]
    assert "escape" in kept["/properties/e"] and "states" in kept["/properties/f"]  # the DFA bound
    check(table, walks=8)


def test_a_pattern_past_a_bound_stays_in_the_engine_with_that_reason(tmp_path, qwen2: triec.Vocabulary) -> None:
    """Issue 49: 400 nested groups raised RecursionError while the schema was read, and the command line then
    refused the whole schema for an unrelated reason (no enum array). The field is now the engine's, with the
    bound as its reason, and the rest of the schema is served, in Python and on the command line."""
    from typer.testing import CliRunner

    from triec.cli import app

    deep = "(" * 400 + "a" + ")" * 400
    schema = obj({"day": FIELDS["day"], "deep": {"type": "string", "pattern": deep}})
    table = triec.compile_schema(schema, qwen2, engine="xgrammar")
    assert [w["pointer"] for w in table.info["slots"]] == ["/properties/day"]
    kept = {w["pointer"]: w["reason"] for w in table.info["engine_patterns"]}
    assert list(kept) == ["/properties/deep"] and "nested deeper than 100" in kept["/properties/deep"]
    assert "position 100" in kept["/properties/deep"]
    path = tmp_path / "deep.json"
    path.write_text(json.dumps(schema))
    r = CliRunner().invoke(app, ["compile", str(path), "-t", "gpt2", "-o", str(tmp_path / "d.triec"), "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.output)
    assert [s.get("format") for s in summary["slots"]] == ["date"]
    assert [e["pointer"] for e in summary["engine_patterns"]] == ["/properties/deep"]
    assert "nested deeper than 100" in summary["engine_patterns"][0]["reason"]


def test_llguidance_keeps_formats_unless_asked(qwen2: triec.Vocabulary) -> None:
    """Under llguidance the fields stay the engine's by default (its spelling of some formats differs)."""
    schema = obj({"day": FIELDS["day"], "status": {"enum": [f"s{i}" for i in range(12)]}})
    assert not any(isinstance(s, PatternSlot) for s in triec.compile_schema(schema, qwen2, threshold=10).slots)
    with pytest.raises(SchemaShapeError, match="nothing for a trie to serve"):
        triec.compile_schema(obj({"day": FIELDS["day"]}), qwen2)
    with pytest.raises(SchemaShapeError, match="nothing for a trie to serve"):
        triec.compile_schema(obj({"day": FIELDS["day"]}), qwen2, engine="xgrammar", patterns=False)
    forced = triec.compile_schema(obj({"day": FIELDS["day"]}), qwen2, patterns=True)  # asked: its DFA under llguidance
    assert isinstance(forced.slots[0], PatternSlot) and forced.engine == "llguidance"


# ---------------------------------------------------------------- tokens across every boundary


# ordinary pieces, between every single byte and the straddling tokens in the synthetic vocabulary
PIECES = [b'{"', b'":', b'": ', b', "', b'"]', b'"}', b"20", b"-0"]


ENTERING = [b'": "20', b'day": "1', b', "day": "', b'["2', b'[""', b' "19', b': "12']
LEAVING = [b'1", "n": ', b'9", "n', b'"]', b'"}', b'"}}', b'31"}}', b'9"]', b'Z", "', b'5"}', b'0"], "x": ']
BETWEEN = [b'", "', b'", "2', b'1", "20', b'", ""']
SYNTHETIC = ENTERING + LEAVING + BETWEEN


@pytest.mark.parametrize("name", ["formats", "nested", "arrays"])
def test_synthetic_tokens_straddle_each_boundary(name: str) -> None:
    vocab = synthetic_vocab(PIECES, SYNTHETIC)
    table = triec.compile_schema(SCHEMAS[name], vocab, engine="xgrammar")
    slots = [s for s in table.slots if isinstance(s, PatternSlot)]
    assert sum(len(s.entry_state) for s in slots) > sum(s.exits.num_groups > 1 for s in slots) > 0  # long heads
    assert all(s.enters.num_groups > 1 for s in slots)
    r = compare_schema(table, walks=25, max_walk_steps=80, full_tail_leaves=1)
    assert r.mismatches == 0, r.examples
    assert r.states_checked == table.num_states
    for text in TEXTS.get(name, []):
        assert compare_texts(table, [text], splits=4).mismatches == 0


def test_straddling_tokens_are_really_used() -> None:
    """One decode that enters a date field inside ``": "20`` and leaves an address inside ``"}}``; a token that
    would close the date and its object where a property must follow is refused."""
    vocab = synthetic_vocab(PIECES, SYNTHETIC)
    table = triec.compile_schema(SCHEMAS["nested"], vocab, engine="xgrammar")
    ids = {b: i for i, b in enumerate(vocab.token_bytes) if b}
    path = [
        b'{"',
        b"n",
        b'": ',
        b"7",
        b', "',
        b"event",
        b'": {"',
        b"day",
        b'": "20',
        b"2",
        b"4",
        b"-",
        b"1",
        b"2",
        b"-",
    ]
    path += [b"31", b'", "', b"ips", b'": {"', b"ip", b'": "', b"1", b".", b"2", b".", b"3", b".", b"4", b'"}}', b"}"]
    assert b"".join(path) == b'{"n": 7, "event": {"day": "2024-12-31", "ips": {"ip": "1.2.3.4"}}}'

    def feed(m: triec.schema.matcher.SchemaMatcher, pieces: list[bytes]) -> bool:  # no such token: byte by byte
        return all(m.accept_token(t) for p in pieces for t in ([ids[p]] if p in ids else [ids[bytes([b])] for b in p]))

    m = table.matcher()
    assert feed(m, path)
    assert m.accept_token(vocab.eos_token_ids[0]) and m.is_terminated()
    m = table.matcher()
    assert feed(m, path[: path.index(b"31")])
    assert not m.accept_token(ids[b'31"}}'])  # the day is complete only with "ips" still to come
    assert feed(m, [b"3", b"1", b'", "'])


# ---------------------------------------------------------------- the artifact


def test_the_artifact_round_trips_as_version_5(tmp_path, qwen2: triec.Vocabulary) -> None:
    table = triec.compile_schema(SCHEMAS["with_enum"], qwen2, engine="xgrammar", threshold=10)
    a, b = tmp_path / "a.triec", tmp_path / "b.triec"
    table.save(a)
    triec.compile_schema(SCHEMAS["with_enum"], qwen2, engine="xgrammar", threshold=10).save(b)
    assert a.read_bytes() == b.read_bytes()  # deterministic
    header, _, version = container.read_header(a.read_bytes(), str(a))
    assert version == 5 and header["schema"]["num_dfa_edges"] > 0
    back = triec.load(a, verify=True)
    assert [type(s) for s in back.slots] == [type(s) for s in table.slots]
    assert back.slots[1].format_name == "date" and back.slots[1].pattern == table.slots[1].pattern
    r = compare_schema(back.with_engine("xgrammar"), walks=6)
    assert r.mismatches == 0 and r.states_checked == back.num_states
    text = '{"status": "state_11", "day": "2031-11-30"}'
    m = back.matcher()
    assert m.accept_tokens(spell(qwen2, text)) == len(spell(qwen2, text))


def test_a_table_without_pattern_fields_is_still_version_3(tmp_path, qwen2: triec.Vocabulary) -> None:
    schema = obj({"status": {"enum": [f"state_{i}" for i in range(12)]}, "n": {"type": "integer"}})
    triec.compile_schema(schema, qwen2, engine="xgrammar", threshold=10).save(tmp_path / "a.triec")
    assert container.read_header((tmp_path / "a.triec").read_bytes(), "a")[2] == 3


def _edit_slot_table(raw: bytes, slot: int, column: str, value: int) -> bytes:
    """The file with one slot_table cell changed (its section CRC recomputed: the content check must catch it)."""
    from triec.artifact.formats import parse_artifact
    from triec.schema.artifact.layout import PATTERN_LAYOUT, PATTERN_SLOT_FIELDS

    found = parse_artifact(raw, "x")
    table = np.asarray(found["arrays"]["slot_table"]).reshape(-1, len(PATTERN_SLOT_FIELDS)).copy()
    table[slot, PATTERN_SLOT_FIELDS.index(column)] = value
    header = found["header"]
    arrays = dict(found["arrays"])
    arrays["slot_table"] = table.reshape(-1)
    return container.encode(header, [(n, d, arrays[n]) for n, d in PATTERN_LAYOUT], 5)


def test_a_damaged_pattern_slot_is_refused_naming_it(tmp_path, qwen2: triec.Vocabulary) -> None:
    table = triec.compile_schema(SCHEMAS["with_enum"], qwen2, engine="xgrammar", threshold=10)
    from triec.artifact.formats import encode_artifact

    raw = encode_artifact(table)
    for column, value, words in (
        ("dfa_edges", 3, "an enum's slot holds no DFA"),
        ("enter_state", 1, "entered at state 0"),
    ):
        slot = 0 if column == "dfa_edges" else 1
        bad = tmp_path / f"{column}.triec"
        bad.write_bytes(_edit_slot_table(raw, slot, column, value))
        with pytest.raises((ArtifactContentError, triec.errors.ArtifactError), match=re.escape(words)):
            triec.load(bad, verify=True)
    from triec.artifact.formats import parse_artifact
    from triec.schema.artifact.layout import PATTERN_LAYOUT

    found = parse_artifact(raw, "x")
    arrays = dict(found["arrays"])
    arrays["state_byte"] = arrays["state_byte"].copy()
    arrays["state_byte"][-1] = 0x22  # the last state of the date field's slot (slot 1, the last one)
    bad = tmp_path / "state_byte.triec"
    bad.write_bytes(container.encode(found["header"], [(n, d, arrays[n]) for n, d in PATTERN_LAYOUT], 5))
    triec.load(bad)  # the layout's checks pass; the content check names the section
    with pytest.raises(ArtifactContentError, match="section state_byte: slot 1: a pattern slot's state bytes are 0"):
        triec.load(bad, verify=True)


# ---------------------------------------------------------------- the command line


def test_compile_inspect_and_verify_on_the_command_line(tmp_path) -> None:
    from typer.testing import CliRunner

    from triec.cli import app

    schema = tmp_path / "event.json"
    schema.write_text(json.dumps(SCHEMAS["formats"]))
    out = tmp_path / "event.triec"
    runner = CliRunner()
    r = runner.invoke(app, ["compile", str(schema), "-t", "gpt2", "-o", str(out), "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.output)
    assert summary["engine"] == "xgrammar"  # the fields' tables follow xgrammar's spelling
    assert [s.get("format") for s in summary["slots"]] == ["date-time", "date", "time", "uuid", "ipv4", None]
    assert summary["slots"][-1]["pattern"] == "^[A-Z]{2}[0-9]{6}$"
    r = runner.invoke(app, ["inspect", str(out), "--json"])
    assert r.exit_code == 0, r.output
    report = json.loads(r.output)
    assert report["format"] == "date-time" and report["schema"]["shown_slot"] == 0
    r = runner.invoke(app, ["verify", str(out), "--against", "reference,xgrammar", "--walks", "20"])
    assert r.exit_code == 0, r.output
    assert "served by slots" in r.output and "mismatch" not in r.output.lower().replace("mismatches", "")
