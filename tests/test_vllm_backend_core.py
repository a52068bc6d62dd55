"""The vLLM backend's decisions and admission, engine-free, on vLLM 0.32's own classes.

The frontend decides what triec serves from the request alone
(:func:`~triec.integrations.vllm.backend.admit`), the engine compiles it
(:func:`~triec.integrations.vllm.backend.triec_grammar`): both must agree on
every shape, or a request would be admitted without xgrammar's check and then
not be served by triec. The frontend replacement is driven through
``SamplingParams._validate_structured_outputs`` under backend ``auto``, where
vLLM retries a ``VLLMValidationError`` with guidance: a refusal must come out as
a 400-class ``VLLMClientError`` instead. The plugin's switch and its checks are
tested without switching it on in this process. Requires vLLM.
"""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import numpy as np
import pytest

pytestmark = pytest.mark.vllm

pytest.importorskip("vllm")

import torch  # noqa: E402
from vllm import SamplingParams  # noqa: E402
from vllm.config import StructuredOutputsConfig  # noqa: E402
from vllm.exceptions import VLLMClientError, VLLMValidationError  # noqa: E402
from vllm.sampling_params import StructuredOutputsParams as SO  # noqa: E402
from vllm.v1.structured_output import backend_xgrammar  # noqa: E402
from vllm.v1.structured_output.backend_types import StructuredOutputOptions as Opt  # noqa: E402

import triec  # noqa: E402
from triec.errors import RequestError  # noqa: E402
from triec.integrations.constraints import Delegate  # noqa: E402
from triec.integrations.vllm import backend, plugin  # noqa: E402

V = 151_936
COLORS = ["red", "green", "blue"]
OBJECT = {"type": "object", "properties": {"label": {"enum": COLORS}, "v": {"const": 1}}, "required": ["label", "v"],
          "additionalProperties": False}  # fmt: skip
DOCS = [
    {"enum": COLORS}, {"type": "string", "enum": COLORS, "title": "c"}, {"anyOf": [{"enum": COLORS}]},
    OBJECT, {"type": "object", "properties": {"n": {"type": "integer"}}}, {"type": "array", "items": {"enum": COLORS}},
    {"type": "array", "minItems": 1, "maxItems": 1, "items": {"type": "object", "anyOf": [
        {"properties": {"name": {"type": "string", "enum": ["f"]}, "parameters": {"type": "object"}},
         "required": ["name", "parameters"]}]}},
    {"enum": ["red", 3]}, {"enum": []}, True, [],
]  # fmt: skip


@pytest.fixture(scope="module")
def state() -> backend.EngineState:
    return backend.engine_state(SimpleNamespace(tokenizer="qwen2", get_vocab_size=lambda: V))


@pytest.mark.parametrize("compact", [False, True])
@pytest.mark.parametrize("any_ws", [True, False])
def test_frontend_and_engine_agree_on_json(state, monkeypatch, compact: bool, any_ws: bool) -> None:
    if compact:
        monkeypatch.setenv(backend.COMPACT_ENV, "1")
    else:
        monkeypatch.delenv(backend.COMPACT_ENV, raising=False)
    for doc in DOCS:
        admitted = backend.admit(SO(json=json.dumps(doc)), None, any_ws)
        served = backend.triec_grammar(state, Opt.JSON, json.dumps(doc), {151643}, any_ws)
        assert admitted == (not isinstance(served, Delegate)), (doc, admitted, served)
    assert backend.admit(SO(json=OBJECT), None, any_ws) is (compact and any_ws)  # triec's spelling, opt-in only


def test_engine_decisions(state) -> None:
    g = backend.triec_grammar(state, Opt.CHOICE, json.dumps(COLORS), {151643, 151645}, True)
    assert isinstance(g, backend.TriecGrammar)
    assert isinstance(backend.triec_grammar(state, Opt.REGEX, "^(red|blue)$", None, True), backend.TriecGrammar)
    for kind, spec in ((Opt.REGEX, "[a-z]+"), (Opt.GRAMMAR, 'root ::= "a"'), (Opt.JSON_OBJECT, ""),
                       (Opt.STRUCTURAL_TAG, '{"type": "structural_tag", "format": {"type": "const_string", "value": "x"}}')):  # fmt: skip
        assert isinstance(backend.triec_grammar(state, kind, spec, None, True), Delegate), kind
    assert isinstance(backend.triec_grammar(state, Opt.CHOICE, json.dumps(["\ud800"]), None, True), Delegate)
    with pytest.raises(RequestError):  # an artifact gone between admission and the engine: the request fails
        backend.triec_grammar(state, Opt.JSON, json.dumps({"x-triec-artifact": "nope"}), None, True)
    again = backend.triec_grammar(state, Opt.CHOICE, json.dumps(COLORS), None, True)
    assert isinstance(again, backend.TriecGrammar) and again.key == g.key
    assert again.grammar.matcher.table is g.grammar.matcher.table  # the same text: the remembered grammar
    state.constraints(True).clear()  # the cache let it go: compiled again, not served from the memo
    fresh = backend.triec_grammar(state, Opt.CHOICE, json.dumps(COLORS), None, True)
    assert isinstance(fresh, backend.TriecGrammar) and fresh.grammar.matcher.table is not g.grammar.matcher.table
    bitmask = torch.full((2, (V + 31) // 32), -1, dtype=torch.int32)
    g.fill_bitmask(bitmask, 1)
    allowed = set(np.flatnonzero(np.unpackbits(bitmask[1].numpy().view(np.uint8), bitorder="little")[:V]).tolist())
    table = triec.compile(COLORS, state.constraints(True).vocab)
    assert allowed == set(table.allowed(table.start).tolist())
    assert bool((bitmask[0] == -1).all())  # other rows untouched


def test_admission() -> None:
    assert backend.admit(SO(choice=COLORS)) and backend.admit(SO(regex="(a|b)")) and backend.admit(SO(json={"enum": COLORS}))
    assert not backend.admit(SO(regex="[ab]+")) and not backend.admit(SO(grammar='root ::= "a"'))
    assert not backend.admit(SO(choice=["ok", "\ud800"]))  # no UTF-8 text: xgrammar's, as without triec
    for so in (SO(choice=[f"v{i}" for i in range(100_001)]), SO(json={"enum": ["x" * (9 << 20)]})):
        with pytest.raises(backend.RequestRefused) as info:
            backend.admit(so)
        assert isinstance(info.value, VLLMClientError) and not isinstance(info.value, VLLMValidationError)
        assert "\n" not in str(info.value)
    with pytest.raises(backend.RequestRefused, match="cannot tell which model"):
        backend.admit(SO(json={"x-triec-artifact": "colors"}))


def model_config() -> SimpleNamespace:
    return SimpleNamespace(is_diffusion=False, tokenizer="qwen2", get_vocab_size=lambda: V)


def test_frontend_hook_under_auto(monkeypatch) -> None:
    """Through vLLM's own ``_validate_structured_outputs``: kept as a choice, refused as 400, others to xgrammar."""
    monkeypatch.setenv("TRIEC_MAX_CHOICES", "50")
    original = backend_xgrammar.validate_xgrammar_grammar
    monkeypatch.setattr(backend_xgrammar, "validate_xgrammar_grammar", backend.frontend_hook(original))
    config = StructuredOutputsConfig(backend="auto")
    served = SamplingParams(structured_outputs=SO(choice=COLORS))
    served._validate_structured_outputs(model_config(), config, object())
    so = served.structured_outputs
    assert so.choice == COLORS and so.grammar is None and so._backend == "xgrammar"
    stock = SamplingParams(structured_outputs=SO(regex="[a-z]{2}"))
    stock._validate_structured_outputs(model_config(), config, object())
    assert stock.structured_outputs.regex == "[a-z]{2}" and stock.structured_outputs._backend == "xgrammar"
    refused = SamplingParams(structured_outputs=SO(choice=[f"v{i}" for i in range(51)]))
    with pytest.raises(backend.RequestRefused, match="holds 51 values; this server compiles at most 50"):
        refused._validate_structured_outputs(model_config(), config, object())
    with pytest.raises(backend.RequestRefused, match="serves no triec artifacts|no artifact named"):
        SamplingParams(structured_outputs=SO(json={"x-triec-artifact": "nope"}))._validate_structured_outputs(
            model_config(), config, object())  # fmt: skip


def test_plugin_is_off_without_the_switch_or_on_another_vllm(monkeypatch, caplog) -> None:
    import vllm

    before = backend_xgrammar.validate_xgrammar_grammar, backend_xgrammar.XgrammarBackend.compile_grammar
    monkeypatch.delenv(plugin.ENV, raising=False)
    plugin.register()
    assert not plugin.is_on()
    assert plugin.mismatch() is None  # this vLLM is the one the replacements were written for
    monkeypatch.setattr(vllm, "__version__", "0.33.0")
    monkeypatch.setenv(plugin.ENV, "1")
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    plugin.log.addHandler(handler)
    try:
        plugin.register()
    finally:
        plugin.log.removeHandler(handler)
    assert not plugin.is_on()
    assert [r.getMessage() for r in records] == [
        "triec vLLM backend stays off: vLLM 0.33.0 (written against 0.32.x); structured outputs are vLLM's own"]
    assert (backend_xgrammar.validate_xgrammar_grammar, backend_xgrammar.XgrammarBackend.compile_grammar) == before


def test_a_tokenizer_triec_cannot_read_delegates(caplog) -> None:
    """No vocabulary (a tokenizer format triec does not decode): lists go to xgrammar, artifacts fail their request."""
    broken = backend.engine_state(SimpleNamespace(tokenizer="/nonexistent/tokenizer", get_vocab_size=lambda: V))
    assert isinstance(backend.triec_grammar(broken, Opt.CHOICE, json.dumps(COLORS), None, True), Delegate)
    with pytest.raises(RequestError, match="cannot read the served tokenizer"):
        backend.triec_grammar(broken, Opt.JSON, json.dumps({"x-triec-artifact": "colors"}), None, True)
