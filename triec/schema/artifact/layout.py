"""The ``triec-schema`` layout, versions 3 and 5: the sections, the columns of the slot and grammar tables, the
header's totals, and each section's count from them (docs/format.md).

Every slot (its trie's six arrays, its exit entries, its three groups of crossing tokens, the grammar each value
picks, its tail and marker) and every grammar (schema text, the literal texts after it, the template text, the
slots it holds) lie in 28 sections whose number does not depend on how many slots or grammars there are: each array
of every slot is concatenated in slot order, and two small tables (``slot_table``, ``grammar_table``) give each
one's counts. The header holds totals only, so a registry of 10,000 grammars keeps it a few hundred bytes.
Version 5 adds the pattern slots' DFAs. Written by :mod:`~triec.schema.artifact.encode`, read by
:mod:`~triec.schema.artifact.load`.
"""

from __future__ import annotations

from triec.runtime.kinds import TableKind

FORMAT_NAME = TableKind.TOOL_SCHEMA.format_name

GROUP_SETS = ("exits", "tails", "enters")
"""The three groups of crossing tokens of every slot, in file order."""

SLOT_FIELDS: tuple[str, ...] = (
    "num_states",
    "num_allowed",
    "num_values",
    "num_entries",
    "tail_bytes",
    "marker_bytes",
    "enter_state",
    "value_grammar",
    *(f"{g}_{c}" for g in GROUP_SETS for c in ("groups", "tokens", "rest_bytes", "label_bytes")),
    "open",
)
"""Columns of ``slot_table``, one row per slot (``enter_state`` is -1 for a slot never entered from a grammar;
``value_grammar`` is 1 when the slot's values each pick the grammar that follows; ``open`` is the byte every key
starts with after the entry state: ``"`` for an enum's JSON strings)."""

GRAMMAR_FIELDS: tuple[str, ...] = ("schema_bytes", "template_bytes", "num_after", "num_slots", "kind", "whitespace")
"""Columns of ``grammar_table``, one row per grammar (``kind`` and ``whitespace`` as indices of :data:`GRAMMAR_KINDS`
and :data:`WHITESPACE`)."""

GRAMMAR_KINDS = ("json", "structural_tag")
"""What a grammar's text is: a JSON Schema, or an xgrammar structural tag (its JSON text)."""

WHITESPACE = ("compact", "any")
"""How a grammar's JSON is spaced: the compact convention, or any whitespace between tokens."""

LAYOUT: tuple[tuple[str, str], ...] = (
    ("slot_table", "<i8"),
    ("allowed_offsets", "<u4"),
    ("allowed_tokens", "<i4"),
    ("allowed_next", "<i4"),
    ("value_state", "<i4"),
    ("value_lcp", "<i4"),
    ("state_byte", "|u1"),
    ("slot_text", "|u1"),
    ("entry_state", "<i4"),
    ("entry_group", "<i4"),
    ("entry_leaf", "<i4"),
    ("value_grammar", "<i4"),
    ("group_offsets", "<u4"),
    ("group_tokens", "<i4"),
    ("group_kind", "|i1"),
    ("group_target", "<i4"),
    ("group_leaf", "<i4"),
    ("group_rest_offsets", "<u4"),
    ("group_rest", "|u1"),
    ("group_rest_token", "<i4"),
    ("label_offsets", "<u4"),
    ("label_bytes", "|u1"),
    ("grammar_table", "<i8"),
    ("grammar_text", "|u1"),
    ("after_lengths", "<u4"),
    ("after_bytes", "|u1"),
    ("grammar_slots", "<i4"),
    ("info", "|u1"),
)
"""The version-3 sections, in file order."""

PATTERN_SLOT_FIELDS: tuple[str, ...] = (*SLOT_FIELDS, "pattern_bytes", "dfa_edges")
"""Version 5's ``slot_table`` columns: version 3's, then each pattern slot's regex length (its text follows the
marker in ``slot_text``; 0 for an enum's slot) and its DFA's edge count."""

PATTERN_LAYOUT: tuple[tuple[str, str], ...] = (
    *LAYOUT[:-1],
    ("dfa_offsets", "<u4"),
    ("dfa_bytes", "|u1"),
    ("dfa_next", "<i4"),
    LAYOUT[-1],
)
"""The version-5 sections: version 3's, with the pattern slots' DFAs (concatenated in slot order) before ``info``."""


HEADER_COUNTS: tuple[str, ...] = (
    "num_slots",
    "num_grammars",
    "num_states",
    "num_allowed",
    "num_values",
    "num_entries",
    "num_value_grammar",
    "num_slot_text",
    "num_groups",
    "num_group_tokens",
    "num_rest_bytes",
    "num_label_bytes",
    "num_grammar_text",
    "num_after",
    "num_after_bytes",
    "num_grammar_slots",
    "num_info_bytes",
)
"""The totals of the header's ``schema`` map, in the order written."""

PATTERN_HEADER_COUNTS: tuple[str, ...] = (*HEADER_COUNTS, "num_dfa_offsets", "num_dfa_edges")
"""Version 5's totals: version 3's, then the pattern slots' DFA offsets (states + 1 each) and edges."""


def section_counts(n: dict[str, int]) -> dict[str, int]:
    """Each section's element count from the header's totals (version 5's when they hold the DFAs' counts)."""
    sets = 3 * n["num_slots"]
    patterned = "num_dfa_edges" in n
    out = {
        "slot_table": n["num_slots"] * len(PATTERN_SLOT_FIELDS if patterned else SLOT_FIELDS),
        "allowed_offsets": n["num_states"] + n["num_slots"],
        "allowed_tokens": n["num_allowed"],
        "allowed_next": n["num_allowed"],
        "value_state": n["num_values"],
        "value_lcp": n["num_values"],
        "state_byte": n["num_states"],
        "slot_text": n["num_slot_text"],
        "entry_state": n["num_entries"],
        "entry_group": n["num_entries"],
        "entry_leaf": n["num_entries"],
        "value_grammar": n["num_value_grammar"],
        "group_offsets": n["num_groups"] + sets,
        "group_tokens": n["num_group_tokens"],
        "group_kind": n["num_group_tokens"],
        "group_target": n["num_group_tokens"],
        "group_leaf": n["num_group_tokens"],
        "group_rest_offsets": n["num_group_tokens"] + sets,
        "group_rest": n["num_rest_bytes"],
        "group_rest_token": n["num_group_tokens"],
        "label_offsets": n["num_groups"] + sets,
        "label_bytes": n["num_label_bytes"],
        "grammar_table": n["num_grammars"] * len(GRAMMAR_FIELDS),
        "grammar_text": n["num_grammar_text"],
        "after_lengths": n["num_after"],
        "after_bytes": n["num_after_bytes"],
        "grammar_slots": n["num_grammar_slots"],
        "info": n["num_info_bytes"],
    }
    if patterned:
        out.update(dfa_offsets=n["num_dfa_offsets"], dfa_bytes=n["num_dfa_edges"], dfa_next=n["num_dfa_edges"])
    return out
