"""The vLLM backend's framework-free parts: the grammar contract against xgrammar's, and the tool-call shapes.

``RequestGrammar`` must behave as vLLM 0.32's ``XgrammarGrammar`` over an
xgrammar ``GrammarMatcher`` with ``override_stop_tokens`` (the reference
semantics of vLLM's structured outputs) on the same finite language: the
same rows, the same answers to ``validate_tokens`` and ``accept_tokens``,
under the call sequence vLLM's scheduler makes with speculative decoding
(validate the drafts; per draft fill, accept one, then fill the bonus row
and roll back; then accept drafts + bonus in one call). The tool-call shapes
are the exact documents vLLM 0.32 builds (tool_parsers/utils.py and the
hermes structural tag, printed from a running server). No vLLM needed.
"""

from __future__ import annotations

import copy
import json
import warnings

import numpy as np
import pytest

import triec
from triec.integrations.vllm.structured import RequestGrammar, tagged_tools
from triec.runtime.matcher import TableMatcher
from triec.runtime.torch import SPARSE_WORDS, apply_bitmask_sparse

VALUES = ["red", "green", "blue", "re", "redder", "grün", 'say "hi"', "a\nb", ""]


class XgrammarGrammar:
    """vLLM 0.32's ``XgrammarGrammar`` (backend_xgrammar.py), the behaviour to match, over a GrammarMatcher."""

    def __init__(self, matcher) -> None:
        self.matcher = matcher
        self._is_terminated = False

    def accept_tokens(self, tokens: list[int]) -> bool:
        if self._is_terminated:
            return True
        for token in tokens:
            if not self.matcher.accept_token(token):
                return False
            self._is_terminated = self.matcher.is_terminated()
            if self._is_terminated:
                break
        return True

    def validate_tokens(self, tokens: list[int]) -> list[int]:
        if self._is_terminated:
            return []
        accepted = []
        for token in tokens:
            if self.matcher.accept_token(token):
                accepted.append(token)
                if self.matcher.is_terminated():
                    break
            else:
                break
        if accepted:
            self.matcher.rollback(len(accepted))
        return accepted

    def rollback(self, n: int) -> None:
        self.matcher.rollback(n)
        self._is_terminated = self.matcher.is_terminated()

    def is_terminated(self) -> bool:
        return self._is_terminated


def row_ids(row: np.ndarray, width: int) -> np.ndarray:
    bits = np.unpackbits(row.view(np.uint8), bitorder="little")[:width]
    return np.flatnonzero(bits)


@pytest.mark.engines
@pytest.mark.parametrize("stops", ["eos", "one_eos", "extra"])
def test_request_grammar_is_xgrammars_contract(qwen2: triec.Vocabulary, stops: str) -> None:
    xgr = pytest.importorskip("xgrammar")
    from triec.engines.xgrammar import XGrammarEngine

    vocab = triec.Vocabulary.load("qwen2", vocab_size=151_936)
    table = triec.compile(VALUES, vocab)
    stop_ids = {
        "eos": list(vocab.eos_token_ids),
        "one_eos": [vocab.eos_token_ids[0]],
        "extra": [*list(vocab.eos_token_ids), 151644],
    }[stops]
    engine = XGrammarEngine(vocab)
    ctx = engine.compile(VALUES)
    width = vocab.vocab_size
    words = (width + 31) // 32
    rng = np.random.default_rng(len(stops))
    walks = ended = rows = 0
    for _walk in range(60):
        ours = RequestGrammar(TableMatcher(table), table.eos_token_ids, set(stop_ids))
        ref = XgrammarGrammar(xgr.GrammarMatcher(ctx, override_stop_tokens=stop_ids))
        a = np.zeros((5, words), dtype=np.int32)
        b = np.zeros((5, words), dtype=np.int32)
        for _step in range(12):
            if ref.is_terminated():
                assert ours.is_terminated()
                ended += 1
                break
            rows += 1
            ours.fill_bitmask(a[0])
            ref.matcher.fill_next_token_bitmask(torch_view(b), 0)
            allowed = row_ids(b[0], width)
            assert np.array_equal(row_ids(a[0], width), allowed)
            # drafts: mostly allowed paths, sometimes a token the grammar refuses
            drafts = draft_path(ref, allowed, rng, width, words)
            assert ours.validate_tokens(drafts) == ref.validate_tokens(drafts)
            n = 0
            for i, d in enumerate(drafts):  # the manager's fill loop
                ours.fill_bitmask(a[min(i, 4)])
                ref.matcher.fill_next_token_bitmask(torch_view(b), min(i, 4))
                assert np.array_equal(a[min(i, 4)], b[min(i, 4)])
                ok_ours = not ours.is_terminated() and ours.accept_tokens([d])
                ok_ref = not ref.is_terminated() and ref.accept_tokens([d])
                assert ok_ours == ok_ref
                if not ok_ref:
                    break
                n += 1
            if n:
                ours.rollback(n)
                ref.rollback(n)
            # the step's outcome: a prefix of the drafts, then a bonus token from the row
            keep = drafts[: int(rng.integers(0, len(ref.validate_tokens(drafts)) + 1))]
            probe_ref = ref.validate_tokens(keep)
            assert probe_ref == keep
            tmp = np.zeros((1, words), dtype=np.int32)
            ref.accept_tokens(keep)
            ours.accept_tokens(keep)
            if ref.is_terminated():
                assert ours.is_terminated()
                continue
            ref.matcher.fill_next_token_bitmask(torch_view(tmp), 0)
            bonus_pool = row_ids(tmp[0], width)
            bonus = int(rng.choice(bonus_pool)) if rng.random() < 0.9 else int(rng.integers(0, 1000))
            assert ours.accept_tokens([bonus]) == ref.accept_tokens([bonus])
            assert ours.is_terminated() == ref.is_terminated()
            if not ref.is_terminated() and bonus not in bonus_pool:
                break  # a refused token leaves both as they were: xgrammar's matcher does not move
        walks += 1
    assert walks == 60 and ended > 20 and rows > 100, (ended, rows)


def torch_view(a: np.ndarray):
    import torch

    return torch.from_numpy(a)


def draft_path(
    ref: XgrammarGrammar, allowed: np.ndarray, rng: np.random.Generator, width: int, words: int
) -> list[int]:
    """Up to three drafts along allowed tokens (walked on the reference's matcher, then rolled back), sometimes off."""
    out: list[int] = []
    accepted = 0
    row = np.zeros((1, words), dtype=np.int32)
    pool = allowed
    for _ in range(int(rng.integers(0, 4))):
        if pool.size == 0:
            break
        t = int(rng.choice(pool)) if rng.random() < 0.85 else int(rng.integers(0, 2000))
        out.append(t)
        if not ref.matcher.accept_token(t):
            break
        accepted += 1
        if ref.matcher.is_terminated():
            break
        ref.matcher.fill_next_token_bitmask(torch_view(row), 0)
        pool = row_ids(row[0], width)
    if accepted:
        ref.matcher.rollback(accepted)
    return out


def test_request_grammar_protocol_details(qwen2: triec.Vocabulary) -> None:
    """The calls vLLM makes around the edges: empty accepts (reasoning), stops, tokens after the stop, rollback over it."""
    vocab = triec.Vocabulary.load("qwen2", vocab_size=151_936)
    table = triec.compile(["red", "redder"], vocab)
    eos = vocab.eos_token_ids
    g = RequestGrammar(TableMatcher(table), eos, {eos[0], 151644})  # a request with an extra stop id
    tokens = table_path(table, vocab, "red")
    assert g.accept_tokens([]) and not g.is_terminated()  # the reasoning gate's empty call
    assert g.validate_tokens([*tokens, 151644, 5]) == [*tokens, 151644]  # up to the stop token; nothing moves
    assert g.matcher.num_accepted == 0
    assert g.accept_tokens(tokens) and g.is_accepting()
    for e in eos:
        if e not in g.stop:
            assert g.validate_tokens([e]) == []  # the table's EOS that does not stop this request
    assert g.accept_tokens([151644, 999, 998]) and g.is_terminated()  # tokens after the stop are ignored
    assert g.validate_tokens([5]) == [] and g.accept_tokens([5])
    g.rollback(1)
    assert not g.is_terminated() and g.is_accepting()
    row = np.full((151_936 + 31) // 32, -1, dtype=np.int32)
    g.fill_bitmask(row)
    ids = set(row_ids(row, 151_936).tolist())
    assert {151644, eos[0]} <= ids and all(e in g.stop or e not in ids for e in eos)
    assert ids - g.stop == set(table.allowed(g.matcher.state).tolist()) - set(eos)
    g.reset()
    assert g.matcher.num_accepted == 0 and not g.is_accepting()
    # vLLM 0.34's contract, kept on every release: a refusal after accepted tokens leaves the state as it was
    assert not g.accept_tokens([*tokens, 0, 1])  # "red" then "!": refused
    assert g.matcher.num_accepted == 0 and not g.is_accepting()
    assert g.accept_tokens(tokens) and g.is_accepting()
    assert not g.accept_tokens([151644, 0][::-1]) and g.matcher.num_accepted == len(tokens)


def table_path(table: triec.MaskTable, vocab: triec.Vocabulary, value: str) -> list[int]:
    """A tokenization of ``value`` the table allows (longest allowed token first)."""
    state, out, rest = table.start, [], value.encode()
    tb = vocab.token_bytes
    while rest:
        best = max(
            (t for t in table.allowed(state).tolist() if t not in table.eos_token_ids and rest.startswith(tb[t])),
            key=lambda t: len(tb[t]),
        )
        out.append(best)
        rest = rest[len(tb[best]) :]
        state = table.advance(state, best)
    return out


@pytest.mark.engines
@pytest.mark.parametrize("width", [151_936, 151_900, 152_000])
def test_sparse_apply_equals_xgrammars_kernel(width: int) -> None:
    """Sparse rows gathered, dense ones by the kernel: the logits equal xgrammar's own apply, row for row."""
    xgr = pytest.importorskip("xgrammar")
    import torch

    rng = np.random.default_rng(width)
    words = (151_936 + 31) // 32
    bm = np.zeros((12, words), dtype=np.int32)
    bm[0] = -1  # unconstrained (a reasoning row)
    for i in range(1, 8):  # trie-like rows: a few words
        w = rng.choice(words, int(rng.integers(1, 40)), replace=False)
        bm[i, w] = rng.integers(-(2**31), 2**31, w.size, dtype=np.int64).astype(np.int32)
    bm[8] = rng.integers(-(2**31), 2**31, words, dtype=np.int64).astype(np.int32)  # dense
    bm[9, : SPARSE_WORDS + 1] = 1  # just past the sparse bound
    bm[10, :SPARSE_WORDS] = 7  # at it
    # row 11 stays 0: nothing allowed
    for indices in (None, [1, 3, 8, 9, 10, 11], [0, 2]):
        base = torch.randn(12, width)
        ours, ref = base.clone(), base.clone()
        t = torch.from_numpy(bm)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "The bitmask covers only", UserWarning)  # the narrow bitmask is the point
            apply_bitmask_sparse(
                ours,
                t,
                indices,
                min(width, words * 32),
                lambda rows, o=ours, b=t: xgr.apply_token_bitmask_inplace(o, b, indices=rows),
            )
            xgr.apply_token_bitmask_inplace(ref, t, indices=indices)
        assert torch.equal(torch.isinf(ours), torch.isinf(ref)) and torch.equal(
            ours[torch.isfinite(ours)], ref[torch.isfinite(ref)]
        )


# ----------------------------------------------------------------------------- tool-call shapes

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
ALERT = {"type": "object", "properties": {"level": {"type": "string", "enum": ["low", "high"]}}, "required": ["level"]}


def vllm_required_schema(tools: list[tuple[str, dict]], parallel: bool | None) -> dict:
    """What vLLM 0.32's ``_get_json_schema_from_tools`` returns (tool_parsers/utils.py), $defs merged at the top."""
    defs: dict = {}
    branches = []
    for name, params in tools:
        params = copy.deepcopy(params)
        defs.update(params.pop("$defs", {}))
        branches.append(
            {
                "properties": {"name": {"type": "string", "enum": [name]}, "parameters": params},
                "required": ["name", "parameters"],
            }
        )
    schema: dict = {"type": "array", "minItems": 1, "items": {"type": "object", "anyOf": branches}}
    if parallel is False:
        schema["maxItems"] = 1
    if defs:
        schema["$defs"] = defs
    return schema


def test_required_tools_reads_vllms_schema_back() -> None:
    """``schema.tools.tools_from_required_schema`` (what the backend and the schema layer use) on the schema vLLM builds."""
    from triec.schema.tools import tools_from_required_schema

    with_defs = {"type": "object", "$defs": {"u": {"enum": ["c", "f"]}}, "properties": {"unit": {"$ref": "#/$defs/u"}}}
    for parallel in (None, True, False):
        found = tools_from_required_schema(
            vllm_required_schema([("get_weather", WEATHER), ("send_alert", ALERT), ("t", with_defs)], parallel)
        )
        assert found is not None and found[1] is (parallel is not False)
        assert [t.name for t in found[0]] == ["get_weather", "send_alert", "t"]
        params = {t.name: t.parameters for t in found[0]}
        assert (
            params["t"]["$defs"] == {"u": {"enum": ["c", "f"]}} and params["t"]["properties"] == with_defs["properties"]
        )
    good = vllm_required_schema([("a", WEATHER)], False)
    assert tools_from_required_schema(json.loads(json.dumps(good))) is not None
    for broken in (
        {**good, "maxItems": 2},
        {**good, "minItems": 2},
        {**good, "title": "x"},
        {**good, "type": "object"},
        {**good, "items": {"type": "object", "anyOf": []}},
        {
            **good,
            "items": {
                "type": "object",
                "anyOf": [
                    {
                        "properties": {"name": {"type": "string", "enum": ["a", "b"]}, "parameters": WEATHER},
                        "required": ["name", "parameters"],
                    }
                ],
            },
        },
        vllm_required_schema([("a", WEATHER), ("a", ALERT)], None),  # a name twice
        {"type": "string", "enum": ["a"]},
        [],
        "x",
    ):
        assert tools_from_required_schema(broken) is None, broken


def hermes_tag(tools: list[tuple[str, object]], stop_after_first: bool) -> dict:
    """The structural tag vLLM 0.32 builds for the hermes parser with strict tools (out/tools_print.txt)."""
    tags = []
    for name, schema in tools:
        content = {
            "type": "json_schema",
            "json_schema": schema,
            "style": "json",
            "any_order": False,
            "max_whitespace_cnt": None,
            "excludes": [],
        }
        tags.append(
            {
                "type": "tag",
                "begin": f'<tool_call>\n{{"name": "{name}", "arguments": ',
                "content": content,
                "end": "}\n</tool_call>",
            }
        )
        tags.append(
            {
                "type": "tag",
                "begin": f'<tool_call>{{"name": "{name}", "arguments": ',
                "content": content,
                "end": "}</tool_call>",
            }
        )
    return {
        "type": "structural_tag",
        "format": {
            "type": "tags_with_separator",
            "tags": tags,
            "separator": "",
            "at_least_one": True,
            "stop_after_first": stop_after_first,
        },
    }


def test_tagged_tools_reads_the_hermes_tag() -> None:
    for stop in (False, True):
        calls = tagged_tools(hermes_tag([("get_weather", WEATHER), ("send_alert", ALERT)], stop))
        assert calls is not None and calls.format == "hermes" and calls.parallel is (not stop)
        assert [(t["function"]["name"], t["function"]["parameters"]) for t in calls.tools] == [
            ("get_weather", WEATHER),
            ("send_alert", ALERT),
        ]
    assert tagged_tools(hermes_tag([("f", True)], True)) is None  # a non-strict tool: any JSON arguments
    auto = hermes_tag([("f", WEATHER)], False)
    auto["format"] = {"type": "triggered_tags", "triggers": ["<tool_call>"], "tags": auto["format"]["tags"]}
    calls = tagged_tools(auto)  # tool_choice="auto": free text around the calls, the same tools
    assert calls is not None and calls.auto and calls.parallel and [t["function"]["name"] for t in calls.tools] == ["f"]
    auto["format"]["triggers"] = ["<tool_call>", "<call>"]
    assert tagged_tools(auto) is None
    llama = {
        "type": "structural_tag",
        "format": {
            "type": "triggered_tags",
            "triggers": ['{"name": '],
            "tags": [
                {
                    "type": "tag",
                    "begin": '{"name": "f", "parameters": ',
                    "content": {"type": "json_schema", "json_schema": WEATHER},
                    "end": "}",
                }
            ],
            "at_least_one": True,
            "stop_after_first": False,
        },
    }
    assert tagged_tools(llama) is None
    one = hermes_tag([("f", WEATHER)], True)
    one["format"]["tags"] = one["format"]["tags"][:1]  # only one of the two spellings: not what vLLM writes
    assert tagged_tools(one) is None
