"""A bounded regular expression to its minimal byte-level DFA: parse, NFA over UTF-8 bytes, subsets, Hopcroft.

The subset is what JSON Schema ``pattern`` fields and the named formats use: literals, classes (negated, ranges,
escapes inside), ``.``, the escapes ``\\d \\D \\w \\W \\s \\S``, ``\\xHH``, ``\\uHHHH``, ``\\u{H...}``, ``\\n \\r \\t \\f
\\v \\0`` and any escaped punctuation, groups (capturing, ``(?:...)``, named ``(?<name>...)``), alternation,
``? * +``, ``{m}``, ``{m,}``, ``{m,n}`` (a lazy ``?`` after a quantifier is accepted: it does not change the
language). ``^`` at the start and ``$`` at the end are accepted and change nothing (the whole output must match).
Anything else (lookaround, backreferences, word boundaries, flags, Unicode properties) is refused with a
:class:`~triec.errors.PatternError` naming its position.

Semantics follow xgrammar 0.2.9's ``compile_regex`` (the engine JSON-schema servers use), which are ECMAScript's
for the escapes: ``\\d`` is ``[0-9]``, ``\\w`` is ``[0-9A-Za-z_]``, ``\\s`` is ECMAScript's white space; ``.`` is
any character, newline included. (llguidance reads ``\\d``, ``\\w`` and ``\\s`` as Unicode classes and ``.`` without
newline: :func:`triec.compiler.regex_spelling.to_rust_regex` spells a parsed pattern explicitly for it.)

A class of characters becomes the UTF-8 byte sequences of its code points (surrogates excluded), so the DFA runs
over bytes and the vocabulary's tokens may split a character anywhere. The DFA is trimmed (no dead state: every
state can still reach acceptance) and minimal; states are numbered breadth-first from the start, 0.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from triec.errors import PatternError, PatternTooLarge

MAX_CODEPOINT = 0x10FFFF
MAX_DFA_STATES = 10_000
"""Default bound on the minimal DFA's states (and the subset construction's): beyond it a pattern is refused."""
MAX_NFA_STATES = 200_000
"""Bound on the NFA's states at the default ``max_states`` (it scales with a larger one), checked on the syntax tree
before the NFA is built: ``((a{1000}){1000}){1000}`` is refused without writing out its billion copies."""
MAX_REPEAT = 1_000
MAX_NESTING = 100
"""Bound on nested groups. The parser and every walk over the syntax tree recurse (about three frames per group),
so 100 keeps the deepest tree a few hundred frames under Python's default limit of 1,000, even when called from
deep inside a framework's stack; no real pattern nests a tenth as deep."""
WORK_PER_STATE = 50
"""The subset construction's work bound, in NFA states gathered into subsets, per state of ``max_states`` (at
least the default's): 500,000 by default, about half a second. ``(a?)`` written 25,000 times has a start subset of
50,000 NFA states and every next one nearly as large; the legitimate patterns measured stay well under (the
textbook ``(a|b)*a(a|b){12}``, 8,193 states, gathers 246,000)."""

Ranges = tuple[tuple[int, int], ...]  # sorted, disjoint, non-adjacent code point ranges

_DIGIT: Ranges = ((0x30, 0x39),)
_WORD: Ranges = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
_SPACE: Ranges = (
    (0x09, 0x0D),
    (0x20, 0x20),
    (0xA0, 0xA0),
    (0x1680, 0x1680),
    (0x2000, 0x200A),
    (0x2028, 0x2029),
    (0x202F, 0x202F),
    (0x205F, 0x205F),
    (0x3000, 0x3000),
    (0xFEFF, 0xFEFF),
)
_ANY: Ranges = ((0, MAX_CODEPOINT),)
_SIMPLE_ESCAPES = {"n": 0x0A, "r": 0x0D, "t": 0x09, "f": 0x0C, "v": 0x0B, "0": 0x00}


def normalize(ranges: list[tuple[int, int]]) -> Ranges:
    """Sorted, merged ranges."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return tuple(out)


def negate(ranges: Ranges) -> Ranges:
    out: list[tuple[int, int]] = []
    nxt = 0
    for lo, hi in ranges:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_CODEPOINT:
        out.append((nxt, MAX_CODEPOINT))
    return tuple(out)


# ----------------------------------------------------------------------------- the syntax tree


@dataclass(frozen=True)
class Chars:
    ranges: Ranges


@dataclass(frozen=True)
class Concat:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Alt:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Repeat:
    item: Node
    lo: int
    hi: int | None  # None: unbounded


Node = Chars | Concat | Alt | Repeat


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0
        self.depth = 0  # groups open around the cursor (bounded by MAX_NESTING: the parser recurses per group)
        self.chars: list[str | None] = [*text, None, None]  # past the end: None (peek is the parser's hot path)

    def fail(self, what: str, at: int | None = None) -> PatternError:
        pos = self.i if at is None else at
        return PatternError(f"pattern {self.text!r:.80}: {what} at position {pos}", position=pos)

    def peek(self) -> str | None:
        return self.chars[self.i]

    def parse(self) -> Node:
        if self.peek() == "^":
            self.i += 1
        node = self.alternation(top=True)
        if self.i < len(self.text):  # a stray ")"
            raise self.fail(f"unbalanced {self.text[self.i]!r}")
        return node

    def alternation(self, top: bool = False) -> Node:
        items = [self.concat(top)]
        while self.peek() == "|":
            self.i += 1
            if top and self.peek() == "^":
                self.i += 1
            items.append(self.concat(top))
        return items[0] if len(items) == 1 else Alt(tuple(items))

    def concat(self, top: bool) -> Node:
        items: list[Node] = []
        while True:
            c = self.peek()
            if c is None or c in "|)":
                break
            if c == "$":
                nxt = self.text[self.i + 1] if self.i + 1 < len(self.text) else None
                if top and nxt in (None, "|"):
                    self.i += 1
                    break
                raise self.fail("an anchor '$' inside the pattern is not supported (only at its end)")
            if c == "^":
                raise self.fail("an anchor '^' inside the pattern is not supported (only at its start)")
            items.append(self.quantified(self.atom()))
        return items[0] if len(items) == 1 else Concat(tuple(items))

    def quantified(self, node: Node) -> Node:
        while True:
            c = self.peek()
            start = self.i
            if c == "?":
                lo, hi = 0, 1
                self.i += 1
            elif c == "*":
                lo, hi = 0, None
                self.i += 1
            elif c == "+":
                lo, hi = 1, None
                self.i += 1
            elif c == "{" and self._is_counted():
                lo, hi = self.counted()
            else:
                return node
            if isinstance(node, Repeat) and self.text[start - 1] in "?*+}":
                if c == "?":  # a lazy quantifier: the same language
                    continue
                raise self.fail(f"a quantifier {c!r} after a quantifier is not supported", start)
            node = Repeat(node, lo, hi)
            if self.peek() == "?":  # lazy: the same language
                self.i += 1

    def _is_counted(self) -> bool:
        j = self.i + 1
        t = self.text
        while j < len(t) and (t[j].isdigit() or t[j] == ","):
            j += 1
        return j < len(t) and t[j] == "}" and j > self.i + 1 and t[self.i + 1].isdigit()

    def counted(self) -> tuple[int, int | None]:
        start = self.i
        end = self.text.index("}", self.i)
        body = self.text[self.i + 1 : end]
        self.i = end + 1
        parts = body.split(",")
        if (
            len(parts) > 2
            or not all(p.isdigit() for p in parts[:1])
            or (len(parts) == 2 and parts[1] and not parts[1].isdigit())
        ):
            raise self.fail(f"a malformed repetition {{{body}}}", start)
        lo = int(parts[0])
        hi: int | None = lo if len(parts) == 1 else (int(parts[1]) if parts[1] else None)
        if hi is not None and hi < lo:
            raise self.fail(f"a repetition {{{body}}} whose maximum is below its minimum", start)
        if lo > MAX_REPEAT or (hi is not None and hi > MAX_REPEAT):
            raise PatternTooLarge(
                f"pattern {self.text!r:.80}: a repetition {{{body}}} at position {start} exceeds {MAX_REPEAT}"
            )
        return lo, hi

    def atom(self) -> Node:
        c = self.peek()
        assert c is not None  # concat() stops at the end
        start = self.i
        if c == "(":
            self.i += 1
            if self.text.startswith("?:", self.i):
                self.i += 2
            elif self.text.startswith("?<", self.i) and not self.text.startswith(("?<=", "?<!"), self.i):
                end = self.text.find(">", self.i)
                name = self.text[self.i + 2 : end] if end > 0 else ""
                if not name or not all(ch.isalnum() or ch == "_" for ch in name):
                    raise self.fail("a malformed group name", start)
                self.i = end + 1
            elif self.peek() == "?":
                raise self.fail("a group with flags or lookaround '(?' is not supported", start)
            if self.depth >= MAX_NESTING:
                raise PatternTooLarge(
                    f"pattern {self.text!r:.80}: groups nested deeper than {MAX_NESTING} (the bound on nesting) "
                    f"at position {start}",
                    position=start,
                )
            self.depth += 1
            node = self.alternation()
            self.depth -= 1
            if self.peek() != ")":
                raise self.fail("an unclosed group '('", start)
            self.i += 1
            return node
        if c == "[":
            return Chars(self.char_class())
        if c == ".":
            self.i += 1
            return Chars(_ANY)
        if c == "\\":
            found = self.escape(in_class=False)
            return Chars(found if isinstance(found, tuple) else ((found, found),))
        if c in "*+?":
            raise self.fail(f"a quantifier {c!r} with nothing to repeat")
        if c == "{" and self._is_counted():
            raise self.fail("a repetition with nothing to repeat")
        self.i += 1
        return Chars(((ord(c), ord(c)),))

    def escape(self, in_class: bool) -> int | Ranges:
        start = self.i
        self.i += 1
        c = self.peek()
        if c is None:
            raise self.fail("a trailing backslash", start)
        self.i += 1
        classes = {"d": _DIGIT, "w": _WORD, "s": _SPACE}
        if c in classes:
            return classes[c]
        if c.lower() in classes:
            return negate(classes[c.lower()])
        if c in _SIMPLE_ESCAPES:
            if c == "0" and self.peek() is not None and self.peek().isdigit():  # type: ignore[union-attr]
                raise self.fail("an octal escape is not supported", start)
            return _SIMPLE_ESCAPES[c]
        if c == "x":
            return self.hex_digits(2, start)
        if c == "u":
            if self.peek() == "{":
                end = self.text.find("}", self.i)
                digits = self.text[self.i + 1 : end] if end > 0 else ""
                if not digits or len(digits) > 6 or any(ch not in "0123456789abcdefABCDEF" for ch in digits):
                    raise self.fail("a malformed escape \\u{...}", start)
                self.i = end + 1
                cp = int(digits, 16)
            else:
                cp = self.hex_digits(4, start)
            if cp > MAX_CODEPOINT or 0xD800 <= cp <= 0xDFFF:
                raise self.fail(f"an escape of U+{cp:04X}, not a Unicode scalar value", start)
            return cp
        if c.isascii() and not c.isalnum() and c not in " ":
            return ord(c)
        if c == "-" and in_class:
            return ord(c)
        raise self.fail(f"the escape \\{c} is not supported", start)

    def hex_digits(self, n: int, start: int) -> int:
        digits = self.text[self.i : self.i + n]
        if len(digits) != n or any(ch not in "0123456789abcdefABCDEF" for ch in digits):
            raise self.fail(f"a malformed escape (expected {n} hex digits)", start)
        self.i += n
        return int(digits, 16)

    def char_class(self) -> Ranges:
        start = self.i
        self.i += 1
        negated = self.peek() == "^"
        if negated:
            self.i += 1
        if self.peek() == "]":
            raise self.fail("an empty class '[]' (or a ']' first in a class) is not supported", start)
        ranges: list[tuple[int, int]] = []
        while True:
            c = self.peek()
            if c is None:
                raise self.fail("an unclosed class '['", start)
            if c == "]":
                self.i += 1
                break
            if c == "[" and self.text.startswith(("[:", "[=", "[."), self.i):
                raise self.fail("a POSIX class inside '[...]' is not supported")
            item_at = self.i
            lo = self.class_item()
            if isinstance(lo, tuple):
                ranges.extend(lo)
                continue
            if self.peek() == "-" and self.i + 1 < len(self.text) and self.text[self.i + 1] != "]":
                self.i += 1
                hi = self.class_item()
                if isinstance(hi, tuple):
                    raise self.fail("a range ending in a class escape", item_at)
                if hi < lo:
                    raise self.fail(f"a range {chr(lo)!r}-{chr(hi)!r} out of order", item_at)
                ranges.append((lo, hi))
            else:
                ranges.append((lo, lo))
        found = normalize(ranges)
        return negate(found) if negated else found

    def class_item(self) -> int | Ranges:
        c = self.peek()
        assert c is not None
        if c == "\\":
            if self.text.startswith("\\b", self.i):
                raise self.fail("the escape \\b inside a class is not supported")
            return self.escape(in_class=True)
        self.i += 1
        return ord(c)


def parse(pattern: str) -> Node:
    """The syntax tree of ``pattern``; :class:`PatternError` naming the position of anything outside the subset."""
    if not isinstance(pattern, str):
        raise PatternError(f"a pattern is a string, not {type(pattern).__name__}", position=0)
    return _Parser(pattern).parse()


# ----------------------------------------------------------------------------- UTF-8


def _encode(cp: int) -> bytes:
    return chr(cp).encode("utf-8")


_LIMITS = (0x7F, 0x7FF, 0xFFFF, MAX_CODEPOINT)


def utf8_sequences(lo: int, hi: int) -> Iterator[tuple[tuple[int, int], ...]]:
    """The byte-range sequences whose concatenations are exactly the UTF-8 encodings of ``lo..hi`` (surrogates
    left out), as in Rust's ``regex-syntax`` ``Utf8Sequences``."""
    if hi <= 0x7F:
        yield ((lo, hi),)
        return
    stack = [(lo, hi)]
    while stack:
        lo, hi = stack.pop()
        if lo > hi:
            continue
        if lo <= 0xDFFF and hi >= 0xD800:  # surrogates are not characters
            stack.append((0xE000, hi))
            stack.append((lo, 0xD7FF))
            continue
        split = False
        for limit in _LIMITS[:-1]:
            if lo <= limit < hi:
                stack.append((limit + 1, hi))
                stack.append((lo, limit))
                split = True
                break
        if split:
            continue
        if hi <= 0x7F:
            yield ((lo, hi),)
            continue
        for i in range(1, 4):
            m = (1 << (6 * i)) - 1
            if lo & ~m != hi & ~m:
                if lo & m != 0:
                    stack.append(((lo | m) + 1, hi))
                    stack.append((lo, lo | m))
                    split = True
                    break
                if hi & m != m:
                    stack.append((hi & ~m, hi))
                    stack.append((lo, (hi & ~m) - 1))
                    split = True
                    break
        if split:
            continue
        a, b = _encode(lo), _encode(hi)
        yield tuple(zip(a, b, strict=True))


# ----------------------------------------------------------------------------- NFA


@lru_cache(maxsize=4096)
def _class_sequences(ranges: Ranges) -> tuple[tuple[tuple[int, int], ...], ...]:
    """The byte-range sequences of a class's code points, cached: ``.{0,1000}`` writes the same class 1,000 times."""
    return tuple(seq for lo, hi in ranges for seq in utf8_sequences(lo, hi))


@lru_cache(maxsize=4096)
def _class_states(ranges: Ranges) -> int:
    """The NFA states :meth:`_Nfa.build` adds for a class: its end, and one per distinct proper prefix of its byte
    sequences (the small trie that shares them)."""
    return 1 + len({seq[: k + 1] for seq in _class_sequences(ranges) for k in range(len(seq) - 1)})


def nfa_size(node: Node) -> int:
    """The number of states :meth:`_Nfa.build` adds for ``node``, every counted repetition written out, computed on
    the tree without building anything: the bound on the NFA is checked before the work, not during it."""
    if isinstance(node, Chars):
        return _class_states(node.ranges)
    if isinstance(node, Concat):
        total = 0
        for item in node.items:
            total += nfa_size(item)
        return total
    if isinstance(node, Alt):
        total = 1
        for item in node.items:
            total += 1 + nfa_size(item)
        return total
    one = nfa_size(node.item)
    return node.lo * one + 1 + (one if node.hi is None else (node.hi - node.lo) * one)


def nfa_bound(max_states: int) -> int:
    """The bound on the NFA's states for a DFA bound of ``max_states``: :data:`MAX_NFA_STATES` by default, scaling
    with a larger ``max_states`` so that raising it (``--max-states``) admits the larger patterns it is raised for."""
    return MAX_NFA_STATES * max(max_states, MAX_DFA_STATES) // MAX_DFA_STATES


def work_bound(max_states: int) -> int:
    """The subset construction's bound on NFA states gathered into subsets (:data:`WORK_PER_STATE`)."""
    return WORK_PER_STATE * max(max_states, MAX_DFA_STATES)


class _Nfa:
    """Thompson NFA over bytes: ``edges[s]`` are (lo, hi, target) byte ranges, ``eps[s]`` epsilon targets."""

    def __init__(self, limit: int) -> None:
        self.edges: list[list[tuple[int, int, int]]] = []
        self.eps: list[list[int]] = []
        self.limit = limit
        self.cyclic = False  # an unbounded repeat loops back: else the DFA is acyclic too (finite language)

    def new(self) -> int:
        if len(self.edges) >= self.limit:
            raise PatternTooLarge(f"the pattern's automaton exceeds {self.limit} NFA states")
        self.edges.append([])
        self.eps.append([])
        return len(self.edges) - 1

    def build(self, node: Node, start: int) -> int:
        """Add ``node`` starting at ``start``; returns its end state."""
        if isinstance(node, Chars):
            end = self.new()
            # share the prefixes of the byte sequences by a small trie keyed by (state, range)
            trie: dict[tuple[int, int, int], int] = {}
            for seq in _class_sequences(node.ranges):
                cur = start
                for k, (a, b) in enumerate(seq):
                    if k == len(seq) - 1:
                        self.edges[cur].append((a, b, end))
                    else:
                        key = (cur, a, b)
                        nxt = trie.get(key)
                        if nxt is None:
                            nxt = self.new()
                            trie[key] = nxt
                            self.edges[cur].append((a, b, nxt))
                        cur = nxt
            return end
        if isinstance(node, Concat):
            cur = start
            for item in node.items:
                cur = self.build(item, cur)
            return cur
        if isinstance(node, Alt):
            end = self.new()
            for item in node.items:
                s = self.new()
                self.eps[start].append(s)
                self.eps[self.build(item, s)].append(end)
            return end
        cur = start
        for _ in range(node.lo):
            cur = self.build(node.item, cur)
        if node.hi is None:
            loop = self.new()
            self.cyclic = True
            self.eps[cur].append(loop)
            self.eps[self.build(node.item, loop)].append(loop)
            return loop
        end = self.new()
        for _ in range(node.hi - node.lo):
            self.eps[cur].append(end)
            cur = self.build(node.item, cur)
        self.eps[cur].append(end)
        return end


# ----------------------------------------------------------------------------- DFA


@dataclass(frozen=True)
class Dfa:
    """A trimmed DFA over bytes: ``trans[s, b]`` is the next state or -1 (no way to acceptance); start 0."""

    trans: np.ndarray  # int32 [S, 256]
    accepting: np.ndarray  # bool [S]

    @property
    def num_states(self) -> int:
        return int(self.trans.shape[0])

    def run(self, data: bytes, state: int = 0) -> int:
        """The state after ``data`` from ``state``, -1 when no accepted string continues it."""
        for b in data:
            if state < 0:
                break
            state = int(self.trans[state, b])
        return state

    def matches(self, data: bytes) -> bool:
        s = self.run(data)
        return s >= 0 and bool(self.accepting[s])


def _closure(nfa: _Nfa, states: set[int]) -> frozenset[int]:
    stack = list(states)
    seen = set(states)
    while stack:
        s = stack.pop()
        for t in nfa.eps[s]:
            if t not in seen:
                seen.add(t)
                stack.append(t)
    return frozenset(seen)


def _byte_classes(nfa: _Nfa) -> np.ndarray:
    """Bytes no NFA edge tells apart share a class: class id per byte (int64 [256])."""
    cuts = np.zeros(257, dtype=bool)
    for edges in nfa.edges:
        for lo, hi, _ in edges:
            cuts[lo] = True
            cuts[hi + 1] = True
    return np.cumsum(cuts[:256]) - 1 if cuts[0] else np.cumsum(cuts[:256])


Edges = list[list[tuple[int, int]]]
"""Each state's live edges, (byte class, target) ascending by class."""


def determinize(nfa: _Nfa, start: int, final: int, max_states: int) -> tuple[Edges, list[bool], np.ndarray]:
    """Subset construction over byte classes: (each state's edges, accepting [S], the class of each byte).

    The edges are sparse (most classes lead nowhere from most states), and a set of NFA targets already closed
    is looked up rather than closed again, whichever state it comes from."""
    classes = _byte_classes(nfa)
    cls = classes.tolist()
    # each NFA state's edges as (class, target), one per class it covers, computed once
    edges = [[(c, t) for lo, hi, t in e for c in range(cls[lo], cls[hi] + 1)] for e in nfa.edges]
    limit = max_states * 4 + 64
    budget = work_bound(max_states)
    first = _closure(nfa, {start})
    work = len(first)
    index = {first: 0}
    order = [first]
    closed: dict[frozenset[int], int] = {}  # a set of targets -> the state of its closure
    succ: Edges = []
    i = 0
    while i < len(order):
        cur = order[i]
        i += 1
        targets: dict[int, set[int]] = {}
        for s in cur:
            for c, t in edges[s]:
                found = targets.get(c)
                if found is None:
                    targets[c] = {t}
                else:
                    found.add(t)
        row: list[tuple[int, int]] = []
        for c in sorted(targets):
            raw = frozenset(targets[c])
            j = closed.get(raw)
            if j is None:
                key = _closure(nfa, targets[c])
                work += len(key)
                if work > budget:
                    raise PatternTooLarge(_work_message(budget, max_states))
                j = index.get(key)
                if j is None:
                    if len(order) >= limit:
                        raise PatternTooLarge(
                            f"its DFA grows past {limit} states during its construction, "
                            f"far over the bound of {max_states} (max_states); a general grammar engine is the "
                            "tool for it"
                        )
                    j = len(order)
                    index[key] = j
                    order.append(key)
                closed[raw] = j
            row.append((c, j))
        succ.append(row)
    return succ, [final in s for s in order], classes


def _work_message(budget: int, max_states: int) -> str:
    return (
        f"its subset construction passes its work bound of {budget:,} NFA states gathered into subsets "
        f"({WORK_PER_STATE} per state of max(max_states, {MAX_DFA_STATES:,}), max_states being {max_states:,}); raise "
        "--max-states (max_states), or a general grammar engine is the tool for it"
    )


def minimize(
    succ: Edges, accepting: list[bool], num_classes: int, acyclic: bool = False
) -> tuple[np.ndarray, list[bool]]:
    """The minimal trimmed DFA of the partial DFA ``succ`` (each state's edges over byte classes, start 0),
    renumbered breadth-first from the start: (rows [S, num_classes] int32 with -1 for no transition, accepting).

    The minimal trimmed DFA is unique and the breadth-first numbering canonical, so either way of finding it
    (:func:`_quotient_acyclic` when the caller knows the DFA is acyclic and it agrees, else
    :func:`_quotient_hopcroft`) gives the same arrays.
    """
    acc = list(accepting)
    found = _quotient_acyclic(succ, acc) if acyclic else None
    qsucc, qacc, live, start = found if found is not None else _quotient_hopcroft(succ, acc)
    if start < 0 or not live[start]:
        raise PatternError("the pattern matches no string", position=0)
    number = {start: 0}
    queue = [start]
    for q in queue:
        for _, t in qsucc[q]:
            if live[t] and t not in number:
                number[t] = len(queue)
                queue.append(t)
    at_row: list[int] = []
    at_class: list[int] = []
    to: list[int] = []
    for i, q in enumerate(queue):
        for c, t in qsucc[q]:
            if live[t]:
                at_row.append(i)
                at_class.append(c)
                to.append(number[t])
    out = np.full((len(queue), num_classes), -1, dtype=np.int32)
    out[at_row, at_class] = to
    return out, [qacc[q] for q in queue]


def _quotient_acyclic(succ: Edges, acc: list[bool]) -> tuple[Edges, list[bool], list[bool], int] | None:
    """Revuz's minimization of an acyclic DFA, O(edges): children first, states with the same finality and the
    same edges to merged states merge, and a non-final state without edges left is dead (its edges are dropped).
    Returns the quotient (edges, accepting, live: all True, the start's state or -1 when it is dead), or None at
    the first cycle (Hopcroft's turn): formats such as dates, UUIDs and addresses are acyclic, and this is faster.
    """
    merged = [-2] * len(succ)  # -2 unseen, -3 on the depth-first path, -1 dead, else the merged state
    signatures: dict[tuple[bool, tuple[tuple[int, int], ...]], int] = {}
    qsucc: Edges = []
    qacc: list[bool] = []
    merged[0] = -3
    path = [(0, 0)]
    while path:
        x, i = path[-1]
        edges = succ[x]
        if i < len(edges):
            path[-1] = (x, i + 1)
            t = edges[i][1]
            if merged[t] == -3:
                return None
            if merged[t] == -2:
                merged[t] = -3
                path.append((t, 0))
            continue
        path.pop()
        out = tuple((c, merged[t]) for c, t in edges if merged[t] >= 0)
        if not out and not acc[x]:
            merged[x] = -1
            continue
        key = (acc[x], out)
        found = signatures.get(key)
        if found is None:
            found = signatures[key] = len(qsucc)
            qsucc.append(list(out))
            qacc.append(acc[x])
        merged[x] = found
    return qsucc, qacc, [True] * len(qsucc), merged[0]


def _quotient_hopcroft(succ: Edges, acc: list[bool]) -> tuple[Edges, list[bool], list[bool], int]:
    """Hopcroft's partition refinement: the quotient (edges, accepting, live: whether each state reaches
    acceptance, the start's state).

    Without a sink state, both initial blocks start as splitters (with one, its complement's split follows); a
    missing transition then never joins a state to one that has it, as equivalence wants.
    """
    total = len(succ)
    pred: list[list[tuple[int, int]]] = [[] for _ in range(total)]  # (class, source) of each state's in-edges
    for x, edges in enumerate(succ):
        for c, t in edges:
            pred[t].append((c, x))
    finals = {x for x in range(total) if acc[x]}
    others = set(range(total)) - finals
    blocks: list[set[int]] = [b for b in (finals, others) if b]
    block = [0] * total
    for b, members in enumerate(blocks):
        for x in members:
            block[x] = b
    work = set(range(len(blocks)))
    while work:
        a = work.pop()
        by_class: dict[int, list[int]] = {}
        for t in blocks[a]:
            for c, x in pred[t]:
                found = by_class.get(c)
                if found is None:
                    by_class[c] = [x]
                else:
                    found.append(x)
        for xs in by_class.values():  # split every block by "reaches the splitter on this class"
            touched: dict[int, list[int]] = {}
            for x in xs:
                y = block[x]
                hit = touched.get(y)
                if hit is None:
                    touched[y] = [x]
                else:
                    hit.append(x)
            for y, hits in touched.items():
                if len(hits) == len(blocks[y]):
                    continue
                inter = set(hits)
                rest = blocks[y] - inter
                blocks[y] = rest
                new = len(blocks)
                blocks.append(inter)
                for x in inter:
                    block[x] = new
                if y in work or len(inter) <= len(rest):
                    work.add(new)
                else:
                    work.add(y)
    # the quotient automaton over one member's live edges, trimmed
    k = len(blocks)
    qsucc = [[(c, block[t]) for c, t in succ[next(iter(members))]] for members in blocks]
    qacc = [acc[next(iter(members))] for members in blocks]
    reverse: list[list[int]] = [[] for _ in range(k)]
    for b, edges in enumerate(qsucc):
        for _, t in edges:
            reverse[t].append(b)
    live = [False] * k
    stack = [b for b in range(k) if qacc[b]]
    for b in stack:
        live[b] = True
    while stack:
        b = stack.pop()
        for p in reverse[b]:
            if not live[p]:
                live[p] = True
                stack.append(p)
    return qsucc, qacc, live, block[0]


def compile_regex(pattern: str, *, max_states: int = MAX_DFA_STATES) -> Dfa:
    """The minimal trimmed DFA of ``pattern`` over UTF-8 bytes.

    Raises :class:`PatternError` for syntax outside the subset (naming the position) or a pattern matching
    nothing, :class:`PatternTooLarge` when the automaton exceeds ``max_states`` states, and before the work that
    would tell: groups nested past :data:`MAX_NESTING`, an NFA past :func:`nfa_bound` (counted on the tree), a subset
    construction past :func:`work_bound`.
    """
    tree = parse(pattern)
    bound = nfa_bound(max_states)
    size = 1 + nfa_size(tree)
    if size > bound:
        raise PatternTooLarge(
            f"pattern {pattern!r:.80}: written out (its repetitions expanded) it needs {size:,} NFA states, over the "
            f"bound of {bound:,} ({MAX_NFA_STATES // MAX_DFA_STATES} per state of max(max_states, {MAX_DFA_STATES:,}), "
            f"max_states being {max_states:,}); raise --max-states (max_states), or a general grammar engine is the "
            "tool for it"
        )
    nfa = _Nfa(bound)
    start = nfa.new()
    final = nfa.build(tree, start)
    try:
        succ, accepting, classes = determinize(nfa, start, final, max_states)
    except PatternTooLarge as exc:  # name the pattern, as the other refusals do
        raise PatternTooLarge(f"pattern {pattern!r:.80}: {exc}") from None
    by_class, acc = minimize(succ, accepting, int(classes.max()) + 1, acyclic=not nfa.cyclic)
    if len(acc) > max_states:
        raise PatternTooLarge(
            f"pattern {pattern!r:.80}: its minimal DFA has {len(acc)} states, more than the bound of {max_states}; "
            "a general grammar engine is the tool for it"
        )
    return Dfa(np.ascontiguousarray(by_class[:, classes]), np.array(acc, dtype=bool))


def restrict_chars(node: Node, allowed: Ranges) -> Node:
    """``node`` with every class intersected with ``allowed``: its language intersected with ``allowed``'s strings."""
    if isinstance(node, Chars):
        out = []
        for lo, hi in node.ranges:
            for a, b in allowed:
                x, y = max(lo, a), min(hi, b)
                if x <= y:
                    out.append((x, y))
        return Chars(normalize(out))
    if isinstance(node, Concat | Alt):
        items = []  # a loop, not a generator: one frame per level of the tree (MAX_NESTING)
        for item in node.items:
            items.append(restrict_chars(item, allowed))
        return Concat(tuple(items)) if isinstance(node, Concat) else Alt(tuple(items))
    return Repeat(restrict_chars(node.item, allowed), node.lo, node.hi)
