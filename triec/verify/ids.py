"""``triec verify`` on an ids table (semantic IDs): every state's row against the token trie of its items.

The oracle is independent of the arrays' layout: a dict of each prefix's next ids, built from the items one by one
(allowed after prefix p = the next id of every item extending p, plus EOS iff p is an item). The walk from the start
follows the table's own rows and must reach every state exactly once, allow exactly the oracle's ids there, and
allow EOS exactly where an item ends. No tokenizer is read: an ids table has no bytes to check against one, and the
engines (grammars over text) are no oracle for it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from triec.runtime.table import MaskTable
from triec.verify.report import CheckResult, Mismatch, VerifyReport


def _where(path: tuple[int, ...]) -> str:
    return " ".join(map(str, path))


def compare_ids(table: MaskTable, max_examples: int) -> CheckResult:
    """Walk the table's rows from the start against the items' token trie, state by state."""
    result = CheckResult(against="reference")
    t0 = time.perf_counter()
    end = object()  # marks a node where an item ends; nested dicts hold O(ids) memory, never every prefix
    root: dict[object, Any] = {}
    for item in table.value_ids:
        node = root
        for t in item:
            node = node.setdefault(t, {})
        node[end] = None
    result.seconds["reference"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    off = table.allowed_offsets.astype(np.int64)
    tokens, nexts = table.allowed_tokens.tolist(), table.allowed_next.tolist()
    accepting = np.zeros(table.num_states, dtype=bool)
    accepting[table.value_state.astype(np.int64)] = True
    seen = np.zeros(table.num_states, dtype=np.int64)
    stack: list[tuple[int, dict[object, Any], tuple[int, ...]]] = [(0, root, ())]
    while stack:
        s, here, path = stack.pop()
        seen[s] += 1
        if seen[s] > 1:
            result.add(Mismatch(s, _where(path), f"state {s} is reached along two token paths"), max_examples)
            continue
        result.states_checked += 1
        lo, hi = int(off[s]), int(off[s + 1])
        ours = tokens[lo:hi]
        theirs = sorted(t for t in here if isinstance(t, int))
        is_item = end in here
        if ours != theirs:
            only_ours = sorted(set(ours) - set(theirs))[:8]
            only_theirs = sorted(set(theirs) - set(ours))[:8]
            result.add(
                Mismatch(
                    s,
                    _where(path),
                    f"allowed ids differ from the items' (only here: {only_ours}, only in the items: {only_theirs})",
                ),
                max_examples,
            )
            continue
        if bool(accepting[s]) != is_item:
            result.add(
                Mismatch(
                    s,
                    _where(path),
                    f"EOS {'allowed' if accepting[s] else 'refused'} here, and this prefix "
                    f"{'is' if is_item else 'is not'} an item",
                ),
                max_examples,
            )
        for t, n in zip(ours, nexts[lo:hi], strict=True):
            if n <= s:
                result.add(Mismatch(s, _where(path), f"id {t} leads back to state {n}"), max_examples)
                continue
            stack.append((n, here[t], (*path, t)))
    unreached = np.flatnonzero(seen == 0)
    if unreached.size:
        result.add(
            Mismatch(int(unreached[0]), "", f"{unreached.size} states are reached by no item's path"), max_examples
        )
    result.seconds["compare"] = time.perf_counter() - t1
    return result


def verify_ids(table: MaskTable, report: VerifyReport, against: Sequence[str], max_examples: int) -> None:
    """The reference comparison (:func:`compare_ids`); any engine named is reported skipped, with why."""
    report.states_selected = table.num_states
    for name in against:
        if name == "reference":
            report.checks.append(compare_ids(table, max_examples))
        else:
            report.checks.append(
                CheckResult(
                    against=name,
                    status="skipped",
                    reason="an ids table's values are token-id sequences, not text: a grammar engine is no oracle "
                    "for it; checked against the token trie of its items (reference)",
                )
            )
