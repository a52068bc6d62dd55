"""What is inside a mask table: metadata, how wide the masks are by depth, one state in detail.

Pure functions over a :class:`~triec.runtime.MaskTable` (and, for section
sizes, the artifact's header); the CLI only formats what they return. Token
bytes come from the table itself: a token allowed at state s spells exactly
``prefix(next) - prefix(s)``, so no tokenizer is needed.
"""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np

from triec.runtime import MaskTable


def state_depths(table: MaskTable) -> np.ndarray:
    """Prefix length of every state, from ``value_state`` and ``value_lcp`` alone."""
    vs = table.value_state.astype(np.int64)
    prev = np.concatenate(([0], vs[:-1]))  # value i creates states prev[i] + 1 .. vs[i]
    owner = np.repeat(np.arange(vs.shape[0]), vs - prev)
    depth = np.zeros(table.num_states, dtype=np.int64)
    depth[1:] = table.value_lcp.astype(np.int64)[owner] + (np.arange(1, table.num_states) - prev[owner])
    return depth


def allowed_counts(table: MaskTable, *, with_eos: bool = True) -> np.ndarray:
    """Allowed tokens per state; EOS ids counted at accepting states when ``with_eos``."""
    counts = np.diff(table.allowed_offsets.astype(np.int64))
    if with_eos and table.eos_token_ids:
        counts[table.value_state.astype(np.int64)] += len(table.eos_token_ids)
    return counts


def depth_distribution(table: MaskTable) -> list[dict[str, Any]]:
    """Per depth: number of states, mean and max allowed tokens (EOS included)."""
    depth = state_depths(table)
    counts = allowed_counts(table)
    states = np.bincount(depth)
    total = np.bincount(depth, weights=counts)
    widest = np.zeros(states.shape[0], dtype=np.int64)
    np.maximum.at(widest, depth, counts)
    return [
        {"depth": d, "states": int(states[d]), "mean_allowed": float(total[d] / states[d]), "max_allowed": int(widest[d])}
        for d in range(states.shape[0])
        if states[d]
    ]


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


def summary(table: MaskTable, header: dict[str, Any] | None = None, section_sizes: dict[str, Any] | None = None) -> dict[str, Any]:
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
    if section_sizes is not None:
        info["sections"] = section_sizes
    return info


def section_sizes(table: MaskTable, level: int = 3) -> dict[str, dict[str, int]]:
    """Bytes of each section, plain and zstd-compressed (what shipping it would cost)."""
    import zstandard

    from triec.artifact.masks import SECTIONS

    cctx = zstandard.ZstdCompressor(level=level)
    out = {}
    for name, dtype in SECTIONS:
        raw = np.ascontiguousarray(getattr(table, name), dtype=np.dtype(dtype)).tobytes()
        out[name] = {"bytes": len(raw), "zstd_bytes": len(cctx.compress(raw))}
    return out


def describe_state(
    table: MaskTable, state: int, *, max_values: int = 10, max_tokens: int | None = 200
) -> dict[str, Any]:
    """One state: its prefix, whether it accepts, the values below it, every allowed token."""
    prefix = table.prefix(state)
    values = table.value_bytes
    lo = bisect.bisect_left(values, prefix)
    hi = bisect.bisect_left(values, prefix + b"\xff")  # no UTF-8 text holds 0xFF
    lo_off, hi_off = int(table.allowed_offsets[state]), int(table.allowed_offsets[state + 1])
    tokens = []
    shown = hi_off - lo_off if max_tokens is None else min(hi_off - lo_off, max_tokens)
    for i in range(lo_off, lo_off + shown):
        nxt = int(table.allowed_next[i])
        tokens.append(
            {
                "id": int(table.allowed_tokens[i]),
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
        "allowed_content_tokens": hi_off - lo_off,
        "eos_allowed": list(table.eos_token_ids) if accepting else [],
        "tokens": tokens,
        "tokens_truncated": shown < hi_off - lo_off,
    }


# ---------------------------------------------------------------- tool schemas


def straddle_counts(table: Any) -> dict[str, Any]:
    """Straddling tokens of a tool-schema table: per tail offset, per head, and the (state, head) entries.

    ``tail[i]`` counts the tokens allowed i bytes into the tail, split into those that stay inside
    it and those that hand over to the continuation (carrying bytes past the tail or not).
    """
    st = table.straddles
    n = table.tail_len
    counts = np.diff(np.asarray(st.offsets, dtype=np.int64))
    target = np.asarray(st.target, dtype=np.int64)
    row = np.repeat(np.arange(st.num_rows), counts)
    rest = np.diff(np.asarray(st.rest_offsets, dtype=np.int64)) > 0
    tail = []
    for i in range(n):
        sel = row == i
        tail.append({
            "offset": i,
            "read": escape_bytes(table.tail[:i]),
            "tokens": int(sel.sum()),
            "inside_tail": int((sel & (target < n)).sum()),
            "handover": int((sel & (target == n) & ~rest).sum()),
            "into_continuation": int((sel & rest).sum()),
        })
    heads = [{"head": escape_bytes(st.head(j)), "tokens": int(counts[n + j]),
              "entries": int((np.asarray(table.entry_row) == n + j).sum())} for j in range(st.num_rows - n)]
    return {"tail": tail, "heads": heads, "entries": int(table.entry_state.shape[0]), "total": int(counts.sum())}


def schema_summary(table: Any) -> dict[str, Any]:
    """Convention, literal text, continuation and engine of a tool-schema table."""
    return {
        "kind": table.kind.value,
        "engine": table.engine,
        "engine_version": table.engine_version,
        "convention": table.convention,
        "name_property": table.name_property,
        "next_property": table.next_property,
        "prefix": table.prefix.decode("utf-8"),
        "tail": table.tail.decode("utf-8"),
        "continuation": table.continuation_text,
        "continuation_sha256": table.continuation_sha256,
        "straddles": straddle_counts(table),
    }
