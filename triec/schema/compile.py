"""``triec.compile_schema``: any JSON Schema the engine accepts, its large string enums served by tries.

Every string enum of at least ``threshold`` members that a trie can serve
exactly (:mod:`triec.schema.locate`) becomes a *slot*: its values' JSON
literals in a trie, walked once with the vocabulary automaton; the engine
gets the schema with that enum reduced to one marker value. When the schema is
an object whose first property is such an enum and whose text up to the next
property is literal (the tool-call shape of D19), that slot starts the output
and holds the literal prefix and tail itself, so its rows never touch an engine.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from triec._memo import gc_paused
from triec.compiler.entry import CompileStats
from triec.compiler.pattern import compile_pattern
from triec.compiler.regex import MAX_DFA_STATES
from triec.compiler.schema_keywords import check_keywords
from triec.encoding import json_string_literal
from triec.errors import PatternError, SchemaShapeError
from triec.runtime.pattern import PatternTable
from triec.schema.grammar import GrammarSpec
from triec.schema.locate import DEFAULT_THRESHOLD, EnumSite, Located, locate, with_markers
from triec.schema.pattern_slot import build_pattern_slot
from triec.schema.shape import CONVENTION, NEEDS_ESCAPE, canonical_json, json_object, parse_tool_schema
from triec.schema.slot import OTHER, Slot, build_values_slot
from triec.schema.table import Grammar, SchemaTable
from triec.tokenizer.index import token_index
from triec.tokenizer.vocabulary import Vocabulary

MARKERS = [chr(c) for c in range(0xF0000, 0xF0400)] + [chr(c) for c in range(0x100000, 0x100400)]
"""Candidate markers: private-use characters of planes 15 and 16, which schemas and tokens essentially never hold."""


def name_keys(prefix: bytes, names: list[str], plain: bool | None = None) -> list[bytes]:
    """PREFIX + the JSON string literal of each name.

    ``plain`` (no name holds a quote, backslash or control character) takes a path of
    a few C-level string operations for the whole list instead of one ``json.dumps`` each.
    """
    if plain is None:
        plain = NEEDS_ESCAPE.search("".join(names)) is None
    if plain and names:
        head = prefix.decode("utf-8") + '"'
        text = head + ('"\x00' + head).join(names) + '"'
        return text.encode("utf-8").split(b"\x00")
    return [prefix + json_string_literal(n).encode("utf-8") for n in names]


def pick_markers(vocab: Vocabulary, n: int, avoid: str = "") -> list[str]:
    """``n`` markers no token can enter: no token holds '"' followed by a marker's first byte."""
    after = token_index(vocab).after_quote
    out = [m for m in MARKERS if m.encode("utf-8")[0] not in after and m not in avoid and m != OTHER][:n]
    if len(out) < n or OTHER.encode("utf-8")[0] in after:
        raise SchemaShapeError(
            f"this vocabulary has tokens with '\"' followed by every marker's first byte; "
            f"no enum can be served by a trie exactly with {vocab.name or 'it'}"
        )
    return out


_HOLDERS: dict[tuple[str, bytes], int | None] = {}


def _check_opener(vocab: Vocabulary, opener: int, marker: str, source: str) -> None:
    """No token may hold a slot's opening byte followed by its marker's first byte: the engine's own row would let
    it into the marker, past where the slot takes over. One pass over the vocabulary per (vocabulary, bytes)."""
    needle = bytes([opener]) + marker.encode("utf-8")[:1]
    key = (vocab.fingerprint, needle)
    if key not in _HOLDERS:
        _HOLDERS[key] = next((i for i, tb in enumerate(vocab.token_bytes) if needle in tb), None)
    holder = _HOLDERS[key]
    if holder is not None:
        raise SchemaShapeError(
            f"{source}: token {holder} holds {needle!r} (the trigger's last byte, then the marker's "
            "first byte); served by the engine"
        )


def compile_schema(
    schema: dict[str, Any] | str | bytes,
    vocab: Vocabulary | str | None = None,
    *,
    engine: str = "llguidance",
    threshold: int = DEFAULT_THRESHOLD,
    whitespace: str = "compact",
    patterns: bool | None = None,
    max_states: int = MAX_DFA_STATES,
    stats: CompileStats | None = None,
    source: str = "schema",
) -> SchemaTable:
    """Compile a JSON Schema whose large string enums (``threshold`` members or more) are served by tries, and
    its ``format`` and ``pattern`` string fields by pattern tables.

    The output convention is compact (``", "`` and ``": "``, schema order, no
    other whitespace), or ``whitespace="any"`` (the engines' flexible JSON: what
    vLLM and SGLang ask xgrammar for by default); everything but the enums runs in ``engine``
    (``llguidance``, the default, or ``xgrammar``), so the masks equal that
    engine's on the whole schema. ``patterns`` serves each string field with a
    ``format`` of :data:`~triec.compiler.pattern.FORMATS` or a ``pattern`` from
    its DFA's table (a pattern slot, docs/patterns.md) as xgrammar spells it;
    default: under engine xgrammar only, where the masks stay equal to the
    engine's (llguidance spells some formats otherwise). A pattern whose DFA
    exceeds ``max_states`` stays in the engine. Raises
    :class:`~triec.errors.SchemaShapeError` when nothing can be served by a slot
    (the message says why for each), or for a schema the engine refuses.
    """
    from triec.engines import engine_version

    stats = stats if stats is not None else CompileStats()
    if not isinstance(vocab, Vocabulary):
        vocab = Vocabulary.load(vocab)
    t0 = time.perf_counter()
    schema = _read_schema(schema, source)
    if patterns is None:
        patterns = engine == "xgrammar"
    found = locate(schema, threshold, engine, always=_tool_enum(schema, engine), patterns=patterns)
    if whitespace not in ("compact", "any"):
        raise SchemaShapeError(f"{source}: whitespace must be 'compact' or 'any', not {whitespace!r}")
    t_pre = time.perf_counter()
    pattern_tables = _pattern_tables(found, vocab, max_states)
    t_pat = time.perf_counter()
    served = [s for s in found.slots if not s.is_pattern] + [s for s in found.slots if s.is_pattern]
    if not served:
        raise _nothing_served(found, threshold, patterns, source)
    text = canonical_json(schema)
    markers = pick_markers(vocab, len(served) + 1, avoid=text)
    by_ptr = {s.pointer: markers[i] for i, s in enumerate(served)}
    if whitespace == "any" and engine != "xgrammar":  # docs/decisions.md D23
        raise SchemaShapeError(
            f"{source}: any whitespace is served with engine xgrammar only (llguidance's flexible "
            "mode disagreed with its own masks after rollbacks here); use compact output"
        )
    start = (  # a literal prefix needs compact output
        _start_shape(schema, served[0], engine) if whitespace == "compact" and not served[0].is_pattern else None
    )
    grammar_schema = with_markers(schema, by_ptr)
    spec = GrammarSpec(canonical_json(grammar_schema), whitespace=whitespace)
    t1 = time.perf_counter()
    _ = vocab.automaton
    t2 = time.perf_counter()
    entered = [i for i, site in enumerate(served) if start is None or i > 0 or _used_elsewhere(schema, site.pointer)]
    slots = _build_slots(served, entered, start, markers, pattern_tables, vocab)
    held = tuple(range(len(slots) - len(entered), len(slots)))
    if start is not None:
        template = start[0] + json_string_literal(markers[0]).encode("utf-8") + start[1]
        grammars, start_slot, start_grammar = [Grammar(spec, template, held)], 0, -1
    else:
        grammars, start_slot, start_grammar = [Grammar(spec, b"", held)], -1, 0
    t3 = time.perf_counter()
    info = _schema_info(text, threshold, whitespace, found, served, entered, start)
    table = SchemaTable(
        slots=slots,
        grammars=grammars,
        start_slot=start_slot,
        start_grammar=start_grammar,
        engine=engine,
        engine_version=engine_version(engine),
        convention=CONVENTION,
        info=info,
        vocab=vocab,
    )
    _record_stats(stats, table, served)
    stats.phases.update(
        {
            "schema": t1 - t0 - (t_pat - t_pre),
            "automaton": t2 - t1,
            "masks": t3 - t2 + t_pat - t_pre,
            "assemble": time.perf_counter() - t3,
        }
    )
    return table


def _read_schema(schema: dict[str, Any] | str | bytes, source: str) -> dict[str, Any]:
    """The schema as a dict: JSON text parsed, anything but an object refused, and every keyword triec reads
    checked for its type before anything reads it (:func:`check_keywords`), each refusal naming ``source``."""
    doc = json_object(schema, source, "a JSON object (a JSON Schema)")
    check_keywords(doc, source)
    return doc


def _nothing_served(found: Located, threshold: int, patterns: bool, source: str) -> SchemaShapeError:
    """The refusal of a schema with no field a slot can serve: why, for each site that was looked at."""
    why = "; ".join(f"{s.pointer or '/'}: {s.reason}" for s in found.sites) or (
        f"no string enum has {threshold} or more members"
        + (", and no string field has a format or a pattern" if patterns else "")
    )
    return SchemaShapeError(
        f"{source}: nothing for a trie to serve ({why}); serve this schema with the engine "
        f"alone, or lower the threshold (now {threshold})"
    )


def _build_slots(
    served: list[EnumSite],
    entered: list[int],
    start: tuple[bytes, bytes, str] | None,
    markers: list[str],
    pattern_tables: dict[str, PatternTable],
    vocab: Vocabulary,
) -> list[Slot]:
    """The table's slots in order: with a literal start, slot 0 holds the prefix and each key, then its literal tail;
    then each entered site, a pattern slot from its DFA's table or a values slot entered after its marker."""
    slots: list[Slot] = []
    if start is not None:  # slot 0 starts the output: the literal prefix in its keys, then its literal tail
        prefix, tail, _prop = start
        keys = sorted(set(name_keys(prefix, served[0].values)))
        slots.append(build_values_slot(keys, vocab, tail=tail, value_grammar=np.zeros(len(keys), dtype=np.int32)))
    for i in entered:
        if served[i].is_pattern:
            slots.append(build_pattern_slot(pattern_tables[served[i].pointer], vocab, marker=markers[i]))
            continue
        keys = sorted(set(name_keys(b"", served[i].values)))
        slots.append(build_values_slot(keys, vocab, enter_state=0, marker=markers[i]))
    return slots


def _schema_info(
    text: str,
    threshold: int,
    whitespace: str,
    found: Located,
    served: list[EnumSite],
    entered: list[int],
    start: tuple[bytes, bytes, str] | None,
) -> dict[str, Any]:
    """The table's ``info``: its shape and schema, each slot's site, and the enums and patterns the engine kept (the
    latter only when there are some, so that a table without pattern fields keeps its bytes)."""
    info: dict[str, Any] = {
        "shape": "tool-call" if start is not None else "schema",
        "schema": text,
        "threshold": threshold,
        "whitespace": whitespace,
        "slots": [_slot_info(served[i]) for i in ([0] if start is not None else []) + entered],
        "engine_enums": [
            {"pointer": s.pointer, "values": len(s.values), "reason": s.reason}
            for s in found.sites
            if not s.served and not s.is_pattern
        ],
    }
    kept = [{"pointer": s.pointer, "reason": s.reason} for s in found.sites if not s.served and s.is_pattern]
    if kept:  # only then: a table without pattern fields keeps its bytes
        info["engine_patterns"] = kept
    if start is not None:
        info.update(prefix=start[0].decode("utf-8"), name_property=start[2])
    return info


def _record_stats(stats: CompileStats, table: SchemaTable, served: list[EnumSite]) -> None:
    """The compile's counts over every slot, for ``triec compile``'s summary."""
    stats.num_values = sum(s.num_values for s in table.slots)
    stats.duplicates = sum(s.duplicates for s in served)
    stats.value_bytes = sum(sum(map(len, s.keys)) for s in table.slots)
    stats.num_states = table.num_states
    stats.num_allowed = sum(s.trie.num_allowed for s in table.slots)


def _slot_info(site: EnumSite) -> dict[str, Any]:
    if site.is_pattern:
        return (
            {"pointer": site.pointer, "format": site.format}
            if site.format
            else {"pointer": site.pointer, "pattern": site.pattern}
        )
    return {"pointer": site.pointer, "values": len(site.values)}


MAX_SLOT_PAIRS = 2_000_000
"""A pattern slot stores its rows token by token (format version 5: 8 bytes a pair), unlike a pattern table's
classes: a field whose rows would hold more pairs than this (``.{0,300}`` on Qwen2: some 45 million) stays in
the engine, which serves it as it always did, instead of a schema artifact of hundreds of megabytes."""


def _pattern_tables(found: Located, vocab: Vocabulary, max_states: int) -> dict[str, PatternTable]:
    """Each served pattern site's table (its whole JSON string); a pattern past ``max_states``, past the walk's
    work bound or past :data:`MAX_SLOT_PAIRS` stays in the engine, with the reason."""
    out: dict[str, PatternTable] = {}
    for site in found.slots:
        if not site.is_pattern:
            continue
        try:
            table = compile_pattern(site.regex, vocab, max_states=max_states)
        except PatternError as exc:
            site.served, site.reason = False, str(exc)
            continue
        if table.num_allowed > MAX_SLOT_PAIRS:
            site.served = False
            site.reason = (
                f"its rows hold {table.num_allowed:,} (state, token) pairs, more than a schema slot stores "
                f"({MAX_SLOT_PAIRS:,}): the engine serves it"
            )
            continue
        table.format_name = site.format
        out[site.pointer] = table
    return out


def _tool_enum(schema: dict[str, Any], engine: str) -> tuple[str, ...]:
    """The pointer of a tool-call schema's first enum (D19's shape), served by a trie whatever its size
    (:func:`~triec.schema.locate.locate` still says when it cannot be, e.g. control characters under llguidance)."""
    try:
        shape = parse_tool_schema(schema, "xgrammar")
    except SchemaShapeError:
        return ()
    return ("/properties/" + shape.name_property.replace("~", "~0").replace("/", "~1"),)


def _start_shape(schema: dict[str, Any], first: Any, engine: str) -> tuple[bytes, bytes, str] | None:
    """(prefix, tail, property) when the first enum is the schema's first property and the text around it literal."""
    if first.pointer.count("/") != 2 or not first.pointer.startswith("/properties/"):
        return None
    try:
        shape = parse_tool_schema(schema, engine)
    except SchemaShapeError:
        return None
    if f"/properties/{shape.name_property.replace('~', '~0').replace('/', '~1')}" != first.pointer:
        return None
    return shape.prefix, shape.tail, shape.name_property


def _used_elsewhere(schema: dict[str, Any], pointer: str) -> bool:
    """Whether a ``$ref`` reaches the start enum at ``pointer`` (then it also needs a slot entered from the engine)."""
    found = []

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ("#" + pointer).startswith(ref.rstrip("/")) and ref.startswith("#"):
                found.append(ref)
            for v in node.values():
                visit(v)
        elif isinstance(node, list):
            for v in node:
                visit(v)

    visit(schema)
    return bool(found)


def compile_tools(
    tools: Any,
    vocab: Vocabulary | str | None = None,
    *,
    format: str = "vllm",
    engine: str = "llguidance",
    parallel: bool = True,
    whitespace: str = "compact",
    stats: CompileStats | None = None,
    source: str = "tools",
) -> SchemaTable:
    """Compile a tool registry (OpenAI, MCP or Anthropic spelling) into the calls of one format.

    The tool names go into one trie after the format's literal prefix; each tool's
    arguments run in ``engine`` on that tool's own schema, compiled when a sequence
    first picks the tool (and cached; tools with equal schemas share one).
    ``parallel`` allows several calls where the format does (``vllm``, ``hermes``).
    Raises :class:`~triec.schema.tools.ToolsError` naming a bad entry.
    """
    with gc_paused():  # tens of thousands of small objects, all kept: collections would only walk them
        return _compile_tools(
            tools,
            vocab,
            format=format,
            engine=engine,
            parallel=parallel,
            whitespace=whitespace,
            stats=stats,
            source=source,
        )


def _compile_tools(
    tools: Any,
    vocab: Vocabulary | str | None,
    *,
    format: str,
    engine: str,
    parallel: bool,
    whitespace: str,
    stats: CompileStats | None,
    source: str,
) -> SchemaTable:
    from triec.errors import ToolsError
    from triec.schema.tools import (
        Tool,
        call_template,
        lazy_call_grammar,
        parse_tools,
        start_grammar,
        tool_format,
    )

    stats = stats if stats is not None else CompileStats()
    if not isinstance(vocab, Vocabulary):
        vocab = Vocabulary.load(vocab)
    t0 = time.perf_counter()
    fmt = tool_format(format)
    parsed = tools if tools and all(isinstance(t, Tool) for t in tools) else parse_tools(tools, source, engine)
    multi = fmt.multi and parallel
    if whitespace not in ("compact", "any"):
        raise ToolsError(f"{source}: whitespace must be 'compact' or 'any', not {whitespace!r}")
    flexible = whitespace == "any"
    if flexible and (engine != "xgrammar" or fmt.name == "hermes"):
        raise ToolsError(
            f"{source}: any whitespace is served for the JSON formats with engine xgrammar only "
            "(hermes calls with free whitespace arrive as structural tags: compile_structural_tag)"
        )
    markers = pick_markers(vocab, 2)
    prefix = b"" if flexible else fmt.prefix.encode("utf-8")  # any whitespace: the start is a grammar of its own
    keys = name_keys(prefix, [t.name for t in parsed])
    order = sorted(range(len(keys)), key=keys.__getitem__)
    keys = [keys[i] for i in order]
    t1 = time.perf_counter()
    _ = vocab.automaton
    t2 = time.perf_counter()
    template = call_template(fmt, markers[0], tail=not flexible)
    held = (0,) if multi else ()
    first = 1 if flexible else 0  # grammar 0 starts the output when the prefix is not literal
    grammars = [Grammar(start_grammar(fmt, parallel, markers[1]), b"", (0,))] if flexible else []
    grammars += [
        Grammar(
            template=template,
            slots=held,
            make=lazy_call_grammar(
                fmt, parsed[i].name, parsed[i].parameters, parallel, (markers[0], markers[1]), whitespace
            ),
        )
        for i in order
    ]
    entered = multi or flexible
    slot = build_values_slot(
        keys,
        vocab,
        tail=b"" if flexible else fmt.tail.encode("utf-8"),
        enter_state=len(prefix) if entered else -1,
        marker=markers[1] if entered else "",
        value_grammar=np.arange(first, first + len(keys), dtype=np.int32),
    )
    t3 = time.perf_counter()
    info = {
        "shape": "tools",
        "format": fmt.name,
        "parallel": bool(parallel),
        "prefix": prefix.decode("utf-8"),
        "name_property": "name",
        "tools": len(parsed),
        "whitespace": whitespace,
    }
    table = _one_slot_table(slot, keys, grammars, flexible, engine, info, vocab, stats)
    stats.phases.update(
        {"tools": t1 - t0, "automaton": t2 - t1, "masks": t3 - t2, "assemble": time.perf_counter() - t3}
    )
    return table


def compile_structural_tag(
    tag: Any,
    vocab: Vocabulary | str | None = None,
    *,
    engine: str = "xgrammar",
    stats: CompileStats | None = None,
    source: str = "structural tag",
) -> SchemaTable:
    """Compile a structural tag whose begins can be served by a trie (:mod:`triec.schema.tags`).

    xgrammar runs each tag's content and end (compiled when a sequence first opens that tag) and, for triggered
    tags (vLLM's ``tool_choice="auto"``, SGLang's legacy ``structures``/``triggers``), the free text around them
    (docs/decisions.md D25); the masks equal xgrammar's on the whole structural tag. Raises
    :class:`~triec.errors.SchemaShapeError` for shapes served by the engine alone (several triggers, a trigger
    that is a token id, ``tags_with_separator`` without a required tag).
    """
    from triec.schema.tags import from_legacy, is_legacy, parse_structural_tag, start_grammar, tag_grammar

    if engine != "xgrammar":
        raise SchemaShapeError(f"{source}: structural tags are xgrammar's format; compile them with engine xgrammar")
    stats = stats if stats is not None else CompileStats()
    if not isinstance(vocab, Vocabulary):
        vocab = Vocabulary.load(vocab)
    t0 = time.perf_counter()
    if is_legacy(tag):  # recorded (and checked against xgrammar) as the triggered tags it stands for
        tag = {"type": "structural_tag", "format": from_legacy(tag)}
    text = tag if isinstance(tag, str) else json.dumps(tag, ensure_ascii=False)
    plan = parse_structural_tag(tag, source)
    (marker,) = pick_markers(vocab, 1, avoid=text)
    # triggered tags: the slot's keys start at the trigger's last byte, where the free text's engine stands at the
    # marker (docs/decisions.md D25); otherwise the whole begins
    cut = len(plan.trigger.encode("utf-8")) - 1 if plan.trigger else 0
    keys = [b.encode("utf-8")[cut:] for b in plan.begins]
    order = sorted(range(len(keys)), key=keys.__getitem__)
    keys = [keys[i] for i in order]
    opener = keys[0][:1].decode("latin-1")
    if plan.trigger:
        _check_opener(vocab, keys[0][0], marker, source)
    held = (0,) if plan.multi else ()
    trigger = plan.trigger or None
    first = 1 if trigger else 0  # grammar 0: the free text before the first tag
    grammars = [Grammar(GrammarSpec(start_grammar(plan, marker), kind="structural_tag"), b"", (0,))] if trigger else []

    def made(i: int) -> Callable[[], GrammarSpec]:  # each tag's grammar text is written when a sequence opens it
        return lambda: GrammarSpec(
            tag_grammar(
                plan.contents[i], plan.ends[i], plan.separator, opener, plan.multi, marker, trigger, plan.excludes
            ),
            kind="structural_tag",
        )

    grammars += [Grammar(template=b"", slots=held, make=made(i)) for i in order]
    t1 = time.perf_counter()
    entered = plan.multi or trigger is not None
    slot = build_values_slot(
        keys,
        vocab,
        enter_state=0 if entered else -1,
        marker=marker if entered else "",
        value_grammar=np.arange(first, first + len(keys), dtype=np.int32),
        open=keys[0][0],
    )
    t2 = time.perf_counter()
    info = {"shape": "structural-tag", "tag": text, "tags": len(keys), "multi": plan.multi}
    if trigger:
        info.update({"trigger": trigger, "at_least_one": plan.at_least_one})
    table = _one_slot_table(slot, keys, grammars, trigger is not None, engine, info, vocab, stats)
    stats.phases.update({"tags": t1 - t0, "masks": t2 - t1})
    return table


def _one_slot_table(
    slot: Slot,
    keys: list[bytes],
    grammars: list[Grammar],
    lead: bool,
    engine: str,
    info: dict[str, Any],
    vocab: Vocabulary,
    stats: CompileStats,
) -> SchemaTable:
    """A table of one slot over ``keys`` (a tool call's names, a structural tag's begins), its sizes recorded in
    ``stats``: the slot starts the output, or with ``lead`` grammar 0 does (free whitespace, or text before a tag)."""
    from triec.engines import engine_version

    table = SchemaTable(
        slots=[slot],
        grammars=grammars,
        start_slot=-1 if lead else 0,
        start_grammar=0 if lead else -1,
        engine=engine,
        engine_version=engine_version(engine),
        convention=CONVENTION,
        info=info,
        vocab=vocab,
    )
    stats.num_values = len(keys)
    stats.value_bytes = sum(map(len, keys))
    stats.num_states = slot.num_states
    stats.num_allowed = slot.trie.num_allowed
    return table
