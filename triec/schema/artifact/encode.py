"""The ``triec-schema`` writer: a schema table's version-3 bytes (version 5 where a slot holds a pattern).

Each slot's arrays are appended to the sections of :data:`~triec.schema.artifact.layout.LAYOUT` in slot order, its
counts to ``slot_table``; each grammar's texts to the grammar sections, its counts to ``grammar_table``; the header
holds the shared fields (:mod:`triec.artifact.header`) and the ``schema`` map's totals. A pure function of the
table: the same table, the same bytes (fixtures/golden).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from triec.artifact import container
from triec.artifact.container import SCHEMA_FORMAT_VERSION, SCHEMA_PATTERNS_FORMAT_VERSION
from triec.artifact.header import encode_header
from triec.errors import ArtifactError
from triec.schema.artifact.layout import (
    FORMAT_NAME,
    GRAMMAR_KINDS,
    HEADER_COUNTS,
    LAYOUT,
    PATTERN_HEADER_COUNTS,
    PATTERN_LAYOUT,
    WHITESPACE,
)
from triec.schema.pattern_slot import PatternSlot
from triec.schema.slot import Groups

if TYPE_CHECKING:
    from collections.abc import Sequence

    from triec.schema.parts import Grammar
    from triec.schema.slot import Slot
    from triec.schema.table import SchemaTable

Parts = dict[str, list[np.ndarray]]
"""Each section's pieces, in slot (or grammar) order, before they are concatenated."""

_NO_GROUPS = Groups.pack([], [], {})
"""The tail groups as written: none (they are derived from the vocabulary at bind, :meth:`Slot.bind`)."""


_COUNTED = {
    "num_states": "state_byte",
    "num_allowed": "allowed_tokens",
    "num_values": "value_state",
    "num_entries": "entry_state",
    "num_value_grammar": "value_grammar",
    "num_slot_text": "slot_text",
    "num_groups": "group_offsets",
    "num_group_tokens": "group_tokens",
    "num_rest_bytes": "group_rest",
    "num_label_bytes": "label_bytes",
    "num_grammar_text": "grammar_text",
    "num_after": "after_lengths",
    "num_after_bytes": "after_bytes",
    "num_grammar_slots": "grammar_slots",
    "num_info_bytes": "info",
    "num_dfa_offsets": "dfa_offsets",
    "num_dfa_edges": "dfa_bytes",
}
"""The section each of the header's totals counts (beyond the slots and grammars)."""


def _cat(parts: Sequence[np.ndarray], dtype: str) -> np.ndarray:
    if not parts:
        return np.zeros(0, dtype=np.dtype(dtype))
    return np.concatenate([np.asarray(p).astype(np.dtype(dtype), copy=False) for p in parts])


def _label_offsets(labels: list[bytes]) -> np.ndarray:
    out = np.zeros(len(labels) + 1, dtype=np.int64)
    np.cumsum([len(h) for h in labels], out=out[1:])
    return out


def _slot_rows(parts: Parts, s: Slot) -> bytes:
    """Append the slot's rows (its trie's, or its DFA's) to ``parts``; returns its pattern's text (b"" for an enum)."""
    trie = s.trie
    if trie.num_allowed >= 2**32:
        raise ArtifactError(f"{trie.num_allowed} allowed pairs in one slot exceed the format's u32 offsets")
    if not isinstance(s, PatternSlot):
        for name in ("allowed_offsets", "allowed_tokens", "allowed_next", "value_state", "value_lcp", "state_byte"):
            parts[name].append(getattr(trie, name))
        return b""
    pt = s.table  # its DFA's rows in the trie's sections; no prefix sums, no state bytes
    for name in ("allowed_offsets", "allowed_tokens", "allowed_next", "value_state"):
        parts[name].append(getattr(pt, name))
    parts["value_lcp"].append(np.zeros(pt.num_values, dtype=np.int32))
    parts["state_byte"].append(np.zeros(pt.num_states, dtype=np.uint8))
    for name in ("dfa_offsets", "dfa_bytes", "dfa_next"):
        parts[name].append(getattr(pt, name))
    return pt.pattern.encode("utf-8")


def _group_parts(parts: Parts, g: Groups) -> list[int]:
    """Append one group set to ``parts``; returns its ``slot_table`` columns (groups, tokens, rest and label bytes)."""
    parts["group_offsets"].append(g.offsets)
    parts["group_tokens"].append(g.tokens)
    parts["group_kind"].append(g.kind)
    parts["group_target"].append(g.target)
    parts["group_leaf"].append(g.leaf)
    parts["group_rest_offsets"].append(g.rest_offsets)
    parts["group_rest"].append(g.rest)
    parts["group_rest_token"].append(g.rest_token)
    parts["label_offsets"].append(_label_offsets(g.labels))
    parts["label_bytes"].append(np.frombuffer(b"".join(g.labels), dtype=np.uint8))
    return [g.num_groups, int(g.tokens.shape[0]), int(g.rest.shape[0]), sum(map(len, g.labels))]


def _slot_parts(parts: Parts, s: Slot, patterned: bool) -> list[int]:
    """Append one slot's arrays to ``parts``; returns its ``slot_table`` row (:data:`SLOT_FIELDS`)."""
    trie = s.trie
    pattern = _slot_rows(parts, s)
    marker = s.marker.encode("utf-8")
    parts["slot_text"].append(np.frombuffer(s.tail + marker + pattern, dtype=np.uint8))
    parts["entry_state"].append(s.entry_state)
    parts["entry_group"].append(s.entry_group)
    parts["entry_leaf"].append(s.entry_leaf)
    if s.value_grammar is not None:
        parts["value_grammar"].append(s.value_grammar)
    row = [
        trie.num_states,
        trie.num_allowed,
        trie.num_values,
        int(s.entry_state.shape[0]),
        len(s.tail),
        len(marker),
        int(s.enter_state),
        int(s.value_grammar is not None),
    ]
    for g in (s.exits, _NO_GROUPS, s.enters):  # tail groups are derived from the vocabulary at bind (Slot.bind)
        row += _group_parts(parts, g)
    row.append(int(s.open))
    if patterned:
        row += [len(pattern), int(s.table.dfa_bytes.shape[0]) if isinstance(s, PatternSlot) else 0]
    return row


def _grammar_parts(parts: Parts, gr: Grammar) -> list[int]:
    """Append one grammar's texts and slots to ``parts``; returns its ``grammar_table`` row (:data:`GRAMMAR_FIELDS`)."""
    text = gr.spec.schema.encode("utf-8")
    parts["grammar_text"].append(np.frombuffer(text + gr.template, dtype=np.uint8))
    after = [a.encode("utf-8") for a in gr.spec.after]
    parts["after_lengths"].append(np.array([len(a) for a in after], dtype=np.int64))
    parts["after_bytes"].append(np.frombuffer(b"".join(after), dtype=np.uint8))
    parts["grammar_slots"].append(np.array(gr.slots, dtype=np.int64))
    return [
        len(text),
        len(gr.template),
        len(after),
        len(gr.slots),
        GRAMMAR_KINDS.index(gr.spec.kind),
        WHITESPACE.index(gr.spec.whitespace),
    ]


def _totals(table: SchemaTable, arrays: dict[str, np.ndarray], patterned: bool) -> dict[str, int]:
    """The header's totals (:data:`HEADER_COUNTS`, or version 5's, in that order) of the concatenated sections."""
    totals = {"num_slots": len(table.slots), "num_grammars": len(table.grammars)}
    for key in (PATTERN_HEADER_COUNTS if patterned else HEADER_COUNTS)[2:]:
        totals[key] = int(arrays[_COUNTED[key]].shape[0])
    totals["num_groups"] -= 3 * len(table.slots)  # each group set's offsets hold one more than its groups
    return totals


def encode_schema_artifact(table: SchemaTable) -> bytes:
    """The version-3 bytes of a schema table: a pure function of it (same table, same bytes)."""
    import msgpack

    patterned = any(isinstance(s, PatternSlot) for s in table.slots)
    layout = PATTERN_LAYOUT if patterned else LAYOUT
    parts: Parts = {name: [] for name, _ in layout}
    rows = [_slot_parts(parts, s, patterned) for s in table.slots]
    grows = [_grammar_parts(parts, gr) for gr in table.grammars]
    info = msgpack.packb(table.info, use_bin_type=True)
    parts["slot_table"] = [np.array(rows, dtype=np.int64).reshape(-1)]
    parts["grammar_table"] = [np.array(grows, dtype=np.int64).reshape(-1)]
    parts["info"] = [np.frombuffer(info, dtype=np.uint8)]
    arrays = {name: _cat(parts[name], dtype) for name, dtype in layout}
    schema: dict[str, Any] = {
        "engine": table.engine,
        "engine_version": table.engine_version or "",
        "convention": table.convention,
        "start_slot": table.start_slot,
        "start_grammar": table.start_grammar,
        **_totals(table, arrays, patterned),
    }
    header = encode_header(FORMAT_NAME, table.table_header, {}, {"schema": schema})
    version = SCHEMA_PATTERNS_FORMAT_VERSION if patterned else SCHEMA_FORMAT_VERSION
    return container.encode(header, [(name, dtype, arrays[name]) for name, dtype in layout], version)
