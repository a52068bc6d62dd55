"""The ``triec-schema`` artifact: a compiled schema's slots and grammars on the container (docs/format.md).

Version 3 (written): every slot (its trie's six arrays, its exit entries, its
three groups of crossing tokens, the grammar each value picks, its tail and
marker) and every grammar (schema text, the literal texts after it, the
template text, the slots it holds) lie in 28 sections whose number does not
depend on how many slots or grammars there are: each array of every slot is
concatenated in slot order, and two small tables (``slot_table``,
``grammar_table``) give each one's counts. The header holds totals only, so a
registry of 10,000 grammars keeps it a few hundred bytes (it is capped at 1 MiB).

Versions 1 and 2 (the first schema layout, D19; read, never written): the trie
of the name keys, then ten sections of (state, head) entries and straddle
tables, and a ``schema`` map recording the literal prefix, tail and
continuation. Such a file is converted on load into one start slot and one
grammar that serve exactly what it served.

numpy only, like the loader: no engine is imported before a matcher is made.
This module registers the format with :mod:`triec.artifact.formats`, which loading
and saving dispatch through (``table.kind`` is ``TableKind.TOOL_SCHEMA``, or the
header's format is this one); the first layout's mask sections are read by
:mod:`triec.artifact.masks`.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

import numpy as np

from triec._version import __version__
from triec.artifact import container, formats, masks
from triec.artifact.container import (
    ENCODED_FORMAT_VERSION,
    PLAIN_FORMAT_VERSION,
    SCHEMA_FORMAT_VERSION,
    SCHEMA_PATTERNS_FORMAT_VERSION,
)
from triec.errors import ArtifactContentError, ArtifactError
from triec.runtime.kinds import TableKind
from triec.runtime.pattern import PatternTable
from triec.runtime.table import MaskTable
from triec.schema.artifact_checks import check_convention, check_info, check_rows_ascending, check_slot_values
from triec.schema.grammar import GrammarSpec
from triec.schema.pattern_slot import PatternSlot
from triec.schema.slot import DYNAMIC, HANDOVER, KINDS, TAIL, TRIE, Groups, Slot
from triec.schema.table import ENGINES, Grammar, SchemaTable

if TYPE_CHECKING:
    from collections.abc import Sequence

FORMAT_NAME = TableKind.TOOL_SCHEMA.format_name

# ---------------------------------------------------------------- version 3: slots and grammars

GROUP_SETS = ("exits", "tails", "enters")
_NO_GROUPS = Groups.pack([], [], {})
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


def _section_counts(n: dict[str, int]) -> dict[str, int]:
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


def _cat(parts: Sequence[np.ndarray], dtype: str) -> np.ndarray:
    if not parts:
        return np.zeros(0, dtype=np.dtype(dtype))
    return np.concatenate([np.asarray(p).astype(np.dtype(dtype), copy=False) for p in parts])


def _label_offsets(labels: list[bytes]) -> np.ndarray:
    out = np.zeros(len(labels) + 1, dtype=np.int64)
    np.cumsum([len(h) for h in labels], out=out[1:])
    return out


def encode_schema_artifact(table: SchemaTable) -> bytes:
    """The version-3 bytes of a schema table: a pure function of it (same table, same bytes)."""
    import msgpack

    patterned = any(isinstance(s, PatternSlot) for s in table.slots)
    layout = PATTERN_LAYOUT if patterned else LAYOUT
    parts: dict[str, list[np.ndarray]] = {name: [] for name, _ in layout}
    rows: list[list[int]] = []
    for s in table.slots:
        trie = s.trie
        if trie.num_allowed >= 2**32:
            raise ArtifactError(f"{trie.num_allowed} allowed pairs in one slot exceed the format's u32 offsets")
        pattern = b""
        if isinstance(s, PatternSlot):  # its DFA's rows in the trie's sections; no prefix sums, no state bytes
            pt = s.table
            for name in ("allowed_offsets", "allowed_tokens", "allowed_next", "value_state"):
                parts[name].append(getattr(pt, name))
            parts["value_lcp"].append(np.zeros(pt.num_values, dtype=np.int32))
            parts["state_byte"].append(np.zeros(pt.num_states, dtype=np.uint8))
            for name in ("dfa_offsets", "dfa_bytes", "dfa_next"):
                parts[name].append(getattr(pt, name))
            pattern = pt.pattern.encode("utf-8")
        else:
            for name in ("allowed_offsets", "allowed_tokens", "allowed_next", "value_state", "value_lcp", "state_byte"):
                parts[name].append(getattr(trie, name))
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
            row += [g.num_groups, int(g.tokens.shape[0]), int(g.rest.shape[0]), sum(map(len, g.labels))]
        row.append(int(s.open))
        if patterned:
            row += [len(pattern), int(s.table.dfa_bytes.shape[0]) if isinstance(s, PatternSlot) else 0]
        rows.append(row)
    grows: list[list[int]] = []
    for gr in table.grammars:
        text = gr.spec.schema.encode("utf-8")
        parts["grammar_text"].append(np.frombuffer(text + gr.template, dtype=np.uint8))
        after = [a.encode("utf-8") for a in gr.spec.after]
        parts["after_lengths"].append(np.array([len(a) for a in after], dtype=np.int64))
        parts["after_bytes"].append(np.frombuffer(b"".join(after), dtype=np.uint8))
        parts["grammar_slots"].append(np.array(gr.slots, dtype=np.int64))
        grows.append(
            [
                len(text),
                len(gr.template),
                len(after),
                len(gr.slots),
                GRAMMAR_KINDS.index(gr.spec.kind),
                WHITESPACE.index(gr.spec.whitespace),
            ]
        )
    info = msgpack.packb(table.info, use_bin_type=True)
    parts["slot_table"] = [np.array(rows, dtype=np.int64).reshape(-1)]
    parts["grammar_table"] = [np.array(grows, dtype=np.int64).reshape(-1)]
    parts["info"] = [np.frombuffer(info, dtype=np.uint8)]
    arrays = {name: _cat(parts[name], dtype) for name, dtype in layout}
    totals = {
        "num_slots": len(table.slots),
        "num_grammars": len(table.grammars),
        "num_states": int(arrays["state_byte"].shape[0]),
        "num_allowed": int(arrays["allowed_tokens"].shape[0]),
        "num_values": int(arrays["value_state"].shape[0]),
        "num_entries": int(arrays["entry_state"].shape[0]),
        "num_value_grammar": int(arrays["value_grammar"].shape[0]),
        "num_slot_text": int(arrays["slot_text"].shape[0]),
        "num_groups": int(arrays["group_offsets"].shape[0]) - 3 * len(table.slots),
        "num_group_tokens": int(arrays["group_tokens"].shape[0]),
        "num_rest_bytes": int(arrays["group_rest"].shape[0]),
        "num_label_bytes": int(arrays["label_bytes"].shape[0]),
        "num_grammar_text": int(arrays["grammar_text"].shape[0]),
        "num_after": int(arrays["after_lengths"].shape[0]),
        "num_after_bytes": int(arrays["after_bytes"].shape[0]),
        "num_grammar_slots": int(arrays["grammar_slots"].shape[0]),
        "num_info_bytes": len(info),
    }
    if patterned:
        totals["num_dfa_offsets"] = int(arrays["dfa_offsets"].shape[0])
        totals["num_dfa_edges"] = int(arrays["dfa_bytes"].shape[0])
    first = table.slots[0].trie
    header: dict[str, Any] = {
        "format": FORMAT_NAME,
        "triec_version": __version__,
        "tokenizer": {"name": first.tokenizer_name, "fingerprint": first.tokenizer_fingerprint},
        "vocab_size": first.vocab_size,
        "eos_token_ids": list(first.eos_token_ids),
        "build_options": first.build_options,
        "schema": {
            "engine": table.engine,
            "engine_version": table.engine_version or "",
            "convention": table.convention,
            "start_slot": table.start_slot,
            "start_grammar": table.start_grammar,
            **totals,
        },
    }
    version = SCHEMA_PATTERNS_FORMAT_VERSION if patterned else SCHEMA_FORMAT_VERSION
    return container.encode(header, [(name, dtype, arrays[name]) for name, dtype in layout], version)


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
    return (PATTERN_LAYOUT if patterned else LAYOUT), _section_counts(n)


def load_schema_artifact(
    header: dict[str, Any],
    arrays: dict[str, np.ndarray],
    source: str,
    *,
    verify: bool = False,
    version: int = SCHEMA_FORMAT_VERSION,
) -> SchemaTable:
    """A version-3 table over checked sections: every index checked, with ``verify`` every content check."""
    import msgpack

    def fail(section: str, msg: str) -> ArtifactContentError:
        return ArtifactContentError(f"{source}: section {section}: {msg}")

    sch = header["schema"]
    vocab_size = int(header["vocab_size"])
    eos = np.asarray(header["eos_token_ids"], dtype=np.int64)
    num_slots, num_grammars = int(sch["num_slots"]), int(sch["num_grammars"])
    fields = PATTERN_SLOT_FIELDS if version == SCHEMA_PATTERNS_FORMAT_VERSION else SLOT_FIELDS
    table = np.asarray(arrays["slot_table"], dtype=np.int64).reshape(num_slots, len(fields))
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
    pattern_len = col.get("pattern_bytes", np.zeros(num_slots, dtype=np.int64))
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
        if int(np.sum(per_slot)) != int(sch[key]):
            raise fail(
                "slot_table",
                f"the slots' counts add up to {int(np.sum(per_slot))}, header field {key!r} says {sch[key]}",
            )
    gtable = np.asarray(arrays["grammar_table"], dtype=np.int64).reshape(num_grammars, len(GRAMMAR_FIELDS))
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
        if int(np.sum(per)) != int(sch[key]):
            raise fail(
                "grammar_table",
                f"the grammars' counts add up to {int(np.sum(per))}, header field {key!r} says {sch[key]}",
            )
    after_len = np.asarray(arrays["after_lengths"], dtype=np.int64)
    if int(after_len.sum()) != int(sch["num_after_bytes"]):
        raise fail("after_lengths", f"the lengths add up to {int(after_len.sum())}, not {sch['num_after_bytes']} bytes")
    build_options = header["build_options"]
    cursors = dict.fromkeys(
        (
            "states",
            "offsets",
            "allowed",
            "values",
            "text",
            "entries",
            "vg",
            "dfa_off",
            "dfa_edge",
            "goff",
            "tok",
            "rest",
            "roff",
            "lab",
            "loff",
        ),
        0,
    )
    slots: list[Slot] = []
    for i in range(num_slots):
        c = {name: int(col[name][i]) for name in fields}
        where = f"{source}: slot {i}"
        s_n, p_n, k_n = c["num_states"], c["num_allowed"], c["num_values"]

        def take(name: str, key: str, n: int) -> np.ndarray:
            lo = cursors[key]
            cursors[key] = lo + n
            return arrays[name][lo : lo + n]

        so, sa, sv = cursors["states"], cursors["allowed"], cursors["values"]
        off = take("allowed_offsets", "offsets", s_n + 1)
        cursors["states"] += s_n
        cursors["allowed"] += p_n
        cursors["values"] += k_n
        pattern_n = c.get("pattern_bytes", 0)
        slot_bytes = take("slot_text", "text", c["tail_bytes"] + c["marker_bytes"] + pattern_n).tobytes()
        tail = slot_bytes[: c["tail_bytes"]]
        try:
            marker = slot_bytes[c["tail_bytes"] : c["tail_bytes"] + c["marker_bytes"]].decode("utf-8")
            pattern = slot_bytes[c["tail_bytes"] + c["marker_bytes"] :].decode("utf-8")
        except UnicodeDecodeError:
            raise fail("slot_text", f"slot {i}: its marker or pattern is not UTF-8") from None
        trie: Any
        if pattern_n:
            trie = _pattern_table(i, c, arrays, cursors, pattern, off, so, sa, sv, header, version, verify, where, fail)
        else:
            check_rows_ascending(off, arrays["allowed_tokens"][sa : sa + p_n], where)
            trie = MaskTable.from_artifact(
                allowed_offsets=off,
                allowed_tokens=arrays["allowed_tokens"][sa : sa + p_n],
                allowed_next=arrays["allowed_next"][sa : sa + p_n],
                value_state=arrays["value_state"][sv : sv + k_n],
                value_lcp=arrays["value_lcp"][sv : sv + k_n],
                state_byte=arrays["state_byte"][so : so + s_n],
                vocab_size=vocab_size,
                eos_token_ids=header["eos_token_ids"],
                tokenizer_fingerprint=header["tokenizer"]["fingerprint"],
                tokenizer_name=header["tokenizer"]["name"],
                build_options=build_options,
                header=header,
                format_version=version,
                verify=verify,
                source=where,
            )
        e0, e_n = cursors["entries"], c["num_entries"]
        cursors["entries"] += e_n
        es, eg, el = (arrays[name][e0 : e0 + e_n] for name in ("entry_state", "entry_group", "entry_leaf"))
        vg = take("value_grammar", "vg", k_n) if c["value_grammar"] else None
        groups: list[Groups] = []
        for g in GROUP_SETS:
            ng, nt, nr, nl = (c[f"{g}_{x}"] for x in ("groups", "tokens", "rest_bytes", "label_bytes"))
            goff = take("group_offsets", "goff", ng + 1).astype(np.int64)
            roff = take("group_rest_offsets", "roff", nt + 1).astype(np.int64)
            loff = take("label_offsets", "loff", ng + 1).astype(np.int64)
            t0 = cursors["tok"]
            cursors["tok"] += nt
            rest = take("group_rest", "rest", nr)
            lab = take("label_bytes", "lab", nl).tobytes()
            for name, o, total in (
                ("group_offsets", goff, nt),
                ("group_rest_offsets", roff, nr),
                ("label_offsets", loff, nl),
            ):
                if o[0] != 0 or o[-1] != total or (np.diff(o) < 0).any():
                    raise fail(name, f"slot {i} {g}: offsets must run from 0 to {total} without decreasing")
            labels = [lab[int(a) : int(b)] for a, b in zip(loff[:-1].tolist(), loff[1:].tolist(), strict=True)]
            groups.append(
                Groups(
                    offsets=goff,
                    tokens=arrays["group_tokens"][t0 : t0 + nt],
                    kind=arrays["group_kind"][t0 : t0 + nt],
                    target=arrays["group_target"][t0 : t0 + nt],
                    leaf=arrays["group_leaf"][t0 : t0 + nt],
                    rest_offsets=roff,
                    rest=rest,
                    rest_token=arrays["group_rest_token"][t0 : t0 + nt],
                    labels=labels,
                )
            )
        exits, tails, enters = groups
        _check_slot(
            i,
            trie,
            tail,
            exits,
            tails,
            enters,
            es,
            eg,
            el,
            vg,
            c["enter_state"],
            num_grammars,
            vocab_size,
            eos,
            fail,
            verify,
        )
        # the tail's groups are not in the file: Slot.bind derives them from the vocabulary
        slot_class = PatternSlot if pattern_n else Slot
        slots.append(slot_class(trie, tail, c["enter_state"], marker, exits, es, eg, el, None, enters, vg, c["open"]))
    grammars: list[Grammar] = []
    gt = arrays["grammar_text"].tobytes()
    ab = arrays["after_bytes"].tobytes()
    held_by = np.asarray(arrays["grammar_slots"], dtype=np.int64)
    if held_by.size and (held_by.min() < 0 or held_by.max() >= num_slots):
        raise fail("grammar_slots", f"slots must lie in 0..{num_slots - 1}")
    if held_by.size and (np.asarray([s.enter_state for s in slots])[held_by] < 0).any():
        raise fail("grammar_slots", "a grammar holds a slot that is never entered (its enter_state is -1)")
    t_at = a_at = n_at = s_at = 0
    for j in range(num_grammars):
        sb, tb, na, ns, kind, space = (int(gcol[name][j]) for name in GRAMMAR_FIELDS)
        try:
            text = gt[t_at : t_at + sb].decode("utf-8")
            after = []
            for n in after_len[n_at : n_at + na].tolist():
                after.append(ab[a_at : a_at + n].decode("utf-8"))
                a_at += n
        except UnicodeDecodeError:
            raise fail("grammar_text", f"grammar {j}: its schema or literal texts are not UTF-8") from None
        template = gt[t_at + sb : t_at + sb + tb]
        t_at += sb + tb
        n_at += na
        held = tuple(held_by[s_at : s_at + ns].tolist())
        s_at += ns
        if verify:
            try:
                json.loads(text)
            except (ValueError, RecursionError):
                raise fail("grammar_text", f"grammar {j}: its schema is not JSON") from None
            if len(set(held)) != len(held):
                raise fail("grammar_slots", f"grammar {j} holds a slot twice")
        spec = GrammarSpec(text, tuple(after), kind=GRAMMAR_KINDS[kind], whitespace=WHITESPACE[space])
        grammars.append(Grammar(spec, template, held))
    start_slot, start_grammar = int(sch["start_slot"]), int(sch["start_grammar"])
    if start_slot >= 0 and slots[start_slot].value_grammar is None:
        raise fail("slot_table", f"the start slot {start_slot} has no value_grammar (nothing would follow its values)")
    try:
        info = msgpack.unpackb(arrays["info"].tobytes(), raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types
        raise fail("info", f"not valid msgpack ({type(exc).__name__})") from None
    if not isinstance(info, dict):
        raise fail("info", "expected a msgpack map")
    check_info(info, source)
    prefix_len = len(info.get("prefix", "").encode("utf-8"))
    for i, slot in enumerate(slots):  # values_of decodes these keys: they decode now or the load is refused
        if not isinstance(slot, PatternSlot):
            skip = prefix_len if i == start_slot else 0
            check_slot_values(slot.keys, skip, info.get("shape") != "structural-tag", f"{source}: slot {i}")
    where_slots = info.get("slots")
    for i, slot in enumerate(slots):  # a format field's name (the regex is the file's; the name only describes it)
        if isinstance(slot, PatternSlot) and isinstance(where_slots, list) and i < len(where_slots):
            fmt = where_slots[i].get("format") if isinstance(where_slots[i], dict) else None
            slot.table.format_name = fmt if isinstance(fmt, str) else None
    cls = ConvertedSchemaTable if "legacy_format" in info else SchemaTable
    return cls(
        slots=slots,
        grammars=grammars,
        start_slot=start_slot,
        start_grammar=start_grammar,
        engine=sch["engine"],
        engine_version=sch["engine_version"] or None,
        convention=sch["convention"],
        info=info,
        source=source,
        header=header,
    )


def _pattern_table(
    i: int,
    c: dict[str, int],
    arrays: dict[str, np.ndarray],
    cursors: dict[str, int],
    pattern: str,
    off: np.ndarray,
    so: int,
    sa: int,
    sv: int,
    header: dict[str, Any],
    version: int,
    verify: bool,
    where: str,
    fail: Any,
) -> PatternTable:
    """A pattern slot's table over its rows and DFA (every index checked; with ``verify`` every row against the
    DFA): one accepting state, after the closing quote, with no edge out of it."""
    s_n, p_n, e_n = c["num_states"], c["num_allowed"], c["dfa_edges"]
    d0, e0 = cursors["dfa_off"], cursors["dfa_edge"]
    cursors["dfa_off"] += s_n + 1
    cursors["dfa_edge"] += e_n
    if c["enter_state"] != 0 or c["open"] != 0x22 or c["tail_bytes"]:
        raise fail("slot_table", f"slot {i}: a pattern slot is entered at state 0 by its opening quote, no tail")
    table = PatternTable.from_artifact(
        allowed_offsets=off,
        allowed_tokens=arrays["allowed_tokens"][sa : sa + p_n],
        allowed_next=arrays["allowed_next"][sa : sa + p_n],
        value_state=arrays["value_state"][sv : sv + 1],
        dfa_offsets=arrays["dfa_offsets"][d0 : d0 + s_n + 1],
        dfa_bytes=arrays["dfa_bytes"][e0 : e0 + e_n],
        dfa_next=arrays["dfa_next"][e0 : e0 + e_n],
        vocab_size=int(header["vocab_size"]),
        eos_token_ids=header["eos_token_ids"],
        tokenizer_fingerprint=header["tokenizer"]["fingerprint"],
        tokenizer_name=header["tokenizer"]["name"],
        pattern=pattern,
        build_options=header["build_options"],
        header=header,
        format_version=version,
        verify=verify,
        source=where,
    )
    final = int(table.value_state[0])
    if int(table.dfa_offsets[final + 1]) != int(table.dfa_offsets[final]):
        raise fail("dfa_offsets", f"slot {i}: its accepting state (after the closing quote) must have no edge out")
    if verify and np.asarray(arrays["value_lcp"][sv : sv + 1]).any():
        raise fail("value_lcp", f"slot {i}: a pattern slot's value_lcp is 0")
    if verify and np.asarray(arrays["state_byte"][so : so + s_n]).any():
        raise fail("state_byte", f"slot {i}: a pattern slot's state bytes are 0 (a DFA state has no one byte into it)")
    return table


def _outside(a: np.ndarray, lo: int, hi: int) -> bool:
    """Whether any element of ``a`` lies outside ``lo .. hi - 1``."""
    return bool(a.size) and (int(a.min()) < lo or int(a.max()) >= hi)


def _check_slot(
    i: int,
    trie: MaskTable,
    tail: bytes,
    exits: Groups,
    tails: Groups,
    enters: Groups,
    es: np.ndarray,
    eg: np.ndarray,
    el: np.ndarray,
    vg: np.ndarray | None,
    enter_state: int,
    num_grammars: int,
    vocab_size: int,
    eos: np.ndarray,
    fail: Any,
    verify: bool,
) -> None:
    """Every index a matcher follows in one slot (each load), and with ``verify`` the order and kinds."""
    s_n, k_n, t_n = trie.num_states, trie.num_values, len(tail)
    if _outside(es, 0, s_n):
        raise fail("entry_state", f"slot {i}: states must lie in 0..{s_n - 1}")
    if _outside(eg, 0, exits.num_groups):
        raise fail("entry_group", f"slot {i}: groups must lie in 0..{exits.num_groups - 1} (its exit heads)")
    if _outside(el, 0, k_n):
        raise fail("entry_leaf", f"slot {i}: values must lie in 0..{k_n - 1}")
    if vg is not None and _outside(vg, 0, num_grammars):
        raise fail("value_grammar", f"slot {i}: grammars must lie in 0..{num_grammars - 1}")
    for name, g in zip(GROUP_SETS, (exits, tails, enters), strict=True):
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
    if any(not h for h in enters.labels):
        raise fail("label_bytes", f"slot {i}: an entering head is empty")
    if verify:
        _verify_slot(i, trie, tail, exits, tails, enters, es, eg, enter_state, fail)


def _verify_slot(
    i: int,
    trie: MaskTable,
    tail: bytes,
    exits: Groups,
    tails: Groups,
    enters: Groups,
    es: np.ndarray,
    eg: np.ndarray,
    enter_state: int,
    fail: Any,
) -> None:
    leaves = np.asarray(trie.value_state, dtype=np.int64)
    e64, g64 = es.astype(np.int64), eg.astype(np.int64)
    if e64.size:
        key = e64 * (exits.num_groups + 1) + g64
        if (np.diff(key) <= 0).any():
            raise fail("entry_state", f"slot {i}: entries must be ascending by (state, group), each once")
        if np.isin(e64, leaves).any():
            raise fail("entry_state", f"slot {i}: an exit entry starts at a key's end")
    for name, g in zip(GROUP_SETS, (exits, tails, enters), strict=True):
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
    for j in range(tails.num_groups):  # tail group j reads tail[j:]: targets beyond its own offset
        lo, hi = tails.span(j)
        t = tails.target[lo:hi][tails.kind[lo:hi] == TAIL]
        if t.size and int(t.min()) <= j:
            raise fail("group_target", f"slot {i} tails: group {j} must lead past offset {j}")
    if enter_state < 0 and enters.num_groups:
        raise fail("label_offsets", f"slot {i}: entering heads for a slot that is never entered")


# ---------------------------------------------------------------- versions 1 and 2: the first layout (read only)

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
"""The ten sections after the trie's six in a version-1/2 ``triec-schema`` file (D19)."""

_COUNTS = ("num_entries", "num_straddle_rows", "num_straddles", "num_rest_bytes", "num_heads", "num_head_bytes")

LEGACY_PLACEHOLDER = ""
"""The name the first layout's continuation held instead of the enum (fed ``prefix + '""' + tail``)."""


def expected_counts(schema: Any, source: str) -> dict[str, int]:
    """Section counts implied by a first-layout header's ``schema`` map (which is checked here)."""

    def fail(msg: str) -> ArtifactError:
        return ArtifactError(f"{source}: header field 'schema': {msg}")

    if not isinstance(schema, dict):
        raise fail(f"expected a map, found {schema!r:.40}")
    for key in (
        "name_property",
        "next_property",
        "prefix",
        "tail",
        "continuation",
        "continuation_sha256",
        "engine",
        "engine_version",
    ):
        if not isinstance(schema.get(key), str):
            raise fail(f"{key!r}: expected a string, found {schema.get(key)!r:.40}")
    check_convention(schema, source)
    if schema["engine"] not in ENGINES:
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
        raise fail(
            f"'num_straddle_rows' {n['num_straddle_rows']} is not len(tail) {len(tail)} + num_heads {n['num_heads']}"
        )
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


def check_schema_indices(trie: MaskTable, tail_len: int, arrays: dict[str, np.ndarray], source: str) -> None:
    """Every index of a first-layout file's ten sections is in range (each plain load; O(entries + straddles)).

    Raises :class:`ArtifactContentError`: entry states in ``0 .. S - 1``, entry rows head rows,
    entry leaves keys' ends, offsets from 0 to their data's length without decreasing,
    straddle tokens content ids of the mask, targets in ``1 .. len(tail)``.
    """

    def fail(section: str, msg: str) -> ArtifactContentError:
        return ArtifactContentError(f"{source}: section {section}: {msg}")

    n, s = tail_len, trie.num_states
    rows = int(arrays["straddle_offsets"].shape[0]) - 1
    leaves = np.asarray(trie.value_state, dtype=np.int64)
    es, er, el = (np.asarray(arrays[k], dtype=np.int64) for k in ("entry_state", "entry_row", "entry_leaf"))
    if es.size:
        if es.min() < 0 or es.max() >= s:
            raise fail("entry_state", f"states must lie in 0..{s - 1}")
        if er.min() < n or er.max() >= rows:
            raise fail("entry_row", f"rows must lie in {n}..{rows - 1} (head rows)")
        pos = np.minimum(np.searchsorted(leaves, el), leaves.shape[0] - 1)
        if np.any(leaves[pos] != el):
            raise fail("entry_leaf", "every entry must end at a key's end (a value_state)")
    for name, data in (
        ("straddle_offsets", "straddle_tokens"),
        ("straddle_rest_offsets", "straddle_rest"),
        ("head_offsets", "head_bytes"),
    ):
        o = np.asarray(arrays[name], dtype=np.int64)
        total = int(arrays[data].shape[0])
        if o[0] != 0 or o[-1] != total or np.any(np.diff(o) < 0):
            raise fail(name, f"offsets must run from 0 to {total} without decreasing")
    tok = np.asarray(arrays["straddle_tokens"], dtype=np.int64)
    if tok.size:
        if tok.min() < 0 or tok.max() >= trie.vocab_size or np.isin(tok, trie.eos_token_ids).any():
            raise fail("straddle_tokens", f"ids must be content tokens in 0..{trie.vocab_size - 1}")
        tgt = np.asarray(arrays["straddle_target"], dtype=np.int64)
        if tgt.min() < 1 or tgt.max() > n:
            raise fail("straddle_target", f"tail offsets must lie in 1..{n}")


def validate_schema_contents(trie: MaskTable, tail_len: int, arrays: dict[str, np.ndarray], source: str) -> None:
    """``verify=True`` checks of a first-layout file's ten sections beyond the indices: order and consistency."""

    def fail(section: str, msg: str) -> ArtifactContentError:
        return ArtifactContentError(f"{source}: section {section}: {msg}")

    n = tail_len
    rows = int(arrays["straddle_offsets"].shape[0]) - 1
    leaves = np.asarray(trie.value_state, dtype=np.int64)
    es, el = np.asarray(arrays["entry_state"], dtype=np.int64), np.asarray(arrays["entry_leaf"], dtype=np.int64)
    if es.size:
        if np.any(np.diff(es) < 0):
            raise fail("entry_state", "states must be ascending")
        if np.isin(es, leaves).any():
            raise fail("entry_state", "a straddle entry starts at a key's end")
        if np.any(el <= es):
            raise fail("entry_leaf", "every entry must end at a key's end below its state")
    tok = np.asarray(arrays["straddle_tokens"], dtype=np.int64)
    if tok.size:
        offsets = np.asarray(arrays["straddle_offsets"], dtype=np.int64)
        row = np.repeat(np.arange(rows), np.diff(offsets))
        same_row = row[1:] == row[:-1]
        if np.any(same_row & (tok[1:] <= tok[:-1])):
            raise fail("straddle_tokens", "ids must be strictly ascending within each row")
        has_rest = np.diff(np.asarray(arrays["straddle_rest_offsets"], dtype=np.int64)) > 0
        if np.any(has_rest & (np.asarray(arrays["straddle_target"], dtype=np.int64) != n)):
            raise fail("straddle_rest_offsets", "only a token reaching the handover carries bytes past the tail")


def _legacy_groups(arrays: dict[str, np.ndarray], rows: range, tail_len: int, labels: list[bytes]) -> Groups:
    """Straddle rows as groups: a target inside the tail is TAIL, the tail's end HANDOVER with the recorded rest."""
    off = np.asarray(arrays["straddle_offsets"], dtype=np.int64)
    lo, hi = (int(off[rows.start]), int(off[rows.stop])) if len(rows) else (0, 0)
    target = np.asarray(arrays["straddle_target"][lo:hi], dtype=np.int32)
    handover = target == tail_len
    roff = np.asarray(arrays["straddle_rest_offsets"], dtype=np.int64)
    r_lo, r_hi = int(roff[lo]), int(roff[hi])
    return Groups(
        offsets=off[rows.start : rows.stop + 1] - lo if len(rows) else np.zeros(1, dtype=np.int64),
        tokens=np.asarray(arrays["straddle_tokens"][lo:hi], dtype=np.int32),
        kind=np.where(handover, HANDOVER, TAIL).astype(np.int8),
        target=np.where(handover, -1, target).astype(np.int32),
        leaf=np.full(hi - lo, -1, dtype=np.int32),
        rest_offsets=roff[lo : hi + 1] - r_lo,
        rest=np.asarray(arrays["straddle_rest"][r_lo:r_hi], dtype=np.uint8),
        rest_token=np.full(hi - lo, -1, dtype=np.int32),
        labels=labels,
    )


def build_schema_table(
    trie: MaskTable, header: dict[str, Any], arrays: dict[str, np.ndarray], source: str | None = None
) -> SchemaTable:
    """A first-layout file as a table of one start slot (the names, then the recorded tail) and one grammar.

    The grammar is the recorded continuation schema with its enum reduced to the placeholder name ``""``,
    fed ``prefix + '""' + tail`` once: the engine state D19 handed over to. The straddle rows become the
    slot's exit and tail groups; a token reaching the tail's end is a handover carrying its recorded rest
    (judged viable by the recorded engine when the file was compiled; :meth:`SchemaTable.with_engine`
    judges them again for another engine).
    """
    from triec.schema.shape import canonical_json, with_enum

    s = header["schema"]
    prefix, tail = s["prefix"].encode("utf-8"), s["tail"].encode("utf-8")
    n = len(tail)
    ho = np.asarray(arrays["head_offsets"], dtype=np.int64)
    hb = arrays["head_bytes"].tobytes()
    heads = [hb[int(a) : int(b)] for a, b in zip(ho[:-1].tolist(), ho[1:].tolist(), strict=True)]
    rows = int(arrays["straddle_offsets"].shape[0]) - 1
    exits = _legacy_groups(arrays, range(n, rows), n, heads)
    tails = _legacy_groups(arrays, range(0, n), n, [b""] * n)
    enters = _legacy_groups(arrays, range(0, 0), n, [])
    leaves = np.asarray(trie.value_state, dtype=np.int64)
    entry_leaf = np.searchsorted(leaves, np.asarray(arrays["entry_leaf"], dtype=np.int64)).astype(np.int32)
    slot = Slot(
        trie,
        tail,
        -1,
        "",
        exits,
        np.asarray(arrays["entry_state"], dtype=np.int32),
        (np.asarray(arrays["entry_row"], dtype=np.int64) - n).astype(np.int32),
        entry_leaf,
        tails,
        enters,
        np.zeros(trie.num_values, dtype=np.int32),
    )
    try:
        continuation = json.loads(s["continuation"])
        grammar_schema = canonical_json(with_enum(continuation, s["name_property"], [LEGACY_PLACEHOLDER]))
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        raise ArtifactContentError(
            f"{source}: header field 'schema': 'continuation' is not the tool schema it "
            f"should be (an object with property {s['name_property']!r})"
        ) from None
    template = prefix + json.dumps(LEGACY_PLACEHOLDER).encode("utf-8") + tail
    info = {
        "shape": "tool-call",
        "legacy_format": 1,
        "prefix": s["prefix"],
        "name_property": s["name_property"],
        "next_property": s["next_property"],
        "continuation": s["continuation"],
        "continuation_sha256": s["continuation_sha256"],
        "slots": [
            {
                "pointer": "/properties/" + s["name_property"].replace("~", "~0").replace("/", "~1"),
                "values": trie.num_values,
            }
        ],
        "engine_enums": [],
    }
    return ConvertedSchemaTable(
        slots=[slot],
        grammars=[Grammar(GrammarSpec(grammar_schema), template, ())],
        start_slot=0,
        start_grammar=-1,
        engine=s["engine"],
        engine_version=s["engine_version"] or None,
        convention=s["convention"],
        info=info,
        source=source,
        header=header,
    )


class ConvertedSchemaTable(SchemaTable):
    """A table read from the first layout (or saved again from one): its handovers carry rests that the
    recorded engine judged viable when the file was compiled, so another engine gets the crossing tokens
    derived again from the heads and the tail, those reading past the tail judged by it at serving time."""

    def with_engine(self, engine: str) -> SchemaTable:
        if engine == self.engine:
            return self
        self._check_servable(engine)
        found = self._twins.get(engine)
        if found is None:
            from triec.engines import engine_version

            vocab = self.vocabulary()
            found = SchemaTable(
                slots=[rejudged(s, vocab) for s in self.slots],
                grammars=self.grammars,
                start_slot=self.start_slot,
                start_grammar=self.start_grammar,
                engine=engine,
                engine_version=engine_version(engine),
                convention=self.convention,
                info=self.info,
                vocab=vocab,
                source=self.source,
                header=self.header,
            )
            self._twins[engine] = found
        return found


def rejudged(slot: Slot, vocab: Any) -> Slot:
    """``slot`` with its exit and tail groups derived again from their heads and its tail over ``vocab``:
    every token reading past the tail is ``DYNAMIC`` (judged by the grammar after the value), none is
    taken on the word of another engine. Group numbers and entries stay as they are."""
    from triec.schema.slot import below_group, tail_groups
    from triec.tokenizer.index import token_index

    ti = token_index(vocab)
    exits = Groups.concat([below_group(ti, h, slot.tail, h) for h in slot.exits.labels])
    return Slot(
        slot.trie,
        slot.tail,
        slot.enter_state,
        slot.marker,
        exits,
        slot.entry_state,
        slot.entry_group,
        slot.entry_leaf,
        tail_groups(vocab, slot.tail),
        slot.enters,
        slot.value_grammar,
        slot.open,
    )


def load_schema_table(
    trie: MaskTable, header: dict[str, Any], arrays: dict[str, np.ndarray], source: str, *, verify: bool = False
) -> SchemaTable:
    """A loaded first-layout ``triec-schema`` artifact: every index checked, with ``verify`` every content check."""
    tail_len = len(header["schema"]["tail"].encode("utf-8"))
    check_schema_indices(trie, tail_len, arrays, source)
    if verify:
        validate_schema_contents(trie, tail_len, arrays, source)
    return build_schema_table(trie, header, arrays, source)


# ---------------------------------------------------------------- the registered format


def parse_schema_sections(
    buf: Any,
    header: dict[str, Any],
    data_start: int,
    version: int,
    source: str,
    *,
    verify: bool = False,
    checksums: bool = False,
) -> dict[str, np.ndarray]:
    """Version 3's (or 5's) sections, or the first layout's (a mask table's six, then ten of its own); checked, as
    views."""
    if version not in (SCHEMA_FORMAT_VERSION, SCHEMA_PATTERNS_FORMAT_VERSION):
        return masks.parse_sections(
            buf,
            header,
            data_start,
            version,
            source,
            verify=verify,
            checksums=checksums,
            extra_layout=SCHEMA_SECTIONS,
            extra_counts=lambda h: expected_counts(h.get("schema"), source),
        )
    masks.check_common_header(header, source)
    layout, expected = layout_counts(header, source, version)
    return container.read_sections(
        buf, source, header, data_start, layout, expected, verify=verify, checksums=checksums
    )


def build_schema(
    header: dict[str, Any], arrays: dict[str, np.ndarray], version: int, source: str, *, verify: bool = False
) -> SchemaTable:
    if version in (SCHEMA_FORMAT_VERSION, SCHEMA_PATTERNS_FORMAT_VERSION):
        return load_schema_artifact(header, arrays, source, verify=verify, version=version)
    trie = masks.build_table(header, arrays, version, source, verify=verify)
    return load_schema_table(trie, header, arrays, source, verify=verify)


FORMAT = formats.register(
    formats.ArtifactFormat(
        name=FORMAT_NAME,
        kind=TableKind.TOOL_SCHEMA,
        versions=(PLAIN_FORMAT_VERSION, ENCODED_FORMAT_VERSION, SCHEMA_FORMAT_VERSION, SCHEMA_PATTERNS_FORMAT_VERSION),
        parse=parse_schema_sections,
        build=build_schema,
        encode=encode_schema_artifact,
    )
)
