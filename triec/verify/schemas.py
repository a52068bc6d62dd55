"""A compiled schema table against an engine compiled on the whole original schema, state by state.

The oracle is llguidance or xgrammar given the whole output's grammar in the
same convention: for a table from ``compile_schema`` the user's schema with
every enum whole (``info["schema"]``), for a table read from the first schema
layout its continuation with every name; other shapes (a tool registry)
register their own (:data:`ORACLES`) or are passed one (``oracle=``). Checked,
every row in full (the matcher's ``fill_bitmask`` against the engine's mask):

* **walks**: random decodes to EOS; a third of the steps prefer long tokens and
  a third closing ones (a quote, brace or bracket, or EOS), so that walks cross
  boundaries and end;
* **each slot, exhaustively**: a walk reaches the slot's entry (the start of
  the output for a start slot), then every trie state of the slot (depth
  first along the trie's own token paths, the matcher forked and the engine
  rolled back; past ``max_states`` a seeded sample that always holds the
  states of depth <= 2), and one step past every crossing token at each state:
  the exits (tokens closing a value and reading on) at every state, the tail
  groups at every tail offset after a few values, and at the entry the
  entering tokens (engine text + opening quote + value bytes), from where the
  text before the quote begins.

Rows where the engine's mask lacks tokens that its own ``accept_token``
accepts (xgrammar on a few long synthetic tokens, docs/verify.md) are counted
apart (``engine_narrower``), not as mismatches. Pure logic, no printing.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from triec.errors import EngineUnavailable, TriecError
from triec.runtime.bitmask import ids_of, is_set
from triec.verify.paths import escape_bytes, token_paths
from triec.verify.report import CheckResult, Mismatch, VerifyReport, VerifyRun
from triec.verify.states import select_states

if TYPE_CHECKING:
    from triec.schema.grammar import EngineDriver
    from triec.schema.matcher import SchemaMatcher
    from triec.schema.slot import Slot
    from triec.schema.table import SchemaTable
    from triec.tokenizer.vocabulary import Vocabulary

DEFAULT_MAX_STATES = 20_000
"""Trie states of one slot checked exhaustively; a larger slot is sampled (depth <= 2 always in)."""


@dataclass
class Oracle:
    """An engine on the whole output: ``driver`` answers fill / accept / rollback on the handles ``new()`` makes."""

    driver: EngineDriver
    new: Callable[[], Any]
    what: str = ""


ORACLES: dict[str, Callable[[SchemaTable], Oracle]] = {}
"""Oracle makers by ``table.info["shape"]`` for shapes whose whole grammar is not a JSON Schema in ``info``."""


def whole_schema(table: SchemaTable) -> dict[str, Any]:
    """The user's whole schema the table was compiled from (every enum with all its members)."""
    info = table.info
    if isinstance(info.get("schema"), str):
        schema: dict[str, Any] = json.loads(info["schema"])  # written by compile_schema from a JSON object
        return schema
    if isinstance(info.get("continuation"), str) and isinstance(info.get("name_property"), str):  # the first layout
        from triec.schema.shape import with_enum

        return with_enum(json.loads(info["continuation"]), info["name_property"], table.names)
    raise TriecError(f"this table ({info.get('shape', '?')}) records no whole schema; pass compare_schema an oracle")


def schema_oracle(table: SchemaTable, schema: dict[str, Any] | None = None) -> Oracle:
    """``table.engine`` compiled on ``schema`` (default: :func:`whole_schema`) in the table's convention."""
    from triec.schema.grammar import driver

    drv = driver(table.engine, table.vocabulary())
    compiled = drv.compile(
        schema if schema is not None else whole_schema(table), table.info.get("whitespace", "compact")
    )
    return Oracle(drv, lambda: drv.start(compiled), f"{table.engine} on the whole schema")


def default_oracle(table: SchemaTable) -> Oracle:
    maker = ORACLES.get(str(table.info.get("shape", "")))
    return maker(table) if maker is not None else schema_oracle(table)


@dataclass
class SchemaCheck:
    against: str
    states_checked: int = 0
    steps_past: int = 0
    tail_checked: int = 0
    enters_checked: int = 0
    slots_checked: int = 0
    slots_unreached: list[int] = field(default_factory=list)
    sampled: bool = False
    walks: int = 0
    walk_steps: int = 0
    walks_ended: int = 0
    approach_steps: int = 0
    mismatches: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)
    engine_narrower: int = 0
    """Rows where the engine's mask lacked tokens that its own ``accept_token`` then accepted (an
    engine's mask narrower than its language: xgrammar on some long synthetic straddling tokens)."""
    narrower_examples: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.mismatches == 0

    def add(self, where: str, prefix: bytes, ours: np.ndarray | None, theirs: np.ndarray | None, vocab: Any) -> None:
        self.mismatches += 1
        if len(self.examples) < 10:
            a = set(ids_of(ours).tolist()) if ours is not None else set()
            b = set(ids_of(theirs).tolist()) if theirs is not None else set()

            def show(ids: set[int]) -> list[str]:
                return [f"{t}:{_show(vocab, t)}" for t in sorted(ids)[:6]]

            self.examples.append(
                {"where": where, "prefix": escape_bytes(prefix), "only_triec": show(a - b), "only_engine": show(b - a)}
            )


def _show(vocab: Any, t: int) -> str:
    if t in vocab.eos_token_ids:
        return "<eos>"
    return escape_bytes(vocab.token_bytes[t]) if t < vocab.num_tokens else "<pad>"


class _Run:
    """One comparison's state: the oracle, the report, scratch rows."""

    def __init__(self, table: SchemaTable, oracle: Oracle, res: SchemaCheck) -> None:
        self.table, self.oracle, self.res = table, oracle, res
        self.drv = oracle.driver
        self.vocab: Vocabulary = table.vocabulary()
        self.ours = np.zeros(table.words_per_row, dtype=np.int32)
        self.theirs = np.zeros(table.words_per_row, dtype=np.int32)
        self.eos = set(table.eos_token_ids)
        tb = self.vocab.token_bytes
        self.closing = np.zeros(table.vocab_size, dtype=bool)
        self.length = np.zeros(table.vocab_size, dtype=np.int64)
        for t, b in enumerate(tb):
            self.closing[t] = b'"' in b or b"}" in b or b"]" in b
            self.length[t] = len(b)
        for e in self.eos:
            self.closing[e] = True
        from triec.tokenizer.index import token_index

        self.byte_token = token_index(self.vocab).byte_token

    def same(self, m: SchemaMatcher[SchemaTable], o: Any, where: str, prefix: bytes) -> bool:
        """Compare the full rows; an engine row narrower than its own accept_token counts apart."""
        m.fill_bitmask(self.ours)
        self.theirs.fill(0)
        self.drv.fill(o, self.theirs)
        if np.array_equal(self.ours, self.theirs):
            return True
        a, b = set(ids_of(self.ours).tolist()), set(ids_of(self.theirs).tolist())
        if not b - a and all(self.accepts(o, t) for t in a - b):
            res = self.res
            res.engine_narrower += 1
            if len(res.narrower_examples) < 10:
                res.narrower_examples.append(
                    {
                        "where": where,
                        "prefix": escape_bytes(prefix),
                        "tokens": [f"{t}:{_show(self.vocab, t)}" for t in sorted(a - b)[:6]],
                    }
                )
            return True
        self.res.add(where, prefix, self.ours, self.theirs, self.vocab)
        return False

    def accepts(self, o: Any, t: int) -> bool:
        if self.drv.accept(o, t):
            self.drv.rollback(o, 1)
            return True
        return False

    def step(self, m: SchemaMatcher[SchemaTable], o: Any, t: int, where: str, prefix: bytes) -> bool:
        """Both accept ``t`` (False, counted as a mismatch, when either refuses)."""
        if not m.accept_token(t):
            self.res.add(f"{where}: triec refuses token {t} ({_show(self.vocab, t)})", prefix, None, None, self.vocab)
            return False
        if not self.drv.accept(o, t):
            self.res.add(
                f"{where}: the engine refuses token {t} ({_show(self.vocab, t)})", prefix, None, None, self.vocab
            )
            m.rollback(1)
            return False
        return True

    def step_past(self, m: SchemaMatcher[SchemaTable], o: Any, tokens: list[int], prefix: bytes, where: str) -> None:
        """One step past each token: both accept it, then the rows after it are compared."""
        for t in tokens:
            m2 = m.fork()
            if not self.step(m2, o, t, where, prefix):
                continue
            self.res.steps_past += 1
            self.same(m2, o, f"{where}, one step past token {t}", prefix + self.token(t))
            self.drv.rollback(o, 1)

    def token(self, t: int) -> bytes:
        return b"" if t in self.eos or t >= self.vocab.num_tokens else self.vocab.token_bytes[t]

    def pick(self, ids: list[int], rng: random.Random) -> int:
        """A third of the time a closing token, a third one of the longest, else any."""
        r = rng.random()
        if r < 1 / 3:
            ends = [t for t in ids if self.closing[t]]
            if ends:
                return rng.choice(ends)
        if r < 2 / 3:
            arr = np.asarray(ids, dtype=np.int64)
            order = np.argsort(-self.length[arr], kind="stable")
            top = arr[order[: max(1, len(ids) // 8)]]
            return int(rng.choice(top.tolist()))
        return rng.choice(ids)


def compare_schema(
    table: SchemaTable,
    oracle: Oracle | dict[str, Any] | None = None,
    *,
    walks: int = 50,
    seed: int = 0,
    max_walk_steps: int = 80,
    full_tail_leaves: int = 3,
    max_states: int = DEFAULT_MAX_STATES,
    entry_attempts: int = 40,
    slots: bool = True,
) -> SchemaCheck:
    """Compare ``table`` with its oracle (default :func:`default_oracle`; a dict is a whole schema to compile).

    ``slots=False`` runs the walks only. See the module docstring for what is checked.
    """
    if isinstance(oracle, dict):
        oracle = schema_oracle(table, oracle)
    elif oracle is None:
        oracle = default_oracle(table)
    res = SchemaCheck(against=table.engine)
    run = _Run(table, oracle, res)
    rng = random.Random(seed)
    if slots:
        for s in range(len(table.slots)):
            at = _reach(run, s, rng, entry_attempts, max(max_walk_steps, 200))
            if at is None:
                res.slots_unreached.append(s)
                continue
            res.slots_checked += 1
            _check_slot(run, s, *at, full_tail_leaves, max_states, seed)
    for _ in range(walks):
        _walk(run, rng, max_walk_steps)
    return res


def compare_texts(
    table: SchemaTable,
    texts: list[str],
    oracle: Oracle | None = None,
    *,
    splits: int = 3,
    seed: int = 0,
    past: int = 2,
) -> SchemaCheck:
    """Compare ``table`` with its oracle along outputs that spell given texts, each cut into tokens ``splits``
    times at random (any allowed token that spells a prefix of the rest), every row compared, then EOS; at each
    step ``past`` other allowed tokens are followed one step. For shapes whose slots random walks seldom reach:
    a slot behind free text and a trigger, say."""
    oracle = default_oracle(table) if oracle is None else oracle
    res = SchemaCheck(against=table.engine)
    run = _Run(table, oracle, res)
    rng = random.Random(seed)
    for text in texts:
        data = text.encode("utf-8")
        for _ in range(splits):
            m, o, i = table.matcher(), run.oracle.new(), 0
            res.walks += 1
            while True:
                res.walk_steps += 1
                if not run.same(m, o, "text walk", data[:i]):
                    break
                ids = ids_of(run.ours).tolist()
                if i == len(data):
                    eos = [t for t in ids if t in run.eos]
                    if not eos:
                        res.add("text walk: no EOS after the whole text", data, run.ours, run.theirs, run.vocab)
                    elif run.step(m, o, eos[0], "text walk", data):
                        res.walks_ended += 1
                    break
                fits = [t for t in ids if t not in run.eos and run.token(t) and data.startswith(run.token(t), i)]
                if not fits:
                    res.add("text walk: no allowed token spells the rest", data[:i], run.ours, run.theirs, run.vocab)
                    break
                others = [t for t in ids if t not in fits]
                run.step_past(m, o, rng.sample(others, min(past, len(others))), data[:i], "text walk")
                t = rng.choice(fits)
                if not run.step(m, o, t, "text walk", data[:i]):
                    break
                i += len(run.token(t))
    return res


# ---------------------------------------------------------------- reaching a slot


def _at_entry(run: _Run, m: SchemaMatcher[SchemaTable], s: int) -> bool:
    """Whether the matcher stands where slot s begins: in the engine, with its opening byte (a quote, a trigger's
    last byte) entering s."""
    from triec.schema.matcher import ENGINE, SLOT

    q = int(run.byte_token[run.table.slots[s].open])
    if m.st.phase != ENGINE or q < 0:
        return False
    m2 = m.fork()
    return m2.accept_token(q) and m2.st.phase == SLOT and m2.st.s == s


def _reach(run: _Run, s: int, rng: random.Random, attempts: int, max_steps: int) -> tuple[Any, Any, bytes] | None:
    """(matcher, engine, text) at slot s's entry along a random walk (rows compared on the way), or None.

    A walk often steps over the entry with one token (``': "A0'``); where a row allows an entering token
    of slot s, the text up to the quote (the walk's text + the token's head) is driven afresh instead.
    """
    from triec.schema.matcher import SLOT

    table = run.table
    slot = table.slots[s]
    if s == table.start_slot:
        m, o = table.matcher(), run.oracle.new()
        return (m, o, b"") if m.st.phase == SLOT and m.st.s == s and m.st.pos == 0 else None
    en = slot.enters
    for _ in range(attempts):
        m, o, prefix = table.matcher(), run.oracle.new(), b""
        for _ in range(max_steps):
            run.res.approach_steps += 1
            if not run.same(m, o, "walk to a slot", prefix):
                return None
            if _at_entry(run, m, s):
                return m, o, prefix
            row = run.ours.copy()
            for j, h in enumerate(en.labels):
                lo, hi = en.span(j)
                if any(is_set(row, t) for t in en.tokens[lo:hi].tolist()):
                    got = _drive(run, prefix + h)
                    if got is not None and run.same(*got, "walk to a slot", prefix + h) and _at_entry(run, got[0], s):
                        return got[0], got[1], prefix + h
            ids = ids_of(row).tolist()
            if not ids:
                run.res.add("walk to a slot: empty mask", prefix, row, run.theirs, run.vocab)
                return None
            t = run.pick(ids, rng)
            if t in run.eos or not run.step(m, o, t, "walk to a slot", prefix):
                break
            prefix += run.token(t)
    return None


# ---------------------------------------------------------------- one slot, state by state


def _check_slot(
    run: _Run,
    s: int,
    m0: SchemaMatcher[SchemaTable],
    o: Any,
    prefix0: bytes,
    full_tail_leaves: int,
    max_states: int,
    seed: int,
) -> None:
    table, res, drv = run.table, run.res, run.drv
    slot = table.slots[s]
    trie = slot.trie
    selected, sampled = select_states(trie, max_states, seed)
    res.sampled = res.sampled or sampled
    parent, via = token_paths(trie)
    keep = np.zeros(trie.num_states, dtype=bool)
    keep[selected] = True
    for st in selected.tolist():  # the states on the way to a selected one are visited too
        p = int(parent[st])
        while p > 0 and not keep[p]:
            keep[p] = True
            p = int(parent[p])
    children: dict[int, list[int]] = {}
    for c in np.flatnonzero(keep[1:]).tolist():
        c += 1
        if parent[c] >= 0:
            children.setdefault(int(parent[c]), []).append(c)
    if s != table.start_slot:
        _check_enters(run, s, prefix0)
    tails_done = 0
    stack: list[tuple[int, int, Any, bytes]] = [(1, 0, m0, prefix0)]
    while stack:
        kind, st, parent_m, prefix = stack.pop()
        if kind == 0:
            drv.rollback(o, 1)
            continue
        if st:
            t = int(via[st])
            m = parent_m.fork()
            if not run.step(m, o, t, f"slot {s} state {st}", prefix):
                continue
            prefix += run.token(t)
            stack.append((0, st, None, b""))
        else:
            m = parent_m
        res.states_checked += 1
        if not run.same(m, o, f"slot {s} trie state {st}", prefix):
            continue
        v = slot.leaf_value(st)
        if v >= 0:
            if slot.tail:
                run.step_past(m, o, _group_tokens(slot.tails, 0, run), prefix, f"slot {s} key end {st}")
                if tails_done < full_tail_leaves:
                    tails_done += 1
                    _check_tail(run, s, m, o, prefix)
        else:
            toks: list[int] = []
            for e in slot.entries_at(st):
                toks.extend(_group_tokens(slot.exits, int(slot.entry_group[e]), run))
            run.step_past(m, o, sorted(set(toks)), prefix, f"slot {s} trie state {st} (exits)")
        for c in reversed(children.get(st, [])):
            stack.append((1, c, m, prefix))


def _group_tokens(groups: Any, g: int, run: _Run) -> list[int]:
    """The tokens of one group that the matcher's last row allowed (a judged token may be refused)."""
    lo, hi = groups.span(g)
    return [int(t) for t in groups.tokens[lo:hi].tolist() if is_set(run.ours, t)]


def _check_tail(run: _Run, s: int, m: SchemaMatcher[SchemaTable], o: Any, prefix: bytes) -> None:
    """Every tail offset after one key: its row, and one step past each of its tokens (single-byte steps there)."""
    slot = run.table.slots[s]
    tail = slot.tail
    drv = run.drv
    fed = 0
    m = m.fork()
    for i in range(1, len(tail)):
        b = int(run.byte_token[tail[i - 1]])
        if b < 0 or not run.step(m, o, b, f"slot {s} tail byte {i - 1}", prefix + tail[: i - 1]):
            break
        fed += 1
        run.res.tail_checked += 1
        if run.same(m, o, f"slot {s} tail offset {i}", prefix + tail[:i]):
            run.step_past(m, o, _group_tokens(slot.tails, i, run), prefix + tail[:i], f"slot {s} tail offset {i}")
    if fed:
        drv.rollback(o, fed)


def _check_enters(run: _Run, s: int, prefix: bytes) -> None:
    """At slot s's entry: from where each entering head begins (the text before the quote ends with it),
    the row there and one step past each entering token of that head."""
    slot: Slot = run.table.slots[s]
    en = slot.enters
    for j, h in enumerate(en.labels):
        if not prefix.endswith(h) or len(h) > len(prefix):
            continue
        before = prefix[: len(prefix) - len(h)]
        got = _drive(run, before)
        if got is None:
            continue
        m, o = got
        run.res.enters_checked += 1
        if run.same(m, o, f"slot {s} entering head {escape_bytes(h)!r}", before):
            lo, hi = en.span(j)
            toks = [int(t) for t in en.tokens[lo:hi].tolist() if is_set(run.ours, t)]
            run.step_past(m, o, toks, before, f"slot {s} entering head {escape_bytes(h)!r}")


def _drive(run: _Run, text: bytes) -> tuple[Any, Any] | None:
    """A fresh matcher and engine after ``text``, spelled with longest-match tokens; None if either refuses."""
    m, o = run.table.matcher(), run.oracle.new()
    for t in _spell(run.vocab, text):
        if not (m.accept_token(t) and run.drv.accept(o, t)):
            return None
    return m, o


def _spell(vocab: Vocabulary, text: bytes) -> list[int]:
    from triec.tokenizer.index import token_index

    ti = token_index(vocab)
    out, i = [], 0
    while i < len(text):
        for n in range(min(len(text) - i, 64), 0, -1):
            ids = ti.spelling(text[i : i + n])
            if ids:
                out.append(ids[0])
                i += n
                break
        else:
            return []
    return out


# ---------------------------------------------------------------- walks


def _walk(run: _Run, rng: random.Random, max_steps: int) -> None:
    """A random decode to EOS, every step's row compared."""
    table, res = run.table, run.res
    m, o = table.matcher(), run.oracle.new()
    prefix = b""
    res.walks += 1
    for _ in range(max_steps):
        res.walk_steps += 1
        if not run.same(m, o, "decode walk", prefix):
            return
        ids = ids_of(run.ours).tolist()
        if not ids:
            res.add("decode walk: empty mask", prefix, run.ours, run.theirs, run.vocab)
            return
        t = run.pick(ids, rng)
        if not run.step(m, o, t, "decode walk", prefix):
            return
        if t in run.eos:
            if not m.is_terminated():
                res.add("decode walk: EOS accepted but the matcher is not terminated", prefix, None, None, run.vocab)
            res.walks_ended += 1
            return
        prefix += run.token(t)


def tools_oracle(table: SchemaTable) -> Oracle:
    """A tools table's oracle: the engine on the whole format over every tool (vLLM's ``tool_choice="required"``
    schema for ``vllm``; the tagged calls as a grammar for ``hermes``; an ``anyOf`` of calls otherwise)."""
    from triec.schema.grammar import driver
    from triec.schema.tools import tool_format, tools_of, whole_format_grammar

    drv = driver(table.engine, table.vocabulary())
    compiled = whole_format_grammar(
        tools_of(table),
        tool_format(table.info["format"]),
        bool(table.info["parallel"]),
        drv,
        table.info.get("whitespace", "compact"),
    )
    return Oracle(drv, lambda: drv.start(compiled), f"{table.engine} on the whole {table.info['format']} format")


ORACLES["tools"] = tools_oracle


def tag_oracle(table: SchemaTable) -> Oracle:
    """A structural-tag table's oracle: xgrammar compiled on the whole structural tag."""
    from triec.schema.grammar import XGrammarDriver, driver

    drv = driver(table.engine, table.vocabulary())
    assert isinstance(drv, XGrammarDriver)  # structural tags compile with xgrammar only (compile_structural_tag)
    compiled = drv.engine.compiler.compile_structural_tag(table.info["tag"])
    return Oracle(drv, lambda: drv.start(compiled), "xgrammar on the whole structural tag")


ORACLES["structural-tag"] = tag_oracle


def verify_schema(
    table: Any,
    vocab: Vocabulary,
    report: VerifyReport,
    run: VerifyRun,
) -> None:
    """``triec verify`` on a schema artifact: each slot's trie against the reference; the whole output against each
    engine.

    Each engine is compared with itself compiled on the whole original schema (every enum whole), in the
    artifact's convention: random walks to EOS, and each slot from its entry, every trie state (up to
    ``states`` per slot, else a sample), one step past every crossing token (docs/verify.md).
    """
    from triec.verify.patterns import regex_check

    table.bind(vocab)
    report.schema = schema_facts(table)
    report.states_selected = table.num_states
    slot_tables = {i: s.trie for i, s in enumerate(table.slots) if not s.has_values}
    if slot_tables:
        report.checks.append(regex_check(slot_tables, vocab, run.max_examples, quoted=True))
    for name in run.against:
        if name == "reference":
            report.checks.append(_slots_reference_check(table, vocab, run.max_examples))
        elif name not in ("llguidance", "xgrammar"):
            report.checks.append(
                CheckResult(
                    against=name, status="skipped", reason="schema tables are compared with llguidance and xgrammar"
                )
            )
        else:
            _engine_check(table, vocab, report, name, run)


def schema_facts(table: Any) -> dict[str, Any]:
    """What a schema artifact holds, for the report: its engine, shape, the text around its slots, and per slot its
    JSON pointer, values (or regex) and states."""
    info = table.info
    facts: dict[str, Any] = {
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
        facts["continuation_sha256"] = info["continuation_sha256"]
    return facts


def _slots_reference_check(table: Any, vocab: Vocabulary, max_examples: int) -> CheckResult:
    """The ``reference`` check of a schema artifact: each value slot's trie against the values' reference, each
    format or pattern slot's rows against its DFA run over each token, every state; mismatches name their slot."""
    from triec.verify.masks import compare_reference as compare_values
    from triec.verify.patterns import add_pattern_mismatches
    from triec.verify.patterns import compare_reference as compare_dfa

    result = CheckResult(against="reference", reason=f"the tries and DFAs of {len(table.slots)} slot(s)")
    for i, s in enumerate(table.slots):
        if not s.has_values:  # a format or pattern field: every row against its DFA run over each token
            pr = compare_dfa(s.trie, vocab, np.arange(s.num_states, dtype=np.int64), max_examples)
            result.states_checked += pr.states_checked
            add_pattern_mismatches(result, pr.mismatches, vocab, max_examples, f"slot {i}: ")
            continue
        r = compare_values(s.trie, vocab, np.arange(s.num_states, dtype=np.int64), max_examples)
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
    return result


def _engine_check(
    table: Any,
    vocab: Vocabulary,
    report: VerifyReport,
    name: str,
    run: VerifyRun,
) -> None:
    """One engine's comparison of a schema artifact (:func:`compare_schema` on the table served by that engine) into
    ``report``: skipped when the engine is not installed (raised when named in ``explicit``) or cannot serve the
    table exactly, an error when the comparison fails."""
    from triec.engines import make_engine

    try:
        make_engine(name, vocab)  # raises EngineUnavailable with the pip command
    except EngineUnavailable as exc:
        if name in run.explicit:
            raise
        report.checks.append(CheckResult(against=name, status="skipped", reason=str(exc)))
        return
    t0 = time.perf_counter()
    try:
        twin = table.with_engine(name)
    except TriecError as exc:  # a table this engine cannot serve exactly (control characters under llguidance)
        report.checks.append(CheckResult(against=name, status="skipped", reason=str(exc)))
        return
    try:
        sr = compare_schema(twin, walks=run.walks, seed=run.seed, max_states=run.states)
    except TriecError as exc:
        report.checks.append(CheckResult(against=name, status="error", reason=str(exc)))
        return
    if sr.sampled:  # the headline says what the engines saw: a sample of each slot's states
        report.sampled = True
        report.states_selected = sr.states_checked
    result = _engine_result(name, twin.engine_version, sr, run.max_examples)
    result.seconds["compare"] = time.perf_counter() - t0
    report.checks.append(result)


def _engine_result(name: str, version: str | None, sr: SchemaCheck, max_examples: int) -> CheckResult:
    """A :class:`SchemaCheck` as the report's :class:`CheckResult`: what was checked, in words, and its examples."""
    result = CheckResult(
        against=name,
        version=version,
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
    for example in sr.examples:  # dicts: the schema verifier's examples (SchemaCheck)
        result.add(
            Mismatch(
                state=-1,
                prefix=example["prefix"],
                problem=example["where"],
                only_triec=[{"id": x.split(":", 1)[0], "bytes": x.split(":", 1)[1]} for x in example["only_triec"]],
                only_other=[{"id": x.split(":", 1)[0], "bytes": x.split(":", 1)[1]} for x in example["only_engine"]],
            ),
            max_examples,
        )
    result.mismatches = sr.mismatches
    result.status = "ok" if sr.mismatches == 0 else "mismatch"
    return result
