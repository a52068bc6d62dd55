"""The parts of an artifact that only a compiled tool schema has (format ``"triec-schema"``).

Same file layout as a mask table (docs/format.md): the six trie sections of the
name keys, then ten more sections (the (state, head) entries and the straddle
tables), and a header ``schema`` map recording the convention, the literal
prefix and tail, the continuation schema (text and sha256) and the engine the
straddle tables were computed with. numpy only, like the loader.

:mod:`triec.artifact.masks` writes and reads the trie's part and calls this module
for the rest (``table.kind`` is ``TableKind.TOOL_SCHEMA``, or the header's format is this one).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import numpy as np

from triec.artifact.masks import FORMAT_NAMES
from triec.errors import ArtifactContentError, ArtifactError
from triec.runtime.kinds import TableKind
from triec.schema.straddle import StraddleTable
from triec.schema.table import SchemaTable

if TYPE_CHECKING:
    from triec.runtime.table import MaskTable

FORMAT_NAME = FORMAT_NAMES[TableKind.TOOL_SCHEMA]

SCHEMA_SECTIONS: tuple[tuple[str, str], ...] = (
    ("entry_state", "<i4"),
    ("entry_row", "<i4"),
    ("entry_leaf", "<i4"),
    ("straddle_offsets", "<u4"),
    ("straddle_tokens", "<i4"),
    ("straddle_target", "<i4"),
    ("straddle_rest_offsets", "<u4"),
    ("straddle_rest", "|u1"),
    ("head_offsets", "<u4"),
    ("head_bytes", "|u1"),
)

_COUNTS = ("num_entries", "num_straddle_rows", "num_straddles", "num_rest_bytes", "num_heads", "num_head_bytes")


def schema_arrays(table: SchemaTable) -> dict[str, np.ndarray]:
    """The arrays of :data:`SCHEMA_SECTIONS`, by name."""
    st = table.straddles
    return {
        "entry_state": table.entry_state,
        "entry_row": table.entry_row,
        "entry_leaf": table.entry_leaf,
        "straddle_offsets": st.offsets,
        "straddle_tokens": st.tokens,
        "straddle_target": st.target,
        "straddle_rest_offsets": st.rest_offsets,
        "straddle_rest": st.rest,
        "head_offsets": st.head_offsets,
        "head_bytes": st.head_bytes,
    }


def schema_header(table: SchemaTable) -> dict[str, Any]:
    """The header's ``schema`` map."""
    st = table.straddles
    return {
        "convention": table.convention,
        "name_property": table.name_property,
        "next_property": table.next_property,
        "prefix": table.prefix.decode("utf-8"),
        "tail": table.tail.decode("utf-8"),
        "continuation": table.continuation_text,
        "continuation_sha256": table.continuation_sha256,
        "engine": table.engine,
        "engine_version": table.engine_version or "",
        "num_entries": int(table.entry_state.shape[0]),
        "num_straddle_rows": st.num_rows,
        "num_straddles": int(st.tokens.shape[0]),
        "num_rest_bytes": int(st.rest.shape[0]),
        "num_heads": int(st.head_offsets.shape[0]) - 1,
        "num_head_bytes": int(st.head_bytes.shape[0]),
    }


def expected_counts(schema: Any, source: str) -> dict[str, int]:
    """Section counts implied by the header's ``schema`` map (which is checked here)."""

    def fail(msg: str) -> ArtifactError:
        return ArtifactError(f"{source}: header field 'schema': {msg}")

    if not isinstance(schema, dict):
        raise fail(f"expected a map, found {schema!r:.40}")
    for key in ("name_property", "next_property", "prefix", "tail", "continuation", "continuation_sha256", "engine",
                "engine_version"):
        if not isinstance(schema.get(key), str):
            raise fail(f"{key!r}: expected a string, found {schema.get(key)!r:.40}")
    if not isinstance(schema.get("convention"), dict):
        raise fail("'convention': expected a map")
    if schema["engine"] not in ("llguidance", "xgrammar"):
        raise fail(f"'engine': expected llguidance or xgrammar, found {schema['engine']!r}")
    tail = schema["tail"].encode("utf-8")
    if not tail:
        raise fail("'tail' is empty")
    digest = "sha256:" + hashlib.sha256(schema["continuation"].encode("utf-8")).hexdigest()
    if digest != schema["continuation_sha256"]:
        raise fail("'continuation_sha256' does not match the continuation's text")
    n = {}
    for key in _COUNTS:
        v = schema.get(key)
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 2**32:
            raise fail(f"{key!r}: expected an integer in 0..2^32-1, found {v!r:.40}")
        n[key] = v
    if n["num_straddle_rows"] != len(tail) + n["num_heads"]:
        raise fail(f"'num_straddle_rows' {n['num_straddle_rows']} is not len(tail) {len(tail)} + num_heads {n['num_heads']}")
    return {
        "entry_state": n["num_entries"],
        "entry_row": n["num_entries"],
        "entry_leaf": n["num_entries"],
        "straddle_offsets": n["num_straddle_rows"] + 1,
        "straddle_tokens": n["num_straddles"],
        "straddle_target": n["num_straddles"],
        "straddle_rest_offsets": n["num_straddles"] + 1,
        "straddle_rest": n["num_rest_bytes"],
        "head_offsets": n["num_heads"] + 1,
        "head_bytes": n["num_head_bytes"],
    }


def build_schema_table(
    trie: MaskTable, header: dict[str, Any], arrays: dict[str, np.ndarray], source: str | None = None
) -> SchemaTable:
    """The table over a checked header and its sections (:func:`load_schema_table` checks the indices too)."""
    s = header["schema"]
    tail = s["tail"].encode("utf-8")
    st = StraddleTable(
        offsets=arrays["straddle_offsets"].astype(np.int64),  # small: the straddle tables hold no per-name data
        tokens=arrays["straddle_tokens"],
        target=arrays["straddle_target"],
        rest_offsets=arrays["straddle_rest_offsets"].astype(np.int64),
        rest=arrays["straddle_rest"],
        head_node=np.zeros(0, dtype=np.int64),  # vocabulary-trie ids are a compile-time detail
        head_offsets=arrays["head_offsets"].astype(np.int64),
        head_bytes=arrays["head_bytes"],
        tail_len=len(tail),
    )
    return SchemaTable(
        trie=trie,
        straddles=st,
        entry_state=arrays["entry_state"],
        entry_row=arrays["entry_row"],
        entry_leaf=arrays["entry_leaf"],
        names=None,
        prefix=s["prefix"].encode("utf-8"),
        tail=tail,
        name_property=s["name_property"],
        next_property=s["next_property"],
        continuation_text=s["continuation"],
        continuation_sha256=s["continuation_sha256"],
        engine=s["engine"],
        engine_version=s["engine_version"] or None,
        convention=s["convention"],
        source=source,
        header=header,
    )


def load_schema_table(
    trie: MaskTable, header: dict[str, Any], arrays: dict[str, np.ndarray], source: str, *, verify: bool = False
) -> SchemaTable:
    """A loaded ``triec-schema`` artifact: its table, every index checked, with ``verify`` every content check."""
    table = build_schema_table(trie, header, arrays, source)
    check_schema_indices(table, source)
    if verify:
        validate_schema_contents(table, source)
    return table


def check_schema_indices(table: SchemaTable, source: str) -> None:
    """Every index the matcher follows is in range (each plain load; O(entries + straddles)).

    Raises :class:`ArtifactContentError`: entry states in ``0 .. S - 1``, entry rows head rows,
    entry leaves keys' ends, offsets from 0 to their data's length without decreasing,
    straddle tokens content ids of the mask, targets in ``1 .. len(tail)``.
    """

    def fail(section: str, msg: str) -> ArtifactContentError:
        return ArtifactContentError(f"{source}: section {section}: {msg}")

    trie, st = table.trie, table.straddles
    n, s = table.tail_len, trie.num_states
    leaves = np.asarray(trie.value_state, dtype=np.int64)
    es, er, el = (np.asarray(a, dtype=np.int64) for a in (table.entry_state, table.entry_row, table.entry_leaf))
    if es.size:
        if es.min() < 0 or es.max() >= s:
            raise fail("entry_state", f"states must lie in 0..{s - 1}")
        if er.min() < n or er.max() >= st.num_rows:
            raise fail("entry_row", f"rows must lie in {n}..{st.num_rows - 1} (head rows)")
        pos = np.minimum(np.searchsorted(leaves, el), leaves.shape[0] - 1)
        if np.any(leaves[pos] != el):
            raise fail("entry_leaf", "every entry must end at a key's end (a value_state)")
    for name, off, total in (("straddle_offsets", st.offsets, st.tokens.shape[0]),
                             ("straddle_rest_offsets", st.rest_offsets, st.rest.shape[0]),
                             ("head_offsets", st.head_offsets, st.head_bytes.shape[0])):
        o = np.asarray(off, dtype=np.int64)
        if o[0] != 0 or o[-1] != total or np.any(np.diff(o) < 0):
            raise fail(name, f"offsets must run from 0 to {total} without decreasing")
    tok = np.asarray(st.tokens, dtype=np.int64)
    if tok.size:
        if tok.min() < 0 or tok.max() >= trie.vocab_size or np.isin(tok, trie.eos_token_ids).any():
            raise fail("straddle_tokens", f"ids must be content tokens in 0..{trie.vocab_size - 1}")
        tgt = np.asarray(st.target, dtype=np.int64)
        if tgt.min() < 1 or tgt.max() > n:
            raise fail("straddle_target", f"tail offsets must lie in 1..{n}")


def validate_schema_contents(table: SchemaTable, source: str) -> None:
    """``verify=True`` checks of the schema sections beyond the indices: order and consistency."""

    def fail(section: str, msg: str) -> ArtifactContentError:
        return ArtifactContentError(f"{source}: section {section}: {msg}")

    trie, st = table.trie, table.straddles
    n = table.tail_len
    leaves = np.asarray(trie.value_state, dtype=np.int64)
    es, el = np.asarray(table.entry_state, dtype=np.int64), np.asarray(table.entry_leaf, dtype=np.int64)
    if es.size:
        if np.any(np.diff(es) < 0):
            raise fail("entry_state", "states must be ascending")
        if np.isin(es, leaves).any():
            raise fail("entry_state", "a straddle entry starts at a key's end")
        if np.any(el <= es):
            raise fail("entry_leaf", "every entry must end at a key's end below its state")
    tok = np.asarray(st.tokens, dtype=np.int64)
    if tok.size:
        row = np.repeat(np.arange(st.num_rows), np.diff(np.asarray(st.offsets, dtype=np.int64)))
        same_row = row[1:] == row[:-1]
        if np.any(same_row & (tok[1:] <= tok[:-1])):
            raise fail("straddle_tokens", "ids must be strictly ascending within each row")
        has_rest = np.diff(np.asarray(st.rest_offsets, dtype=np.int64)) > 0
        if np.any(has_rest & (np.asarray(st.target, dtype=np.int64) != n)):
            raise fail("straddle_rest_offsets", "only a token reaching the handover carries bytes past the tail")
