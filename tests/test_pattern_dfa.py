"""The regex subset (triec/compiler/regex.py): parsing and its refusals, UTF-8 byte sequences, the DFA's language
against Python's ``re`` and its minimality, the bound on its size."""

from __future__ import annotations

import inspect
import itertools
import random
import re
import sys

import numpy as np
import pytest

import triec
from triec.compiler.pattern import FORMATS, JSON_CHARS, string_schema_regex
from triec.compiler.regex import (
    MAX_NESTING,
    _Nfa,
    compile_regex,
    nfa_size,
    parse,
    restrict_chars,
    utf8_sequences,
)
from triec.compiler.regex_spelling import to_rust_regex, to_xgrammar_regex
from triec.errors import PatternError, PatternTooLarge, TriecError

# patterns whose language Python's re (ASCII, DOTALL) reads the same way
SAME_AS_RE = [
    "abc",
    "a|b|",
    "(a|b)*abb",
    "[0-9]{2,4}",
    "x{3,}",
    "(?:ab|a)(?:bc|c)?",
    "[^ab]c?",
    "\\d+\\.\\d*",
    "\\w{1,3}-\\W",
    "[a-c-]+",
    ".a.",
    "^(x|y)+z$",
    "(a?){3}b",
    "[\\-\\]x]+",
    "\\D\\x41\\u0042",
    "a{0}b",
    *FORMATS.values(),
]
ALPHABET = "abcxyz0123459-.:T+Z]AB\n é"


def _strings(rng: random.Random, n: int) -> list[str]:
    out = ["".join(p) for k in range(4) for p in itertools.product("ab0-", repeat=k)]
    for _ in range(n):
        out.append("".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 12))))
    return out


@pytest.mark.parametrize("pattern", SAME_AS_RE)
def test_language_equals_python_re(pattern: str) -> None:
    dfa = compile_regex(pattern)
    rx = re.compile(pattern, re.ASCII | re.DOTALL)
    rng = random.Random(pattern)
    samples = _strings(rng, 3000)
    if pattern in FORMATS.values():  # members of a format: mutate valid ones
        samples += ["2024-02-29", "1999-12-31", "2024-13-01", "2024-00-10", "2024-01-32", "23:59:60Z", "24:00:00Z"]
        samples += ["12:30:00.123+05:30", "2024-02-29T12:30:00.5Z", "255.255.255.255", "256.1.1.1", "01.2.3.4"]
        samples += ["123e4567-e89b-12d3-a456-426614174000", "123e4567-e89b-12d3-a456-42661417400"]
    for s in samples:
        assert dfa.matches(s.encode("utf-8")) == bool(rx.fullmatch(s)), (pattern, s)


def _moore_classes(trans: np.ndarray, accepting: np.ndarray) -> int:
    """The number of Myhill-Nerode classes of a trimmed DFA, by plain Moore refinement (an independent check)."""
    n = trans.shape[0]
    full = np.where(trans < 0, n, trans)
    cls = np.concatenate([accepting.astype(np.int64), [2]])  # the missing dead state is its own class
    while True:
        ext = np.vstack([full, np.full((1, 256), n)])
        sig = np.column_stack([cls, cls[ext]])
        _, new = np.unique(sig, axis=0, return_inverse=True)
        new = np.asarray(new).reshape(-1)
        if len(set(new.tolist())) == len(set(cls.tolist())):
            return len(set(new.tolist())) - 1  # without the dead class
        cls = new


@pytest.mark.parametrize("pattern", [*SAME_AS_RE, "(a|b)*a(a|b){6}", "é+ü?日本(語|人)", "[α-ω]{2}|[а-я]"])
def test_dfa_is_minimal_and_trimmed(pattern: str) -> None:
    dfa = compile_regex(pattern)
    assert _moore_classes(dfa.trans, dfa.accepting) == dfa.num_states
    # trimmed: every state reached from 0 and reaching acceptance
    reach = {0}
    stack = [0]
    while stack:
        s = stack.pop()
        for t in set(dfa.trans[s].tolist()) - {-1}:
            if t not in reach:
                reach.add(t)
                stack.append(t)
    assert reach == set(range(dfa.num_states))
    co = dfa.accepting.copy()
    for _ in range(dfa.num_states):
        co = co | np.array([any(co[t] for t in row if t >= 0) for row in dfa.trans.tolist()])
    assert co.all()


def test_known_sizes() -> None:
    assert compile_regex("(a|b)*a(a|b){5}").num_states == 2**6  # the textbook exponential family
    assert compile_regex(FORMATS["date"]).num_states == 14
    assert compile_regex("a|b").num_states == 2
    assert compile_regex("x*").num_states == 1


def test_size_bound_refuses_clearly() -> None:
    with pytest.raises(PatternTooLarge, match="states") as info:
        compile_regex("(a|b)*a(a|b){16}")
    assert isinstance(info.value, TriecError)
    with pytest.raises(PatternTooLarge, match="more than the bound of 10"):
        compile_regex(FORMATS["date"], max_states=10)
    with pytest.raises(PatternTooLarge, match="exceeds 1000"):
        compile_regex("a{1001}")


@pytest.mark.parametrize(
    ("pattern", "position", "fragment"),
    [
        ("(?=a)", 0, "lookaround"),
        ("ab(?i)c", 2, "flags"),
        ("a(b", 1, "unclosed group"),
        ("a)", 1, "unbalanced"),
        ("\\bx", 0, "\\b"),
        ("x\\1", 1, "\\1"),
        ("a**", 2, "after a quantifier"),
        ("*a", 0, "nothing to repeat"),
        ("[z-a]", 1, "out of order"),
        ("\\p{L}", 0, "\\p"),
        ("a{3,2}", 1, "below its minimum"),
        ("x^", 1, "'^'"),
        ("$x", 0, "'$'"),
        ("[]", 0, "empty class"),
        ("[abc", 0, "unclosed class"),
        ("ab\\", 2, "trailing backslash"),
        ("\\xZZ", 0, "hex digits"),
        ("\\ud800", 0, "scalar"),
        ("[[:alpha:]]", 1, "POSIX"),
    ],
)
def test_parse_errors_name_the_position(pattern: str, position: int, fragment: str) -> None:
    with pytest.raises(PatternError) as info:
        compile_regex(pattern)
    assert info.value.position == position, str(info.value)
    assert f"position {position}" in str(info.value) and fragment in str(info.value)


def test_a_pattern_matching_nothing_is_refused() -> None:
    with pytest.raises(PatternError, match="matches no string"):
        compile_regex("[^\\x00-\\u{10ffff}]")


@pytest.mark.parametrize(
    ("lo", "hi"), [(0, 0x10FFFF), (0x41, 0x5A), (0x7F, 0x800), (0xD000, 0xE100), (0xFFF0, 0x10010)]
)
def test_utf8_sequences_are_exactly_the_encodings(lo: int, hi: int) -> None:
    seqs = list(utf8_sequences(lo, hi))

    def covered(b: bytes) -> bool:
        return any(len(s) == len(b) and all(a <= x <= z for (a, z), x in zip(s, b, strict=True)) for s in seqs)

    rng = random.Random(lo)
    probes = {lo, hi, 0x7F, 0x80, 0x7FF, 0x800, 0xFFFF, 0x10000, 0xD7FF, 0xE000}
    probes |= {rng.randint(0, 0x10FFFF) for _ in range(400)}
    for cp in sorted(probes):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        assert covered(chr(cp).encode("utf-8")) == (lo <= cp <= hi), hex(cp)
    # sequences never overlap and never spell a surrogate or an overlong form: count the byte strings they cover
    total = sum(int(np.prod([z - a + 1 for a, z in s])) for s in seqs)
    surrogates = max(0, min(hi, 0xDFFF) - max(lo, 0xD800) + 1)
    assert total == hi - lo + 1 - surrogates


def test_rust_spelling_is_explicit() -> None:
    assert to_rust_regex(parse("\\d")) == "[0-9]"
    assert to_rust_regex(parse("a.b")).startswith("a[\\x00-")
    assert to_rust_regex(parse("(x|y){2,}")) == "(?:x|y){2,}"  # an alternation is its own group


def test_public_surface() -> None:
    assert (
        triec.compile_pattern is not None
        and triec.PatternTable
        and set(triec.FORMATS)
        == {
            "date",
            "time",
            "date-time",
            "uuid",
            "ipv4",
        }
    )
    with pytest.raises(triec.PatternError, match="exactly one"):
        triec.compile_pattern("a", "gpt2", format="date")
    with pytest.raises(triec.PatternError, match="unknown format"):
        triec.compile_pattern(format="email", vocab="gpt2")


def test_hex_escapes_take_two_digits() -> None:
    """ECMAScript's (JSON Schema's) and llguidance's reading; xgrammar 0.2.9 reads ``\\x41b`` as U+041B
    (docs/patterns.md)."""
    dfa = compile_regex("\\x41b")
    assert dfa.matches(b"Ab") and not dfa.matches("\u041b".encode())


# ----------------------------------------------------------------------------- bounded work (issue 49)


def _deepest(depth: int) -> str:
    """A pattern of ``depth`` nested groups whose tree is as deep as groups allow (a repeat, an alternation and a
    concatenation per group): the worst case for every recursive walk."""
    inner = "a"
    for _ in range(depth):
        inner = f"({inner}|b)*c"
    return inner


def test_nesting_past_the_bound_is_one_pattern_error_with_its_position() -> None:
    """400 nested groups raised RecursionError from the parser; now the 101st group is refused where it opens."""
    deep = "(" * 400 + "a" + ")" * 400
    for attempt in (
        lambda: compile_regex(deep),
        lambda: triec.compile_pattern(deep, "gpt2"),
        lambda: triec.compile_string_schema({"type": "string", "pattern": deep}, "gpt2"),
    ):
        with pytest.raises(PatternError, match="nested deeper than 100") as info:
            attempt()
        assert info.value.position == MAX_NESTING == 100
    assert compile_regex("(" * MAX_NESTING + "a" + ")" * MAX_NESTING).matches(b"a")


def test_the_deepest_pattern_admitted_leaves_most_of_the_stack() -> None:
    """At the bound, parsing, the NFA and DFA, both engines' spellings and a schema's reading of it fit in 400 frames,
    so that a call from 600 frames deep in a framework still stays under Python's default limit of 1,000."""
    pattern = _deepest(MAX_NESTING)
    tree = parse(pattern)
    schema = {"type": "string", "pattern": pattern}
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack(0)) + 400)
    try:
        dfa = compile_regex(pattern)
        rust, xg = to_rust_regex(tree), to_xgrammar_regex(restrict_chars(tree, JSON_CHARS))
        found = string_schema_regex(schema)
    finally:
        sys.setrecursionlimit(limit)
    assert dfa.matches(b"abc" + b"c" * (MAX_NESTING - 1)) and not dfa.matches(b"ab")
    assert rust.count("(?:") == MAX_NESTING  # a group per level: the repeat shares its alternation's
    assert compile_regex(xg).num_states == dfa.num_states  # the spelling parses again, nesting no deeper
    assert found is not None and compile_regex(found[0]).matches(b'"' + b"a" + b"c" * MAX_NESTING + b'"')


@pytest.mark.parametrize("pattern", [*SAME_AS_RE, ".{0,30}", "[^a]{3,7}", "(é|[\\u{100}-\\u{10FFFF}]x?)+", "a{0}"])
def test_nfa_size_is_what_the_nfa_builds(pattern: str) -> None:
    """The bound on the NFA is checked on the tree before building it: the count must be the build's own."""
    tree = parse(pattern)
    nfa = _Nfa(10**6)
    nfa.build(tree, nfa.new())
    assert 1 + nfa_size(tree) == len(nfa.edges)


def test_an_expansion_past_the_nfa_bound_is_refused_before_it_is_built() -> None:
    with pytest.raises(PatternTooLarge, match=r"1,001,001,002 NFA states, over the bound of 200,000") as info:
        compile_regex("((a{1000}){1000}){1000}")
    assert "--max-states" in str(info.value)
    assert compile_regex("(a{100}){100}", max_states=20_000).num_states == 10_001  # raising max_states admits more


@pytest.mark.parametrize("pattern", ["(a?)" * 25_000, "(.{0,50}){0,50}"])
def test_hostile_subset_constructions_stop_at_the_work_bound(pattern: str) -> None:
    """Each subset of these holds tens of thousands of NFA states (81 s and 5.3 GB before the state bound refused
    the second): the work bound refuses them first, naming itself and what to raise."""
    with pytest.raises(PatternTooLarge, match="work bound of 500,000") as info:
        compile_regex(pattern)
    assert "--max-states" in str(info.value)


def test_the_whole_code_space_repeated_is_a_dfa_or_a_refusal() -> None:
    """``[\\u{0}-\\u{10FFFF}]{1000}`` ran out of memory in the table stage; its DFA is 8,001 states (one per
    character boundary and UTF-8 continuation), within the default bound."""
    dfa = compile_regex("[\\u{0}-\\u{10FFFF}]{1000}")
    assert dfa.num_states == 8001
    assert dfa.matches(("é" * 999 + "\U0010ffff").encode()) and not dfa.matches(b"a" * 1001)


@pytest.mark.parametrize(("pattern", "states"), [(".{0,1000}", 8001), ("[^a]{500}", 4001), ("^.{1,255}$", 2041)])
def test_long_counted_repetitions_still_get_their_dfa(pattern: str, states: int) -> None:
    """Ordinary schema length bounds are not caught by the new bounds."""
    assert compile_regex(pattern).num_states == states


def test_a_schema_pattern_whose_json_regex_nests_past_the_bound_is_refused_naming_it() -> None:
    """A top-level alternation gains a group inside the JSON string's quotes: at the bound, the refusal names the
    user's pattern, not the regex triec wrote for it; one level shallower it is served."""
    at_bound = _deepest(MAX_NESTING) + "|z"
    with pytest.raises(PatternTooLarge, match="nest deeper than 100") as info:
        string_schema_regex({"type": "string", "pattern": at_bound})
    assert str(info.value).startswith(f"pattern {at_bound!r:.80}:")
    found = string_schema_regex({"type": "string", "pattern": _deepest(MAX_NESTING - 1) + "|z"})
    assert found is not None and compile_regex(found[0]).matches(b'"z"')
