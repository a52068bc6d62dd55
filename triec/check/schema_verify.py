"""A compiled tool schema against an engine compiled on the whole schema, state by state.

The oracle is llguidance or xgrammar given the schema with every name, in the same
convention (:mod:`triec.schema.continuation`). Checked: every trie state's full row
(reached along the trie's own token paths); one step past every token that
leaves the trie part (each straddle at each trie state, each tail-row token at
each key's end); every tail offset; and random decode walks to EOS, every
step's row compared. Pure logic, no printing.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from triec._arrays import row_ids
from triec.check.paths import escape_bytes, token_paths
from triec.schema.continuation import driver

if TYPE_CHECKING:
    from triec.schema.matcher import SchemaMatcher
    from triec.schema.table import SchemaTable


@dataclass
class SchemaCheck:
    against: str
    states_checked: int = 0
    steps_past: int = 0
    tail_checked: int = 0
    walks: int = 0
    walk_steps: int = 0
    walks_ended: int = 0
    mismatches: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)
    engine_narrower: int = 0
    """Rows where the engine's mask lacked tokens that its own ``accept_token`` then accepted (an
    engine's mask narrower than its language: xgrammar on some long synthetic straddling tokens)."""
    narrower_examples: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.mismatches == 0

    def add(self, where: str, prefix: bytes, ours: np.ndarray, theirs: np.ndarray, vocab: Any) -> None:
        self.mismatches += 1
        if len(self.examples) < 10:
            a, b = set(row_ids(ours).tolist()), set(row_ids(theirs).tolist())

            def show(ids: set[int]) -> list[str]:
                return [f"{t}:{escape_bytes(vocab.token_bytes[t]) if t < vocab.num_tokens else '<pad>'}" for t in sorted(ids)[:6]]

            self.examples.append({"where": where, "prefix": escape_bytes(prefix), "only_triec": show(a - b), "only_engine": show(b - a)})


def compare_schema(
    table: SchemaTable,
    schema: dict[str, Any],
    *,
    walks: int = 50,
    seed: int = 0,
    max_walk_steps: int = 80,
    full_tail_leaves: int = 3,
) -> SchemaCheck:
    """Compare with ``table.engine`` compiled on ``schema`` (the whole schema, every name)."""
    vocab = table.vocabulary()
    drv = driver(table.engine, vocab)
    whole = drv.compile(schema)
    res = SchemaCheck(against=table.engine)
    width = table.words_per_row
    ours = np.zeros(width, dtype=np.int32)
    theirs = np.zeros(width, dtype=np.int32)

    def same(m: SchemaMatcher, o: Any, where: str, prefix: bytes) -> bool:
        m.fill_bitmask(ours)
        theirs.fill(0)
        drv.fill(o, theirs)
        if np.array_equal(ours, theirs):
            return True
        only_ours = set(row_ids(ours).tolist()) - set(row_ids(theirs).tolist())
        if not set(row_ids(theirs).tolist()) - set(row_ids(ours).tolist()) and all(_accepts(drv, o, t) for t in only_ours):
            res.engine_narrower += 1
            if len(res.narrower_examples) < 10:
                res.narrower_examples.append({"where": where, "prefix": escape_bytes(prefix), "tokens": [
                    f"{t}:{escape_bytes(vocab.token_bytes[t])}" for t in sorted(only_ours)[:6]]})
            return True
        res.add(where, prefix, ours, theirs, vocab)
        return False

    def step_past(m: SchemaMatcher, o: Any, tokens: list[int], prefix: bytes, where: str) -> None:
        for t in tokens:
            m2 = m.copy()
            if not m2.accept_token(t):
                res.add(f"{where}: triec refuses its own token {t}", prefix, ours, theirs, vocab)
                continue
            if not drv.accept(o, t):
                res.add(f"{where}: engine refuses token {t}", prefix, ours, theirs, vocab)
                continue
            res.steps_past += 1
            same(m2, o, f"{where}, one step past token {t}", prefix + vocab.token_bytes[t])
            drv.rollback(o, 1)

    trie = table.trie
    parent, via = token_paths(trie)
    children: dict[int, list[int]] = {}
    for s in range(1, trie.num_states):
        if parent[s] >= 0:
            children.setdefault(int(parent[s]), []).append(s)
    leaf_value = {int(s): i for i, s in enumerate(trie.value_state.tolist())}
    st = table.straddles
    o = drv.start(whole)
    full_tail_done = 0
    stack: list[tuple[int, int, bytes]] = [(1, 0, b"")]
    while stack:
        kind, s, prefix = stack.pop()
        if kind == 0:
            drv.rollback(o, 1)
            continue
        if s:
            t = int(via[s])
            if not drv.accept(o, t):
                res.add(f"state {s}: engine refuses trie token {t}", prefix, ours, theirs, vocab)
                continue
            stack.append((0, s, b""))
        m = table.matcher_at(s)
        res.states_checked += 1
        same(m, o, f"trie state {s}", prefix)
        if s in leaf_value:
            lo, hi = int(st.offsets[0]), int(st.offsets[1])
            step_past(m, o, st.tokens[lo:hi].tolist(), prefix, f"key end {s}")
            if full_tail_done < full_tail_leaves:
                full_tail_done += 1
                _check_tail(table, drv, o, leaf_value[s], prefix, res, same, step_past)
        else:
            straddling = []
            for e in table.entries_at(s):
                r = int(table.entry_row[e])
                straddling.extend(st.tokens[int(st.offsets[r]) : int(st.offsets[r + 1])].tolist())
            step_past(m, o, straddling, prefix, f"trie state {s} (straddles)")
        for c in reversed(children.get(s, [])):
            stack.append((1, c, prefix + vocab.token_bytes[int(via[c])]))

    rng = random.Random(seed)
    for _ in range(walks):
        _walk(table, drv, whole, rng, res, same, max_walk_steps)
    return res


def _accepts(drv: Any, o: Any, t: int) -> bool:
    if drv.accept(o, t):
        drv.rollback(o, 1)
        return True
    return False


def _check_tail(
    table: SchemaTable, drv: Any, o: Any, value: int, prefix: bytes, res: SchemaCheck,
    same: Callable[..., bool], step_past: Callable[..., None],
) -> None:
    """Every tail offset after one key: its row and one step past each of its tokens."""
    tail = table.tail
    for i in range(1, len(tail)):
        if not drv.feed(o, tail[i - 1 : i]):
            res.add(f"engine refuses tail byte {i - 1}", prefix, np.zeros(1), np.zeros(1), table.vocab)
            drv.rollback(o, i - 1)
            return
        m = table.matcher_at(0, tail_offset=i, value=value)
        res.tail_checked += 1
        if same(m, o, f"tail offset {i}", prefix + tail[:i]):
            st = table.straddles
            step_past(m, o, st.tokens[int(st.offsets[i]) : int(st.offsets[i + 1])].tolist(), prefix + tail[:i], f"tail offset {i}")
    drv.rollback(o, len(tail) - 1)


_CLOSING: dict[str, np.ndarray] = {}


def _closing(vocab: Any) -> np.ndarray:
    """Per id: does the token hold a closing quote, brace or bracket (walks prefer those so that they end)."""
    found = _CLOSING.get(vocab.fingerprint)
    if found is None:
        found = np.zeros(vocab.vocab_size, dtype=bool)
        for t, b in enumerate(vocab.token_bytes):
            found[t] = b'"' in b or b"}" in b or b"]" in b
        _CLOSING[vocab.fingerprint] = found
    return found


def _walk(
    table: SchemaTable, drv: Any, whole: Any, rng: random.Random, res: SchemaCheck, same: Callable[..., bool], max_steps: int
) -> None:
    """A random decode to EOS; closing tokens preferred half the time so that walks end."""
    vocab = table.vocab
    m, o = table.matcher(), drv.start(whole)
    eos = set(table.eos_token_ids)
    closing = _closing(vocab)
    prefix = b""
    res.walks += 1
    row = np.zeros(table.words_per_row, dtype=np.int32)
    for _ in range(max_steps):
        res.walk_steps += 1
        if not same(m, o, "decode walk", prefix):
            return
        m.fill_bitmask(row)
        ids = row_ids(row).tolist()
        if not ids:
            res.add("decode walk: empty mask", prefix, row, row, vocab)
            return
        ends = [t for t in ids if t in eos or closing[t]]
        t = rng.choice(ends) if ends and rng.random() < 0.5 else rng.choice(ids)
        if not (m.accept_token(t) and drv.accept(o, t)):
            res.add(f"decode walk: token {t} refused", prefix, row, row, vocab)
            return
        if t in eos:
            if not m.is_terminated():
                res.add("decode walk: EOS accepted but the matcher is not terminated", prefix, row, row, vocab)
            res.walks_ended += 1
            return
        prefix += vocab.token_bytes[t]
