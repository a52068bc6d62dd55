"""Straddle tables: the tokens that cross from the name into the literal tail or the continuation.

Output = KEY(v) + TAIL + C, where KEY(v) = PREFIX + json(v) ends at the name's
closing quote, TAIL is literal and C is the continuation's language. The keys
are prefix-free (each holds one unescaped closing quote), so a token read at a
point of the output splits in at most one way. Besides the trie's own tokens
(inside some key) a token can be

* a *tail row* token at tail offset i (i bytes of TAIL read after a key's end):
  a non-empty prefix of TAIL[i:], leading to offset i + len, or TAIL[i:] + x with
  x a non-empty viable prefix of C (it hands over and feeds x);
* a *head row* token at a trie state: h + r, where h (ending in the quote) closes
  the key and r is as above from offset 0. Its head h is a token-trie node; which
  trie states reach a key end by h is found by the compile's walk.

Both kinds depend only on (vocabulary, TAIL, continuation, engine), never on the
names, so they are built once and cached on disk like the vocabulary automaton:
atomic write, a digest verified on load. Rows are CSR: ``offsets``, ``tokens``
(ascending per row), ``target`` (tail offset reached, 1..len(TAIL); len(TAIL) is
the handover), ``rest_offsets`` + ``rest`` (x, the bytes fed to the engine).
Rows 0..len(TAIL)-1 are the tail offsets; head row j is row len(TAIL) + j.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from triec.disk_cache import load_arrays, save_arrays
from triec.tokenizer.automaton import VocabAutomaton, cache_dir

if TYPE_CHECKING:
    from triec.schema.continuation import Continuation, EngineDriver
    from triec.tokenizer.vocabulary import Vocabulary

CACHE_FORMAT = 1
QUOTE = ord('"')


@dataclass(frozen=True)
class StraddleTable:
    offsets: np.ndarray  # int64 [R + 1]
    tokens: np.ndarray  # int32 [N]
    target: np.ndarray  # int32 [N]
    rest_offsets: np.ndarray  # int64 [N + 1]
    rest: np.ndarray  # uint8 [B]
    head_node: np.ndarray  # int64 [H]: vocabulary-trie node of each head, ascending
    head_offsets: np.ndarray  # int64 [H + 1]
    head_bytes: np.ndarray  # uint8: the heads' bytes
    tail_len: int

    @property
    def num_rows(self) -> int:
        return int(self.offsets.shape[0]) - 1

    def row(self, r: int) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = int(self.offsets[r]), int(self.offsets[r + 1])
        return self.tokens[lo:hi], self.target[lo:hi]

    def rest_of(self, i: int) -> bytes:
        return self.rest[int(self.rest_offsets[i]) : int(self.rest_offsets[i + 1])].tobytes()

    def head(self, j: int) -> bytes:
        return self.head_bytes[int(self.head_offsets[j]) : int(self.head_offsets[j + 1])].tobytes()


class _Trie:
    """Navigation over the vocabulary automaton's flat arrays."""

    def __init__(self, a: VocabAutomaton) -> None:
        self.a = a
        self.keys = a.edge_keys

    def child(self, u: int, b: int) -> int:
        k = u * 256 + b
        pos = int(np.searchsorted(self.keys, k))
        return int(self.a.edge_child[pos]) if int(self.keys[pos]) == k else -1

    def walk(self, data: bytes, u: int = 0) -> list[int]:
        """Nodes after each byte of ``data`` from ``u`` (shorter when it falls off)."""
        out = []
        for b in data:
            u = self.child(u, b)
            if u < 0:
                break
            out.append(u)
        return out

    def children(self, u: int) -> tuple[list[int], list[int]]:
        lo = int(np.searchsorted(self.keys, u * 256))
        hi = int(np.searchsorted(self.keys, u * 256 + 256))
        return (self.keys[lo:hi] & 255).tolist(), self.a.edge_child[lo:hi].tolist()

    def ids(self, u: int) -> list[int]:
        k = int(self.a.node_key[u])
        if k < 0:
            return []
        return self.a.key_ids[int(self.a.key_offsets[k]) : int(self.a.key_offsets[k + 1])].tolist()


def find_heads(a: VocabAutomaton, first_tail_byte: int) -> tuple[list[int], list[bytes]]:
    """Vocabulary-trie nodes whose bytes end in ``"`` and that continue with TAIL's first byte.

    Every token that closes a name and reads on into the tail passes through one of them.
    """
    keys, child = a.edge_keys[:-1], a.edge_child[:-1]
    parent = np.full(a.num_nodes, -1, dtype=np.int64)
    byte = np.zeros(a.num_nodes, dtype=np.int64)
    parent[child] = keys >> 8
    byte[child] = keys & 255
    quoted = child[(keys & 255) == QUOTE]
    want = quoted * 256 + first_tail_byte
    pos = np.searchsorted(a.edge_keys, want)
    heads = np.sort(quoted[a.edge_keys[pos] == want])
    out = []
    for u in heads.tolist():
        b = bytearray()
        while u > 0:
            b.append(int(byte[u]))
            u = int(parent[u])
        out.append(bytes(reversed(b)))
    return heads.tolist(), out


def build_straddles(vocab: Vocabulary, tail: bytes, cont: Continuation) -> StraddleTable:
    """Every straddle row for ``tail`` and the continuation's engine (seconds at most; cached by the caller)."""
    tr = _Trie(vocab.automaton)
    drv = cont.driver
    memo: dict[int, list[tuple[int, bytes]]] = {}

    def below(u: int) -> list[tuple[int, bytes]]:
        """(token, x) of every token strictly below node u whose extra bytes x are viable in C."""
        if u not in memo:
            memo[u] = _viable_below(tr, drv, cont.new(), u)
        return memo[u]

    rows: list[list[tuple[int, int, bytes]]] = []
    n = len(tail)
    for i in range(n):
        rows.append(_spine_row(tr, tail[i:], i, n, below))
    heads, head_bytes = find_heads(vocab.automaton, tail[0])
    for h in head_bytes:
        row = _spine_row(tr, h + tail, -len(h), n, below)
        rows.append(row)
    return _pack(rows, heads, head_bytes, n)


def _viable_below(tr: _Trie, drv: EngineDriver, m: Any, u: int) -> list[tuple[int, bytes]]:
    """Depth first below node u with the engine fed each byte: a refused byte prunes its whole subtree."""
    found: list[tuple[int, bytes]] = []

    def visit(node: int, x: bytes) -> None:
        bs, cs = tr.children(node)
        for b, c in zip(bs, cs, strict=True):
            if not drv.feed_byte(m, b):
                continue
            nx = x + bytes([b])
            found.extend((t, nx) for t in tr.ids(c))
            visit(c, nx)
            drv.rollback(m, 1)

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        visit(u, b"")
    finally:
        sys.setrecursionlimit(limit)
    return found


def _spine_row(
    tr: _Trie, spine: bytes, offset0: int, n: int, below: Callable[[int], list[tuple[int, bytes]]]
) -> list[tuple[int, int, bytes]]:
    """Tokens read along ``spine`` (= the rest of the tail, possibly after a head) and past it.

    ``offset0`` is the tail offset at the spine's first byte (negative: a head's bytes come first).
    """
    out: list[tuple[int, int, bytes]] = []
    nodes = tr.walk(spine)
    for d, u in enumerate(nodes, start=1):
        off = offset0 + d
        if off >= 1:
            out.extend((t, off, b"") for t in tr.ids(u))
    if len(nodes) == len(spine) and nodes:
        out.extend((t, n, x) for t, x in below(nodes[-1]))
    out.sort()
    return out


def _pack(rows: list[list[tuple[int, int, bytes]]], heads: list[int], head_bytes: list[bytes], n: int) -> StraddleTable:
    counts = [len(r) for r in rows]
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    flat = [e for r in rows for e in r]
    rests = [e[2] for e in flat]
    rest_offsets = np.zeros(len(flat) + 1, dtype=np.int64)
    np.cumsum([len(x) for x in rests], out=rest_offsets[1:])
    head_offsets = np.zeros(len(heads) + 1, dtype=np.int64)
    np.cumsum([len(h) for h in head_bytes], out=head_offsets[1:])
    return StraddleTable(
        offsets=offsets,
        tokens=np.array([e[0] for e in flat], dtype=np.int32),
        target=np.array([e[1] for e in flat], dtype=np.int32),
        rest_offsets=rest_offsets,
        rest=np.frombuffer(b"".join(rests), dtype=np.uint8).copy(),
        head_node=np.array(heads, dtype=np.int64),
        head_offsets=head_offsets,
        head_bytes=np.frombuffer(b"".join(head_bytes), dtype=np.uint8).copy(),
        tail_len=n,
    )


# ---------------------------------------------------------------- disk cache


def cache_key(vocab: Vocabulary, tail: bytes, engine: str, engine_version: str | None, continuation_text: str) -> str:
    """What the tables depend on: vocabulary, tail, continuation, engine (and its version)."""
    from triec.tokenizer.automaton import CACHE_FORMAT as AUTOMATON_FORMAT

    h = hashlib.sha256(b"triec-straddles-v%d-automaton-v%d\x00" % (CACHE_FORMAT, AUTOMATON_FORMAT))
    for part in (vocab.fingerprint, str(vocab.vocab_size), ",".join(map(str, vocab.eos_token_ids)), engine,
                 engine_version or "", continuation_text):
        h.update(part.encode("utf-8") + b"\x00")
    h.update(tail)
    return h.hexdigest()


def _path(key: str) -> Path:
    return cache_dir() / "straddles" / f"v{CACHE_FORMAT}-{key}.npz"


_ARRAYS = [f.name for f in fields(StraddleTable) if f.name != "tail_len"]


def save_cached(table: StraddleTable, key: str) -> Path | None:
    """Atomic, verified write (:func:`triec.disk_cache.save_arrays`); a failure only costs the cache."""
    arrays = {name: getattr(table, name) for name in _ARRAYS}
    arrays["tail_len"] = np.array([table.tail_len], dtype=np.int64)
    return save_arrays(_path(key), key, CACHE_FORMAT, arrays)


def load_cached(key: str) -> StraddleTable | None:
    """The cached tables if present and intact; ``None`` when in any doubt."""
    arrays = load_arrays(_path(key), key, CACHE_FORMAT, [*_ARRAYS, "tail_len"])
    if arrays is None:
        return None
    tail_len = int(arrays.pop("tail_len")[0])
    return StraddleTable(tail_len=tail_len, **arrays)


def _heads_match(table: StraddleTable, a: VocabAutomaton) -> bool:
    """Each cached head's bytes still lead to its recorded vocabulary-trie node."""
    tr = _Trie(a)
    for j, node in enumerate(table.head_node.tolist()):
        h = table.head(j)
        path = tr.walk(h)
        if len(path) != len(h) or path[-1] != node:
            return False
    return True


_MEMORY: dict[str, StraddleTable] = {}


def load_or_build(
    vocab: Vocabulary, tail: bytes, engine: str, continuation_text: str, make_continuation: Callable[[], Continuation]
) -> tuple[StraddleTable, str]:
    """In-process memo, then the disk cache, then a build (which needs the engine). Returns (table, how)."""
    from triec.engines import engine_version

    key = cache_key(vocab, tail, engine, engine_version(engine), continuation_text)
    found = _MEMORY.get(key)
    how = "memory"
    if found is None:
        found, how = load_cached(key), "disk"
        if found is not None and not _heads_match(found, vocab.automaton):
            found = None  # head ids from another automaton build: recompute
        if found is None:
            found, how = build_straddles(vocab, tail, make_continuation()), "built"
            save_cached(found, key)
        _MEMORY[key] = found
    return found, how
