"""Load checks of a schema table (formats 3 and 5) that make what loads safe to serve (issues 49, 50).

The header's ``schema`` map (:func:`layout_counts`), the slot and grammar tables' counts against its totals, every
index a matcher follows in one slot (:func:`check_slot`, each load; with ``verify``, :func:`verify_slot`: order and
kinds), and what the serving path reads besides: header fields read without a use that would refuse them (the
convention), a trie slot's rows in the order ``advance`` searches them, its keys decoding to the values
``values_of`` returns, and the ``info`` fields the table reads. Each raises :class:`~triec.errors.ArtifactError`
(the header) or :class:`~triec.errors.ArtifactContentError` naming the section, in one line; each is vectorized or
one C-level parse, so a load stays at the price of the index checks. :mod:`~triec.schema.artifact.load` calls them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from triec.artifact.container import SCHEMA_FORMAT_VERSION, SCHEMA_PATTERNS_FORMAT_VERSION
from triec.errors import ArtifactContentError, ArtifactError
from triec.schema.artifact.layout import (
    GRAMMAR_FIELDS,
    GRAMMAR_KINDS,
    GROUP_SETS,
    HEADER_COUNTS,
    LAYOUT,
    PATTERN_HEADER_COUNTS,
    PATTERN_LAYOUT,
    WHITESPACE,
    section_counts,
)
from triec.schema.shape import CONVENTION
from triec.schema.slot import DYNAMIC, HANDOVER, KINDS, TAIL, TRIE, Groups
from triec.schema.table import ENGINES

if TYPE_CHECKING:
    from triec.runtime.pattern import PatternTable
    from triec.runtime.table import MaskTable

Fail = Callable[[str, str], ArtifactContentError]
"""The error for one section of one file: ``fail(section, message)``."""


def section_error(source: str) -> Fail:
    """``fail(section, message)``: the content error naming ``source``'s section."""

    def fail(section: str, msg: str) -> ArtifactContentError:
        return ArtifactContentError(f"{source}: section {section}: {msg}")

    return fail


def check_convention(schema: dict[str, Any], source: str) -> None:
    """The header's ``convention`` is the one triec writes and serves (:data:`~triec.schema.shape.CONVENTION`):
    the grammars were compiled in it, so any other value (another type, a number for ``property_order``) describes
    a table this triec never wrote."""
    found = schema.get("convention")
    if found != CONVENTION:
        raise ArtifactError(
            f"{source}: header field 'schema': 'convention': expected {CONVENTION}, found {found!r:.80}"
        )


def engine_fields(schema: dict[str, Any]) -> dict[str, Any]:
    """The header's ``schema`` map's engine, its version and the convention (checked by :func:`layout_counts` or
    the first layout's reader), as a schema table's keyword arguments."""
    return {
        "engine": schema["engine"],
        "engine_version": schema["engine_version"] or None,
        "convention": schema["convention"],
    }


def check_rows_ascending(offsets: np.ndarray, tokens: np.ndarray, where: str) -> None:
    """A trie slot's tokens strictly ascend within each state: ``advance`` binary-searches the row that ``allowed``
    lists whole, so a row out of order (a zeroed run) would list a token it then refuses. O(P + S) vectorized."""
    p = int(tokens.shape[0])
    if p < 2:
        return
    step = tokens[1:].astype(np.int64) - tokens[:-1]
    starts = np.zeros(p, dtype=bool)
    off = np.asarray(offsets[1:-1], dtype=np.int64)
    starts[off[off < p]] = True
    if ((step <= 0) & ~starts[1:]).any():
        raise ArtifactContentError(
            f"{where}: section allowed_tokens: expected strictly ascending ids within each state"
        )


def check_info(info: dict[str, Any], source: str) -> None:
    """The ``info`` fields the table itself reads (``prefix``, ``shape``) have their types."""
    for key in ("prefix", "shape"):
        if key in info and not isinstance(info[key], str):
            raise ArtifactContentError(f"{source}: section info: {key!r}: expected a string, found {info[key]!r:.40}")


def check_slot_values(keys: Sequence[bytes], skip: int, as_json: bool, where: str) -> None:
    """A trie slot's keys decode to the values ``values_of`` returns: UTF-8, and (``as_json``) each past its first
    ``skip`` bytes one JSON string literal. One parse of all keys as a JSON array of exactly ``len(keys)`` strings
    (a C-level pass; a key holding a separator would change the count), rather than one call per key."""
    try:
        texts = [k[skip:].decode("utf-8") for k in keys]
    except UnicodeDecodeError:
        raise ArtifactContentError(f"{where}: section state_byte: a value is not valid UTF-8") from None
    if not as_json or not texts:
        return
    try:
        values = json.loads("[" + ",".join(texts) + "]")
    except (json.JSONDecodeError, RecursionError):
        values = None
    if not (isinstance(values, list) and len(values) == len(texts) and all(isinstance(v, str) for v in values)):
        raise ArtifactContentError(f"{where}: section state_byte: a value is not a JSON string literal")


# ---------------------------------------------------------------- the header's schema map


def layout_counts(
    header: dict[str, Any], source: str, version: int = SCHEMA_FORMAT_VERSION
) -> tuple[tuple[tuple[str, str], ...], dict[str, int]]:
    """The version-3 (or 5) layout and each section's count, from the header's ``schema`` map (checked here)."""
    patterned = version == SCHEMA_PATTERNS_FORMAT_VERSION
    schema = header.get("schema")

    def fail(msg: str) -> ArtifactError:
        return ArtifactError(f"{source}: header field 'schema': {msg}")

    if not isinstance(schema, dict):
        raise fail(f"expected a map, found {schema!r:.40}")
    if schema.get("engine") not in ENGINES:
        raise fail(f"'engine': expected {' or '.join(ENGINES)}, found {schema.get('engine')!r:.40}")
    if not isinstance(schema.get("engine_version"), str):
        raise fail(f"'engine_version': expected a string, found {schema.get('engine_version')!r:.40}")
    check_convention(schema, source)
    n: dict[str, int] = {}
    for key in PATTERN_HEADER_COUNTS if patterned else HEADER_COUNTS:
        v = schema.get(key)
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 2**40:
            raise fail(f"{key!r}: expected an integer in 0..2^40-1, found {v!r:.40}")
        n[key] = v
    if n["num_slots"] < 1:
        raise fail("'num_slots': a schema table holds at least one slot")
    for key, upper in (("start_slot", n["num_slots"]), ("start_grammar", n["num_grammars"])):
        v = schema.get(key)
        if not isinstance(v, int) or isinstance(v, bool) or not -1 <= v < upper:
            raise fail(f"{key!r}: expected an integer in -1..{upper - 1}, found {v!r:.40}")
    if (schema["start_slot"] < 0) == (schema["start_grammar"] < 0):
        raise fail("exactly one of 'start_slot' and 'start_grammar' is -1")
    return (PATTERN_LAYOUT if patterned else LAYOUT), section_counts(n)


# ---------------------------------------------------------------- the slot and grammar tables


def check_slot_table(
    table: np.ndarray, fields: tuple[str, ...], schema: dict[str, Any], version: int, fail: Fail
) -> dict[str, np.ndarray]:
    """``slot_table``'s columns by name, each row's counts in range and their sums the header's totals."""
    col = {name: table[:, i] for i, name in enumerate(fields)}
    if table.size and (np.delete(table, fields.index("enter_state"), axis=1) < 0).any():
        raise fail("slot_table", "counts must not be negative")
    if (col["enter_state"] < -1).any() or (col["enter_state"] >= col["num_states"]).any():
        raise fail("slot_table", "enter_state must be -1 or a state of its slot")
    if not np.isin(col["value_grammar"], (0, 1)).all():
        raise fail("slot_table", "value_grammar must be 0 or 1")
    if (col["open"] > 255).any():
        raise fail("slot_table", "open must be a byte (0..255)")
    if (col["num_states"] < 1).any() or (col["num_values"] < 1).any():
        raise fail("slot_table", "every slot holds at least one state and one value")
    if (col["tails_groups"] != 0).any():
        raise fail("slot_table", "a slot's tail groups are derived from the vocabulary; the file holds none")
    pattern_len = col.get("pattern_bytes", np.zeros(table.shape[0], dtype=np.int64))
    is_pattern = pattern_len > 0
    totals = {
        "num_states": col["num_states"],
        "num_allowed": col["num_allowed"],
        "num_values": col["num_values"],
        "num_entries": col["num_entries"],
        "num_slot_text": col["tail_bytes"] + col["marker_bytes"] + pattern_len,
        "num_value_grammar": col["num_values"] * col["value_grammar"],
        "num_groups": sum(col[f"{g}_groups"] for g in GROUP_SETS),
        "num_group_tokens": sum(col[f"{g}_tokens"] for g in GROUP_SETS),
        "num_rest_bytes": sum(col[f"{g}_rest_bytes"] for g in GROUP_SETS),
        "num_label_bytes": sum(col[f"{g}_label_bytes"] for g in GROUP_SETS),
    }
    if version == SCHEMA_PATTERNS_FORMAT_VERSION:
        if ((col["dfa_edges"] > 0) & ~is_pattern).any():
            raise fail("slot_table", "an enum's slot holds no DFA (dfa_edges must be 0 where pattern_bytes is)")
        if (col["num_values"][is_pattern] != 1).any() or (col["value_grammar"][is_pattern] != 0).any():
            raise fail("slot_table", "a pattern slot has one accepting state and no value_grammar")
        totals["num_dfa_offsets"] = (col["num_states"] + 1) * is_pattern
        totals["num_dfa_edges"] = col["dfa_edges"]
    for key, per_slot in totals.items():
        if int(np.sum(per_slot)) != int(schema[key]):
            raise fail(
                "slot_table",
                f"the slots' counts add up to {int(np.sum(per_slot))}, header field {key!r} says {schema[key]}",
            )
    return col


def check_grammar_table(
    gtable: np.ndarray, schema: dict[str, Any], after_len: np.ndarray, fail: Fail
) -> dict[str, np.ndarray]:
    """``grammar_table``'s columns by name, each in range and their sums the header's totals (``after_lengths``'s too)."""
    gcol = {name: gtable[:, i] for i, name in enumerate(GRAMMAR_FIELDS)}
    if gtable.size and (gtable < 0).any():
        raise fail("grammar_table", "counts must not be negative")
    if (gcol["kind"] >= len(GRAMMAR_KINDS)).any() or (gcol["whitespace"] >= len(WHITESPACE)).any():
        raise fail(
            "grammar_table", f"kind must lie in 0..{len(GRAMMAR_KINDS) - 1}, whitespace in 0..{len(WHITESPACE) - 1}"
        )
    for key, per in (
        ("num_grammar_text", gcol["schema_bytes"] + gcol["template_bytes"]),
        ("num_after", gcol["num_after"]),
        ("num_grammar_slots", gcol["num_slots"]),
    ):
        if int(np.sum(per)) != int(schema[key]):
            raise fail(
                "grammar_table",
                f"the grammars' counts add up to {int(np.sum(per))}, header field {key!r} says {schema[key]}",
            )
    if int(after_len.sum()) != int(schema["num_after_bytes"]):
        raise fail(
            "after_lengths", f"the lengths add up to {int(after_len.sum())}, not {schema['num_after_bytes']} bytes"
        )
    return gcol


# ---------------------------------------------------------------- one slot's arrays


@dataclass(frozen=True)
class SlotArrays:
    """One slot's arrays as a file holds them, before they make a :class:`~triec.schema.slot.Slot`: what
    :func:`check_slot` and :func:`verify_slot` read."""

    trie: MaskTable | PatternTable
    tail: bytes
    exits: Groups
    tails: Groups  # as written: none (derived from the vocabulary at bind)
    enters: Groups
    entry_state: np.ndarray
    entry_group: np.ndarray
    entry_leaf: np.ndarray
    value_grammar: np.ndarray | None
    enter_state: int

    @property
    def group_sets(self) -> tuple[tuple[str, Groups], ...]:
        """The three group sets by name, in file order (:data:`GROUP_SETS`)."""
        return tuple(zip(GROUP_SETS, (self.exits, self.tails, self.enters), strict=True))


def _outside(a: np.ndarray, lo: int, hi: int) -> bool:
    """Whether any element of ``a`` lies outside ``lo .. hi - 1``."""
    return bool(a.size) and (int(a.min()) < lo or int(a.max()) >= hi)


def check_slot(i: int, slot: SlotArrays, num_grammars: int, eos: np.ndarray, fail: Fail, verify: bool) -> None:
    """Every index a matcher follows in one slot (each load), and with ``verify`` the order and kinds."""
    trie = slot.trie
    s_n, k_n, t_n, vocab_size = trie.num_states, trie.num_values, len(slot.tail), trie.vocab_size
    if _outside(slot.entry_state, 0, s_n):
        raise fail("entry_state", f"slot {i}: states must lie in 0..{s_n - 1}")
    if _outside(slot.entry_group, 0, slot.exits.num_groups):
        raise fail("entry_group", f"slot {i}: groups must lie in 0..{slot.exits.num_groups - 1} (its exit heads)")
    if _outside(slot.entry_leaf, 0, k_n):
        raise fail("entry_leaf", f"slot {i}: values must lie in 0..{k_n - 1}")
    if slot.value_grammar is not None and _outside(slot.value_grammar, 0, num_grammars):
        raise fail("value_grammar", f"slot {i}: grammars must lie in 0..{num_grammars - 1}")
    for name, g in slot.group_sets:
        tok = g.tokens
        if _outside(tok, 0, vocab_size) or (eos.size and np.isin(tok, eos).any()):
            raise fail("group_tokens", f"slot {i} {name}: ids must be content tokens in 0..{vocab_size - 1}")
        if _outside(g.kind, 0, len(KINDS)):
            raise fail("group_kind", f"slot {i} {name}: kinds must lie in 0..{len(KINDS) - 1}")
        target = g.target
        if _outside(target[g.kind == TRIE], 0, s_n):
            raise fail("group_target", f"slot {i} {name}: a trie target must be a state in 0..{s_n - 1}")
        if _outside(target[g.kind == TAIL], 0, t_n):
            raise fail("group_target", f"slot {i} {name}: a tail target must be an offset in 0..{t_n - 1}")
        if _outside(g.leaf, -1, k_n) or (name == "enters" and _outside(g.leaf[g.kind != TRIE], 0, k_n)):
            raise fail("group_leaf", f"slot {i} {name}: values must lie in 0..{k_n - 1}")
        if _outside(g.rest_token, -1, vocab_size):
            raise fail("group_rest_token", f"slot {i} {name}: ids must lie in -1..{vocab_size - 1}")
    if any(not h for h in slot.enters.labels):
        raise fail("label_bytes", f"slot {i}: an entering head is empty")
    if verify:
        verify_slot(i, slot, fail)


def verify_slot(i: int, slot: SlotArrays, fail: Fail) -> None:
    """``verify=True`` checks of one slot beyond its indices: entries and group tokens in order, each kind's rest,
    leaf and target where it belongs."""
    leaves = np.asarray(slot.trie.value_state, dtype=np.int64)
    e64, g64 = slot.entry_state.astype(np.int64), slot.entry_group.astype(np.int64)
    if e64.size:
        key = e64 * (slot.exits.num_groups + 1) + g64
        if (np.diff(key) <= 0).any():
            raise fail("entry_state", f"slot {i}: entries must be ascending by (state, group), each once")
        if np.isin(e64, leaves).any():
            raise fail("entry_state", f"slot {i}: an exit entry starts at a key's end")
    for name, g in slot.group_sets:
        tok = g.tokens.astype(np.int64)
        if tok.size:
            grp = np.repeat(np.arange(g.num_groups), np.diff(g.offsets))
            if ((grp[1:] == grp[:-1]) & (tok[1:] <= tok[:-1])).any():
                raise fail("group_tokens", f"slot {i} {name}: ids must be strictly ascending within each group")
        kind = g.kind.astype(np.int64)
        has_rest = np.diff(g.rest_offsets) > 0
        if (has_rest & ~np.isin(kind, (HANDOVER, DYNAMIC))).any() or (~has_rest & (kind == DYNAMIC)).any():
            raise fail("group_rest_offsets", f"slot {i} {name}: exactly the tokens read past the tail carry a rest")
        if (g.rest_token[kind != DYNAMIC] != -1).any():
            raise fail("group_rest_token", f"slot {i} {name}: only a token read past the tail has a rest token")
        if name != "enters" and (kind == TRIE).any():
            raise fail("group_kind", f"slot {i} {name}: only an entering token lands inside the trie")
        if name != "enters" and (g.leaf != -1).any():
            raise fail("group_leaf", f"slot {i} {name}: the value is the entry's or the position's, not the token's")
        if name == "exits" and any(not h for h in g.labels):
            raise fail("label_bytes", f"slot {i}: an exit head is empty")
    tails = slot.tails
    for j in range(tails.num_groups):  # tail group j reads tail[j:]: targets beyond its own offset
        lo, hi = tails.span(j)
        t = tails.target[lo:hi][tails.kind[lo:hi] == TAIL]
        if t.size and int(t.min()) <= j:
            raise fail("group_target", f"slot {i} tails: group {j} must lead past offset {j}")
    if slot.enter_state < 0 and slot.enters.num_groups:
        raise fail("label_offsets", f"slot {i}: entering heads for a slot that is never entered")
