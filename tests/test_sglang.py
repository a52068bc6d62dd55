"""The SGLang grammar backend driven through SGLang 0.5.23's own classes, next to SGLang's xgrammar backend.

Everything SGLang's scheduler does with a grammar backend, on CPU: the backend
is registered by SGLang's ``load_plugins`` (triec's entry point), chosen by
``--grammar-backend triec`` through SGLang's real argument parser and
published config, built by ``create_grammar_backend``; requests go through
``get_cached_or_future_value`` and ``set_cache`` as ``GrammarManager`` calls
them, masks through the batch's ``update_regex_vocab_mask``, SGLang's mask
buffer and apply kernel, speculative drafts through ``traverse_tree``. Every
served request is compared state by state with SGLang's own xgrammar backend
on the same request and with the triec runtime (a table compiled separately);
delegated requests must come back as xgrammar's grammars, unchanged.
Requires SGLang (the ``sglang`` nox session); skipped elsewhere.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.sglang

pytest.importorskip("sglang")
torch = pytest.importorskip("torch")

import sglang_shims  # noqa: E402

sglang_shims.install()  # before anything imports sglang.srt.configs

import tokenizers  # noqa: E402
import transformers  # noqa: E402
from conftest import TOKENIZERS as SPECS  # noqa: E402
from sglang.srt.constrained.base_grammar_backend import (  # noqa: E402
    GRAMMAR_BACKEND_REGISTRY,
    InvalidGrammarObject,
    create_grammar_backend,
)
from sglang.srt.constrained.reasoner_grammar_backend import ReasonerGrammarObject  # noqa: E402
from sglang.srt.constrained.xgrammar_backend import XGrammarGrammar, XGrammarGrammarBackend  # noqa: E402
from sglang.srt.plugins import load_plugins  # noqa: E402
from sglang.srt.runtime_context import get_exec, get_serving, publish  # noqa: E402
from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo  # noqa: E402
from sglang.srt.server_args import GRAMMAR_BACKEND_CHOICES, prepare_server_args  # noqa: E402
from sglang.srt.speculative.spec_utils import generate_token_bitmask, traverse_tree  # noqa: E402

import triec  # noqa: E402
import triec.integrations.constraints  # noqa: E402
import triec.synthetic.sets  # noqa: E402
from triec.integrations import sglang as backend_module  # noqa: E402
from triec.integrations.constraints import ARTIFACT_KEYWORD, RESTRICT_KEYWORD  # noqa: E402
from triec.runtime.states import FINISHED  # noqa: E402
from triec.tokenizer.source import locate  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

# name -> (the model's logits width, the model's EOS set as SGLang passes it: config eos | generation_config eos)
MODELS = {"qwen2": (151_936, {151643, 151645}), "gpt2": (50_257, {50256}), "phi3": (32_064, {32000, 32007})}

VALUES = [
    "get_user",
    "get_users",
    "list",
    "list_items",
    'say "hi"',
    "a b-c",
    "café.ouvert",
    "日本語",
    "x😀y",
    "tab\there",
    "",
]
TOOLS = triec.synthetic.sets.tool_names(300)


# ----------------------------------------------------------------------------- SGLang set up as its scheduler is


@pytest.fixture(scope="module")
def server_args() -> Any:
    load_plugins()  # SGLang's own plugin loading: triec's sglang.srt.plugins entry point registers the backend
    args = prepare_server_args(["--model-path", "dummy", "--grammar-backend", "triec"])
    publish(args, role="scheduler")
    return args


@pytest.fixture(scope="module")
def hf(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Real tokenizers (the test suite's), saved and loaded back as SGLang loads a model's: from a directory."""
    out = {}
    for name in MODELS:
        directory = tmp_path_factory.mktemp(f"tok-{name}")
        backend = tokenizers.Tokenizer.from_str(json.dumps(locate(SPECS[name]).tokenizer_json))
        transformers.PreTrainedTokenizerFast(tokenizer_object=backend).save_pretrained(directory)
        out[name] = transformers.AutoTokenizer.from_pretrained(directory)
    return out


@pytest.fixture(scope="module")
def served(hf: dict[str, Any]) -> dict[str, triec.Vocabulary]:
    """The triec runtime's reference vocabularies: the same tokenizer files, widths and EOS sets."""
    return {
        n: triec.Vocabulary.load(hf[n].name_or_path, vocab_size=w, eos_token_ids=sorted(e))
        for n, (w, e) in MODELS.items()
    }


_BACKENDS: dict[Any, Any] = {}


def backends(server_args: Any, hf: dict[str, Any], name: str = "qwen2", **serving: Any) -> tuple[Any, Any]:
    """(triec, xgrammar): what create_grammar_backend builds for each name, with these serving options."""
    key = (name, tuple(sorted(serving.items())))
    if key not in _BACKENDS:
        width, eos = MODELS[name]
        with get_serving().override(**serving):
            assert get_exec().kernel.grammar_backend == "triec"
            mine = create_grammar_backend(server_args, hf[name], width, set(eos))
            with get_exec().kernel.override(grammar_backend="xgrammar"):
                theirs = create_grammar_backend(server_args, hf[name], width, set(eos))
        _BACKENDS[key] = (mine, theirs)
    return _BACKENDS[key]


def resolve(backend: Any, key: tuple[str, str]) -> Any:
    """GrammarManager.process_req_with_grammar and get_ready_grammar_requests, without the polling."""
    value, hit = backend.get_cached_or_future_value(key, False)
    if not hit:
        value = value.result()
        backend.set_cache(key, value.copy())
    return value


def row(grammar: Any, width: int) -> torch.Tensor:
    mask = grammar.allocate_vocab_mask(vocab_size=width, batch_size=1, device="cpu")
    grammar.fill_vocab_mask(mask, 0)
    return mask[0].clone()


def ids_of(r: torch.Tensor, width: int) -> list[int]:
    bits = np.unpackbits(r.numpy().view(np.uint8), bitorder="little")[:width]
    return np.flatnonzero(bits).tolist()


def jump(grammar: Any, tok: Any) -> Any:
    try:
        return grammar.try_jump_forward(tok)
    except UnicodeDecodeError:  # xgrammar 0.2.7 fails to return forced bytes that follow a multi-byte character
        return "raises"


class Walk:
    """One request three ways: triec's grammar, xgrammar's grammar, the triec runtime's state in a reference table."""

    def __init__(self, mine: Any, theirs: Any, table: triec.MaskTable, tok: Any, width: int) -> None:
        self.mine, self.theirs, self.table, self.tok, self.width = mine, theirs, table, tok, width
        self.state = table.start
        self.jumps = 0

    def check(self) -> list[int]:
        """The rows equal (xgrammar, the runtime), termination and jump-forward as xgrammar's; the allowed ids."""
        assert self.mine.is_terminated() == self.theirs.is_terminated() == (self.state == FINISHED)
        if self.state == FINISHED:
            return []
        mine, theirs = row(self.mine, self.width), row(self.theirs, self.width)
        want = np.zeros((1, self.table.words_per_row), dtype=np.int32)
        self.table.fill_bitmask([self.state], want)
        assert torch.equal(mine, theirs), sorted(set(ids_of(mine, self.width)) ^ set(ids_of(theirs, self.width)))[:8]
        assert np.array_equal(mine.numpy(), want[0])
        jm, jt = jump(self.mine, self.tok), jump(self.theirs, self.tok)
        if jt != "raises":
            assert jm == jt, (self.table.prefix(self.state), jm, jt)
        self.jumps += jm is not None
        return ids_of(mine, self.width)

    def step(self, token: int) -> None:
        self.mine.accept_token(token)
        self.theirs.accept_token(token)
        self.state = self.table.advance(self.state, token)

    def back(self, k: int, states: list[int]) -> None:
        self.mine.rollback(k)
        self.theirs.rollback(k)
        self.state = states[-k - 1]


def compare(
    backend_pair: tuple[Any, Any],
    key: tuple[str, str],
    table: triec.MaskTable,
    tok: Any,
    width: int,
    walks: int = 25,
    depth: int = 2,
) -> int:
    """Random walks to EOS and a depth-first search of the first steps, every state compared; states seen."""
    mine_b, theirs_b = backend_pair
    mine, theirs = resolve(mine_b, key), resolve(theirs_b, key)
    assert type(mine) is backend_module.TriecGrammarObject and type(theirs) is XGrammarGrammar
    rng = random.Random(hash(key) & 0xFFFF)
    seen = 0
    for _ in range(walks):
        w = Walk(mine.copy(), theirs.copy(), table, tok, width)
        while (ids := w.check()) != []:
            seen += 1
            w.step(rng.choice(ids))
        assert w.mine.is_terminated()

    def dfs(w: Walk, d: int) -> None:
        nonlocal seen
        ids = w.check()
        seen += 1
        if d == 0:
            return
        for t in ids:
            states = [w.state]
            w.step(t)
            states.append(w.state)
            dfs(w, d - 1)
            w.back(1, states)

    dfs(Walk(mine.copy(), theirs.copy(), table, tok, width), depth)
    return seen


# ----------------------------------------------------------------------------- registration


def test_registered_through_sglangs_plugins_and_chosen_on_the_command_line(
    server_args: Any, hf: dict[str, Any]
) -> None:
    eps = [ep for ep in importlib.metadata.entry_points(group="sglang.srt.plugins") if ep.name == "triec"]
    assert [ep.value for ep in eps] == ["triec.integrations.sglang:register"]
    assert GRAMMAR_BACKEND_REGISTRY["triec"] is backend_module.init_backend
    assert GRAMMAR_BACKEND_CHOICES.count("triec") == 1
    backend_module.register()  # idempotent: SGLang runs it in every process
    assert GRAMMAR_BACKEND_CHOICES.count("triec") == 1
    assert get_exec().kernel.grammar_backend == "triec"
    mine, theirs = backends(server_args, hf)
    assert type(mine) is backend_module.TriecGrammarBackend and type(theirs) is XGrammarGrammarBackend
    assert (
        type(mine.fallback) is XGrammarGrammarBackend and mine.fallback.any_whitespace is theirs.any_whitespace is True
    )
    assert mine.constraints.vocab.eos_token_ids == (151643, 151645) and mine.constraints.vocab.vocab_size == 151_936
    assert mine.is_support_token_filter


def test_the_launch_script_registers_where_entry_points_are_filtered() -> None:
    """tools/sglang_launch.py with SGLANG_PLUGINS naming another plugin: ``--help`` lists ``triec`` as a choice."""
    code = (
        "import runpy, sys; sys.path.insert(0, 'tests'); import sglang_shims; sglang_shims.install(); "
        "sys.argv = ['sglang_launch.py', '--help']; runpy.run_path('tools/sglang_launch.py', run_name='__main__')"
    )
    env = dict(os.environ, SGLANG_PLUGINS="some-other-plugin")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    help_text = re.sub(r"\s+", " ", out.stdout)
    assert re.search(r"--grammar-backend \{[^}]*\btriec\b[^}]*\}", help_text), help_text[-2000:]


# ----------------------------------------------------------------------------- masks, state by state


def _spelled(values: list[str]) -> str:
    """An alternation as users write it: re.escape'd, some characters as \\uXXXX, in a non-capturing group, anchored."""
    parts = []
    for v in values:
        parts.append("".join(f"\\u{ord(c):04x}" if c in "é日" else re.escape(c) for c in v))
    return "^(?:" + "|".join(parts) + ")$"


SERVED_CASES = {
    "regex (foo|bar)": ("qwen2", {}, ("regex", "(foo|bar)"), ["foo", "bar"], "raw"),
    "regex 300 tools": ("qwen2", {}, ("regex", "(" + "|".join(map(re.escape, TOOLS)) + ")"), TOOLS, "raw"),
    "regex escapes": ("qwen2", {}, ("regex", _spelled(VALUES)), VALUES, "raw"),
    "json enum": ("qwen2", {}, ("json", json.dumps({"enum": VALUES})), VALUES, "json"),
    "json enum compact": (
        "qwen2",
        {"constrained_json_disable_any_whitespace": True},
        ("json", json.dumps({"type": "string", "enum": VALUES, "title": "v"})),
        VALUES,
        "json",
    ),
    "gpt2 regex": ("gpt2", {}, ("regex", "|".join(map(re.escape, TOOLS[:100]))), TOOLS[:100], "raw"),
    "gpt2 json enum": ("gpt2", {}, ("json", json.dumps({"enum": VALUES})), VALUES, "json"),
    "phi3 regex": ("phi3", {}, ("regex", _spelled(VALUES)), VALUES, "raw"),
    "phi3 json enum": ("phi3", {}, ("json", json.dumps({"enum": TOOLS[:50]})), TOOLS[:50], "json"),
}


@pytest.mark.parametrize("case", sorted(SERVED_CASES))
def test_served_masks_equal_xgrammar_and_the_runtime(
    server_args: Any, hf: dict[str, Any], served: dict, case: str
) -> None:
    name, serving, key, values, encoding = SERVED_CASES[case]
    table = triec.compile(values, served[name], encoding=encoding)
    seen = compare(backends(server_args, hf, name, **serving), key, table, hf[name], MODELS[name][0])
    assert seen > 40


def test_flat_objects_are_served_with_compact_json_and_by_the_schema_layer_otherwise(server_args, hf, served) -> None:
    schema = {
        "type": "object",
        "properties": {"label": {"enum": VALUES}, "version": {"const": 1}},
        "required": ["label", "version"],
    }
    key = ("json", json.dumps(schema))
    pair = backends(server_args, hf, constrained_json_disable_any_whitespace=True)
    assert compare(pair, key, triec.compile_json_schema(schema, served["qwen2"]), hf["qwen2"], 151_936) > 40
    # any whitespace (SGLang's default): xgrammar allows "{ " and "{\n"; the schema layer serves it in that convention
    assert walk_pair(backends(server_args, hf), key, 151_936) > 40


def walk_pair(backend_pair: tuple[Any, Any], key: tuple[str, str], width: int, walks: int = 12, steps: int = 40) -> int:
    """Random walks over triec's and xgrammar's grammars of one request: every row equal; states seen."""
    mine_b, theirs_b = backend_pair
    mine, theirs = resolve(mine_b, key), resolve(theirs_b, key)
    assert type(mine) is backend_module.TriecGrammarObject and type(theirs) is XGrammarGrammar
    rng = random.Random(7)
    seen = 0
    for _ in range(walks):
        a, b = mine.copy(), theirs.copy()
        for _ in range(steps):
            assert a.is_terminated() == b.is_terminated()
            if a.is_terminated():
                break
            ra, rb = row(a, width), row(b, width)
            assert torch.equal(ra, rb), sorted(set(ids_of(ra, width)) ^ set(ids_of(rb, width)))[:8]
            seen += 1
            t = rng.choice(ids_of(ra, width))
            a.accept_token(t)
            b.accept_token(t)
    return seen


def test_enums_anywhere_and_tool_calls_are_served_by_the_schema_layer(server_args, hf) -> None:
    """A large enum inside an object, and a hermes tool-call structural tag (begins carrying the names): triec's rows
    equal xgrammar's state by state, in SGLang's default whitespace."""
    codes = [f"C{i:05d}.{i % 7}" for i in range(10_000)]  # the default threshold: served by a trie from 10,000
    schema = {
        "type": "object",
        "properties": {
            "who": {"type": "string", "maxLength": 8},
            "codes": {"type": "array", "items": {"enum": codes}, "maxItems": 3},
        },
        "required": ["who", "codes"],
    }
    assert walk_pair(backends(server_args, hf), ("json", json.dumps(schema)), 151_936) > 100
    tags = []
    for name in ("get_weather", "get_time", "send_alert"):
        content = {"type": "json_schema", "json_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}
        tags.append(
            {
                "type": "tag",
                "begin": f'<tool_call>\n{{"name": "{name}", "arguments": ',
                "content": content,
                "end": "}\n</tool_call>",
            }
        )
    tag = {
        "type": "structural_tag",
        "format": {
            "type": "tags_with_separator",
            "tags": tags,
            "separator": "",
            "at_least_one": True,
            "stop_after_first": False,
        },
    }
    assert walk_pair(backends(server_args, hf), ("structural_tag", json.dumps(tag)), 151_936) > 100
    legacy = {
        "type": "structural_tag",
        "triggers": ["<tool_call>"],
        "at_least_one": True,
        "structures": [{"begin": t["begin"], "schema": t["content"]["json_schema"], "end": t["end"]} for t in tags],
    }
    assert walk_pair(backends(server_args, hf), ("structural_tag", json.dumps(legacy)), 151_936) > 100  # triggered


def test_format_and_pattern_fields_are_served_by_their_dfas(server_args, hf) -> None:
    """A schema whose only slots are format and pattern fields (issue 44): served by the schema layer, every row
    equal to xgrammar's on the whole schema, in SGLang's default whitespace."""
    schema = {
        "type": "object",
        "properties": {
            "when": {"type": "string", "format": "date-time"},
            "id": {"type": "string", "format": "uuid"},
            "ip": {"type": "string", "format": "ipv4"},
            "code": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{6}$"},
        },
        "required": ["when", "id", "ip", "code"],
    }
    assert walk_pair(backends(server_args, hf), ("json", json.dumps(schema)), 151_936, steps=60) > 100


# ----------------------------------------------------------------------------- delegated requests

DELEGATED = [
    ("regex", "[a-z]{1,4}"),
    ("regex", "(foo|bar)+"),
    ("regex", r"\d{3}"),
    ("json", json.dumps({"type": "object"})),
    ("json", json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})),
    ("json", json.dumps({"enum": ["a", 1, None]})),
    ("json", "$$ANY$$"),
    ("ebnf", 'root ::= "yes" | "no"'),
    (
        "structural_tag",
        json.dumps(
            {
                "type": "structural_tag",
                "structures": [
                    {
                        "begin": '<tool_call>{"name":"get_weather", "arguments":',
                        "schema": {"type": "object"},
                        "end": "}</tool_call>",
                    },
                    {
                        "begin": '<call>{"name":"get_time", "arguments":',
                        "schema": {"type": "object"},
                        "end": "}</call>",
                    },
                ],
                "triggers": ["<tool_call>", "<call>"],
            }
        ),
    ),  # two triggers: xgrammar's
]


@pytest.mark.parametrize("key", DELEGATED, ids=[f"{k}:{s[:24]}" for k, s in DELEGATED])
def test_everything_else_is_xgrammars_unchanged(server_args: Any, hf: dict[str, Any], key: tuple[str, str]) -> None:
    mine_b, theirs_b = backends(server_args, hf)
    mine, theirs = resolve(mine_b, key), resolve(theirs_b, key)
    assert type(mine) is XGrammarGrammar and mine.key_string == key[1]
    rng = random.Random(0)
    for _ in range(8):
        a, b = mine.copy(), theirs.copy()
        for _ in range(12):
            if a.is_terminated():
                break
            ra, rb = row(a, 151_936), row(b, 151_936)
            assert torch.equal(ra, rb)
            t = rng.choice(ids_of(ra, 151_936))
            a.accept_token(t)
            b.accept_token(t)
        assert a.is_terminated() == b.is_terminated()


def test_invalid_grammars_fail_as_under_xgrammar(server_args: Any, hf: dict[str, Any]) -> None:
    mine_b, theirs_b = backends(server_args, hf)
    for key in [("regex", "(foo|"), ("json", '{"enum": ['), ("ebnf", "root ::= ")]:
        mine, theirs = resolve(mine_b, key), resolve(theirs_b, key)
        assert isinstance(mine, InvalidGrammarObject) and isinstance(theirs, InvalidGrammarObject)
        assert mine.error_message == theirs.error_message


# ----------------------------------------------------------------------------- rollback, termination, copy


def test_termination_and_rollback_behave_as_xgrammars(server_args: Any, hf: dict[str, Any], served: dict) -> None:
    tok = hf["qwen2"]
    key = ("regex", "(foo|bar|foobar)")
    mine, theirs = (resolve(b, key) for b in backends(server_args, hf))
    table = triec.compile(["foo", "bar", "foobar"], served["qwen2"])
    w = Walk(mine, theirs, table, tok, 151_936)
    states = [w.state]
    for t in tok.encode("foo", add_special_tokens=False):
        w.check()
        w.step(t)
        states.append(w.state)
    assert set(w.check()) >= {151643, 151645}  # "foo" is a value: EOS allowed, and "bar" may follow
    w.step(151645)
    states.append(w.state)
    assert mine.is_terminated() and theirs.is_terminated() and w.check() == []
    before = list(mine.accepted_tokens)
    mine.accept_token(tok.convert_tokens_to_ids("z"))  # ignored once terminated, as xgrammar does
    theirs.accept_token(tok.convert_tokens_to_ids("z"))
    assert mine.accepted_tokens == theirs.accepted_tokens == before
    w.back(1, states)  # rolling back over EOS: live again
    states.pop()
    assert not mine.is_terminated() and w.check()
    k = len(states) - 1
    w.back(k, states)  # back to the start in one call
    del states[1:]
    assert mine.accepted_tokens == theirs.accepted_tokens == [] and w.check()
    bad = tok.convert_tokens_to_ids("z")
    for g in (mine, theirs):
        with pytest.raises(ValueError, match="Tokens not accepted"):  # the scheduler aborts the request on ValueError
            g.accept_token(bad)
    assert w.check()  # a refused token changed nothing
    with pytest.raises(ValueError):
        mine.rollback(1)  # past the history (xgrammar raises RuntimeError there)


def test_copy_is_a_fresh_grammar_at_the_start_like_xgrammars(
    server_args: Any, hf: dict[str, Any], served: dict
) -> None:
    """SGLang copies on every cache hit and for each of n parallel samples: a new grammar at the start state."""
    tok = hf["qwen2"]
    key = ("regex", "(" + "|".join(map(re.escape, TOOLS[:40])) + ")")
    mine_b, theirs_b = backends(server_args, hf)
    first, theirs_first = resolve(mine_b, key), resolve(theirs_b, key)
    hit, theirs_hit = resolve(mine_b, key), resolve(theirs_b, key)  # cache hits: copies
    assert hit is not first and hit.grammar_stats.is_cache_hit and theirs_hit.grammar_stats.is_cache_hit
    assert hit.compiled is first.compiled  # one compiled table behind every copy
    t = tok.encode(TOOLS[0], add_special_tokens=False)[0]
    for g in (first, theirs_first):
        g.accept_token(t)
    mine_copy, theirs_copy = first.copy(), theirs_first.copy()
    assert torch.equal(row(mine_copy, 151_936), row(theirs_copy, 151_936))
    assert torch.equal(row(mine_copy, 151_936), row(hit, 151_936))
    assert not torch.equal(row(first, 151_936), row(mine_copy, 151_936))  # not the current state
    mine_copy.accept_token(t)
    assert first.accepted_tokens == [t] and mine_copy.accepted_tokens == [t] and hit.accepted_tokens == []
    mine_copy.accept_token(tok.encode(TOOLS[0], add_special_tokens=False)[1])
    assert len(first.accepted_tokens) == 1  # independent


def test_jump_forward_where_the_trie_forces_bytes(server_args: Any, hf: dict[str, Any]) -> None:
    tok = hf["qwen2"]
    key = ("regex", "(foobar|foobaz|日本語|日本人)")
    mine, theirs = (resolve(b, key) for b in backends(server_args, hf))
    assert mine.try_jump_forward(tok) is None and theirs.try_jump_forward(tok) is None  # a choice at the start
    f = tok.convert_tokens_to_ids("f")
    mine.accept_token(f)
    theirs.accept_token(f)
    assert mine.try_jump_forward(tok) == theirs.try_jump_forward(tok) == ([], "ooba")
    assert mine.jump_forward_str_state(([], "ooba")) == ("ooba", -1)
    mine.jump_and_retokenize([f], tok.encode("fooba", add_special_tokens=False), -1)
    assert mine.compiled.table.prefix(mine.matcher.state) == b"fooba"
    other = mine.copy()
    for t in tok.encode("日", add_special_tokens=False):
        other.accept_token(t)
    assert other.try_jump_forward(tok) == ([], "本")  # xgrammar 0.2.7 raises UnicodeDecodeError here


# ----------------------------------------------------------------------------- batches as the scheduler builds them


def _batch_grammars(server_args: Any, hf: dict[str, Any]) -> list[Any]:
    mine_b, theirs_b = backends(server_args, hf)
    tok = hf["qwen2"]
    a = resolve(mine_b, ("regex", "(foo|bar)"))
    b = resolve(mine_b, ("json", json.dumps({"enum": TOOLS})))
    c = resolve(mine_b, ("regex", "[a-z]+"))  # delegated: an XGrammarGrammar inside triec's batch
    d = resolve(theirs_b, ("regex", "(yes|no)"))
    e = resolve(mine_b, ("regex", "(foo|bar)"))
    done = resolve(mine_b, ("regex", "(ok)"))
    finished = resolve(mine_b, ("regex", "(ok)"))
    for t in tok.encode("fo", add_special_tokens=False):
        a.accept_token(t)
    b.accept_token(tok.encode('"', add_special_tokens=False)[0])
    for t in [*tok.encode("ok", add_special_tokens=False), 151643]:
        done.accept_token(t)
    finished.finished = True  # the scheduler's flag after the request ended
    assert done.is_terminated() and type(c) is XGrammarGrammar
    return [a, None, b, c, d, e, done, finished]


@pytest.mark.parametrize("first", ["triec", "xgrammar"])
def test_a_mixed_batch_through_sglangs_update_regex_vocab_mask(
    server_args: Any, hf: dict[str, Any], first: str
) -> None:
    """SamplingBatchInfo.update_regex_vocab_mask uses the batch's first grammar for the buffer, the batched fill of
    every live row (any backend's), the move and the apply; rows it skips keep -1."""
    grammars = _batch_grammars(server_args, hf)
    if first == "xgrammar":
        grammars = [grammars[4], *grammars[:4], *grammars[5:]]
    info = SimpleNamespace(
        grammars=grammars, vocab_size=151_936, temperatures=torch.ones(len(grammars), 1), device="cpu"
    )
    SamplingBatchInfo.update_regex_vocab_mask(info)
    mask = info.grammar_mask.vocab_mask
    assert mask.dtype == torch.int32 and mask.shape == (len(grammars), (151_936 + 31) // 32)
    for r, g in enumerate(grammars):
        live = g is not None and not g.finished and not g.is_terminated()
        want = row(g, 151_936) if live else torch.full_like(mask[0], -1)
        assert torch.equal(mask[r], want), (r, type(g).__name__)
    logits = torch.randn(len(grammars), 151_936)
    reference = logits.clone()
    info.grammar_mask.apply(logits)
    import xgrammar

    xgrammar.apply_token_bitmask_inplace(reference, mask)  # xgrammar's own CPU kernel on the same buffer
    assert torch.equal(logits, reference)
    for r in range(len(grammars)):
        assert int(torch.isfinite(logits[r]).sum()) == len(ids_of(mask[r], 151_936))
    fo = grammars.index(
        next(
            g
            for g in grammars
            if g is not None
            and g.accepted_tokens
            and not g.is_terminated()
            and type(g) is backend_module.TriecGrammarObject
            and g.key_string == "(foo|bar)"
        )
    )
    assert len(ids_of(mask[fo], 151_936)) == 1  # after "fo": "o"


def test_speculative_drafts_through_sglangs_traverse_tree(server_args: Any, hf: dict[str, Any]) -> None:
    """generate_token_bitmask: a DFS over each draft tree (accept, fill, rollback(1)); masks as xgrammar's, state
    restored."""
    tok = hf["qwen2"]
    ids = {s: tok.convert_tokens_to_ids(s) for s in ["f", "b", "o", "oo", "ar", "z"]}
    draft = torch.tensor([0, ids["f"], ids["b"], ids["oo"], ids["o"], 151645, ids["z"], ids["o"], ids["ar"]])
    # node 0 -> {1: f, 2: b, 6: z}; 1 -> {3: oo, 4: o}; 3 -> {5: EOS}; 4 -> {7: o}; 2 -> {8: ar}
    nxt = torch.tensor([1, 3, 8, 5, 7, -1, -1, -1, -1])
    sib = torch.tensor([-1, 2, 6, 4, -1, -1, -1, -1, -1])
    masks = []
    for b in backends(server_args, hf):
        g = resolve(b, ("regex", "(foo|bar)"))
        reqs = [SimpleNamespace(grammar=g), SimpleNamespace(grammar=g.copy())]
        mask, _ = generate_token_bitmask(
            reqs, torch.stack([nxt, nxt]), torch.stack([sib, sib]), torch.stack([draft, draft]), 151_936
        )
        assert g.accepted_tokens == [] and not g.is_terminated()
        masks.append(mask)
        single = g.allocate_vocab_mask(vocab_size=151_936, batch_size=len(draft), device="cpu")
        traverse_tree(nxt, sib, draft, g, single, vocab_size=151_936)
        assert torch.equal(single, mask[: len(draft)])
    assert torch.equal(masks[0], masks[1])


# ----------------------------------------------------------------------------- reasoning models


def test_a_reasoning_parser_wraps_the_backend_as_sglang_wraps_its_own(server_args: Any, hf: dict[str, Any]) -> None:
    """create_grammar_backend returns a registered backend before its reasoner wrapping: triec wraps itself."""
    tok = hf["qwen2"]
    think_end = tok.encode("</think>", add_special_tokens=False)
    with get_serving().override(reasoning_parser="qwen3"):
        mine_b = create_grammar_backend(server_args, tok, 151_936, {151643, 151645}, think_end_ids=think_end)
        with get_exec().kernel.override(grammar_backend="xgrammar"):
            theirs_b = create_grammar_backend(server_args, tok, 151_936, {151643, 151645}, think_end_ids=think_end)
    assert (
        type(mine_b).__name__ == "TriecReasonerGrammarBackend"
        and type(mine_b.grammar_backend).__name__ == "TriecGrammarBackend"
    )
    pair = []
    for b in (mine_b, theirs_b):
        value, _hit = b.get_cached_or_future_value(("regex", "(foo|bar)"), True)  # the request reasons first
        pair.append(value.result())
    mine, theirs = pair
    assert isinstance(mine, ReasonerGrammarObject) and type(mine.grammar) is backend_module.TriecGrammarObject
    for t in [
        *tok.encode("hmm, foo?", add_special_tokens=False),
        *think_end,
        *tok.encode("ba", add_special_tokens=False),
    ]:
        rm, rt = row(mine, 151_936), row(theirs, 151_936)
        assert torch.equal(rm, rt)  # all -1 while thinking, the grammar's row after </think>
        mine.accept_token(t)
        theirs.accept_token(t)
    assert torch.equal(row(mine, 151_936), row(theirs, 151_936))
    assert ids_of(row(mine, 151_936), 151_936) == [tok.convert_tokens_to_ids("r")]
    mine.rollback(3)
    theirs.rollback(3)
    assert torch.equal(row(mine, 151_936), row(theirs, 151_936))


def test_an_answer_frame_is_compiled_by_xgrammar_for_the_same_key(server_args: Any, hf: dict[str, Any]) -> None:
    """A reasoning parser's answer frame (an xgrammar structural tag around the grammar): triec's regexes and enums
    are framed as xgrammar's grammar of the same key; artifacts are not framed (None)."""
    mine_b, theirs_b = backends(server_args, hf)
    key = ("regex", "(foo|bar)")

    def frame(content: dict) -> dict:
        return {
            "type": "structural_tag",
            "format": {"type": "sequence", "elements": [{"type": "const_string", "value": "A: "}, content]},
        }

    framed = mine_b.compile_framed_grammar(resolve(mine_b, key), frame)
    reference = theirs_b.compile_framed_grammar(resolve(theirs_b, key), frame)
    assert type(framed) is XGrammarGrammar
    rng = random.Random(1)
    while not reference.is_terminated():
        r = row(framed, 151_936)
        assert torch.equal(r, row(reference, 151_936))
        t = rng.choice(ids_of(r, 151_936))
        framed.accept_token(t)
        reference.accept_token(t)
    assert framed.is_terminated()


# ----------------------------------------------------------------------------- artifacts by name, refusals, the cache


@pytest.fixture
def with_artifacts(server_args: Any, hf: dict[str, Any], served: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A triec backend whose operator set TRIEC_ARTIFACT_DIR, with two artifacts in it."""
    root = tmp_path / "artifacts"
    root.mkdir()
    triec.compile(TOOLS, served["qwen2"]).save(root / "tools.triec")
    triec.compile(TOOLS, served["gpt2"]).save(root / "gpt2-tools.triec")
    monkeypatch.setenv("TRIEC_ARTIFACT_DIR", str(root))
    return create_grammar_backend(server_args, hf["qwen2"], 151_936, {151643, 151645}), root


def test_an_artifact_by_name_serves_its_values(
    server_args: Any, hf: dict[str, Any], served: dict, with_artifacts
) -> None:
    """{"x-triec-artifact": "tools"} as the json schema: the artifact's values, as xgrammar serves the same set as a
    regex; {"x-triec-restrict": [...]} narrows it for one request."""
    mine_b, _root = with_artifacts
    _, theirs_b = backends(server_args, hf)
    for schema, values in [
        ({ARTIFACT_KEYWORD: "tools"}, TOOLS),
        ({ARTIFACT_KEYWORD: "tools", RESTRICT_KEYWORD: TOOLS[5:9]}, TOOLS[5:9]),
    ]:
        key = ("json", json.dumps(schema))
        mine = resolve(mine_b, key)
        assert type(mine) is backend_module.TriecGrammarObject and mine.compiled.artifact == "tools"
        assert resolve(mine_b, key).compiled is mine.compiled  # SGLang's cache hit: the same table
        theirs = resolve(theirs_b, ("regex", "(" + "|".join(map(re.escape, values)) + ")"))
        table = triec.compile(values, served["qwen2"])
        rng = random.Random(2)
        for _ in range(15):
            w = Walk(mine.copy(), theirs.copy(), table, hf["qwen2"], 151_936)
            while ids := w.check():
                w.step(rng.choice(ids))


def test_a_canonical_artifact_is_served_as_its_table(
    server_args: Any, hf: dict[str, Any], served: dict, with_artifacts
) -> None:
    """tokenization="canonical" (issue 29) by name, whole and restricted: every row the table's, each value's
    encoder tokens only, no jump-forward (forced bytes are not forced tokens)."""
    mine_b, root = with_artifacts
    vocab = served["qwen2"]
    triec.compile(TOOLS, vocab, tokenization="canonical").save(root / "canonical-tools.triec")
    encoder = vocab.encoder()
    for schema, values in [
        ({ARTIFACT_KEYWORD: "canonical-tools"}, TOOLS),
        ({ARTIFACT_KEYWORD: "canonical-tools", RESTRICT_KEYWORD: TOOLS[5:9]}, TOOLS[5:9]),
    ]:
        mine = resolve(mine_b, ("json", json.dumps(schema)))
        assert type(mine) is backend_module.TriecGrammarObject
        table = triec.compile(values, vocab, tokenization="canonical")
        rng = random.Random(3)
        for _ in range(15):
            g, state, ids = mine.copy(), table.start, []
            while state != FINISHED:
                got = row(g, 151_936)
                want = np.zeros((1, table.words_per_row), dtype=np.int32)
                table.fill_bitmask([state], want)
                assert np.array_equal(got.numpy()[: want.shape[1]], want[0])
                assert jump(g, hf["qwen2"]) is None
                token = rng.choice(table.allowed(state).tolist())
                g.accept_token(token)
                state = table.advance(state, token)
                ids.append(token)
            assert g.is_terminated()
            text = b"".join(vocab.token_bytes[t] for t in ids[:-1]).decode()
            assert text in values and ids[:-1] == encoder.encode(text, add_special_tokens=False).ids


@pytest.mark.parametrize(
    ("schema", "words"),
    [
        ({ARTIFACT_KEYWORD: "missing"}, "no artifact named 'missing'"),
        ({ARTIFACT_KEYWORD: "../tools"}, "not an artifact name"),
        ({ARTIFACT_KEYWORD: "gpt2-tools"}, "50257 wide"),
        ({ARTIFACT_KEYWORD: "tools", "type": "string"}, "holds only"),
        ({ARTIFACT_KEYWORD: "tools", RESTRICT_KEYWORD: ["no.such.tool"]}, "no.such.tool"),
    ],
)
def test_bad_artifact_requests_are_refused_at_admission(with_artifacts, schema: dict, words: str) -> None:
    """An InvalidGrammarObject: SGLang aborts that request ("Failed to compile json grammar: ...", HTTP 400)."""
    backend, _ = with_artifacts
    bad = resolve(backend, ("json", json.dumps(schema)))
    assert isinstance(bad, InvalidGrammarObject) and words in bad.error_message and "\n" not in bad.error_message
    assert type(resolve(backend, ("regex", "(foo|bar)"))) is backend_module.TriecGrammarObject  # and keeps serving


def test_an_artifact_whose_eos_ids_do_not_stop_gets_the_processors_refusal(with_artifacts, hf: dict[str, Any]) -> None:
    """One door: {"x-triec-artifact": NAME} is admitted by the serving core (serving.admit), as a vLLM processors'
    request is, so an artifact whose EOS ids SGLang does not stop on gets the same refusal (only the hint of how a
    server makes them stop differs)."""
    from triec.integrations import serving

    backend, root = with_artifacts
    spec = hf["qwen2"].name_or_path
    odd = triec.Vocabulary.load(spec, vocab_size=151_936, eos_token_ids=[151644])  # an EOS id SGLang does not stop on
    triec.compile(TOOLS, odd).save(root / "oddeos.triec")
    bad = resolve(backend, ("json", json.dumps({ARTIFACT_KEYWORD: "oddeos"})))
    assert isinstance(bad, InvalidGrammarObject)
    params = SimpleNamespace(
        extra_args={"triec": "oddeos"}, stop_token_ids=None, ignore_eos=False, min_tokens=0, structured_outputs=None
    )
    with pytest.raises(triec.RequestError) as processors:
        serving.check_request(
            params, serving.ServedModel(spec, 151_936, 151643, (151643, 151645)), serving.ArtifactStore(root)
        )
    refusal = str(processors.value).rsplit(" (", 1)[0]
    assert refusal == "artifact 'oddeos' ends values with EOS ids [151644], but [151644] would not stop generation"
    assert bad.error_message.endswith(f"{refusal} ({backend_module.STOPS_HINT})"), bad.error_message


def test_artifact_refusals_are_not_cached_and_changed_files_are_reloaded(with_artifacts, served: dict) -> None:
    backend, root = with_artifacts
    key = ("json", json.dumps({ARTIFACT_KEYWORD: "colors"}))
    assert isinstance(resolve(backend, key), InvalidGrammarObject)
    triec.compile(["red", "green"], served["qwen2"]).save(root / "colors.triec")  # the operator adds it
    first = resolve(backend, key)
    assert type(first) is backend_module.TriecGrammarObject and sorted(first.compiled.table.values) == ["green", "red"]
    triec.compile(["blue"], served["qwen2"]).save(root / "colors.triec")  # and replaces it
    st = os.stat(root / "colors.triec")
    os.utime(root / "colors.triec", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert resolve(backend, key).compiled.table.values == ["blue"]  # not SGLang's cached grammar of the old file


def test_lists_past_the_limits_are_refused(
    server_args: Any, hf: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRIEC_MAX_CHOICES", "50")
    backend = create_grammar_backend(server_args, hf["qwen2"], 151_936, {151643, 151645})
    for key in [
        ("regex", "(" + "|".join(map(re.escape, TOOLS[:51])) + ")"),
        ("json", json.dumps({"enum": TOOLS[:51]})),
    ]:
        bad = resolve(backend, key)
        assert isinstance(bad, InvalidGrammarObject) and "at most 50" in bad.error_message
    assert type(resolve(backend, ("regex", "|".join(map(re.escape, TOOLS[:50]))))) is backend_module.TriecGrammarObject


def test_sglangs_cache_keeps_triec_grammars_within_triecs_bound(server_args, hf, served, monkeypatch) -> None:
    """SGLang caches a grammar per distinct key without bound; triec's are dropped with triec's cache entries."""
    one = triec.integrations.constraints.table_nbytes(triec.compile(TOOLS[:20], served["qwen2"]))
    monkeypatch.setenv("TRIEC_CACHE_BYTES", str(3 * one))
    backend = create_grammar_backend(server_args, hf["qwen2"], 151_936, {151643, 151645})
    keys = [("regex", "(" + "|".join(map(re.escape, TOOLS[i : i + 20])) + ")") for i in range(0, 200, 20)]
    for key in keys:
        assert type(resolve(backend, key)) is backend_module.TriecGrammarObject
    resolve(backend, ("regex", "[0-9]+"))  # delegated grammars are cached as SGLang caches them
    cached = [k for k, v in backend.cache.items() if type(v) is backend_module.TriecGrammarObject]
    assert 1 <= len(cached) <= 3 and set(cached) <= set(keys[-3:])
    assert backend.constraints.cache.nbytes <= 3 * one and ("regex", "[0-9]+") in backend.cache
    hit, is_hit = backend.get_cached_or_future_value(keys[0], False)  # dropped: compiled again, not a stale copy
    assert not is_hit and type(hit.result()) is backend_module.TriecGrammarObject
