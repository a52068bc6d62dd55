"""The ``triec-schema`` reader, versions 3 and 5: a schema table over a file's checked sections.

The container has checked each section's length against the header's totals (:func:`~triec.schema.artifact.checks.
layout_counts`); here the slot and grammar tables are checked against those totals, then each slot is read in file
order (its rows as a :class:`~triec.runtime.table.MaskTable`, or a pattern slot's as a
:class:`~triec.runtime.pattern.PatternTable`; its entries, its three group sets) and checked
(:func:`~triec.schema.artifact.checks.check_slot`), then the grammars, then ``info``. Every index is checked on
each load; ``verify`` adds every content check.
"""

from __future__ import annotations

import json
from typing import Any, cast

import numpy as np

from triec.artifact.container import SCHEMA_FORMAT_VERSION, SCHEMA_PATTERNS_FORMAT_VERSION
from triec.artifact.header import read_table_header
from triec.runtime.pattern import PatternTable
from triec.runtime.table import MaskTable
from triec.schema.artifact.checks import (
    Fail,
    SlotArrays,
    check_grammar_table,
    check_info,
    check_rows_ascending,
    check_slot,
    check_slot_table,
    check_slot_values,
    engine_fields,
    section_error,
)
from triec.schema.artifact.layout import (
    GRAMMAR_FIELDS,
    GRAMMAR_KINDS,
    GROUP_SETS,
    PATTERN_SLOT_FIELDS,
    SLOT_FIELDS,
    WHITESPACE,
)
from triec.schema.artifact.legacy import ConvertedSchemaTable
from triec.schema.grammar import GrammarSpec
from triec.schema.pattern_slot import PatternSlot
from triec.schema.slot import Groups, Slot
from triec.schema.table import Grammar, SchemaTable


class _Sections:
    """The sections, read slot after slot (grammar after grammar): where each one's next piece begins."""

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self.arrays = arrays
        self._at: dict[str, int] = {}

    def span(self, key: str, n: int) -> slice:
        """The next ``n`` elements of the sections read together under ``key``."""
        lo = self._at.get(key, 0)
        self._at[key] = lo + n
        return slice(lo, lo + n)

    def take(self, name: str, n: int) -> np.ndarray:
        """The next ``n`` elements of section ``name``."""
        return self.arrays[name][self.span(name, n)]


class _SlotReader:
    """One file's slots, read and checked in file order."""

    def __init__(
        self, header: dict[str, Any], arrays: dict[str, np.ndarray], source: str, version: int, verify: bool
    ) -> None:
        self.header, self.source, self.version, self.verify = header, source, version, verify
        self.sections = _Sections(arrays)
        self.fail: Fail = section_error(source)
        self.eos = np.asarray(header["eos_token_ids"], dtype=np.int64)
        self.num_grammars = int(header["schema"]["num_grammars"])

    def slot(self, i: int, c: dict[str, int]) -> Slot:
        """Slot ``i`` of the file, ``c`` its ``slot_table`` row: every index checked, with ``verify`` its contents."""
        at = self.sections
        off = at.take("allowed_offsets", c["num_states"] + 1)
        rows, values, states = (
            at.span(key, c[n])
            for key, n in (("allowed", "num_allowed"), ("values", "num_values"), ("states", "num_states"))
        )
        pattern_n = c.get("pattern_bytes", 0)
        slot_bytes = at.take("slot_text", c["tail_bytes"] + c["marker_bytes"] + pattern_n).tobytes()
        tail = slot_bytes[: c["tail_bytes"]]
        try:
            marker = slot_bytes[c["tail_bytes"] : c["tail_bytes"] + c["marker_bytes"]].decode("utf-8")
            pattern = slot_bytes[c["tail_bytes"] + c["marker_bytes"] :].decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail("slot_text", f"slot {i}: its marker or pattern is not UTF-8") from None
        where = f"{self.source}: slot {i}"
        trie: MaskTable | PatternTable
        if pattern_n:
            trie = self._pattern_table(i, c, pattern, off, rows, values, states, where)
        else:
            trie = self._trie(off, rows, values, states, where)
        entries = at.span("entries", c["num_entries"])
        es, eg, el = (at.arrays[name][entries] for name in ("entry_state", "entry_group", "entry_leaf"))
        vg = at.take("value_grammar", c["num_values"]) if c["value_grammar"] else None
        exits, tails, enters = (self._groups(i, g, c) for g in GROUP_SETS)
        arrays = SlotArrays(trie, tail, exits, tails, enters, es, eg, el, vg, c["enter_state"])
        check_slot(i, arrays, self.num_grammars, self.eos, self.fail, self.verify)
        # the tail's groups are not in the file: Slot.bind derives them from the vocabulary; a pattern slot's
        # ``trie`` holds its PatternTable (PatternSlot.table)
        slot_class = PatternSlot if pattern_n else Slot
        held = cast("MaskTable", trie)
        return slot_class(held, tail, c["enter_state"], marker, exits, es, eg, el, None, enters, vg, c["open"])

    def _trie(self, off: np.ndarray, rows: slice, values: slice, states: slice, where: str) -> MaskTable:
        """An enum slot's trie over its rows (every index checked, the rows' order too; with ``verify`` its
        contents)."""
        a = self.sections.arrays
        check_rows_ascending(off, a["allowed_tokens"][rows], where)
        return MaskTable.from_artifact(
            allowed_offsets=off,
            allowed_tokens=a["allowed_tokens"][rows],
            allowed_next=a["allowed_next"][rows],
            value_state=a["value_state"][values],
            value_lcp=a["value_lcp"][values],
            state_byte=a["state_byte"][states],
            table_header=read_table_header(self.header, self.version, where),
            verify=self.verify,
        )

    def _pattern_table(
        self,
        i: int,
        c: dict[str, int],
        pattern: str,
        off: np.ndarray,
        rows: slice,
        values: slice,
        states: slice,
        where: str,
    ) -> PatternTable:
        """A pattern slot's table over its rows and DFA (every index checked; with ``verify`` every row against the
        DFA): one accepting state, after the closing quote, with no edge out of it."""
        a, fail = self.sections.arrays, self.fail
        dfa_offsets = self.sections.take("dfa_offsets", c["num_states"] + 1)
        edges = self.sections.span("dfa_edges", c["dfa_edges"])
        if c["enter_state"] != 0 or c["open"] != 0x22 or c["tail_bytes"]:
            raise fail("slot_table", f"slot {i}: a pattern slot is entered at state 0 by its opening quote, no tail")
        table = PatternTable.from_artifact(
            allowed_offsets=off,
            allowed_tokens=a["allowed_tokens"][rows],
            allowed_next=a["allowed_next"][rows],
            value_state=a["value_state"][values],  # one accepting state (check_slot_table)
            dfa_offsets=dfa_offsets,
            dfa_bytes=a["dfa_bytes"][edges],
            dfa_next=a["dfa_next"][edges],
            pattern=pattern,
            table_header=read_table_header(self.header, self.version, where),
            verify=self.verify,
        )
        final = int(table.value_state[0])
        if int(table.dfa_offsets[final + 1]) != int(table.dfa_offsets[final]):
            raise fail("dfa_offsets", f"slot {i}: its accepting state (after the closing quote) must have no edge out")
        if self.verify and np.asarray(a["value_lcp"][values]).any():
            raise fail("value_lcp", f"slot {i}: a pattern slot's value_lcp is 0")
        if self.verify and np.asarray(a["state_byte"][states]).any():
            raise fail(
                "state_byte", f"slot {i}: a pattern slot's state bytes are 0 (a DFA state has no one byte into it)"
            )
        return table

    def _groups(self, i: int, g: str, c: dict[str, int]) -> Groups:
        """Slot ``i``'s group set ``g`` (exits, tails, enters): its offsets checked."""
        at = self.sections
        ng, nt, nr, nl = (c[f"{g}_{x}"] for x in ("groups", "tokens", "rest_bytes", "label_bytes"))
        goff = at.take("group_offsets", ng + 1).astype(np.int64)
        roff = at.take("group_rest_offsets", nt + 1).astype(np.int64)
        loff = at.take("label_offsets", ng + 1).astype(np.int64)
        toks = at.span("group_tokens", nt)
        rest = at.take("group_rest", nr)
        lab = at.take("label_bytes", nl).tobytes()
        for name, o, total in (
            ("group_offsets", goff, nt),
            ("group_rest_offsets", roff, nr),
            ("label_offsets", loff, nl),
        ):
            if o[0] != 0 or o[-1] != total or (np.diff(o) < 0).any():
                raise self.fail(name, f"slot {i} {g}: offsets must run from 0 to {total} without decreasing")
        a = at.arrays
        return Groups(
            offsets=goff,
            tokens=a["group_tokens"][toks],
            kind=a["group_kind"][toks],
            target=a["group_target"][toks],
            leaf=a["group_leaf"][toks],
            rest_offsets=roff,
            rest=rest,
            rest_token=a["group_rest_token"][toks],
            labels=[lab[int(lo) : int(hi)] for lo, hi in zip(loff[:-1].tolist(), loff[1:].tolist(), strict=True)],
        )


def _grammars(
    arrays: dict[str, np.ndarray], gcol: dict[str, np.ndarray], slots: list[Slot], verify: bool, fail: Fail
) -> list[Grammar]:
    """The file's grammars over checked counts: the slots each holds entered ones, the texts UTF-8 (with ``verify``,
    each schema JSON and no slot held twice)."""
    num_slots = len(slots)
    gt = arrays["grammar_text"].tobytes()
    ab = arrays["after_bytes"].tobytes()
    after_len = np.asarray(arrays["after_lengths"], dtype=np.int64)
    held_by = np.asarray(arrays["grammar_slots"], dtype=np.int64)
    if held_by.size and (held_by.min() < 0 or held_by.max() >= num_slots):
        raise fail("grammar_slots", f"slots must lie in 0..{num_slots - 1}")
    if held_by.size and (np.asarray([s.enter_state for s in slots])[held_by] < 0).any():
        raise fail("grammar_slots", "a grammar holds a slot that is never entered (its enter_state is -1)")
    grammars: list[Grammar] = []
    t_at = a_at = n_at = s_at = 0
    for j in range(int(gcol["kind"].shape[0])):
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
    return grammars


def _info(arrays: dict[str, np.ndarray], slots: list[Slot], start_slot: int, source: str, fail: Fail) -> dict[str, Any]:
    """Section ``info`` (a msgpack map, the fields the table reads typed), each trie slot's keys decoding to its
    values; each pattern slot's format name read from it."""
    import msgpack

    try:
        info = msgpack.unpackb(arrays["info"].tobytes(), raw=False, strict_map_key=True)
    except Exception as exc:  # noqa: BLE001 - msgpack raises several unrelated types
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
    return info


def load_schema_artifact(
    header: dict[str, Any],
    arrays: dict[str, np.ndarray],
    source: str,
    *,
    verify: bool = False,
    version: int = SCHEMA_FORMAT_VERSION,
) -> SchemaTable:
    """A version-3 table over checked sections: every index checked, with ``verify`` every content check."""
    fail = section_error(source)
    sch = header["schema"]
    num_slots, num_grammars = int(sch["num_slots"]), int(sch["num_grammars"])
    fields = PATTERN_SLOT_FIELDS if version == SCHEMA_PATTERNS_FORMAT_VERSION else SLOT_FIELDS
    table = np.asarray(arrays["slot_table"], dtype=np.int64).reshape(num_slots, len(fields))
    col = check_slot_table(table, fields, sch, version, fail)
    gtable = np.asarray(arrays["grammar_table"], dtype=np.int64).reshape(num_grammars, len(GRAMMAR_FIELDS))
    gcol = check_grammar_table(gtable, sch, np.asarray(arrays["after_lengths"], dtype=np.int64), fail)
    reader = _SlotReader(header, arrays, source, version, verify)
    slots = [reader.slot(i, {name: int(col[name][i]) for name in fields}) for i in range(num_slots)]
    grammars = _grammars(arrays, gcol, slots, verify, fail)
    start_slot, start_grammar = int(sch["start_slot"]), int(sch["start_grammar"])
    if start_slot >= 0 and slots[start_slot].value_grammar is None:
        raise fail("slot_table", f"the start slot {start_slot} has no value_grammar (nothing would follow its values)")
    info = _info(arrays, slots, start_slot, source, fail)
    cls = ConvertedSchemaTable if "legacy_format" in info else SchemaTable
    return cls(
        slots=slots,
        grammars=grammars,
        start_slot=start_slot,
        start_grammar=start_grammar,
        **engine_fields(sch),
        info=info,
        source=source,
        header=header,
    )
