"""``triec.compile_pattern``: a regex or a named format + vocabulary -> :class:`~triec.runtime.pattern.PatternTable`.

The regex becomes its minimal byte DFA (:mod:`triec.compiler.regex`); then every DFA state's row is found by walking
the vocabulary's token trie (:mod:`triec.tokenizer.automaton`) with every DFA state at once, tokens that act alike
on the DFA grouped into classes (:mod:`triec.compiler.pattern_rows`, :mod:`triec.runtime.token_classes`). A token
is allowed at state s when its bytes, read from s, stay in the DFA: since the DFA is trimmed, every state it
reaches still reaches acceptance, which is exactly when a grammar engine allows a token.

Named formats (:data:`FORMATS`) are xgrammar 0.2.9's spelling of JSON Schema's ``format`` values, read from
``str(xgrammar.Grammar.from_json_schema('{"type": "string", "format": ...}'))`` and written as regexes (without the
quotes a JSON string adds); docs/patterns.md says where they differ from JSON Schema's text.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

import numpy as np

from triec.compiler.pattern_rows import MAX_WORK, token_class_rows
from triec.compiler.regex import (
    MAX_DFA_STATES,
    MAX_NESTING,
    Chars,
    Concat,
    Dfa,
    Node,
    Repeat,
    compile_regex,
    negate,
    normalize,
    parse,
    restrict_chars,
)
from triec.compiler.regex_spelling import to_xgrammar_regex
from triec.errors import PatternError, PatternTooLarge
from triec.named_formats import FORMATS as FORMATS  # re-exported: the compiler's public name
from triec.runtime.pattern import PatternTable
from triec.tokenizer.automaton import VocabAutomaton
from triec.tokenizer.vocabulary import Vocabulary


def format_regex(name: str) -> str:
    """The regex of a named format; :class:`PatternError` naming the known ones for any other name."""
    found = FORMATS.get(name)
    if found is None:
        raise PatternError(f"unknown format {name!r}; expected one of {', '.join(FORMATS)}", position=0)
    return found


_WALK_INDEX: dict[int, tuple[weakref.ref[VocabAutomaton], np.ndarray, int]] = {}


def walk_index(automaton: VocabAutomaton) -> tuple[np.ndarray, int]:
    """Where each trie node's children start in ``edge_keys`` (int64 [N + 1]) and the largest token id in the trie
    (-1 for none); built once per automaton."""
    key = id(automaton)
    found = _WALK_INDEX.get(key)
    if found is not None and found[0]() is automaton:
        return found[1], found[2]
    n = automaton.num_nodes
    starts = np.searchsorted(automaton.edge_keys, np.arange(n + 1, dtype=np.int64) * 256).astype(np.int64)
    max_id = int(automaton.key_ids.max(initial=-1))
    _WALK_INDEX[key] = (weakref.ref(automaton, lambda _: _WALK_INDEX.pop(key, None)), starts, max_id)
    return starts, max_id


def dfa_live(dfa: Dfa) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The DFA's live transitions in row-major order: (state, byte, next state); one scan of ``trans`` serves both
    the walk and the table's CSR."""
    s_idx, b_idx = np.nonzero(dfa.trans >= 0)
    return s_idx, b_idx, dfa.trans[s_idx, b_idx]


STRING_KEYWORDS = {"type", "format", "pattern", "title", "description", "$comment", "examples"}
JSON_CHARS = negate(normalize([(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C)]))
"""What a JSON string holds unescaped: every character but the C0 controls, the quote and the backslash."""


def string_schema_regex(schema: Any) -> tuple[str, str | None] | None:
    """(regex of the whole JSON string, format name) for a string schema with a ``format`` of :data:`FORMATS` or a
    ``pattern``, as xgrammar 0.2.9 serves it (``any_whitespace=False``): the quotes around the strings of the
    format or pattern that need no escape (xgrammar matches the pattern's characters unescaped and never lets one
    of them be written as an escape); None for any other schema. A pattern whose language needs an escape (it
    holds a quote, a backslash or a control character outside a class) is refused: xgrammar's reading of those
    is not one triec reproduces."""
    if not isinstance(schema, dict) or schema.get("type") != "string" or not set(schema) <= STRING_KEYWORDS:
        return None
    fmt, pat = schema.get("format"), schema.get("pattern")
    if (fmt is None) == (pat is None):
        return None
    if fmt is not None:
        if fmt not in FORMATS:
            return None
        return '"' + FORMATS[fmt] + '"', fmt
    if not isinstance(pat, str):
        raise PatternError(f"'pattern': expected a string, found {type(pat).__name__}", position=0)
    tree = parse(pat)
    _refuse_escaped_literals(tree, pat)
    quote = Chars(((0x22, 0x22),))
    regex = to_xgrammar_regex(Concat((quote, restrict_chars(tree, JSON_CHARS), quote)))
    _check_respelled_nesting(regex, pat)
    return regex, None


def _check_respelled_nesting(regex: str, pattern: str) -> None:
    """The JSON string's regex may nest a group or two deeper than the user's pattern (around a top-level
    alternation, around a repeated character): refuse past :data:`MAX_NESTING` here, naming the user's pattern,
    rather than later with a position in a regex the user never wrote."""
    try:
        parse(regex)
    except PatternTooLarge:
        raise PatternTooLarge(
            f"pattern {pattern!r:.80}: as a JSON string's regex (a group around a top-level alternation or a "
            f"repeated character) its groups nest deeper than {MAX_NESTING} (the bound on nesting)",
            position=0,
        ) from None


def _refuse_escaped_literals(node: Node, pattern: str) -> None:
    """Refuse a literal character a JSON string must escape (xgrammar reads those differently); one frame per
    level of the tree, whose depth the parser bounds (MAX_NESTING)."""
    if isinstance(node, Chars):
        if len(node.ranges) == 1 and node.ranges[0][0] == node.ranges[0][1]:
            cp = node.ranges[0][0]
            if cp < 0x20 or cp in (0x22, 0x5C):
                raise PatternError(
                    f"pattern {pattern!r:.80}: the character U+{cp:04X} must be escaped in a JSON string; "
                    "triec serves patterns whose strings need no escape",
                    position=0,
                )
        return
    if isinstance(node, Repeat):
        _refuse_escaped_literals(node.item, pattern)
        return
    for child in node.items:
        _refuse_escaped_literals(child, pattern)


def dfa_csr(dfa: Dfa, live: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, ...]:
    """The DFA's live transitions as CSR: (offsets [S + 1], bytes ascending per state, next state)."""
    s_idx, b_idx, nxt = dfa_live(dfa) if live is None else live
    offsets = np.searchsorted(s_idx, np.arange(dfa.num_states + 1)).astype(np.uint32)
    return offsets, b_idx.astype(np.uint8), nxt.astype(np.int32)


def compile_string_schema(
    schema: dict[str, Any],
    vocab: Vocabulary | str | None = None,
    *,
    max_states: int = MAX_DFA_STATES,
    max_work: int = MAX_WORK,
    stats: dict[str, Any] | None = None,
) -> PatternTable:
    """A string schema with a ``format`` (:data:`FORMATS`) or a ``pattern`` as a pattern table over its JSON
    string, quotes included: the output xgrammar's ``compile_json_schema`` allows for it (compact).

    :class:`PatternError` for any other schema, or a pattern whose strings would need escapes;
    :class:`~triec.errors.SchemaShapeError` for a keyword of the wrong type (naming it and its JSON pointer).
    """
    from triec.compiler.schema_keywords import check_keywords

    check_keywords(schema)
    found = string_schema_regex(schema)
    if found is None:
        raise PatternError(
            "expected a string schema with a 'format' (" + ", ".join(FORMATS) + ") or a 'pattern' and no other "
            "constraint",
            position=0,
        )
    regex, fmt = found
    table = compile_pattern(regex, vocab, max_states=max_states, max_work=max_work, stats=stats)
    table.format_name = fmt
    return table


def compile_pattern(
    pattern: str | None = None,
    vocab: Vocabulary | str | None = None,
    *,
    format: str | None = None,
    max_states: int = MAX_DFA_STATES,
    max_work: int = MAX_WORK,
    stats: dict[str, Any] | None = None,
) -> PatternTable:
    """Compile a regular expression (or a named ``format``: ``date``, ``time``, ``date-time``, ``uuid``, ``ipv4``)
    into a :class:`PatternTable` for ``vocab`` (a :class:`Vocabulary` or anything :meth:`Vocabulary.load` takes;
    default the bundled ``qwen2``).

    The whole output must match (``^`` and ``$`` are implied); EOS is allowed where it does. The regex subset and
    its semantics are :mod:`triec.compiler.regex`'s (xgrammar's). Raises :class:`~triec.errors.PatternError` for a
    pattern outside the subset (naming the position) and :class:`~triec.errors.PatternTooLarge` when its minimal
    DFA exceeds ``max_states`` or its rows over the vocabulary would take more than ``max_work`` steps to find
    (:mod:`triec.compiler.pattern_rows`; refused as soon as the walk passes it). ``stats``, when given, receives the phases' times (seconds) and the sizes.
    """
    if (pattern is None) == (format is None):
        raise PatternError("compile_pattern takes a pattern or a format, exactly one", position=0)
    regex = format_regex(format) if format is not None else pattern
    assert regex is not None
    t0 = time.perf_counter()
    dfa = compile_regex(regex, max_states=max_states)
    t1 = time.perf_counter()
    if not isinstance(vocab, Vocabulary):
        vocab = Vocabulary.load(vocab)
    automaton = vocab.automaton
    t2 = time.perf_counter()
    starts, _ = walk_index(automaton)
    classes = token_class_rows(dfa, automaton, starts, vocab.vocab_size, vocab.eos_token_ids, max_work=max_work)
    d_off, d_bytes, d_next = dfa_csr(dfa)
    table = PatternTable.from_compile(
        classes=classes,
        value_state=np.flatnonzero(dfa.accepting).astype(np.int32),
        dfa_offsets=d_off,
        dfa_bytes=d_bytes,
        dfa_next=d_next,
        **vocab.table_fields(),
        pattern=regex,
        format_name=format,
    )
    if stats is not None:
        stats.update(
            {
                "dfa_seconds": t1 - t0,
                "automaton_seconds": t2 - t1,
                "rows_seconds": time.perf_counter() - t2,
                "num_states": table.num_states,
                "num_allowed": table.num_allowed,
                "num_classes": classes.num_classes,
                "num_class_pairs": classes.num_class_pairs,
            }
        )
    return table
