"""Check an artifact state by state against independent derivations of its masks.

triec's promise is that in every state the allowed tokens equal what an exact
finite-state engine computes for the same values and vocabulary. This module
makes that promise checkable on the user's own artifact and tokenizer:

1. integrity: checksums, format, ranges (``triec.load(verify=True)``), and the
   tokenizer's fingerprint against the one recorded in the artifact;
2. state selection: every state up to a limit, else a seeded sample that always
   holds the start and every state of byte depth <= 2 (the widest masks);
3. per state, the artifact's mask row against another derivation: the
   pyahocorasick reference (plus brute force on small sets), or a peer engine
   driven to the state along a token path the artifact itself provides;
4. decode walks: random allowed tokens from the start until EOS, every step's
   mask compared, each walk ending on a value.

Pure logic: no printing. docs/verify.md explains what is compared and why.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from triec._arrays import concat_ranges
from triec.artifact.formats import load
from triec.engines import ENGINES, Engine, Matcher, make_engine
from triec.errors import ArtifactError, EngineUnavailable, EngineUnsupported, TokenizerError, TriecError
from triec.runtime.bitmask import ids_of
from triec.runtime.kinds import Table, TableKind
from triec.runtime.table import MaskTable
from triec.tokenizer.resolve import resolve_vocabulary
from triec.tokenizer.vocabulary import Vocabulary
from triec.verify.paths import escape_bytes, token_paths
from triec.verify.schemas import compare_schema
from triec.verify.states import select_states, state_depths  # noqa: F401  (state_depths: re-exported)

AGAINST: tuple[str, ...] = ("reference", *ENGINES)
DEFAULT_STATES = 50_000
DEFAULT_WALKS = 100
MAX_EXAMPLES = 10
BRUTE_FORCE_BUDGET = 5_000_000  # states x tokens: the definition checked literally, for small sets
REFERENCE_VALUES = 200_000
"""Past this many values the reference runs on a seeded sample of :data:`SAMPLED_VALUES` values (the artifact's
rows restricted to them, every state of their trie), saying so: its own scan of every value would hold every
match (about 30 bytes each: 1.4 GB at a million titles) and take minutes."""
SAMPLED_VALUES = 20_000
PROGRESS_EVERY = 256  # states between progress reports (a report costs a call; a state, microseconds)

WRONG_TOKENIZER = (
    "an artifact compiled for one tokenizer and served with another yields plausible but wrong masks: "
    "the token ids point at different bytes, so nothing fails loudly"
)


# ---------------------------------------------------------------- report


@dataclass
class Mismatch:
    """One state where two derivations disagree."""

    state: int
    prefix: str  # escaped
    problem: str  # what disagreed, in words
    only_triec: list[dict[str, Any]] = field(default_factory=list)  # [{"id": 123, "bytes": "..."}]
    only_other: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class CheckResult:
    """The comparison of the artifact with one derivation (reference or engine)."""

    against: str
    status: str = "ok"  # ok | mismatch | skipped | error
    version: str | None = None
    reason: str = ""  # why skipped, or the engine's error
    states_checked: int = 0
    walks: int = 0
    walk_steps: int = 0
    mismatches: int = 0
    examples: list[Mismatch] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    def add(self, mismatch: Mismatch, max_examples: int = MAX_EXAMPLES) -> None:
        self.mismatches += 1
        self.status = "mismatch"
        if len(self.examples) < max_examples:
            self.examples.append(mismatch)


@dataclass
class VerifyReport:
    """Everything ``triec verify`` found; ``ok`` decides the exit code."""

    artifact: str
    tokenizer: str = ""
    fingerprint: str = ""
    num_values: int = 0
    num_states: int = 0
    vocab_size: int = 0
    eos_token_ids: list[int] = field(default_factory=list)
    integrity_ok: bool = False
    integrity_problems: list[str] = field(default_factory=list)
    states_selected: int = 0
    sampled: bool = False
    seed: int = 0
    unreachable_states: int = 0
    tail_states: int = 0  # the tail layout: states whose rows are served from the values (version 4)
    values_sampled: int = 0  # past REFERENCE_VALUES: the values the reference ran on (0: every value)
    warnings: list[str] = field(default_factory=list)  # what holds but may not be meant (an EOS id that is text)
    schema: dict[str, Any] | None = None  # a schema artifact: engine, shape, slots, enums left in the engine
    pattern: dict[str, Any] | None = None  # a pattern artifact: regex, format, states, accepting states, DFA edges
    checks: list[CheckResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Integrity held, nothing mismatched, and at least one comparison ran."""
        ran = [c for c in self.checks if c.status != "skipped"]
        return self.integrity_ok and bool(ran) and all(c.status == "ok" for c in ran)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["ok"] = self.ok
        return d


@dataclass(frozen=True)
class CheckProgress:
    """How far one comparison has come: what ``verify(progress=...)`` is told as it runs.

    ``phase`` is ``preparing`` (the reference's own derivation), ``loading`` (the
    engine over the vocabulary), ``compiling`` (the engine's grammar), ``states``, ``walks``, then ``done``, or ``skipped`` / ``error``
    when the engine could not finish.
    """

    against: str
    phase: str
    states: int
    states_total: int
    walks: int = 0
    walks_total: int = 0


ProgressFn = Callable[[CheckProgress], None]


# ---------------------------------------------------------------- integrity


def load_checked(path: str, tokenizer: str | None) -> tuple[Table | None, Vocabulary | None, VerifyReport]:
    """Load with full checks, resolve the tokenizer, compare fingerprints.

    Without ``tokenizer`` the name recorded in the artifact is used. Returns
    ``(None, None, report)`` when integrity fails. A tokenizer that cannot be
    found at all raises :class:`TokenizerError` (a usage problem, exit 2).
    """
    report = VerifyReport(artifact=str(path))
    if not Path(path).exists():
        raise TriecError(f"{path}: no such artifact file")
    if not Path(path).is_file():
        raise TriecError(f"{path}: not a regular file, expected an artifact")
    try:
        table = load(path, verify=True)
    except ArtifactError as exc:
        report.integrity_problems.append(str(exc))
        return None, None, report
    report.tokenizer = tokenizer or table.tokenizer_name
    report.fingerprint = table.tokenizer_fingerprint
    report.num_values, report.num_states = table.num_values, table.num_states
    report.vocab_size, report.eos_token_ids = table.vocab_size, list(table.eos_token_ids)
    if not report.tokenizer:
        raise TokenizerError(f"{path}: the artifact records no tokenizer name; pass one with -t")
    vocab, problems = resolve_vocabulary(report.tokenizer, table)
    if problems:
        report.integrity_problems.append(
            f"{path}: wrong tokenizer {report.tokenizer!r}: {'; '.join(problems)}. "
            f"{WRONG_TOKENIZER[0].upper()}{WRONG_TOKENIZER[1:]}"
        )
        return None, vocab, report
    report.integrity_ok = True
    return table, vocab, report


# ---------------------------------------------------------------- states and paths


# ---------------------------------------------------------------- reference


def _token_list(ids: Sequence[int], vocab: Vocabulary, limit: int = 8) -> list[dict[str, Any]]:
    out = []
    for t in list(ids)[:limit]:
        b = vocab.token_bytes[t] if 0 <= t < vocab.num_tokens else b""
        label = "<eos>" if t in vocab.eos_token_ids else ("<padding>" if t >= vocab.num_tokens else escape_bytes(b))
        out.append({"id": int(t), "bytes": label})
    return out


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
        only_triec=_token_list(sorted(a - b), vocab),
        only_other=_token_list(sorted(b - a), vocab),
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


# ---------------------------------------------------------------- engines


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
    parent, via = paths
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

    compare = _RowComparer(table, vocab, result, max_examples)
    m = engine.matcher(compiled)

    def check(s: int, prefix: bytes) -> None:
        result.states_checked += 1
        compare(m, s, prefix, "mask rows differ")
        if result.states_checked % PROGRESS_EVERY == 0:
            report("states")

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
                        f"{engine.name} refuses token {t} ({escape_bytes(vocab.token_bytes[t])!s}), "
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


# ---------------------------------------------------------------- driver


def parse_against(raw: Sequence[str]) -> list[str]:
    """``reference``, engine names, comma lists and ``all`` (reference + every engine)."""
    names: list[str] = []
    for chunk in raw:
        for part in chunk.split(","):
            part = part.strip()
            if not part:
                continue
            if part == "all":
                names.extend(AGAINST)
            elif part in AGAINST:
                names.append(part)
            else:
                raise TriecError(f"--against: expected reference, {', '.join(ENGINES)} or all, found {part!r}")
    return list(dict.fromkeys(names)) or ["reference"]


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


def verify(
    path: str,
    *,
    tokenizer: str | None = None,
    against: Sequence[str] = ("reference",),
    states: int = DEFAULT_STATES,
    seed: int = 0,
    walks: int = DEFAULT_WALKS,
    explicit: Sequence[str] = (),
    max_examples: int = MAX_EXAMPLES,
    progress: ProgressFn | None = None,
) -> VerifyReport:
    """Run every check. Engines named in ``explicit`` must be installed
    (:class:`EngineUnavailable`); others that are missing are reported as skipped.
    ``progress`` hears how far each comparison has come (:class:`CheckProgress`)."""
    t0 = time.perf_counter()
    table, vocab, report = load_checked(path, tokenizer)
    report.seed = seed
    if table is None or vocab is None:
        report.seconds = time.perf_counter() - t0
        return report
    if table.kind is TableKind.TOOL_SCHEMA:
        _verify_schema(table, vocab, report, against, explicit, walks, seed, max_examples, states)
        report.seconds = time.perf_counter() - t0
        return report
    if table.kind is TableKind.PATTERN:
        _verify_pattern(table, vocab, report, against, explicit, walks, seed, max_examples, states)
        report.seconds = time.perf_counter() - t0
        return report
    assert isinstance(table, MaskTable), f"{path}: a {table.kind} table"  # the kinds an artifact holds
    from triec.compiler.entry import eos_text_message

    for tid, text in sorted(vocab.eos_texts.items()):  # verified as compiled, but maybe not as meant (issue 37)
        example = next((v for v in table.value_bytes if text in v), None)
        if example is not None:
            report.warnings.append(eos_text_message(tid, text, example))
    if table.tails is not None:
        report.tail_states = table.tails.num_tails
        problem = _token_index_problem(table, vocab)
        if problem:
            report.integrity_ok = False
            report.integrity_problems.append(problem)
            report.seconds = time.perf_counter() - t0
            return report
    if table.canonical:  # every state against the encoder's token trie (a tail table's through its expanded rows)
        _verify_canonical(table, vocab, report, against, max_examples, progress)
        report.seconds = time.perf_counter() - t0
        return report
    sample_values = table.num_values > REFERENCE_VALUES
    if sample_values and all(name == "reference" for name in against):  # no state sample needed (an O(S) pass)
        selected, report.sampled = np.zeros(0, dtype=np.int64), True
    else:
        selected, report.sampled = select_states(table, states, seed)
    report.states_selected = int(selected.size)
    paths: tuple[np.ndarray, np.ndarray] | None = None
    for name in against:
        if name == "reference":
            if sample_values:
                check = compare_reference_sampled(table, vocab, SAMPLED_VALUES, seed, max_examples, progress)
                report.values_sampled = min(SAMPLED_VALUES, table.num_values)
                report.states_selected = max(report.states_selected, check.states_checked)
            else:
                check = compare_reference(table, vocab, selected, max_examples, progress)
            report.checks.append(check)
            continue
        if progress:
            progress(CheckProgress(name, "loading", 0, int(selected.size)))
        try:
            engine = make_engine(name, vocab)
        except EngineUnavailable as exc:
            if progress:
                progress(CheckProgress(name, "skipped", 0, int(selected.size)))
            if name in explicit:
                raise
            report.checks.append(CheckResult(against=name, status="skipped", reason=str(exc)))
            continue
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
            progress(CheckProgress(name, report.checks[-1].status, 0, int(selected.size)))
    report.seconds = time.perf_counter() - t0
    return report


def _verify_pattern(
    table: Table,
    vocab: Vocabulary,
    report: VerifyReport,
    against: Sequence[str],
    explicit: Sequence[str],
    walks: int,
    seed: int,
    max_examples: int,
    states: int,
) -> None:
    """A pattern table: rows against its own DFA (reference) and the engines' masks for its regex along walks."""
    from triec.runtime.pattern import PatternTable
    from triec.verify import patterns

    assert isinstance(table, PatternTable)
    report.num_values, report.pattern = 0, pattern_facts(table)  # a regular language: no values to count
    rng = np.random.default_rng(seed)
    selected = (
        np.arange(table.num_states)
        if table.num_states <= states
        else np.sort(rng.choice(table.num_states, size=states, replace=False))
    )
    report.states_selected, report.sampled = int(selected.size), table.num_states > states
    report.checks.append(regex_check([table], vocab, max_examples))
    for name in against:
        t0 = time.perf_counter()
        try:
            if name == "reference":
                found = patterns.compare_reference(table, vocab, selected, max_examples)
            elif name in ("llguidance", "xgrammar"):
                found = patterns.compare_engine(table, vocab, name, walks=walks, seed=seed, max_examples=max_examples)
            else:
                report.checks.append(
                    CheckResult(against=name, status="skipped", reason=f"{name} does not compile regexes here")
                )
                continue
        except EngineUnavailable as exc:
            if name in explicit:
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
        _add_pattern_mismatches(result, found.mismatches, vocab, max_examples)
        report.checks.append(result)


def pattern_facts(table: Table) -> dict[str, Any]:
    """What a pattern table holds, for the report: its regex and format, its DFA's states, accepting states and
    edges (a pattern table has no values; ``num_values`` counts its accepting states)."""
    from triec.runtime.pattern import PatternTable

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
    regex compiled again (:func:`triec.verify.patterns.compare_regex`); a mismatch names the difference."""
    from triec.verify import patterns

    t0 = time.perf_counter()
    result = CheckResult(against="regex", reason="the stored DFA against its regex compiled again")
    numbered = tables.items() if isinstance(tables, dict) else ((None, t) for t in tables)
    for i, t in numbered:
        found = patterns.compare_regex(t, quoted=quoted)
        result.states_checked += found.states_checked
        _add_pattern_mismatches(result, found.mismatches, vocab, max_examples, "" if i is None else f"slot {i}: ")
    result.seconds["compare"] = time.perf_counter() - t0
    return result


def _add_pattern_mismatches(
    result: CheckResult, found: list[dict[str, Any]], vocab: Vocabulary, max_examples: int, where: str = ""
) -> None:
    """A pattern check's mismatches (:mod:`triec.verify.patterns`' dicts) into ``result``, ``where`` before each."""
    for m in found:
        result.add(
            Mismatch(
                state=int(m["state"]),
                prefix=str(m.get("prefix", "")),
                problem=where + str(m["problem"]),
                only_triec=_token_list(m.get("only_triec", []), vocab),
                only_other=_token_list(m.get("only_other", []), vocab),
            ),
            max_examples,
        )


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


def _verify_schema(
    table: Any,
    vocab: Vocabulary,
    report: VerifyReport,
    against: Sequence[str],
    explicit: Sequence[str],
    walks: int,
    seed: int,
    max_examples: int,
    states: int = DEFAULT_STATES,
) -> None:
    """A schema artifact: each slot's trie against the reference; the whole output against each engine.

    Each engine is compared with itself compiled on the whole original schema (every enum whole), in the
    artifact's convention: random walks to EOS, and each slot from its entry, every trie state (up to
    ``states`` per slot, else a sample), one step past every crossing token (docs/verify.md).
    """
    table.bind(vocab)
    info = table.info
    report.schema = {
        "engine": table.engine,
        "shape": info.get("shape", ""),
        "prefix": table.prefix.decode("utf-8"),
        "tail": table.tail.decode("utf-8"),
        "grammars": len(table.grammars),
        "slots": [
            {
                "pointer": (info.get("slots") or [{}] * len(table.slots))[i].get("pointer", ""),
                "values": s.num_values if s.has_values else 0,
                "states": s.num_states,
                **({"regex": s.pattern} if not s.has_values else {}),
            }
            for i, s in enumerate(table.slots)
        ],
        "engine_enums": list(info.get("engine_enums") or []),
    }
    if "continuation_sha256" in info:
        report.schema["continuation_sha256"] = info["continuation_sha256"]
    report.states_selected = table.num_states
    slot_tables = {i: s.trie for i, s in enumerate(table.slots) if not s.has_values}
    if slot_tables:
        report.checks.append(regex_check(slot_tables, vocab, max_examples, quoted=True))
    for name in against:
        if name == "reference":
            result = CheckResult(against="reference", reason=f"the tries and DFAs of {len(table.slots)} slot(s)")
            for i, s in enumerate(table.slots):
                if not s.has_values:  # a format or pattern field: every row against its DFA run over each token
                    from triec.verify.patterns import compare_reference as compare_dfa

                    pr = compare_dfa(s.trie, vocab, np.arange(s.num_states, dtype=np.int64), max_examples)
                    result.states_checked += pr.states_checked
                    _add_pattern_mismatches(result, pr.mismatches, vocab, max_examples, f"slot {i}: ")
                    continue
                r = compare_reference(s.trie, vocab, np.arange(s.num_states, dtype=np.int64), max_examples)
                result.states_checked += r.states_checked
                result.mismatches += r.mismatches
                for ex in r.examples[: max(0, max_examples - len(result.examples))]:
                    ex.problem = f"slot {i}: {ex.problem}"
                    result.examples.append(ex)
                for k, v in r.seconds.items():
                    result.seconds[k] = result.seconds.get(k, 0.0) + v
                if r.status not in ("ok", "mismatch"):
                    result.status, result.reason = r.status, r.reason
            if result.status == "ok" and result.mismatches:
                result.status = "mismatch"
            report.checks.append(result)
            continue
        if name not in ("llguidance", "xgrammar"):
            report.checks.append(
                CheckResult(
                    against=name, status="skipped", reason="schema tables are compared with llguidance and xgrammar"
                )
            )
            continue
        try:
            make_engine(name, vocab)  # raises EngineUnavailable with the pip command
        except EngineUnavailable as exc:
            if name in explicit:
                raise
            report.checks.append(CheckResult(against=name, status="skipped", reason=str(exc)))
            continue
        t0 = time.perf_counter()
        try:
            twin = table.with_engine(name)
        except TriecError as exc:  # a table this engine cannot serve exactly (control characters under llguidance)
            report.checks.append(CheckResult(against=name, status="skipped", reason=str(exc)))
            continue
        try:
            sr = compare_schema(twin, walks=walks, seed=seed, max_states=states)
        except TriecError as exc:
            report.checks.append(CheckResult(against=name, status="error", reason=str(exc)))
            continue
        if sr.sampled:  # the headline says what the engines saw: a sample of each slot's states
            report.sampled = True
            report.states_selected = sr.states_checked
        result = CheckResult(
            against=name,
            version=twin.engine_version,
            states_checked=sr.states_checked + sr.steps_past + sr.tail_checked + sr.enters_checked,
            walks=sr.walks,
            walk_steps=sr.walk_steps,
        )
        result.reason = (
            f"{sr.states_checked} trie states of {sr.slots_checked} slot(s)"
            + (" (sampled)" if sr.sampled else "")
            + f", {sr.steps_past} steps past crossing tokens, {sr.tail_checked} tail offsets, "
            f"{sr.enters_checked} entering heads, {sr.walks_ended} of {sr.walks} walks ended with EOS"
        )
        if sr.slots_unreached:
            result.reason += f"; slots no walk reached: {sr.slots_unreached}"
        if sr.engine_narrower:
            result.reason += (
                f"; {sr.engine_narrower} rows where the engine's mask omits tokens its own accept_token accepts"
            )
        for example in sr.examples:  # dicts: the schema verifier's examples (schemas.SchemaCheck)
            result.add(
                Mismatch(
                    state=-1,
                    prefix=example["prefix"],
                    problem=example["where"],
                    only_triec=[{"id": x.split(":", 1)[0], "bytes": x.split(":", 1)[1]} for x in example["only_triec"]],
                    only_other=[
                        {"id": x.split(":", 1)[0], "bytes": x.split(":", 1)[1]} for x in example["only_engine"]
                    ],
                ),
                max_examples,
            )
        result.mismatches = sr.mismatches
        result.status = "ok" if sr.mismatches == 0 else "mismatch"
        result.seconds["compare"] = time.perf_counter() - t0
        report.checks.append(result)
