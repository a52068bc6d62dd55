"""The first ``triec-schema`` layout, versions 1 and 2 (D19): read, never written.

The trie of the name keys (a mask table's six sections, read by :mod:`triec.artifact.masks`), then ten sections of
(state, head) entries and straddle tables, and a ``schema`` map recording the literal prefix, tail and continuation.
Such a file is converted on load into one start slot and one grammar that serve exactly what it served
(:class:`ConvertedSchemaTable`; saved again, it is written as version 3 and read back as one).
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

import numpy as np

from triec.errors import ArtifactContentError, ArtifactError
from triec.runtime.table import MaskTable
from triec.schema.artifact.checks import check_convention, engine_fields
from triec.schema.grammar import GrammarSpec
from triec.schema.slot import HANDOVER, TAIL, Groups, Slot
from triec.schema.table import ENGINES, Grammar, SchemaTable

if TYPE_CHECKING:
    from triec.tokenizer.vocabulary import Vocabulary

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
        **engine_fields(s),
        info=info,
        source=source,
        header=header,
    )


class ConvertedSchemaTable(SchemaTable):
    """A table read from the first layout (or saved again from one): its handovers carry rests that the
    recorded engine judged viable when the file was compiled, so another engine gets the crossing tokens
    derived again from the heads and the tail, those reading past the tail judged by it at serving time."""

    def twin_slots(self) -> tuple[list[Slot], Vocabulary | None]:
        """The slots rejudged over the vocabulary (:func:`rejudged`): no handover taken on the recorded engine's word."""
        vocab = self.vocabulary()
        return [rejudged(s, vocab) for s in self.slots], vocab


def rejudged(slot: Slot, vocab: Vocabulary) -> Slot:
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
