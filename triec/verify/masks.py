"""A mask table (a value set) checked state by state: against the reference, its encoder's token trie, or a peer engine.

:func:`verify_masks` is ``triec verify`` on a mask table (:mod:`triec.verify.tables` loads the artifact and calls it):
every selected state's row against :mod:`triec.compiler.reference` (its own Aho-Corasick scan of the values, brute
force on small sets, a seeded sample of values past :data:`REFERENCE_VALUES`), a canonical table against
``encoder.encode`` of each value, and each peer engine driven down the artifact's own token paths and along random
decode walks. Pure logic: no printing.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from triec._arrays import concat_ranges
from triec.engines import Engine, Matcher, make_engine
from triec.errors import EngineUnavailable, EngineUnsupported, TriecError
from triec.runtime.bitmask import ids_of
from triec.runtime.table import MaskTable
from triec.tokenizer.vocabulary import Vocabulary
from triec.verify.paths import escape_bytes, token_paths
from triec.verify.report import (
    DEFAULT_WALKS,
    MAX_EXAMPLES,
    PROGRESS_EVERY,
    CheckProgress,
    CheckResult,
    Mismatch,
    ProgressFn,
    VerifyReport,
    token_list,
)
from triec.verify.states import select_states

BRUTE_FORCE_BUDGET = 5_000_000  # states x tokens: the definition checked literally, for small sets


REFERENCE_VALUES = 200_000
"""Past this many values the reference runs on a seeded sample of :data:`SAMPLED_VALUES` values (the artifact's
rows restricted to them, every state of their trie), saying so: its own scan of every value would hold every
match (about 30 bytes each: 1.4 GB at a million titles) and take minutes."""


SAMPLED_VALUES = 20_000


def _set_mismatch(
    table: MaskTable,
    vocab: Vocabulary,
    state: int,
    ours: np.ndarray,
    theirs: np.ndarray,
    problem: str,
    prefix: bytes | None = None,
) -> Mismatch:
    a, b = set(ours.tolist()), set(theirs.tolist())
    p = table.prefix(state) if prefix is None else prefix
    return Mismatch(
        state=int(state),
        prefix=escape_bytes(p),
        problem=problem,
        only_triec=token_list(sorted(a - b), vocab),
        only_other=token_list(sorted(b - a), vocab),
    )


def compare_reference(
    table: MaskTable,
    vocab: Vocabulary,
    states: np.ndarray,
    max_examples: int = MAX_EXAMPLES,
    progress: ProgressFn | None = None,
) -> CheckResult:
    """Allowed tokens, next states and accepting flags against :mod:`triec.compiler.reference`.

    The reference numbers the prefixes of the artifact's values itself and finds
    tokens with its own Aho-Corasick scan; brute force (the definition: token t
    is allowed after p iff p + bytes(t) is a prefix of a value) runs too when
    states x tokens is small.
    """
    from triec.compiler.reference import (
        brute_force_allowed,
        count_prefixes,
        key_states,
        prefix_of,
        prefix_states,
        reference_transitions,
    )

    result = CheckResult(against="reference")
    total = int(states.size)
    if progress:
        progress(CheckProgress("reference", "preparing", 0, total))
    t0 = time.perf_counter()
    keys = table.value_bytes
    found = count_prefixes(keys)  # the reference's own numbering, in memory linear in the values (issue 37)
    if found != table.num_states:
        result.add(
            Mismatch(0, "", f"the values have {found} distinct prefixes, the artifact {table.num_states} states")
        )
        return result
    r_off, r_tok, r_next = reference_transitions(keys, vocab.token_bytes)
    result.seconds["reference"] = time.perf_counter() - t0
    t1 = time.perf_counter()

    def by_state(s: int) -> bytes:  # state -> prefix, for the few states a mismatch names
        return prefix_of(keys, s)

    accepting = np.zeros(table.num_states, dtype=bool)
    accepting[key_states(keys)] = True
    ours_acc = np.zeros(table.num_states, dtype=bool)
    ours_acc[table.value_state.astype(np.int64)] = True
    for s in states.tolist():
        ours, nexts = table.transitions(s)  # the row as served: a stored row, or a tail row of the tail layout
        theirs, their_next = r_tok[r_off[s] : r_off[s + 1]], r_next[r_off[s] : r_off[s + 1]]
        result.states_checked += 1
        if progress and result.states_checked % PROGRESS_EVERY == 0:
            progress(CheckProgress("reference", "states", result.states_checked, total))
        if not np.array_equal(ours, theirs):
            result.add(_set_mismatch(table, vocab, s, ours, theirs, "allowed tokens differ", by_state(s)), max_examples)
        elif not np.array_equal(nexts, their_next):
            bad = int(np.flatnonzero(nexts != their_next)[0])
            result.add(
                Mismatch(
                    s,
                    escape_bytes(by_state(s)),
                    f"token {int(ours[bad])} leads to state {int(nexts[bad])}, the reference says {int(their_next[bad])}",
                ),
                max_examples,
            )
        elif accepting[s] != ours_acc[s]:
            result.add(
                Mismatch(
                    s,
                    escape_bytes(by_state(s)),
                    f"EOS {'allowed' if ours_acc[s] else 'refused'} here, the reference "
                    f"{'allows' if accepting[s] else 'refuses'} it",
                ),
                max_examples,
            )
    if table.num_states * vocab.num_tokens <= BRUTE_FORCE_BUDGET:
        prefixes = prefix_states(keys)  # small sets only (the budget): a map of every prefix
        brute = brute_force_allowed(keys, vocab.token_bytes)
        for p, ids in brute.items():
            s = prefixes[p]
            ours, _ = table.transitions(s)
            if ours.tolist() != ids:
                result.add(
                    _set_mismatch(table, vocab, s, ours, np.array(ids), "allowed tokens differ from brute force", p),
                    max_examples,
                )
        result.seconds["brute_force"] = time.perf_counter() - t1
    result.seconds["compare"] = time.perf_counter() - t1
    if progress:
        progress(CheckProgress("reference", "done", result.states_checked, total))
    return result


def compare_canonical(
    table: MaskTable, vocab: Vocabulary, max_examples: int = MAX_EXAMPLES, progress: ProgressFn | None = None
) -> CheckResult:
    """A canonical table against the token trie of ``encoder.encode(value)``, one value at a time, state by state.

    Every state: a token-trie node's row must hold exactly the reference node's next tokens (each leading
    to the state of that child) and allow EOS exactly where a value ends; a state inside a token's bytes
    must allow nothing. The engines are not an oracle here: they allow every spelling, a larger language.
    """
    result = CheckResult(against="reference")
    t0 = time.perf_counter()
    encoder = vocab.encoder()
    children: dict[tuple[int, ...], set[int]] = {(): set()}
    ends: set[tuple[int, ...]] = set()
    for text in table.strings:
        ids = tuple(encoder.encode(text, add_special_tokens=False).ids)
        for d in range(len(ids)):
            children.setdefault(ids[:d], set()).add(ids[d])
            children.setdefault(ids[: d + 1], set())
        ends.add(ids)
    result.seconds["reference"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    off = table.allowed_offsets.astype(np.int64)
    accepting = np.zeros(table.num_states, dtype=bool)
    accepting[table.value_state.astype(np.int64)] = True
    token_bytes = vocab.token_bytes
    ends_reached: list[int] = []  # the last state of each token edge walked, and the edge's length in states
    lengths: list[int] = []
    stack: list[tuple[int, tuple[int, ...]]] = [(0, ())]
    while stack:
        s, path = stack.pop()
        result.states_checked += 1
        lo, hi = int(off[s]), int(off[s + 1])
        ours, nexts = table.allowed_tokens[lo:hi].tolist(), table.allowed_next[lo:hi].tolist()
        theirs = sorted(children[path])

        def where(path: tuple[int, ...] = path) -> str:  # the prefix, spelled only for a mismatch
            return escape_bytes(b"".join(token_bytes[t] for t in path))

        if ours != theirs:
            result.add(
                _set_mismatch(
                    table,
                    vocab,
                    s,
                    np.array(ours),
                    np.array(theirs),
                    "allowed tokens differ from the encoder's",
                    b"".join(token_bytes[t] for t in path),
                ),
                max_examples,
            )
        elif bool(accepting[s]) != (path in ends):
            result.add(
                Mismatch(
                    s,
                    where(),
                    f"EOS {'allowed' if accepting[s] else 'refused'} here, the encoder's "
                    f"tokenizations {'end' if path in ends else 'do not end'} here",
                ),
                max_examples,
            )
        else:
            for t, n in zip(ours, nexts, strict=True):
                if n - len(token_bytes[t]) < s:  # its chain would start at or before the state it leaves
                    result.add(Mismatch(s, where(), f"token {t} leads back to state {n}"), max_examples)
                    continue
                ends_reached.append(n)
                lengths.append(len(token_bytes[t]))
                stack.append((n, (*path, t)))
    # every state is the root or on exactly one walked token's chain, and a chain's inner states allow nothing
    last, size = np.array(ends_reached, dtype=np.int64), np.array(lengths, dtype=np.int64)
    owners = np.bincount(np.concatenate([[0], concat_ranges(last - size + 1, size)]), minlength=table.num_states)
    inner = np.ones(table.num_states, dtype=bool)
    inner[0] = False
    inner[last] = False
    result.states_checked += int(inner.sum())
    if (owners != 1).any():
        bad = int(np.flatnonzero(owners != 1)[0])
        why = "is reached by no encoder tokenization" if owners[bad] == 0 else "lies on several tokens' byte chains"
        result.add(Mismatch(bad, "", f"state {bad} {why} ({int((owners != 1).sum())} such states)"), max_examples)
    busy = inner & ((np.diff(off) > 0) | accepting)
    if busy.any():
        bad = int(np.flatnonzero(busy)[0])
        result.add(Mismatch(bad, "", f"state {bad} lies inside a token's bytes but allows tokens or EOS"), max_examples)
    result.seconds["compare"] = time.perf_counter() - t1
    if progress:
        progress(CheckProgress("reference", "done", result.states_checked, result.states_checked))
    return result


def compare_engine(
    table: MaskTable,
    vocab: Vocabulary,
    engine: Engine,
    states: np.ndarray,
    paths: tuple[np.ndarray, np.ndarray],
    *,
    walks: int = DEFAULT_WALKS,
    seed: int = 0,
    max_examples: int = MAX_EXAMPLES,
    progress: ProgressFn | None = None,
    compiled: Any = None,
) -> CheckResult:
    """Full mask rows of ``states`` and of random decode walks against a peer engine.

    The engine is driven down the artifact's token paths depth first (consume,
    compare, recurse, roll back), so each state costs one token and one mask.
    ``compiled`` is the engine's grammar; by default the alternation of the
    table's exact strings (:attr:`MaskTable.strings`).
    """
    result = CheckResult(against=engine.name, version=engine.version)
    result.seconds["engine_setup"] = engine.setup_seconds
    total = int(states.size)

    def report(phase: str) -> None:
        if progress:
            progress(CheckProgress(engine.name, phase, result.states_checked, total, result.walks, walks))

    report("compiling")
    t0 = time.perf_counter()
    if compiled is None:
        compiled = engine.compile(table.strings)
    result.seconds["compile"] = time.perf_counter() - t0

    t1 = time.perf_counter()
    selected, children = _path_tree(table, states, paths[0])
    compare = _RowComparer(table, vocab, result, max_examples)
    m = engine.matcher(compiled)

    def check(s: int, prefix: bytes) -> None:
        result.states_checked += 1
        compare(m, s, prefix, "mask rows differ")
        if result.states_checked % PROGRESS_EVERY == 0:
            report("states")

    _drive_paths(table, vocab, engine.name, m, selected, children, paths[1], result, max_examples, check)
    result.seconds["states"] = time.perf_counter() - t1

    t2 = time.perf_counter()
    rng = random.Random(seed)
    report("walks")
    for _ in range(walks):
        _walk(table, vocab, engine.matcher(compiled), rng, result, max_examples)
        report("walks")
    result.seconds["walks"] = time.perf_counter() - t2
    report("done")
    return result


def _path_tree(table: MaskTable, states: np.ndarray, parent: np.ndarray) -> tuple[np.ndarray, dict[int, list[int]]]:
    """The part of the artifact's token-path tree that the engine must walk: the selected states (a mask) and each
    state's children among the selected states and their ancestors. Only reachable states take part; the
    engine reaches a state by consuming the tokens of its path, so every ancestor is on the way."""
    selected = np.zeros(table.num_states, dtype=bool)
    selected[states] = True
    needed = selected.copy()  # selected states and their ancestors on the path tree
    reachable = (parent >= 0) | (np.arange(table.num_states) == 0)
    for s in np.flatnonzero(selected & reachable)[::-1].tolist():
        p = int(parent[s])
        while p >= 0 and not needed[p]:
            needed[p] = True
            p = int(parent[p])
    children: dict[int, list[int]] = {}
    for s in np.flatnonzero(needed & reachable).tolist():
        if s:
            children.setdefault(int(parent[s]), []).append(s)
    return selected, children


def _drive_paths(
    table: MaskTable,
    vocab: Vocabulary,
    engine_name: str,
    m: Matcher,
    selected: np.ndarray,
    children: dict[int, list[int]],
    via: np.ndarray,
    result: CheckResult,
    max_examples: int,
    check: Callable[[int, bytes], None],
) -> None:
    """Drive the engine's matcher depth first down the path tree (consume, ``check`` the selected state, recurse,
    roll back), so each state costs one token and one mask; a token the engine refuses, or a path that does not
    spell the state's prefix, is a mismatch."""
    # Iterative DFS: ("enter", state, prefix) consumes the edge into state, ("leave",) rolls it back.
    stack: list[tuple[int, int, bytes]] = [(1, 0, b"")]
    while stack:
        kind, s, prefix = stack.pop()
        if kind == 0:
            m.rollback(1)
            continue
        if s:
            t = int(via[s])
            if not m.consume(t):
                result.add(
                    Mismatch(
                        s,
                        escape_bytes(prefix),
                        f"{engine_name} refuses token {t} ({escape_bytes(vocab.token_bytes[t])!s}), "
                        "which the artifact allows here",
                    ),
                    max_examples,
                )
                continue
            stack.append((0, s, b""))
        if selected[s]:
            if table.prefix(s) != prefix:
                result.add(
                    Mismatch(
                        s,
                        escape_bytes(prefix),
                        f"the artifact's path to state {s} spells {escape_bytes(prefix)!r}, "
                        f"its prefix is {escape_bytes(table.prefix(s))!r}",
                    ),
                    max_examples,
                )
            check(s, prefix)
        for c in reversed(children.get(s, [])):
            stack.append((1, c, prefix + vocab.token_bytes[int(via[c])]))


class _RowComparer:
    """The artifact's full bitmask row of a state against the engine's, recording a mismatch."""

    def __init__(self, table: MaskTable, vocab: Vocabulary, result: CheckResult, max_examples: int) -> None:
        self.table, self.vocab, self.result, self.max_examples = table, vocab, result, max_examples
        self.ours = np.empty((1, table.words_per_row), dtype=np.int32)
        self.theirs = np.empty(table.words_per_row, dtype=np.int32)

    def __call__(self, matcher: Matcher, state: int, prefix: bytes, what: str) -> bool:
        self.table.fill_bitmask([state], self.ours)
        self.theirs.fill(0)
        matcher.fill(self.theirs)
        if np.array_equal(self.ours[0], self.theirs):
            return True
        mismatch = _set_mismatch(self.table, self.vocab, state, ids_of(self.ours[0]), ids_of(self.theirs), what, prefix)
        self.result.add(mismatch, self.max_examples)
        return False


def _walk(
    table: MaskTable, vocab: Vocabulary, m: Matcher, rng: random.Random, result: CheckResult, max_examples: int
) -> None:
    """One random constrained decode; every step's row compared; it must end on a value."""
    compare = _RowComparer(table, vocab, result, max_examples)
    eos = set(vocab.eos_token_ids)
    state, prefix = table.start, b""
    result.walks += 1
    for _ in range(max(len(v) for v in table.value_bytes) + 1):
        result.walk_steps += 1
        if not compare(m, state, prefix, "mask rows differ on a decode walk"):
            return
        allowed = table.allowed(state).tolist()
        content = [t for t in allowed if t not in eos]
        if len(content) < len(allowed) and (not content or rng.random() < 0.3):
            if table.value(state) is None:
                result.add(
                    Mismatch(state, escape_bytes(prefix), "EOS allowed but the prefix is not a value"), max_examples
                )
            return
        if not content:
            result.add(Mismatch(state, escape_bytes(prefix), "empty mask: the walk is stuck"), max_examples)
            return
        t = rng.choice(content)
        if not m.consume(t):
            result.add(
                Mismatch(state, escape_bytes(prefix), f"engine refuses token {t} on a decode walk"), max_examples
            )
            return
        state, prefix = table.advance(state, t), prefix + vocab.token_bytes[t]
    result.add(Mismatch(state, escape_bytes(prefix), "walk did not reach EOS"), max_examples)


def compare_reference_sampled(
    table: MaskTable,
    vocab: Vocabulary,
    n: int,
    seed: int,
    max_examples: int = MAX_EXAMPLES,
    progress: ProgressFn | None = None,
) -> CheckResult:
    """The reference on a seeded sample of ``n`` values: the artifact's rows restricted to them (``restrict``, then
    ``compact``: every state of the sample's trie, its row as the artifact serves it, tail rows included, less the
    tokens leading to other values) against the reference's compile of the sample, array by array. A tail state has
    one value below it, so its whole row is checked; a branching state, its tokens towards the sampled values."""
    from triec.compiler.reference import key_states, reference_transitions

    result = CheckResult(against="reference")
    t0 = time.perf_counter()
    rng = random.Random(seed)
    keys_all = table.value_bytes
    picked = sorted(rng.sample(range(len(keys_all)), min(n, len(keys_all))))
    keys = [keys_all[i] for i in picked]
    if progress:
        progress(CheckProgress("reference", "preparing", 0, len(keys)))
    view = table.restrict([table.values[i] for i in picked])
    sub = view.compact()
    r_off, r_tok, r_next = reference_transitions(keys, vocab.token_bytes)
    result.seconds["reference"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    ours_off = np.asarray(sub.allowed_offsets, dtype=np.int64)
    theirs_off = np.asarray(r_off, dtype=np.int64)
    result.states_checked = sub.num_states
    if ours_off.shape != theirs_off.shape:
        result.add(
            Mismatch(0, "", f"the sample has {sub.num_states} states here, {theirs_off.shape[0] - 1} in the reference")
        )
        return result
    accepting = np.zeros(sub.num_states, dtype=bool)
    accepting[key_states(keys)] = True
    ours_acc = np.zeros(sub.num_states, dtype=bool)
    ours_acc[sub.value_state.astype(np.int64)] = True
    bad_rows = np.flatnonzero(ours_off != theirs_off)
    bad: set[int] = set()
    if bad_rows.size:
        bad.add(int(bad_rows[0]) - 1 if bad_rows[0] > 0 else 0)
    elif not (np.array_equal(sub.allowed_tokens, r_tok) and np.array_equal(sub.allowed_next, r_next)):
        pos = np.flatnonzero((sub.allowed_tokens != r_tok) | (sub.allowed_next != r_next))
        bad.update((np.searchsorted(ours_off, pos, side="right") - 1).tolist())
    bad.update(np.flatnonzero(accepting != ours_acc).tolist())
    for k in sorted(bad):
        s = int(view.states[k])
        lo, hi = int(ours_off[k]), int(ours_off[min(k + 1, ours_off.shape[0] - 1)])
        ours = sub.allowed_tokens[lo:hi]
        theirs = r_tok[int(theirs_off[k]) : int(theirs_off[k + 1])] if k + 1 < theirs_off.shape[0] else r_tok[:0]
        result.add(
            _set_mismatch(table, vocab, s, ours, theirs, "allowed tokens, next states or EOS differ", table.prefix(s)),
            max_examples,
        )
    result.seconds["compare"] = time.perf_counter() - t1
    if progress:
        progress(CheckProgress("reference", "done", result.states_checked, result.states_checked))
    return result


def _token_index_problem(table: MaskTable, vocab: Vocabulary) -> str:
    """Why a tail table's stored token index is not the vocabulary's content tokens ('' when it is)."""
    from triec.runtime.tails import TailIndex

    ours = table.tails.index if table.tails is not None else None
    want = TailIndex.of(vocab.token_bytes, vocab.eos_token_ids)
    if ours is None:
        return ""
    for name in ("key_offsets", "key_bytes", "id_offsets", "ids"):
        if not np.array_equal(np.asarray(getattr(ours, name)), getattr(want, name)):
            return (
                f"token index (section token_{name}): not the tokenizer's content tokens; tail rows would be "
                "wrong for this tokenizer"
            )
    return ""


def _verify_canonical(
    table: MaskTable,
    vocab: Vocabulary,
    report: VerifyReport,
    against: Sequence[str],
    max_examples: int,
    progress: ProgressFn | None,
) -> None:
    """A canonical table: every state against the encoder's token trie; engines are skipped (a larger language)."""
    report.states_selected = table.num_states
    for name in against:
        if name == "reference":
            report.checks.append(compare_canonical(table, vocab, max_examples, progress))
        else:
            report.checks.append(
                CheckResult(
                    against=name,
                    status="skipped",
                    reason=(
                        "a canonical table allows each value's encoder tokenization only; the engines allow every token "
                        "sequence that spells a value (a larger language), so they are no oracle for it: checked against "
                        "the encoder's token trie (reference)"
                    ),
                )
            )


def verify_masks(
    table: MaskTable,
    vocab: Vocabulary,
    report: VerifyReport,
    against: Sequence[str],
    explicit: Sequence[str],
    *,
    states: int,
    seed: int,
    walks: int,
    max_examples: int,
    progress: ProgressFn | None,
) -> None:
    """``triec verify`` on a mask table, into ``report``: the warnings, the tail layout's token index, then each
    comparison named in ``against`` (a canonical table: its encoder's token trie only)."""
    _eos_warnings(table, vocab, report)
    if table.tails is not None:
        report.tail_states = table.tails.num_tails
        problem = _token_index_problem(table, vocab)
        if problem:
            report.integrity_ok = False
            report.integrity_problems.append(problem)
            return
    if table.canonical:  # every state against the encoder's token trie (a tail table's through its expanded rows)
        _verify_canonical(table, vocab, report, against, max_examples, progress)
        return
    sample_values = table.num_values > REFERENCE_VALUES
    if sample_values and all(name == "reference" for name in against):  # no state sample needed (an O(S) pass)
        selected, report.sampled = np.zeros(0, dtype=np.int64), True
    else:
        selected, report.sampled = select_states(table, states, seed)
    report.states_selected = int(selected.size)
    paths: tuple[np.ndarray, np.ndarray] | None = None
    for name in against:
        if name == "reference":
            report.checks.append(_reference_check(table, vocab, report, selected, seed, max_examples, progress))
        else:
            paths = _engine_check(
                table, vocab, report, name, selected, paths, explicit, walks, seed, max_examples, progress
            )


def _eos_warnings(table: MaskTable, vocab: Vocabulary, report: VerifyReport) -> None:
    """An EOS token whose text a value holds: verified as compiled, but maybe not as meant (issue 37)."""
    from triec.compiler.entry import eos_text_message

    for tid, text in sorted(vocab.eos_texts.items()):
        example = next((v for v in table.value_bytes if text in v), None)
        if example is not None:
            report.warnings.append(eos_text_message(tid, text, example))


def _reference_check(
    table: MaskTable,
    vocab: Vocabulary,
    report: VerifyReport,
    selected: np.ndarray,
    seed: int,
    max_examples: int,
    progress: ProgressFn | None,
) -> CheckResult:
    """The reference on the selected states, or past :data:`REFERENCE_VALUES` on a seeded sample of values (the
    report then says how many values and states it saw)."""
    if table.num_values <= REFERENCE_VALUES:
        return compare_reference(table, vocab, selected, max_examples, progress)
    check = compare_reference_sampled(table, vocab, SAMPLED_VALUES, seed, max_examples, progress)
    report.values_sampled = min(SAMPLED_VALUES, table.num_values)
    report.states_selected = max(report.states_selected, check.states_checked)
    return check


def _engine_check(
    table: MaskTable,
    vocab: Vocabulary,
    report: VerifyReport,
    name: str,
    selected: np.ndarray,
    paths: tuple[np.ndarray, np.ndarray] | None,
    explicit: Sequence[str],
    walks: int,
    seed: int,
    max_examples: int,
    progress: ProgressFn | None,
) -> tuple[np.ndarray, np.ndarray] | None:
    """One peer engine's comparison into ``report``: skipped when it is not installed (raised when named in
    ``explicit``) or cannot compile the set, an error when it fails. The token paths to every state are found for
    the first engine that runs and returned, for the next one to reuse."""
    total = int(selected.size)
    if progress:
        progress(CheckProgress(name, "loading", 0, total))
    try:
        engine = make_engine(name, vocab)
    except EngineUnavailable as exc:
        if progress:
            progress(CheckProgress(name, "skipped", 0, total))
        if name in explicit:
            raise
        report.checks.append(CheckResult(against=name, status="skipped", reason=str(exc)))
        return paths
    if paths is None:
        paths = token_paths(table)
        reachable = (paths[0] >= 0).sum() + 1
        report.unreachable_states = int(table.num_states - reachable)
    try:
        report.checks.append(
            compare_engine(
                table,
                vocab,
                engine,
                selected,
                paths,
                walks=walks,
                seed=seed,
                max_examples=max_examples,
                progress=progress,
            )
        )
    except EngineUnsupported as exc:
        report.checks.append(CheckResult(against=name, status="skipped", version=engine.version, reason=str(exc)))
    except TriecError as exc:  # the engine itself failed: not a pass
        report.checks.append(CheckResult(against=name, status="error", version=engine.version, reason=str(exc)))
    if progress and report.checks[-1].status in ("skipped", "error"):
        progress(CheckProgress(name, report.checks[-1].status, 0, total))
    return paths
