"""Tool registries (issue 18): every format, equal to the engine on the whole format, state by state.

The oracle is llguidance or xgrammar compiled on the whole format over every
tool (vLLM's ``tool_choice="required"`` schema for ``vllm``; an ``anyOf`` of the
calls for ``llama3`` / ``object``; the tagged calls as a lark / EBNF grammar for
``hermes``), in the same compact convention (:func:`triec.verify.schemas.compare_schema`:
every trie state of the names exhaustively, one step past each crossing token,
each tail offset, and random walks to EOS with several calls).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from shared import ENGINES, synthetic_vocab

import triec
from triec.schema.compile import compile_tools
from triec.schema.tools import ToolsError, parse_tools, tools_of
from triec.synthetic.registries import make_registry, respell
from triec.verify.schemas import compare_schema

pytestmark = pytest.mark.engines

FORMATS = [("vllm", True), ("vllm", False), ("hermes", True), ("hermes", False), ("llama3", False), ("object", False)]

# quotes, backslashes, '/', non-ASCII, emoji, U+2028, prefixes of each other
HARD = [
    "get",
    "get_user",
    "get_user_by_id",
    'say "hi"',
    "back\\slash",
    "a/b",
    "café.ouvrir",
    "日本語.検索",
    "👩\u200d💻.run",
    "line\u2028sep",
]


def registry(k: int, seed: int, engine: str) -> list[dict]:
    """Synthetic tools with every kind of argument schema, plus the hard names (no control characters under
    llguidance, which spells them several ways)."""
    tools = [t for t in make_registry(k, seed=seed, hard_names=0.1) if "x-refused-by" not in t]
    if engine == "llguidance":
        tools = [t for t in tools if not any(ord(c) < 32 or ord(c) == 127 for c in t["function"]["name"])]
    taken = {t["function"]["name"] for t in tools}
    kinds = [
        {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        {},
        None,
        {
            "type": "object",
            "properties": {"n": {"type": "integer", "minimum": 0}, "ok": {"type": "boolean"}},
            "required": ["n"],
            "additionalProperties": False,
        },
    ]
    for i, name in enumerate(n for n in HARD if n not in taken):
        fn = {"name": name}
        if kinds[i % len(kinds)] is not None:
            fn["parameters"] = kinds[i % len(kinds)]
        tools.append({"type": "function", "function": fn})
    return tools


def check(table: triec.SchemaTable, walks: int = 6, narrower_ok: bool = False, steps: int = 120) -> None:
    r = compare_schema(table, walks=walks, max_walk_steps=steps, max_states=400)
    assert r.mismatches == 0, r.examples
    assert narrower_ok or r.engine_narrower == 0, r.narrower_examples
    assert r.states_checked > 0 and r.steps_past > 0 and r.walk_steps > 0


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("fmt", "parallel"), FORMATS)
def test_every_format_equals_the_engine_on_the_whole_format(vocabs, engine, fmt, parallel):
    table = compile_tools(registry(14, 3, engine), vocabs["qwen2"], format=fmt, engine=engine, parallel=parallel)
    check(table)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", ["gpt2", "phi3"])
def test_other_tokenizers(vocabs, engine, name):
    for fmt, parallel in (("vllm", True), ("hermes", True)):
        check(
            compile_tools(registry(10, 7, engine), vocabs[name], format=fmt, engine=engine, parallel=parallel), walks=4
        )


def test_several_calls_in_one_output(vocabs):
    """Two and three calls, each its own tool's arguments; the tool chosen is read back after each."""
    vocab = vocabs["qwen2"]
    tools = [
        {
            "name": "add",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}},
                "required": ["a"],
                "additionalProperties": False,
            },
        },
        {
            "name": "echo",
            "parameters": {
                "type": "object",
                "properties": {"s": {"type": "string"}},
                "required": ["s"],
                "additionalProperties": False,
            },
        },
    ]
    eos = vocab.eos_token_ids[0]
    for fmt, text in (
        (
            "vllm",
            '[{"name": "add", "parameters": {"a": 1}}, {"name": "echo", "parameters": {"s": "x"}}, '
            '{"name": "add", "parameters": {"a": 22}}]',
        ),
        (
            "hermes",
            '<tool_call>\n{"name": "echo", "arguments": {"s": "hi"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "add", "arguments": {"a": 3}}\n</tool_call>',
        ),
    ):
        table = compile_tools(tools, vocab, format=fmt)
        m = table.matcher()
        for t in _spell(vocab, m, text.encode()):
            assert m.accept_token(t), text
        assert [v for _, v in m.values] == [json.loads(x) for x in _names(text)]
        assert eos in m.allowed().tolist() and m.accept_token(eos) and m.is_terminated()
        # a call of the wrong tool's arguments is refused
        m = table.matcher()
        bad = text.replace('"a": 1', '"s": 1', 1) if fmt == "vllm" else text.replace('"s": "hi"', '"a": 1', 1)
        assert not _accepts_all(vocab, m, bad.encode())


def _names(text: str) -> list[str]:
    import re

    return re.findall(r'"name": ("[^"]*")', text)


def _spell(vocab: triec.Vocabulary, m, data: bytes) -> list[int]:
    """A decode of ``data`` with tokens the matcher allows (longest first), advancing a fork."""
    out, f, i = [], m.fork(), 0
    tb = vocab.token_bytes
    while i < len(data):
        allowed = [t for t in f.allowed().tolist() if t < len(tb) and tb[t] and data.startswith(tb[t], i)]
        assert allowed, (data[:i], data[i:])
        t = max(allowed, key=lambda t: len(tb[t]))
        assert f.accept_token(t)
        out.append(t)
        i += len(tb[t])
    return out


def _accepts_all(vocab: triec.Vocabulary, m, data: bytes) -> bool:
    tb, i = vocab.token_bytes, 0
    while i < len(data):
        allowed = [t for t in m.allowed().tolist() if t < len(tb) and tb[t] and data.startswith(tb[t], i)]
        if not allowed:
            return False
        t = max(allowed, key=lambda t: len(tb[t]))
        m.accept_token(t)
        i += len(tb[t])
    return True


# ---------------------------------------------------------------- synthetic tokens across every boundary


# ordinary pieces, between every single byte and the straddling tokens in the synthetic vocabulary
PIECES = [b'[{"', b"name", b'":', b' "', b"get", b"_user"]  # the call's opening and the name's pieces
PIECES += [b'",', b'", "', b"parameters", b"arguments", b'": ', b"{}", b"}}", b'"}']  # the tail's and the arguments'


SYNTHETIC = [
    b'get", "parameters": {',  # a name's end, the whole tail, the arguments' start
    b'_user", "parameters": {"q": "',  # from inside a name into a string of the arguments
    b'}}, {"name": "get',  # closes a call, opens the next and reads into a name
    b'"}}, {"name": "',  # closes a string, the arguments, the call, opens the next up to the name
    b"}}]",  # closes the arguments, the call and the array
    b'[{"name": "get", "parameters": {}}]',  # a whole output
    b'rameters": {}',  # from inside the tail through the arguments
    b'", "arguments": {"q": ',  # hermes/object tail into the arguments
    b'}\n</tool_call>\n<tool_call>\n{"name": "g',  # hermes: one call to the next
    b'"}\n</tool_call>',
]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("fmt", "parallel"), [("vllm", True), ("hermes", True), ("object", False)])
def test_synthetic_tokens_spanning_name_literal_and_arguments(engine, fmt, parallel):
    vocab = synthetic_vocab(PIECES, SYNTHETIC)
    tools = [
        {"name": n, "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}
        for n in ("get", "get_user", "get_users", 'q"s')
    ] + [{"name": "x\\", "parameters": {}}]
    table = compile_tools(tools, vocab, format=fmt, engine=engine, parallel=parallel)
    # xgrammar's mask omits a few long straddling tokens that its own accept_token accepts (docs/verify.md)
    check(table, walks=12, narrower_ok=engine == "xgrammar", steps=60)
    ids = {b: vocab.token_bytes.index(b) for b in SYNTHETIC}
    if fmt == "vllm":
        m = table.matcher()
        assert m.accept_token(ids[b'[{"name": "get", "parameters": {}}]'])
        assert m.value == "get" and m.allowed().tolist() == list(vocab.eos_token_ids)


# ---------------------------------------------------------------- input and refusals


def test_spellings_and_missing_parameters(vocabs):
    openai = make_registry(12, seed=4)
    for spelling in ("mcp", "anthropic"):
        other = respell(openai, spelling)
        assert [(t.name, t.parameters) for t in parse_tools(other)] == [
            (t.name, t.parameters) for t in parse_tools(openai)
        ]
    assert parse_tools({"tools": respell(openai, "mcp")})[0].name == parse_tools(openai)[0].name
    table = compile_tools([{"name": "ping"}, {"name": "pong", "parameters": None}], vocabs["gpt2"], format="object")
    m = table.matcher()
    assert _accepts_all(vocabs["gpt2"], m, b'{"name": "ping", "arguments": {}}')
    assert not _accepts_all(vocabs["gpt2"], table.matcher(), b'{"name": "ping", "arguments": {"a": 1}}')
    assert {t.name for t in tools_of(table)} == {"ping", "pong"}


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "non-empty JSON array"),
        ([{"name": "a"}, {"name": "a"}], "tools[1].name: 'a' is already the name of tools[0]"),
        ([{"function": {"name": ""}}], "tools[0].function.name: expected a non-empty string"),
        (
            [{"type": "function", "function": {"name": "a", "parameters": [1]}}],
            "tools[0].function.parameters: expected",
        ),
        ([{"type": "tool", "function": {"name": "a"}}], "tools[0].type"),
        ([{"name": "a\nb"}], "control character"),
        ([3], "tools[0]: expected an object"),
    ],
)
def test_bad_entries_are_refused_naming_the_entry(vocabs, doc, message):
    with pytest.raises(ToolsError, match=__import__("re").escape(message)):
        compile_tools(doc, vocabs["gpt2"])


def test_a_schema_the_engine_rejects_is_refused_at_first_use(vocabs):
    tools = [
        {"name": "ok", "parameters": {"type": "object"}},
        {
            "name": "bad",
            "parameters": {"type": "object", "properties": {"u": {"type": "string", "format": "uri-reference"}}},
        },
    ]
    table = compile_tools(tools, vocabs["gpt2"], format="object", engine="llguidance")
    assert _accepts_all(vocabs["gpt2"], table.matcher(), b'{"name": "ok", "arguments": {}}')
    m = table.matcher()
    with pytest.raises(triec.TriecError, match="llguidance"):
        _accepts_all(vocabs["gpt2"], m, b'{"name": "bad", "arguments": ')


def test_the_build_compiles_no_argument_grammar(vocabs):
    """K tools, no grammar compiled before a sequence picks one; equal schemas share one compiled grammar."""
    tools = [
        {"name": f"t{i}", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}} for i in range(50)
    ]
    table = compile_tools(tools, vocabs["qwen2"], format="object")
    drv = table.driver()
    before = drv.compiles
    assert not any(table.is_compiled(g) for g in range(len(table.grammars)))
    for name in ("t1", "t2", "t3"):
        m = table.matcher()
        assert _accepts_all(vocabs["qwen2"], m, f'{{"name": "{name}", "arguments": {{"x": 1}}}}'.encode())
    assert drv.compiles - before <= 1  # three tools, one schema: compiled at most once (it may be cached already)
    row = np.zeros(table.words_per_row, dtype=np.int32)
    table.matcher().fill_bitmask(row)  # the name field's first row needs no engine


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("fmt", "parallel"), [("vllm", True), ("hermes", False)])
def test_rows_after_a_handover_are_shared_and_stay_exact(vocabs, engine, fmt, parallel):
    """The row of a handle that is its tool's template plus the bytes read since (the first rows of the arguments)
    is computed once and shared: every later sequence there gets the same row, and one that the engine has moved
    (a token accepted, then rolled back; a fork moved on) computes its own, equal to the engine's own answer."""
    vocab = vocabs["qwen2"]
    tools = [
        {
            "name": n,
            "parameters": {
                "type": "object",
                "properties": {"q": {"type": "string"}, "n": {"type": "integer"}},
                "required": ["q"],
            },
        }
        for n in ("get_user", "get_users", "find")
    ]
    table = compile_tools(tools, vocab, format=fmt, engine=engine, parallel=parallel)
    head = (
        b'<tool_call>\n{"name": "get_user", "arguments": {'
        if fmt == "hermes"
        else b'[{"name": "get_user", "parameters": {'
    )
    m = table.matcher()
    ids = _spell(vocab, m, head)
    assert m.accept_tokens(ids) == len(ids) and m.phase == "engine"
    assert m.st.fresh is not None, "the handover leaves the tool's template plus the bytes after the tail"
    first = m.allowed()
    key = ("row", m.st.g, m.st.fresh)
    assert key in table.row_cache
    unshared = m.fork()
    unshared.st.fresh = None  # the same handle, its row asked of the engine (and the probes) again
    assert np.array_equal(unshared.allowed(), first)
    again = table.matcher()
    assert again.accept_tokens(ids) == len(ids)
    entries = len(table.row_cache)
    assert np.array_equal(again.allowed(), first) and len(table.row_cache) == entries  # served from the cache
    t = next(t for t in first.tolist() if t not in table.eos_token_ids and vocab.token_bytes[t] == b'"')
    f = m.fork()
    assert f.accept_token(t) and f.st.fresh is None  # the engine took a token: its own row from now on
    moved = f.allowed()
    ref = f.fork()
    ref.st.fresh = None
    assert np.array_equal(ref.allowed(), moved) and not np.array_equal(moved, first)
    assert np.array_equal(m.allowed(), first)  # the fork's step did not touch m's handle
    f.rollback(1)
    assert np.array_equal(f.allowed(), first)


@pytest.mark.parametrize(("fmt", "parallel"), [("vllm", True), ("vllm", False), ("llama3", False)])
def test_any_whitespace_equals_xgrammar(vocabs, fmt, parallel):
    """vLLM asks xgrammar for any whitespace by default: the start is a grammar of its own, the names are entered."""
    pytest.importorskip("xgrammar")
    table = compile_tools(
        registry(10, 5, "xgrammar"), vocabs["qwen2"], format=fmt, engine="xgrammar", parallel=parallel, whitespace="any"
    )
    check(table, walks=5, steps=80)


def test_any_whitespace_refusals(vocabs):
    with pytest.raises(ToolsError, match="xgrammar only"):
        compile_tools([{"name": "a"}], vocabs["gpt2"], whitespace="any")
    with pytest.raises(ToolsError, match="structural tags"):
        compile_tools([{"name": "a"}], vocabs["gpt2"], format="hermes", engine="xgrammar", whitespace="any")


def test_compile_tools_leaves_the_garbage_collector_as_it_found_it() -> None:
    """compile_tools pauses cyclic collection while it builds (triec._memo.gc_paused): restored either way."""
    import gc

    from triec._memo import gc_paused

    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():  # nested: the inner exit must not switch it back on
            pass
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # the caller's choice is kept
    finally:
        gc.enable()
    with pytest.raises(ZeroDivisionError), gc_paused():
        1 / 0  # noqa: B018
    assert gc.isenabled()
