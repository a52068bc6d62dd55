"""Checking and showing a pattern table: every row against its own DFA, and against llguidance and xgrammar.

The reference derivation runs every token's bytes through the DFA stored in the artifact from each state checked
(by brute force, tokens grouped by length: O(states x vocabulary bytes)); it shares nothing with the compiler's
walk over the token trie. A table stored by token class (format version 6) also has its classes found again
from its DFA and compared array for array, which covers every state at the price of a compile. The engines compile the same regex (xgrammar as written, since its semantics
are the reference for the escapes; llguidance spelled explicitly by :func:`~triec.compiler.regex_spelling.to_rust_regex`)
and are compared state by state along seeded decode walks.

:func:`verify_pattern` is ``triec verify`` on a pattern table (:mod:`triec.verify.tables` loads the artifact and calls
it); :func:`regex_check`, the stored DFA against its regex compiled again, serves schema pattern slots too.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from triec.compiler.regex import Dfa, compile_regex, parse
from triec.compiler.regex_spelling import to_rust_regex
from triec.engines.base import engine_version, import_engine
from triec.engines.llguidance import LLGuidanceEngine
from triec.engines.xgrammar import XGrammarEngine
from triec.errors import EngineUnavailable, PatternError
from triec.named_formats import FORMATS
from triec.runtime.bitmask import ids_of
from triec.runtime.kinds import Table
from triec.runtime.pattern import PatternTable
from triec.runtime.token_classes import TokenClasses
from triec.tokenizer.vocabulary import Vocabulary
from triec.verify.paths import escape_bytes
from triec.verify.report import CheckResult, Mismatch, VerifyReport, VerifyRun, token_list

WALK_DEPTH = 48
"""Tokens per decode walk at most (a walk also ends where only EOS is allowed)."""


@dataclass
class PatternCheck:
    """One comparison of a pattern table's rows with a derivation."""

    against: str
    status: str = "ok"
    version: str | None = None
    reason: str = ""
    states_checked: int = 0
    walks: int = 0
    walk_steps: int = 0
    mismatches: list[dict[str, Any]] = field(default_factory=list)  # state, prefix, problem, only_triec, only_other


def reference_rows(table: PatternTable, vocab: Vocabulary, states: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """(tokens ascending, next states) of each of ``states``: every token's bytes run through the DFA."""
    dense = table.dense_dfa()  # row S: the dead sink
    tb = vocab.token_bytes
    ids = np.array([i for i, b in enumerate(tb) if b], dtype=np.int64)
    lengths = np.array([len(tb[i]) for i in ids], dtype=np.int64)
    order = np.argsort(-lengths, kind="stable")
    ids, lengths = ids[order], lengths[order]
    width = int(lengths.max()) if lengths.size else 0
    mat = np.zeros((ids.size, max(width, 1)), dtype=np.int64)
    for row, i in enumerate(ids.tolist()):
        b = tb[i]
        mat[row, : len(b)] = np.frombuffer(b, dtype=np.uint8)
    longer = np.searchsorted(-lengths, -np.arange(width + 1), side="left").tolist()  # tokens longer than pos
    out = []
    dead = table.num_states
    for s in states.tolist():
        cur = np.full(ids.size, s, dtype=np.int64)
        for pos in range(width):
            n = longer[pos]  # they come first
            if n == 0:
                break
            cur[:n] = dense[cur[:n], mat[:n, pos]]
        ok = cur != dead
        toks, nxt = ids[ok], cur[ok]
        o = np.argsort(toks, kind="stable")
        out.append((toks[o], nxt[o]))
    return out


def recompiled_classes(table: PatternTable, vocab: Vocabulary) -> TokenClasses:
    """The class layout of the table's own DFA over ``vocab``, found again (numbering is canonical: smallest
    member first, so a faithful artifact's arrays come back equal)."""
    from triec.compiler.pattern import walk_index
    from triec.compiler.pattern_rows import token_class_rows
    from triec.compiler.regex import Dfa

    dense = table.dense_dfa()[: table.num_states]
    trans = np.where(dense == table.num_states, -1, dense).astype(np.int32)  # the sink is "dead" in a Dfa
    accepting = np.zeros(table.num_states, dtype=bool)
    accepting[np.asarray(table.value_state, dtype=np.int64)] = True
    starts, _ = walk_index(vocab.automaton)
    dfa = Dfa(trans=trans, accepting=accepting)
    return token_class_rows(dfa, vocab.automaton, starts, vocab.vocab_size, vocab.eos_token_ids, max_work=2**62)


def class_mismatches(table: PatternTable, vocab: Vocabulary, max_examples: int) -> list[dict[str, Any]]:
    """Where the stored classes differ from the DFA's found again: every state is covered at the price of one
    compile, so a class table's rows are all checked even where the brute-force rows are sampled."""
    stored = table.classes
    assert stored is not None
    again = recompiled_classes(table, vocab)
    if not (
        np.array_equal(stored.member_offsets, again.member_offsets)
        and np.array_equal(stored.member_tokens, again.member_tokens)
    ):
        return [{"state": 0, "prefix": "", "problem": "the token classes differ from the DFA's over this vocabulary"}]
    out: list[dict[str, Any]] = []
    for s in range(table.num_states):
        lo, hi = int(stored.class_offsets[s]), int(stored.class_offsets[s + 1])
        alo, ahi = int(again.class_offsets[s]), int(again.class_offsets[s + 1])
        if np.array_equal(stored.class_ids[lo:hi], again.class_ids[alo:ahi]) and np.array_equal(
            stored.class_next[lo:hi], again.class_next[alo:ahi]
        ):
            continue
        out.append({"state": s, "prefix": escape_bytes(table.prefix(s)), "problem": "class rows differ"})
        if len(out) >= max_examples:
            break
    return out


def compare_reference(
    table: PatternTable, vocab: Vocabulary, states: np.ndarray, max_examples: int = 10
) -> PatternCheck:
    """The rows of ``states`` against every token's bytes run through the stored DFA; a class table's classes
    also against the DFA's found again (every state)."""
    check = PatternCheck(against="reference")
    if table.classes is not None:
        found = class_mismatches(table, vocab, max_examples)
        if found:
            check.status = "mismatch"
            check.mismatches.extend(found)
    for s, (toks, nxt) in zip(states.tolist(), reference_rows(table, vocab, states), strict=True):
        mine, mine_next = table.transitions(s)
        check.states_checked += 1
        if np.array_equal(mine, toks) and np.array_equal(mine_next, nxt):
            continue
        check.status = "mismatch"
        if len(check.mismatches) < max_examples:
            check.mismatches.append(
                {
                    "state": s,
                    "prefix": escape_bytes(table.prefix(s)),
                    "problem": "tokens differ" if not np.array_equal(mine, toks) else "next states differ",
                    "only_triec": np.setdiff1d(mine, toks)[:8].tolist(),
                    "only_other": np.setdiff1d(toks, mine)[:8].tolist(),
                }
            )
    return check


def engine_pattern(name: str, vocab: Vocabulary, regex: str) -> Any:
    """A fresh-matcher factory of engine ``name`` for ``regex``: xgrammar reads it as written, llguidance as
    :func:`~triec.compiler.regex_spelling.to_rust_regex` spells it (the escapes' meanings differ between the two)."""
    if name == "llguidance":
        ll = LLGuidanceEngine(vocab)
        compiled = ll.compile_pattern(to_rust_regex(parse(regex)))
        return lambda: ll.matcher(compiled)
    xg = XGrammarEngine(vocab)
    compiled = xg.compile_pattern(regex)
    return lambda: xg.matcher(compiled)


def compare_engine(
    table: PatternTable, vocab: Vocabulary, name: str, *, walks: int, seed: int, max_examples: int = 10
) -> PatternCheck:
    """The table's allowed set against the engine's mask at every state along ``walks`` seeded decode walks."""
    import_engine(name)  # EngineUnavailable with the pip command when it is missing
    check = PatternCheck(against=name, version=engine_version(name))
    start = engine_pattern(name, vocab, table.pattern)
    words = table.words_per_row
    rng = random.Random(seed)
    eos = set(vocab.eos_token_ids)
    seen: set[int] = set()
    for _ in range(max(walks, 1)):
        m = start()
        state = table.start
        check.walks += 1
        for _step in range(WALK_DEPTH):
            mine = table.allowed(state)
            row = np.zeros(words, dtype=np.int32)
            m.fill(row)
            theirs = ids_of(row, vocab.vocab_size)
            check.walk_steps += 1
            if state not in seen:
                seen.add(state)
            if not np.array_equal(mine, theirs):
                check.status = "mismatch"
                if len(check.mismatches) < max_examples:
                    check.mismatches.append(
                        {
                            "state": state,
                            "prefix": escape_bytes(table.prefix(state)),
                            "problem": "allowed sets differ",
                            "only_triec": np.setdiff1d(mine, theirs)[:8].tolist(),
                            "only_other": np.setdiff1d(theirs, mine)[:8].tolist(),
                        }
                    )
                break
            content = [int(t) for t in mine.tolist() if int(t) not in eos]
            if not content:
                break
            if rng.random() < 0.5:  # long tokens cross the most DFA states
                tok = max(rng.sample(content, min(8, len(content))), key=lambda t: len(vocab.token_bytes[t]))
            else:
                tok = rng.choice(content)
            if not m.consume(tok):
                check.status = "mismatch"
                check.mismatches.append({"state": state, "problem": f"the engine refused allowed token {tok}"})
                break
            state = table.advance(state, tok)
    check.states_checked = len(seen)
    return check


# ---------------------------------------------------------------- inspect


def pattern_summary(table: PatternTable) -> dict[str, Any]:
    """What ``triec inspect`` shows of a pattern artifact."""
    counts = table.allowed_counts()  # from the classes' sizes: the rows are never expanded for a summary
    header = dict(table.header or {})
    classes = table.classes
    return {
        "kind": table.kind.value,
        "format_version": table.format_version,
        "triec_version": header.get("triec_version"),
        "format": table.format_name,
        "pattern": table.pattern,
        "tokenizer": {"name": table.tokenizer_name, "fingerprint": table.tokenizer_fingerprint},
        "vocab_size": table.vocab_size,
        "eos_token_ids": list(table.eos_token_ids),
        "states": table.num_states,
        "accepting_states": table.value_state.tolist(),
        "allowed_pairs": table.num_allowed,
        "max_allowed": int(counts.max()) if counts.size else 0,
        "dfa_edges": int(table.dfa_bytes.shape[0]),
        "token_classes": None if classes is None else classes.num_classes,
        "class_pairs": None if classes is None else classes.num_class_pairs,
        "rows": [
            {
                "state": s,
                "shortest_prefix": escape_bytes(table.prefix(s)),
                "accepting": table.is_accepting(s),
                "allowed_content_tokens": int(counts[s]),
                "dfa_bytes": int(table.dfa_offsets[s + 1]) - int(table.dfa_offsets[s]),
            }
            for s in range(min(table.num_states, 200))
        ],
    }


def describe_pattern_state(table: PatternTable, state: int, max_tokens: int | None = 200) -> dict[str, Any]:
    toks, nxt = table.transitions(state)
    shown = toks.size if max_tokens is None else min(toks.size, max_tokens)
    return {
        "state": int(state),
        "shortest_prefix": escape_bytes(table.prefix(state)),
        "accepting": table.is_accepting(state),
        "eos_allowed": list(table.eos_token_ids) if table.is_accepting(state) else [],
        "forced_bytes": escape_bytes(table.forced_bytes(state)),
        "allowed_content_tokens": int(toks.size),
        "tokens": [{"id": int(t), "next_state": int(n)} for t, n in zip(toks[:shown], nxt[:shown], strict=True)],
        "tokens_truncated": shown < toks.size,
    }


# ---------------------------------------------------------------- the stored DFA against its regex


def expected_regexes(format_name: str | None, regex: str, *, quoted: bool | None) -> tuple[str, ...]:
    """The regexes a table may hold: a named format's, within quotes (``quoted``: a schema's pattern slot or a
    string schema's table, whose DFA is the whole JSON string's) or not (``False``) or either (``None``); without
    a name, the stored one itself."""
    if format_name is None:
        return (regex,)
    found = FORMATS.get(format_name)
    if found is None:
        return ()
    return {True: (f'"{found}"',), False: (found,), None: (found, f'"{found}"')}[quoted]


def dfa_difference(table: PatternTable, reference: Dfa) -> str | None:
    """Where the stored DFA differs from ``reference`` (the regex compiled again), or None when they are the same
    automaton. Both are minimal and trimmed, so they are equal exactly when a walk from state 0 pairs their states
    one to one with the same accepting flags and the same bytes to paired states: the walk does not rely on how
    either numbers its states."""
    n, m = table.num_states, reference.num_states
    if n != m:
        return f"the stored DFA has {n} states, the regex's minimal DFA {m}"
    stored = table.dense_dfa()  # row n: the dead sink
    ref = np.where(reference.trans >= 0, reference.trans, n)
    accepting = np.zeros(n, dtype=bool)
    accepting[np.asarray(table.value_state, dtype=np.int64)] = True
    pair = {0: 0}  # regex state -> stored state
    taken = {0}
    queue = [0]
    for r in queue:
        s = pair[r]
        where = f"state {s} (after {escape_bytes(table.prefix(s))})"
        if bool(reference.accepting[r]) != bool(accepting[s]):
            return f"{where}: {'accepting' if accepting[s] else 'not accepting'}, the regex's is not so"
        dead_ref, dead_stored = ref[r] == n, stored[s] == n
        if not np.array_equal(dead_ref, dead_stored):
            b = int(np.flatnonzero(dead_ref != dead_stored)[0])
            return f"{where}: byte {b:#04x} {'leads on' if dead_ref[b] else 'is refused'} in the stored DFA only"
        for b in np.flatnonzero(~dead_ref).tolist():
            rn, sn = int(ref[r, b]), int(stored[s, b])
            if rn not in pair:
                if sn in taken:
                    return f"{where}: byte {b:#04x} leads to state {sn}, which the regex's DFA reaches otherwise"
                pair[rn] = sn
                taken.add(sn)
                queue.append(rn)
            elif pair[rn] != sn:
                return f"{where}: byte {b:#04x} leads to state {sn}, the regex's DFA to its state {pair[rn]}"
    if len(pair) != n:
        return f"{n - len(pair)} stored states are not reached from the start"
    return None


def compare_regex(table: PatternTable, *, quoted: bool | None = None) -> PatternCheck:
    """``triec verify``'s check that the stored DFA is the stored regex's (and a named format's regex is that
    format's): the regex compiled again into its minimal DFA and compared with the stored one. The reference check
    runs every token over the stored DFA, so together they tie the rows to the regex the header shows."""
    check = PatternCheck(against="regex", states_checked=table.num_states)
    expected = expected_regexes(table.format_name, table.pattern, quoted=quoted)
    problem: str | None
    if table.pattern not in expected:
        problem = f"the regex {table.pattern!r:.60} is not format {table.format_name!r}'s ({expected[:1]!r:.60})"
    else:
        try:
            problem = dfa_difference(table, compile_regex(table.pattern))
        except PatternError as exc:
            problem = f"the regex {table.pattern!r:.60} does not compile: {exc}"
    if problem is not None:
        check.status = "mismatch"
        check.mismatches.append({"state": 0, "prefix": "", "problem": problem, "only_triec": [], "only_other": []})
    return check


def verify_pattern(
    table: Table,
    vocab: Vocabulary,
    report: VerifyReport,
    run: VerifyRun,
) -> None:
    """A pattern table: rows against its own DFA (reference) and the engines' masks for its regex along walks."""
    assert isinstance(table, PatternTable)
    report.num_values, report.pattern = 0, pattern_facts(table)  # a regular language: no values to count
    rng = np.random.default_rng(run.seed)
    selected = (
        np.arange(table.num_states)
        if table.num_states <= run.states
        else np.sort(rng.choice(table.num_states, size=run.states, replace=False))
    )
    report.states_selected, report.sampled = int(selected.size), table.num_states > run.states
    report.checks.append(regex_check([table], vocab, run.max_examples))
    for name in run.against:
        t0 = time.perf_counter()
        try:
            if name == "reference":
                found = compare_reference(table, vocab, selected, run.max_examples)
            elif name in ("llguidance", "xgrammar"):
                found = compare_engine(
                    table, vocab, name, walks=run.walks, seed=run.seed, max_examples=run.max_examples
                )
            else:
                report.checks.append(
                    CheckResult(against=name, status="skipped", reason=f"{name} does not compile regexes here")
                )
                continue
        except EngineUnavailable as exc:
            if name in run.explicit:
                raise
            report.checks.append(CheckResult(against=name, status="skipped", reason=str(exc)))
            continue
        result = CheckResult(
            against=name,
            status=found.status,
            version=found.version,
            states_checked=found.states_checked,
            walks=found.walks,
            walk_steps=found.walk_steps,
            seconds={"compare": time.perf_counter() - t0},
        )
        add_pattern_mismatches(result, found.mismatches, vocab, run.max_examples)
        report.checks.append(result)


def pattern_facts(table: Table) -> dict[str, Any]:
    """What a pattern table holds, for the report: its regex and format, its DFA's states, accepting states and
    edges (a pattern table has no values; ``num_values`` counts its accepting states)."""
    assert isinstance(table, PatternTable)
    return {
        "regex": table.pattern,
        "format": table.format_name,
        "states": table.num_states,
        "accepting_states": int(table.value_state.shape[0]),
        "dfa_edges": int(table.dfa_bytes.shape[0]),
    }


def regex_check(
    tables: Sequence[Any] | dict[int, Any], vocab: Vocabulary, max_examples: int, *, quoted: bool | None = None
) -> CheckResult:
    """The ``regex`` check: each pattern table's (or schema pattern slot's, by slot number) stored DFA against its
    regex compiled again (:func:`compare_regex`); a mismatch names the difference."""
    t0 = time.perf_counter()
    result = CheckResult(against="regex", reason="the stored DFA against its regex compiled again")
    numbered = tables.items() if isinstance(tables, dict) else ((None, t) for t in tables)
    for i, t in numbered:
        found = compare_regex(t, quoted=quoted)
        result.states_checked += found.states_checked
        add_pattern_mismatches(result, found.mismatches, vocab, max_examples, "" if i is None else f"slot {i}: ")
    result.seconds["compare"] = time.perf_counter() - t0
    return result


def add_pattern_mismatches(
    result: CheckResult, found: list[dict[str, Any]], vocab: Vocabulary, max_examples: int, where: str = ""
) -> None:
    """A pattern check's mismatches (this module's dicts) into ``result``, ``where`` before each."""
    for m in found:
        result.add(
            Mismatch(
                state=int(m["state"]),
                prefix=str(m.get("prefix", "")),
                problem=where + str(m["problem"]),
                only_triec=token_list(m.get("only_triec", []), vocab),
                only_other=token_list(m.get("only_other", []), vocab),
            ),
            max_examples,
        )
