"""Issue 49's damaged artifacts, one each: refused at load, or by ``triec verify`` where only the regex shows it.

The seeded fuzz run over the same layouts is tests/test_fuzz_layouts.py; these pin the cases the issue names.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from artifact_mutations import Seed, repack, with_section_crcs

import triec
from triec.named_formats import FORMATS
from triec.verify.tables import verify

SCHEMA = {
    "type": "object",
    "properties": {"day": {"type": "string", "format": "date"}, "kind": {"enum": ["a", "bb", "ccc"]}},
    "required": ["day", "kind"],
}


def _saved(table: object, tmp_path: Path) -> Seed:
    path = tmp_path / "seed.triec"
    table.save(path)  # type: ignore[attr-defined]
    return Seed(path.read_bytes())


def _write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "mutated.triec"
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("name", ["triec-schema", "", "UUID", 5])
def test_a_pattern_format_must_be_a_named_format(tmp_path: Path, vocabs: dict[str, triec.Vocabulary], name: object):
    seed = _saved(triec.compile_pattern(format="uuid", vocab=vocabs["gpt2"]), tmp_path)
    header = seed.fresh_header()
    header["pattern"]["format"] = name
    path = _write(tmp_path, repack(seed, header, seed.data[seed.data_start :]))
    with pytest.raises(triec.ArtifactError, match="header field 'pattern'"):
        triec.load(path)


def test_a_slot_whose_keys_do_not_decode_is_refused_at_load(tmp_path: Path, vocabs: dict[str, triec.Vocabulary]):
    """Control bytes in a trie slot's ``state_byte`` (CRCs recomputed) made ``values_of`` raise json's error."""
    table = triec.compile_schema(SCHEMA, vocabs["gpt2"], engine="xgrammar", threshold=2)
    seed = _saved(table, tmp_path)
    _, start, _length = next(s for s in seed.sections if s[0] == "state_byte")
    buf = bytearray(seed.data)
    buf[start + 2] = 0x01  # inside the first value's JSON string literal: a raw control character
    for verify_ in (False, True):
        with pytest.raises(triec.ArtifactContentError, match="section state_byte: a value is not a JSON string"):
            triec.load(_write(tmp_path, with_section_crcs(seed, buf)), verify=verify_)


def _verified(path: Path, vocab: triec.Vocabulary) -> dict[str, object]:
    report = verify(str(path), tokenizer=vocab.name, against=["reference"])
    return {c.against: c for c in report.checks} | {"ok": report.ok}


@pytest.mark.parametrize(
    ("regex", "problem"),
    [
        ("a+", "the stored DFA has 37 states, the regex's minimal DFA 2"),
        (FORMATS["uuid"].replace("A-F", "G-K", 1), "byte 0x41 leads on in the stored DFA only"),
        ("(", "does not compile"),
    ],
)
def test_verify_recompiles_a_pattern_tables_regex(
    tmp_path: Path, vocabs: dict[str, triec.Vocabulary], regex: str, problem: str
) -> None:
    """Issue 49: a uuid artifact whose header regex was rewritten (CRC recomputed) verified OK."""
    seed = _saved(triec.compile_pattern(format="uuid", vocab=vocabs["gpt2"]), tmp_path)
    header = seed.fresh_header()
    header["pattern"] = {"regex": regex, "format": None}
    path = _write(tmp_path, repack(seed, header, seed.data[seed.data_start :]))
    checks = _verified(path, vocabs["gpt2"])
    assert checks["ok"] is False
    assert checks["regex"].status == "mismatch" and problem in checks["regex"].examples[0].problem  # type: ignore[attr-defined]


def test_verify_passes_an_intact_pattern_table_and_schema(tmp_path: Path, vocabs: dict[str, triec.Vocabulary]):
    for table in (
        triec.compile_pattern("[a-c]{1,3}(x|yz)?", vocabs["gpt2"]),
        triec.compile_schema(SCHEMA, vocabs["gpt2"], engine="xgrammar", threshold=2),
    ):
        seed = _saved(table, tmp_path)
        checks = _verified(_write(tmp_path, seed.data), vocabs["gpt2"])
        assert checks["regex"].status == "ok" and checks["ok"] is True  # type: ignore[attr-defined]


def test_verify_recompiles_a_schema_pattern_slots_regex(tmp_path: Path, vocabs: dict[str, triec.Vocabulary]):
    """A pattern slot's regex lives in ``slot_text``: rewritten to another of the same length (CRCs recomputed),
    the slot's rows and DFA no longer follow it."""
    seed = _saved(triec.compile_schema(SCHEMA, vocabs["gpt2"], engine="xgrammar", threshold=2), tmp_path)
    _, start, length = next(s for s in seed.sections if s[0] == "slot_text")
    buf = bytearray(seed.data)
    text = bytes(buf[start : start + length])
    at = text.index(b"[0-9]{4}")
    buf[start + at : start + at + 8] = b"[0-8]{4}"
    checks = _verified(_write(tmp_path, with_section_crcs(seed, buf)), vocabs["gpt2"])
    assert checks["ok"] is False and checks["regex"].status == "mismatch"  # type: ignore[attr-defined]
    assert checks["regex"].examples[0].problem.startswith("slot 1: the regex")  # type: ignore[attr-defined]
