"""The backend's rows against vLLM's own ``XgrammarBackend``, on whichever vLLM is installed (0.32 to 0.34).

vLLM's ``XgrammarBackend`` is built here as its engine builds it (its
``__post_init__`` on a Hugging Face tokenizer of Qwen2, with the tokenizer infos
and compilers of that release: 0.33 keeps two, JSON on a vocabulary without
special tokens and structural tags on the full one). Each kind triec serves is
compiled twice on that one backend object, by vLLM's own ``compile_grammar``
and by the plugin's replacement, and the two grammars are walked side by side
with vLLM's stop ids: every bitmask row equal, every ``validate_tokens`` answer
equal (0.33's manager asks it about single reasoning-end tokens before a
request's first content token), state unchanged by it. ``nox -s vllm_classes``
runs this file on vLLM 0.34's classes (0.33's on request), ``nox -s vllm`` on 0.32's.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

pytestmark = pytest.mark.vllm

pytest.importorskip("vllm")

import torch  # noqa: E402
from test_vllm_structured import hermes_tag, vllm_required_schema  # noqa: E402  (tests/ is on sys.path)
from vllm.v1.structured_output import backend_xgrammar  # noqa: E402
from vllm.v1.structured_output.backend_types import StructuredOutputOptions as Opt  # noqa: E402

import triec.synthetic.sets  # noqa: E402
from benchmarks.vllm_backend import formats_schema  # noqa: E402
from triec.integrations.vllm import backend, internals, patches  # noqa: E402

V = 151_936
STOP = {151643, 151645}  # Qwen2's <|endoftext|> and <|im_end|>, as vLLM passes them
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["c", "f"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
}
ALERT = {
    "type": "object",
    "properties": {"level": {"type": "integer", "minimum": 0, "maximum": 5}},
    "required": ["level"],
    "additionalProperties": False,
}


def _hf_tokenizer():
    import tokenizers
    import transformers

    from triec.tokenizer.source import locate

    raw = tokenizers.Tokenizer.from_str(json.dumps(locate("qwen2").tokenizer_json))
    return transformers.PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|im_end|>")


@pytest.fixture(scope="module")
def vllm_backend(tmp_path_factory):
    """vLLM's XgrammarBackend as its engine builds it, with the triec state of a fresh engine."""
    config = SimpleNamespace(
        structured_outputs_config=SimpleNamespace(disable_any_whitespace=False),
        model_config=SimpleNamespace(
            hf_config=SimpleNamespace(model_type="qwen2"),
            tokenizer="qwen2",
            get_vocab_size=lambda: V,
            skip_tokenizer_init=False,
            is_diffusion=False,
        ),
        speculative_config=None,
    )
    made = backend_xgrammar.XgrammarBackend(vllm_config=config, tokenizer=_hf_tokenizer(), vocab_size=V)
    saved = dict(backend._STATES)
    backend._STATES.clear()  # a fresh engine's state: its tokenizer infos are taken from this backend
    yield made
    backend._STATES.clear()
    backend._STATES.update(saved)


def _original():
    compile_grammar = backend_xgrammar.XgrammarBackend.compile_grammar
    return getattr(compile_grammar, "__wrapped__", compile_grammar)  # vLLM's own, whether or not triec is installed


def _row(bitmask: torch.Tensor) -> np.ndarray:
    return np.flatnonzero(np.unpackbits(bitmask[0].numpy().view(np.uint8), bitorder="little")[:V])


def _tools(n: int) -> list[tuple[str, dict]]:
    names = triec.synthetic.sets.tool_names(n)
    return [(name, WEATHER if i % 2 else ALERT) for i, name in enumerate(names)] + [("get_weather", WEATHER)]


COLORS = ["red", "green", "blue", "re", "grün", 'say "hi"']
CASES = {
    "choice": (Opt.CHOICE, lambda: json.dumps(COLORS)),
    "choice-2000": (Opt.CHOICE, lambda: json.dumps(triec.synthetic.sets.tool_names(2000))),
    "enum-json": (Opt.JSON, lambda: json.dumps({"type": "string", "enum": triec.synthetic.sets.tool_names(500)})),
    "required-tools": (Opt.JSON, lambda: json.dumps(vllm_required_schema(_tools(120), None))),
    "hermes-one": (Opt.STRUCTURAL_TAG, lambda: json.dumps(hermes_tag(_tools(120), stop_after_first=True))),
    "hermes-many": (Opt.STRUCTURAL_TAG, lambda: json.dumps(hermes_tag(_tools(120), stop_after_first=False))),
    "formats-json": (Opt.JSON, lambda: json.dumps(formats_schema())),  # issue 44: each field by its DFA's table
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_rows_equal_vllms_own_xgrammar(vllm_backend, monkeypatch, case: str) -> None:
    monkeypatch.delenv(backend.COMPACT_ENV, raising=False)
    kind, make = CASES[case]
    spec = make()
    assert internals.tag_compiler(backend_xgrammar.XgrammarBackend) is not None
    hooked = patches.compile_hook(_original(), internals.tag_compiler(backend_xgrammar.XgrammarBackend))
    rng = np.random.default_rng(sum(map(ord, case)))
    ours_b = torch.zeros((1, (V + 31) // 32), dtype=torch.int32)
    ref_b = torch.zeros_like(ours_b)
    probes = [151657, 151643, 151645, 27, 90, 1]  # <tool_call>, the stops, '<', '{', '"': validate_tokens([t]) each
    rows = 0
    for walk in range(4):
        ours = hooked(vllm_backend, kind, spec, STOP)
        ref = _reference(vllm_backend, kind, spec)
        assert isinstance(ours, backend.TriecStructuredOutputGrammar), (case, ours)
        for step in range(120):
            if ref.is_terminated():
                assert ours.is_terminated()
                break
            ours.fill_bitmask(ours_b, 0)
            ref.fill_bitmask(ref_b, 0)
            a, b = _row(ours_b), _row(ref_b)
            assert np.array_equal(a, b), (
                case,
                walk,
                step,
                len(a),
                len(b),
                sorted(set(a.tolist()) ^ set(b.tolist()))[:8],
            )
            if step < 3:
                for t in probes:
                    assert ours.validate_tokens([t]) == ref.validate_tokens([t]), (case, step, t)
                ours.fill_bitmask(ours_b, 0)
                assert np.array_equal(_row(ours_b), a)  # validate_tokens leaves the state as it was
            rows += 1
            t = int(rng.choice(a))
            assert ours.accept_tokens("r", [t]) and ref.accept_tokens("r", [t])
    assert rows >= 8


def _reference(vllm_backend, kind: Opt, spec: str):
    """vLLM's own grammar; a ``choice`` as vLLM's frontend rewrites it, xgrammar's EBNF (``choice_as_grammar``)."""
    from vllm.v1.structured_output.utils import choice_as_grammar

    if kind == Opt.CHOICE:
        kind, spec = Opt.GRAMMAR, choice_as_grammar(json.loads(spec))
    return _original()(vllm_backend, kind, spec, STOP)


def test_tags_take_the_tag_compilers_tokenizer_info(vllm_backend) -> None:
    """Structural tags on the compiler vLLM compiles them with (0.33: ``full_vocab_compiler``), JSON on ``compiler``:
    inside a free string the two vocabularies differ (special tokens stand as their text in the full one)."""
    from triec.schema.grammar import driver

    attr = internals.tag_compiler(backend_xgrammar.XgrammarBackend)
    hooked = patches.compile_hook(_original(), internals.tag_compiler(backend_xgrammar.XgrammarBackend))
    hooked(vllm_backend, Opt.STRUCTURAL_TAG, json.dumps(hermes_tag(_tools(4), stop_after_first=True)), STOP)
    d = driver("xgrammar", backend.backend_state(vllm_backend.vllm_config.model_config, V).vocabulary())
    tag_info = getattr(vllm_backend, attr).compile_regex("a").tokenizer_info
    json_info = vllm_backend.compiler.compile_regex("a").tokenizer_info
    assert d.tag_compiler.compile_regex("a").tokenizer_info.decoded_vocab == tag_info.decoded_vocab
    assert d.engine.compiler.compile_regex("a").tokenizer_info.decoded_vocab == json_info.decoded_vocab
    if attr == "full_vocab_compiler":  # 0.33: the JSON vocabulary has no special tokens, the tags' has them
        assert json_info.decoded_vocab[151645] == b"" and tag_info.decoded_vocab[151645] == b"<|im_end|>"


def _vllm_auto_tag(tools: list[tuple[str, dict]]) -> str:
    """The structural tag vLLM itself builds for the hermes parser, strict tools and ``tool_choice="auto"``, as its
    frontend writes it into the request (``json.dumps(tag.model_dump())``)."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionToolsParam
    from vllm.tool_parsers.structural_tag_registry import get_model_structural_tag

    params = [
        ChatCompletionToolsParam(type="function", function={"name": n, "parameters": p, "strict": True})
        for n, p in tools
    ]
    tag = get_model_structural_tag("hermes", params, "auto", reasoning=False)
    assert tag is not None
    return json.dumps(tag.model_dump())


def test_auto_tool_calls_equal_vllms_own_xgrammar(vllm_backend, monkeypatch) -> None:
    """``tool_choice="auto"`` over 120 strict tools, the tag from vLLM's own builder: served by triec (not delegated),
    rows equal vLLM's xgrammar through free text, a call, free text and a second call, then EOS."""
    monkeypatch.delenv(backend.COMPACT_ENV, raising=False)
    tools = _tools(120)
    spec = _vllm_auto_tag(tools)
    assert json.loads(spec)["format"]["type"] == "triggered_tags"
    name_a, name_b = tools[1][0], tools[2][0]
    text = (
        "Let me look. <tool_call>\n"
        + json.dumps({"name": name_a, "arguments": {"city": "Oslo", "unit": "c"}})
        + "\n</tool_call>\nAnd now: <tool_call>\n"
        + json.dumps({"name": name_b, "arguments": {"level": 4}})
        + "\n</tool_call> done"
    ).encode()
    hooked = patches.compile_hook(_original(), internals.tag_compiler(backend_xgrammar.XgrammarBackend))
    from triec.tokenizer.vocabulary import Vocabulary

    tb = Vocabulary.load("qwen2").token_bytes
    ours_b = torch.zeros((1, (V + 31) // 32), dtype=torch.int32)
    ref_b = torch.zeros_like(ours_b)
    rng = np.random.default_rng(5)
    for split in range(2):
        ours = hooked(vllm_backend, Opt.STRUCTURAL_TAG, spec, STOP)
        ref = _reference(vllm_backend, Opt.STRUCTURAL_TAG, spec)
        assert isinstance(ours, backend.TriecStructuredOutputGrammar), ours
        i = steps = 0
        while not ref.is_terminated():
            ours.fill_bitmask(ours_b, 0)
            ref.fill_bitmask(ref_b, 0)
            a, b = _row(ours_b), _row(ref_b)
            assert np.array_equal(a, b), (split, text[:i], sorted(set(a.tolist()) ^ set(b.tolist()))[:8])
            fits = [t for t in a.tolist() if t < len(tb) and tb[t] and text.startswith(tb[t], i)]
            t = int(rng.choice(fits)) if i < len(text) else min(STOP)
            assert ours.accept_tokens("r", [t]) and ref.accept_tokens("r", [t])
            i += len(tb[t]) if t < len(tb) else 0
            steps += 1
        assert ours.is_terminated() and i == len(text) and steps > 40
