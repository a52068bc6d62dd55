"""What is inside a mask table: metadata, how wide the masks are by depth, one state in detail.

Pure functions over a :class:`~triec.runtime.MaskTable` (and, for section
sizes, the artifact's header); the CLI only formats what they return. Token
bytes come from the table itself: a token allowed at state s spells exactly
``prefix(next) - prefix(s)``, so no tokenizer is needed.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from triec.runtime import MaskTable
from triec.runtime.tails import CanonicalTailLayout
from triec.verify.states import state_depths

if TYPE_CHECKING:
    from triec.schema.pattern_slot import PatternSlot
    from triec.schema.slot import Slot
    from triec.schema.table import SchemaTable


def allowed_counts(table: MaskTable, *, with_eos: bool = True) -> np.ndarray:
    """Allowed tokens per state; EOS ids counted at accepting states when ``with_eos``.

    A tail table's tail rows are counted by walking the tails in chunks (never expanded whole)."""
    tails = table.tails
    if tails is None:
        counts = np.diff(table.allowed_offsets.astype(np.int64))
    else:
        counts = np.zeros(table.num_states, dtype=np.int64)
        counts[tails.row_states()] = np.diff(tails.offsets.astype(np.int64))
        counts[tails.tail_states()[0]] = tails.tail_counts()
    if with_eos and table.eos_token_ids:
        counts[table.value_state.astype(np.int64)] += len(table.eos_token_ids)
    return counts


def depth_distribution(table: MaskTable, max_rows: int | None = None) -> list[dict[str, Any]]:
    """Per depth: number of states, mean and max allowed tokens (EOS included).

    ``max_rows``: past that many depths (one long value makes one depth per byte), the first ``max_rows // 2``
    depths stay one row each and the deeper ones are summed into ranges of equal width, each row then saying
    ``depth`` to ``depth_to``: the report stays that size whatever the values' length (issue 37).
    """
    depth = state_depths(table)
    counts = allowed_counts(table)
    states = np.bincount(depth)
    total = np.bincount(depth, weights=counts)
    widest = np.zeros(states.shape[0], dtype=np.int64)
    np.maximum.at(widest, depth, counts)
    present = np.flatnonzero(states)
    if max_rows is None or present.size <= max_rows:
        return [
            {
                "depth": int(d),
                "states": int(states[d]),
                "mean_allowed": float(total[d] / states[d]),
                "max_allowed": int(widest[d]),
            }
            for d in present.tolist()
        ]
    head = max(1, max_rows // 2)
    rest = present[head:]
    edges = np.unique(np.linspace(rest[0], rest[-1] + 1, max_rows - head + 1).astype(np.int64))
    group = np.searchsorted(edges, rest, side="right") - 1
    starts = np.concatenate(([0], np.flatnonzero(np.diff(group)) + 1))
    firsts = np.concatenate((present[:head], rest[starts]))
    lasts = np.concatenate((present[:head], rest[np.concatenate((starts[1:] - 1, [rest.size - 1]))]))
    n = np.concatenate((states[present[:head]], np.add.reduceat(states[rest], starts)))
    t = np.concatenate((total[present[:head]], np.add.reduceat(total[rest], starts)))
    w = np.concatenate((widest[present[:head]], np.maximum.reduceat(widest[rest], starts)))
    out = []
    for lo, hi, k, tk, wk in zip(firsts.tolist(), lasts.tolist(), n.tolist(), t.tolist(), w.tolist(), strict=True):
        row: dict[str, Any] = {
            "depth": int(lo),
            "states": int(k),
            "mean_allowed": float(tk / k),
            "max_allowed": int(wk),
        }
        if hi != lo:
            row["depth_to"] = int(hi)
        out.append(row)
    return out


def widest_states(table: MaskTable, n: int = 10) -> list[dict[str, Any]]:
    counts = allowed_counts(table)
    n = min(n, counts.shape[0])
    top = np.argpartition(-counts, n - 1)[:n] if n < counts.shape[0] else np.arange(counts.shape[0])
    top = top[np.lexsort((top, -counts[top]))]
    return [{"state": int(s), "prefix": escape_bytes(table.prefix(int(s))), "allowed": int(counts[s])} for s in top]


def escape_bytes(raw: bytes) -> str:
    """Readable and unambiguous: UTF-8 text; control bytes, backslashes and invalid UTF-8 escaped."""
    out = []
    for ch in raw.decode("utf-8", errors="surrogateescape"):
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:  # a byte that is not valid UTF-8 here (e.g. half a character)
            out.append(f"\\x{code - 0xDC00:02x}")
        elif ch == "\\":
            out.append("\\\\")
        elif ch in "\n\r\t":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t"}[ch])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        else:
            out.append(ch)
    return "".join(out)


def summary(
    table: MaskTable, header: dict[str, Any] | None = None, section_sizes: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Metadata and size figures of a table (and its artifact, when given)."""
    value_bytes = sum(len(v) for v in table.value_bytes)
    counts = allowed_counts(table)
    info: dict[str, Any] = {
        "format_version": (header or {}).get("format_version"),
        "triec_version": (header or {}).get("triec_version"),
        "tokenizer": {"name": table.tokenizer_name, "fingerprint": table.tokenizer_fingerprint},
        "vocab_size": table.vocab_size,
        "eos_token_ids": list(table.eos_token_ids),
        "encoding": table.encoding.to_header(),
        "tokenization": table.tokenization,
        "values": table.num_values,
        "value_bytes": value_bytes,
        "states": table.num_states,
        "sharing_ratio": round(table.num_states / value_bytes, 4) if value_bytes else None,
        "allowed_pairs": table.num_allowed,
        "root_allowed": int(counts[0]),
        "max_allowed": int(counts.max()),
        "mean_allowed": round(float(counts.mean()), 3),
        "build_options": table.build_options,
    }
    if "groups" in table.build_options:
        info["groups"] = group_summary(table)
    tails = table.tails
    info["layout"] = "full" if tails is None else "tails"
    if tails is not None:  # what the tails are, what they cost: their bytes in state_byte and the token index
        info["tail_states"] = tails.num_tails
        info["tail_share"] = round(tails.num_tails / table.num_states, 4)
        info["tail_pairs"] = int(counts.sum() - np.diff(tails.offsets.astype(np.int64)).sum())
        info["tail_pairs"] -= len(table.eos_token_ids) * table.num_values  # EOS counted above, never a pair
        info["tail_bytes"] = tails.num_tails
        info["token_index_bytes"] = tails.index.nbytes
        info["stored_bytes_per_pair"] = 4
        info["far_pairs"] = int(tails.far_pairs.shape[0])
        if isinstance(tails, CanonicalTailLayout):  # a canonical table's tails read each value's tail tokens
            info["tail_tokens"] = tails.num_tail_tokens
            info["tail_token_bytes"] = int(tails.tail_tokens.nbytes + tails.tail_token_offsets.nbytes)
    if section_sizes is not None:
        info["sections"] = section_sizes
    return info


GROUPS_SHOWN = 20
"""Groups listed by ``triec inspect`` (the largest first): a table may hold a million."""


def group_summary(table: MaskTable) -> dict[str, Any]:
    """A grouped table's separator, group count, size range, and its largest groups with a few members each."""
    from triec.runtime.groups import group_members, separator

    members = group_members(table)
    sizes = sorted(((len(v), k) for k, v in members.items()), key=lambda t: (-t[0], t[1]))
    return {
        "separator": separator(table),
        "count": len(members),
        "recorded_count": table.build_options["groups"]["count"],
        "smallest": sizes[-1][0],
        "largest": sizes[0][0],
        "groups": [{"label": k, "values": n, "examples": members[k][:3]} for n, k in sizes[:GROUPS_SHOWN]],
    }


def section_sizes(table: MaskTable, level: int = 3) -> dict[str, dict[str, int]]:
    """Bytes of each section, plain and zstd-compressed (what shipping it would cost)."""
    import zstandard

    from triec.artifact.masks import table_sections

    cctx = zstandard.ZstdCompressor(level=level)
    out = {}
    layout, arrays = table_sections(table)
    for name, dtype in layout:
        raw = np.ascontiguousarray(arrays[name], dtype=np.dtype(dtype)).tobytes()
        out[name] = {"bytes": len(raw), "zstd_bytes": len(cctx.compress(raw))}
    return out


def file_section_sizes(path: Any, level: int = 3) -> dict[str, dict[str, int]]:
    """Bytes of each section of an artifact file as its header lists them, plain and zstd-compressed."""
    import zstandard

    from triec.artifact import container

    buf, _ = container.read_buffer(path)
    header, data_start, _ = container.read_header(buf, str(path))
    cctx = zstandard.ZstdCompressor(level=level)
    out = {}
    for sec in header.get("sections", []):
        start = data_start + int(sec["offset"])
        raw = bytes(buf[start : start + int(sec["length"])])
        out[str(sec["name"])] = {"bytes": len(raw), "zstd_bytes": len(cctx.compress(raw))}
    return out


def states_for_prefix(table: MaskTable, prefix: bytes) -> list[int]:
    """The states whose prefix is ``prefix``, ascending: one for a byte trie, any number for a canonical table.

    A canonical table's states are token-trie nodes (one per byte along each token edge), so the same
    bytes can be reached along several token paths; each value with this prefix names the one on its
    path. O(K) plus the paths: for inspection, not serving.
    """
    if not table.canonical:
        s = table.state_for_prefix(prefix)
        return [] if s is None else [s]
    owner = np.repeat(
        np.arange(table.num_states, dtype=np.int64),
        np.diff(np.asarray(table.allowed_offsets, dtype=np.int64)).astype(np.intp),
    )
    parent = np.zeros(table.num_states, dtype=np.int64)
    parent[table.allowed_next.astype(np.int64)] = owner  # each token edge's end: the state it leaves
    depth = state_depths(table)
    found: set[int] = set()
    d = len(prefix)
    for i, value in enumerate(table.value_bytes):
        if not value.startswith(prefix):
            continue
        node = int(table.value_state[i])
        while node and depth[parent[node]] >= d:  # up the token edges until one starts above depth d
            node = int(parent[node])
        found.add(node - int(depth[node] - d))  # inside the edge into node, or node itself
    return sorted(found)


def describe_state(
    table: MaskTable, state: int, *, max_values: int = 10, max_tokens: int | None = 200
) -> dict[str, Any]:
    """One state: its prefix, whether it accepts, the values below it, every allowed token."""
    prefix = table.prefix(state)
    below = table.values_below(state)
    lo, hi = below.start, below.stop
    row_tokens, row_next = table.transitions(state)  # as served, whatever the layout
    tokens = []
    shown = row_tokens.shape[0] if max_tokens is None else min(row_tokens.shape[0], max_tokens)
    for i in range(shown):
        nxt = int(row_next[i])
        tokens.append(
            {
                "id": int(row_tokens[i]),
                "bytes": escape_bytes(table.prefix(nxt)[len(prefix) :]),
                "next_state": nxt,
            }
        )
    accepting = table.is_accepting(state)
    return {
        "state": int(state),
        "prefix": escape_bytes(prefix),
        "depth": len(prefix),
        "accepting": accepting,
        "value": table.value(state),
        "values_below": hi - lo,
        "first_values": table.values[lo : min(hi, lo + max_values)],
        "allowed_content_tokens": int(row_tokens.shape[0]),
        "eos_allowed": list(table.eos_token_ids) if accepting else [],
        "tokens": tokens,
        "tokens_truncated": shown < int(row_tokens.shape[0]),
    }


# ---------------------------------------------------------------- schema tables


def _kind_counts(groups: Any, rows: np.ndarray | None = None) -> dict[str, int]:
    """Crossing tokens of a slot's groups by kind (TRIE, TAIL, HANDOVER, DYNAMIC); ``rows``: only those groups."""
    from triec.schema.slot import KINDS

    kind = np.asarray(groups.kind, dtype=np.int64)
    if rows is not None:
        grp = np.repeat(
            np.arange(groups.num_groups), np.diff(np.asarray(groups.offsets, dtype=np.int64)).astype(np.intp)
        )
        kind = kind[np.isin(grp, rows)]
    counts = np.bincount(kind, minlength=len(KINDS)) if kind.size else np.zeros(len(KINDS), dtype=np.int64)
    return {name: int(counts[i]) for i, name in enumerate(KINDS)}


def _bind(table: SchemaTable) -> None:
    """Bind a loaded schema table to its recorded tokenizer when it can be found (its tail rows come from it)."""
    from triec.errors import TriecError

    if all(s.tails is not None for s in table.slots):
        return
    with contextlib.suppress(TriecError):  # shown as "derived when served"
        table.vocabulary()


def tail_rows(slot: Slot) -> list[dict[str, Any]]:
    """Per offset of a slot's literal tail: the tokens allowed there, those staying inside the tail, those ending
    it (the handover), and those reading past it into the grammar after the value (judged there, or recorded)."""
    from triec.schema.slot import DYNAMIC, HANDOVER, TAIL

    out: list[dict[str, Any]] = []
    if slot.tails is None:  # not bound: its tail rows are derived from the vocabulary when served
        return out
    rest = np.diff(np.asarray(slot.tails.rest_offsets, dtype=np.int64)) > 0
    for i in range(len(slot.tail)):
        lo, hi = slot.tails.span(i)
        kind = np.asarray(slot.tails.kind[lo:hi], dtype=np.int64)
        out.append(
            {
                "offset": i,
                "read": escape_bytes(slot.tail[:i]),
                "tokens": hi - lo,
                "inside_tail": int((kind == TAIL).sum()),
                "handover": int(((kind == HANDOVER) & ~rest[lo:hi]).sum()),
                "into_grammar": int(((kind == DYNAMIC) | ((kind == HANDOVER) & rest[lo:hi])).sum()),
            }
        )
    return out


def straddle_counts(table: SchemaTable, slot: int | None = None) -> dict[str, Any]:
    """Crossing tokens of one slot (default: the start slot, else slot 0): per tail offset, per exit head, the
    (state, head) entries and the entering heads (what D19 called straddles)."""
    _bind(table)
    s = table.slots[slot if slot is not None else max(table.start_slot, 0)]
    counts = np.diff(np.asarray(s.exits.offsets, dtype=np.int64))
    heads = [
        {"head": escape_bytes(h), "tokens": int(counts[j]), "entries": int((s.entry_group == j).sum())}
        for j, h in enumerate(s.exits.labels)
    ]
    enters = [
        {"head": escape_bytes(h), "tokens": s.enters.span(j)[1] - s.enters.span(j)[0]}
        for j, h in enumerate(s.enters.labels)
    ]
    tails = 0 if s.tails is None else int(s.tails.tokens.shape[0])
    total = int(s.exits.tokens.shape[0]) + tails + int(s.enters.tokens.shape[0])
    return {
        "tail": tail_rows(s),
        "heads": heads,
        "enters": enters,
        "entries": int(s.entry_state.shape[0]),
        "total": total,
    }


def slot_summary(table: SchemaTable, i: int) -> dict[str, Any]:
    """One slot: where it stands, its values and trie, its tail, its crossing tokens by kind."""
    _bind(table)
    s = table.slots[i]
    where = table.info.get("slots") or []
    pointer = where[i].get("pointer", "") if i < len(where) and isinstance(where[i], dict) else ""
    held_by = [g for g, gr in enumerate(table.grammars) if i in gr.slots][:8]
    regex = (
        None if s.has_values else cast("PatternSlot", s).pattern
    )  # a format or pattern field's slot: its DFA's regex, no values
    field = where[i] if i < len(where) and isinstance(where[i], dict) else {}
    return {
        "slot": i,
        "pointer": pointer,
        "start": i == table.start_slot,
        "entered_from_grammars": held_by,
        **(
            {"regex": regex, "format": cast("PatternSlot", s).format_name, "pattern": field.get("pattern")}
            if regex is not None
            else {}
        ),
        "values": s.num_values if s.has_values else 0,
        "states": s.num_states,
        "allowed_pairs": s.trie.num_allowed,
        "tail": s.tail.decode("utf-8", "backslashreplace"),
        "value_grammar": s.value_grammar is not None,
        "entries": int(s.entry_state.shape[0]),
        "exit_heads": s.exits.num_groups,
        "entering_heads": s.enters.num_groups,
        "crossing": {
            "exits": _kind_counts(s.exits),
            "tails": None if s.tails is None else _kind_counts(s.tails),
            "enters": _kind_counts(s.enters),
        },
    }


def grammar_summary(table: SchemaTable, g: int, max_text: int = 200) -> dict[str, Any]:
    gr = table.grammars[g]
    text = gr.spec.schema
    return {
        "grammar": g,
        "schema_bytes": len(text.encode("utf-8")),
        "schema": text[:max_text] + ("..." if len(text) > max_text else ""),
        "sha256": gr.spec.sha256,
        "after": list(gr.spec.after),
        "template": escape_bytes(gr.template),
        "slots": list(gr.slots),
    }


def schema_summary(table: SchemaTable, max_grammars: int = 20) -> dict[str, Any]:
    """What a schema table holds: its engine and convention, every slot, its grammars (the first
    ``max_grammars`` in detail), the enums the engine serves, the start slot's tail offsets."""
    info = table.info
    start = table.slots[table.start_slot] if table.start_slot >= 0 else None
    return {
        "kind": table.kind.value,
        "shape": info.get("shape", ""),
        "engine": table.engine,
        "engine_version": table.engine_version,
        "convention": table.convention,
        "start": f"slot {table.start_slot}" if table.start_slot >= 0 else f"grammar {table.start_grammar}",
        "prefix": table.prefix.decode("utf-8", "backslashreplace"),
        "tail": table.tail.decode("utf-8", "backslashreplace"),
        "name_property": info.get("name_property", ""),
        "threshold": info.get("threshold"),
        "legacy_format": info.get("legacy_format"),
        "slots": [slot_summary(table, i) for i in range(len(table.slots))],
        "num_grammars": len(table.grammars),
        "grammars": [grammar_summary(table, g) for g in range(min(len(table.grammars), max_grammars))],
        "engine_enums": list(info.get("engine_enums") or []),
        "tail_offsets": tail_rows(start) if start is not None else [],
        "straddles": straddle_counts(table),
    }
