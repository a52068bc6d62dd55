"""``triec.compile_schema``: an enum-then-continuation JSON Schema + vocabulary -> :class:`SchemaTable`.

The trie holds the keys ``PREFIX + json(name)`` only; the literal TAIL is shared
by every name through the straddle tables (built once per vocabulary, tail,
continuation and engine, and cached on disk), so a compile costs the trie of
the names plus a lookup.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from triec.build.compile import CompileStats, mask_table
from triec.build.walk import walk
from triec.encoding import json_string_literal
from triec.schema.shape import CONVENTION, NEEDS_ESCAPE, parse_tool_schema
from triec.schema.table import SchemaTable
from triec.tokenizer.vocabulary import Vocabulary
from triec.trie import build_trie


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


def compile_schema(
    schema: dict[str, Any] | str | bytes,
    vocab: Vocabulary | str | None = None,
    *,
    engine: str = "llguidance",
    stats: CompileStats | None = None,
    source: str = "schema",
) -> SchemaTable:
    """Compile ``{"type": "object", "properties": {NAME: {"enum": [...]}, NEXT: ARGS, ...}, "required": [all]}``.

    The output convention is compact (``", "`` and ``": "``, schema order, no other
    whitespace); the continuation after ``, "NEXT": `` runs in ``engine``
    (``llguidance``, the default, or ``xgrammar``). Raises
    :class:`~triec.schema.shape.SchemaShapeError` for any other shape.
    """
    from triec.engines import engine_version
    from triec.schema import straddle

    stats = stats if stats is not None else CompileStats()
    if not isinstance(vocab, Vocabulary):
        vocab = Vocabulary.load(vocab)
    t0 = time.perf_counter()
    if isinstance(schema, (str, bytes)):  # JSON text
        import json

        from triec.schema.shape import SchemaShapeError

        try:
            schema = json.loads(schema)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise SchemaShapeError(f"{source}: not valid JSON ({exc})") from None
    tool = parse_tool_schema(schema, engine, source)
    keys = name_keys(tool.prefix, tool.names, tool.names_plain)
    name_of = dict(zip(keys, tool.names, strict=True))
    keys.sort()
    t1 = time.perf_counter()
    automaton = vocab.automaton
    t2 = time.perf_counter()
    trie = build_trie(keys)
    tr = walk(trie, automaton, vocab.vocab_size, leaf_entries=True)
    t3 = time.perf_counter()

    table_holder: dict[str, Any] = {}

    def make_continuation() -> Any:
        from triec.schema.continuation import PLACEHOLDER, Continuation, driver

        cont = Continuation(
            driver(engine, vocab), tool.continuation, tool.name_property,
            tool.prefix + json_string_literal(PLACEHOLDER).encode("utf-8") + tool.tail,
        )
        table_holder["cont"] = cont
        return cont

    st, how = straddle.load_or_build(vocab, tool.tail, engine, tool.continuation_text, make_continuation)
    t4 = time.perf_counter()
    assert tr.leaf_entries is not None
    start, v, leaf = tr.leaf_entries
    pos = np.searchsorted(st.head_node, v)
    pos_c = np.minimum(pos, max(st.head_node.shape[0] - 1, 0))
    hit = np.flatnonzero((pos < st.head_node.shape[0]) & (st.head_node[pos_c] == v)) if st.head_node.size else np.zeros(0, np.int64)
    e_state, e_row, e_leaf = start[hit], pos[hit] + len(tool.tail), leaf[hit]
    o = np.lexsort((e_row, e_state))
    trie_table = mask_table(trie, tr.offsets, tr.tokens, tr.next_state, vocab, keys=keys)
    table = SchemaTable(
        trie=trie_table,
        straddles=st,
        entry_state=e_state[o].astype(np.int32),
        entry_row=e_row[o].astype(np.int32),
        entry_leaf=e_leaf[o].astype(np.int32),
        names=name_of,
        prefix=tool.prefix,
        tail=tool.tail,
        name_property=tool.name_property,
        next_property=tool.next_property,
        continuation_text=tool.continuation_text,
        continuation_sha256=tool.continuation_sha256,
        engine=engine,
        engine_version=engine_version(engine),
        convention=CONVENTION,
        vocab=vocab,
        continuation=table_holder.get("cont"),
    )
    t5 = time.perf_counter()
    stats.num_values = len(keys)
    stats.duplicates = tool.duplicates
    stats.value_bytes = int(trie.key_offsets[-1])
    stats.num_states = trie.num_nodes
    stats.num_allowed = trie_table.num_allowed
    stats.phases.update({"values": t1 - t0, "automaton": t2 - t1, "masks": t3 - t2, f"straddles ({how})": t4 - t3,
                         "assemble": t5 - t4})
    return table
