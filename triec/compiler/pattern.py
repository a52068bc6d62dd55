"""``triec.compile_pattern``: a regex or a named format + vocabulary -> :class:`~triec.runtime.pattern.PatternTable`.

The regex becomes its minimal byte DFA (:mod:`triec.compiler.regex`); then every DFA state's row is found by walking
the vocabulary's token trie (:mod:`triec.tokenizer.automaton`) in lockstep with the DFA, all states at once, one
trie level per round: a (DFA state, trie node) pair goes on only through the children whose byte the DFA takes, so a
digit state visits only the tokens made of digits (output-sensitive), and cycles are harmless (a token is short).
A token reached at trie node n from state s is allowed there and leads to the DFA state the walk holds: since the
DFA is trimmed, every such state still reaches acceptance, which is exactly when a grammar engine allows a token.

Named formats (:data:`FORMATS`) are xgrammar 0.2.9's spelling of JSON Schema's ``format`` values, read from
``str(xgrammar.Grammar.from_json_schema('{"type": "string", "format": ...}'))`` and written as regexes (without the
quotes a JSON string adds); docs/patterns.md says where they differ from JSON Schema's text.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

import numpy as np

from triec._arrays import concat_ranges
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
    to_xgrammar_regex,
)
from triec.errors import PatternError, PatternTooLarge
from triec.runtime.pattern import PatternTable
from triec.tokenizer.automaton import VocabAutomaton
from triec.tokenizer.vocabulary import Vocabulary

_DATE = "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[1-2][0-9]|3[01])"
_TIME = "([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\\.[0-9]+)?(Z|[+\\-]([01][0-9]|2[0-3]):[0-5][0-9])"
_OCTET = "(25[0-5]|2[0-4][0-9]|[0-1]?[0-9]?[0-9])"

FORMATS: dict[str, str] = {
    "date": _DATE,
    "time": _TIME,
    "date-time": f"{_DATE}T{_TIME}",
    "uuid": "[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}",
    "ipv4": f"({_OCTET}\\.){{3}}{_OCTET}",
}
"""JSON Schema ``format`` name -> the regex of xgrammar 0.2.9's grammar for it (the string's content)."""


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


FEW = 16
"""A frontier this small advances in Python: a numpy round costs some 30 us of calls whatever its size, and a
long token (``0000000000000000``, a run of dashes) keeps one or two triples going for a dozen rounds."""

_BIG_FANOUT = 16
"""A node with more children than this is looked up in one numpy gather by :func:`_advance_few`."""


def _advance_few(
    src: np.ndarray,
    q: np.ndarray,
    node: np.ndarray,
    trans: np.ndarray,
    starts: np.ndarray,
    edge_keys: np.ndarray,
    edge_child: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One round of :func:`dfa_rows` for a few triples, each node's children looked up in the DFA one by one (a node
    with many children in one numpy gather): the same triples as the numpy round, in another order."""
    n_src: list[int] = []
    n_q: list[int] = []
    n_node: list[int] = []
    for s, d, n in zip(src.tolist(), q.tolist(), node.tolist(), strict=True):
        lo, hi = int(starts[n]), int(starts[n + 1])
        if hi - lo > _BIG_FANOUT:
            nq = trans[d, edge_keys[lo:hi] & 255]
            ok = np.flatnonzero(nq >= 0)
            n_src.extend([s] * ok.size)
            n_q.extend(nq[ok].tolist())
            n_node.extend(edge_child[lo + ok].tolist())
            continue
        for k in range(lo, hi):
            nd = int(trans[d, int(edge_keys[k]) & 255])
            if nd >= 0:
                n_src.append(s)
                n_q.append(nd)
                n_node.append(int(edge_child[k]))
    return (np.array(n_src, dtype=np.int64), np.array(n_q, dtype=np.int64), np.array(n_node, dtype=np.int64))


def _advance_many(
    src: np.ndarray,
    q: np.ndarray,
    node: np.ndarray,
    flat: np.ndarray,
    starts: np.ndarray,
    edge_keys: np.ndarray,
    edge_child: np.ndarray,
    live_dfa: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One round of :func:`dfa_rows` in numpy: each triple by the fewer of its node's children (looked up in the
    DFA's flat ``trans``) and its DFA state's live bytes (``live_dfa``: CSR offsets, counts, bytes, next states;
    looked up among the node's children), or all by their children when those are few in all (``_FEW_CHILDREN``).
    Index arrays and ``take`` throughout: a boolean mask or a 2-D index costs 2-5x as much per element."""
    live_off, live_n, live_b, live_q = live_dfa
    lo = starts.take(node)
    n_children = starts.take(node + 1) - lo
    if int(n_children.sum()) <= _FEW_CHILDREN:  # every child looked up in the DFA: a third of the calls
        idx = concat_ranges(lo, n_children)
        nq = flat.take(np.repeat(q, n_children) * _ROW + (edge_keys.take(idx) & 255))
        ok = np.flatnonzero(nq >= 0)
        return np.repeat(src, n_children).take(ok), nq.take(ok), edge_child.take(idx.take(ok))
    by_dfa = live_n.take(q) < n_children
    parts = []
    if not by_dfa.all():  # the node's children, each looked up in the DFA
        pick = np.flatnonzero(~by_dfa)
        counts = n_children.take(pick)
        idx = concat_ranges(lo.take(pick), counts)
        ent = np.repeat(pick, counts)
        nq = flat.take(q.take(ent) * _ROW + (edge_keys.take(idx) & 255))
        ok = np.flatnonzero(nq >= 0)
        parts.append((src.take(ent.take(ok)), nq.take(ok), edge_child.take(idx.take(ok))))
    if by_dfa.any():  # the DFA state's live bytes, each looked up among the node's children
        pick = np.flatnonzero(by_dfa)
        at_q = q.take(pick)
        counts = live_n.take(at_q)
        at = concat_ranges(live_off.take(at_q), counts)
        ent = np.repeat(pick, counts)
        want = node.take(ent) * _ROW + live_b.take(at)
        idx = np.searchsorted(edge_keys, want)
        ok = np.flatnonzero(edge_keys.take(idx) == want)  # the sentinel keeps idx in range
        parts.append((src.take(ent.take(ok)), live_q.take(at.take(ok)), edge_child.take(idx.take(ok))))
    if len(parts) == 1:
        return parts[0]
    src, q, node = (np.concatenate([a[i] for a in parts]) for i in range(3))
    return src, q, node


_FEW_CHILDREN = 16384
"""A round whose nodes have this few children in all looks each up in the DFA: some 20 numpy calls instead of
60, for at most this many elements (a bound on what a few wide nodes can cost where the live bytes would do)."""

_ROW = np.int64(256)
"""A DFA row's width in ``trans.ravel()``, as int64 so that a state times it cannot overflow int32."""


def dfa_rows(
    dfa: Dfa,
    automaton: VocabAutomaton,
    eos_token_ids: tuple[int, ...] = (),
    live: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, ...]:
    """Every DFA state's row over the token trie: (offsets [S + 1], tokens ascending per state, next state).

    Each round extends every (source state, DFA state, trie node) triple by one byte, whichever is fewer: the
    node's children looked up in the DFA, or the DFA state's live bytes looked up among the node's children.
    A leaf has no children, so it takes the first way and yields nothing: the frontier is not filtered, and the
    tokens are read once at the end from every triple the walk held (numpy's per-call cost is most of a round).
    ``live`` is :func:`dfa_live`'s result when the caller has it.
    """
    trans = dfa.trans
    n_states = dfa.num_states
    root = automaton.root_child
    edge_keys, edge_child = automaton.edge_keys, automaton.edge_child
    starts, max_id = walk_index(automaton)
    live_s, live_b, live_q = dfa_live(dfa) if live is None else live
    live_off = np.searchsorted(live_s, np.arange(n_states + 1))
    live_dfa = (live_off, np.diff(live_off), live_b, live_q)
    flat = trans.ravel()
    # round 0: each state with each first byte the DFA takes and some token starts with
    first = root[live_b] >= 0
    src, q, node = live_s[first], live_q[first], root[live_b[first]]
    held_src: list[np.ndarray] = []
    held_q: list[np.ndarray] = []
    held_node: list[np.ndarray] = []
    while src.size:
        held_src.append(src)
        held_q.append(q)
        held_node.append(node)
        if src.size <= FEW:
            src, q, node = _advance_few(src, q, node, trans, starts, edge_keys, edge_child)
            continue
        src, q, node = _advance_many(src, q, node, flat, starts, edge_keys, edge_child, live_dfa)
    if held_node:
        key = automaton.node_key.take(np.concatenate(held_node))
        hit = np.flatnonzero(key >= 0)
        f_key = key.take(hit)
        f_src = np.concatenate(held_src).take(hit)
        f_q = np.concatenate(held_q).take(hit)
    else:
        f_src = f_key = f_q = np.zeros(0, dtype=np.int64)
    # a distinct token text may be several ids
    k_lo = automaton.key_offsets[f_key]
    if automaton.single_id:
        tokens = automaton.key_ids[k_lo]
        src, nxt = f_src, f_q
    else:
        k_n = automaton.key_offsets[f_key + 1] - k_lo
        tokens = automaton.key_ids[concat_ranges(k_lo, k_n)]
        src = np.repeat(f_src, k_n)
        nxt = np.repeat(f_q, k_n)
    in_trie = [e for e in eos_token_ids if e <= max_id]  # EOS ids are often special tokens, past every text's id
    if in_trie:
        keep = np.ones(tokens.shape[0], dtype=bool)
        for eos in in_trie:
            keep &= tokens != eos
        kept = np.flatnonzero(keep)
        tokens, src, nxt = tokens.take(kept), src.take(kept), nxt.take(kept)
    src, tokens, nxt = _sort_pairs(src, tokens, nxt, n_states, max_id)
    offsets = np.searchsorted(src, np.arange(n_states + 1, dtype=np.int64)).astype(np.uint32)
    return offsets, tokens.astype(np.int32), nxt.astype(np.int32)


def _sort_pairs(
    src: np.ndarray, tokens: np.ndarray, nxt: np.ndarray, n_states: int, max_id: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(state, token, next state) triples ordered by state, then token (the pairs are distinct): packed into one
    key, int32 when state, id and state fit in 31 bits (a pattern's few dozen states with any vocabulary: twice
    as fast to sort as int64), else int64, and sorted as numbers, 2-3x faster than an argsort and three gathers;
    an argsort when even 63 bits are too few."""
    bits = n_states.bit_length()
    bits_id = max(max_id, 0).bit_length()
    total = 2 * bits + bits_id
    if total > 63:
        order = np.argsort((src.astype(np.int64) << 32) | tokens)
        return src[order], tokens[order], nxt[order]
    dtype = np.int32 if total <= 31 else np.int64
    high = np.left_shift(src.astype(dtype), bits_id + bits)
    key = np.sort(high | np.left_shift(tokens.astype(dtype), bits) | nxt.astype(dtype, copy=False))
    return key >> (bits_id + bits), (key >> bits) & ((1 << bits_id) - 1), key & ((1 << bits) - 1)


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
    stats: dict[str, Any] | None = None,
) -> PatternTable:
    """A string schema with a ``format`` (:data:`FORMATS`) or a ``pattern`` as a pattern table over its JSON
    string, quotes included: the output xgrammar's ``compile_json_schema`` allows for it (compact).

    :class:`PatternError` for any other schema, or a pattern whose strings would need escapes;
    :class:`~triec.errors.SchemaShapeError` for a keyword of the wrong type (naming it and its JSON pointer).
    """
    from triec.schema.keywords import check_keywords

    check_keywords(schema)
    found = string_schema_regex(schema)
    if found is None:
        raise PatternError(
            "expected a string schema with a 'format' (" + ", ".join(FORMATS) + ") or a 'pattern' and no other "
            "constraint",
            position=0,
        )
    regex, fmt = found
    table = compile_pattern(regex, vocab, max_states=max_states, stats=stats)
    table.format_name = fmt
    return table


def compile_pattern(
    pattern: str | None = None,
    vocab: Vocabulary | str | None = None,
    *,
    format: str | None = None,  # noqa: A002 - JSON Schema's keyword
    max_states: int = MAX_DFA_STATES,
    stats: dict[str, Any] | None = None,
) -> PatternTable:
    """Compile a regular expression (or a named ``format``: ``date``, ``time``, ``date-time``, ``uuid``, ``ipv4``)
    into a :class:`PatternTable` for ``vocab`` (a :class:`Vocabulary` or anything :meth:`Vocabulary.load` takes;
    default the bundled ``qwen2``).

    The whole output must match (``^`` and ``$`` are implied); EOS is allowed where it does. The regex subset and
    its semantics are :mod:`triec.compiler.regex`'s (xgrammar's). Raises :class:`~triec.errors.PatternError` for a
    pattern outside the subset (naming the position) and :class:`~triec.errors.PatternTooLarge` when its minimal
    DFA exceeds ``max_states``. ``stats``, when given, receives the phases' times (seconds) and the sizes.
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
    live = dfa_live(dfa)
    offsets, tokens, nxt = dfa_rows(dfa, automaton, vocab.eos_token_ids, live)
    d_off, d_bytes, d_next = dfa_csr(dfa, live)
    table = PatternTable.from_compile(
        allowed_offsets=offsets,
        allowed_tokens=tokens,
        allowed_next=nxt,
        value_state=np.flatnonzero(dfa.accepting).astype(np.int32),
        dfa_offsets=d_off,
        dfa_bytes=d_bytes,
        dfa_next=d_next,
        vocab_size=vocab.vocab_size,
        eos_token_ids=vocab.eos_token_ids,
        tokenizer_fingerprint=vocab.fingerprint,
        tokenizer_name=vocab.name,
        pattern=regex,
        format_name=format,
        build_options={"tokenizer_family": vocab.family, "tokenizer_tokens": vocab.num_tokens},
    )
    if stats is not None:
        stats.update(
            {
                "dfa_seconds": t1 - t0,
                "automaton_seconds": t2 - t1,
                "rows_seconds": time.perf_counter() - t2,
                "num_states": table.num_states,
                "num_allowed": table.num_allowed,
            }
        )
    return table
