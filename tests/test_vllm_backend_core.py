"""The vLLM backend's decisions and admission, engine-free, on the installed vLLM's own classes (0.32 to 0.34).

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
import triec.synthetic.sets  # noqa: E402
from triec.errors import RequestError  # noqa: E402
from triec.integrations.constraints import Delegate  # noqa: E402
from triec.integrations.vllm import backend, beams, internals, patches, plugin  # noqa: E402

V = 151_936
COLORS = ["red", "green", "blue"]
OBJECT = {
    "type": "object",
    "properties": {"label": {"enum": COLORS}, "v": {"const": 1}},
    "required": ["label", "v"],
    "additionalProperties": False,
}
DOCS = [
    {"enum": COLORS},
    {"type": "string", "enum": COLORS, "title": "c"},
    {"anyOf": [{"enum": COLORS}]},
    OBJECT,
    {"type": "object", "properties": {"n": {"type": "integer"}}},
    {"type": "array", "items": {"enum": COLORS}},
    {
        "type": "array",
        "minItems": 1,
        "maxItems": 1,
        "items": {
            "type": "object",
            "anyOf": [
                {
                    "properties": {"name": {"type": "string", "enum": ["f"]}, "parameters": {"type": "object"}},
                    "required": ["name", "parameters"],
                }
            ],
        },
    },
    {"enum": ["red", 3]},
    {"enum": []},
    True,
    [],
]


@pytest.fixture(scope="module")
def state() -> backend.BackendState:
    return backend.backend_state(SimpleNamespace(tokenizer="qwen2", get_vocab_size=lambda: V))


@pytest.mark.parametrize("compact", [False, True])
@pytest.mark.parametrize("any_ws", [True, False])
def test_frontend_and_engine_agree_on_json(state, monkeypatch, compact: bool, any_ws: bool) -> None:
    if compact:
        monkeypatch.setenv(backend.COMPACT_ENV, "1")
    else:
        monkeypatch.delenv(backend.COMPACT_ENV, raising=False)
    served_by: dict[str, bool] = {}
    for doc in DOCS:
        admitted = backend.claims(SO(json=json.dumps(doc)), None, any_ws)
        served = not isinstance(backend.triec_grammar(state, Opt.JSON, json.dumps(doc), {151643}, any_ws), Delegate)
        assert served or not admitted, (doc, admitted)  # what the frontend admits (skipping xgrammar's check) is served
        served_by[json.dumps(doc)] = served
    assert backend.claims(SO(json=OBJECT), None, any_ws) is (compact and any_ws)  # triec's spelling, opt-in only
    # with any whitespace the schema layer serves the object (its first enum as a slot) and vLLM's required tools
    # schema, exactly; under disable_any_whitespace ("," and ":") both are xgrammar's
    assert served_by[json.dumps(OBJECT)] is any_ws and served_by[json.dumps(DOCS[6])] is any_ws
    assert not served_by[json.dumps(DOCS[5])]  # a 3-value enum in an array: nothing for a trie, xgrammar's


def test_engine_decisions(state) -> None:
    g = backend.triec_grammar(state, Opt.CHOICE, json.dumps(COLORS), {151643, 151645}, True)
    assert isinstance(g, backend.TriecStructuredOutputGrammar)
    Grammar = backend.TriecStructuredOutputGrammar
    assert isinstance(backend.triec_grammar(state, Opt.REGEX, "^(red|blue)$", None, True), Grammar)
    for kind, spec in (
        (Opt.REGEX, "[a-z]+"),
        (Opt.GRAMMAR, 'root ::= "a"'),
        (Opt.JSON_OBJECT, ""),
        (Opt.STRUCTURAL_TAG, '{"type": "structural_tag", "format": {"type": "const_string", "value": "x"}}'),
    ):
        assert isinstance(backend.triec_grammar(state, kind, spec, None, True), Delegate), kind
    assert isinstance(backend.triec_grammar(state, Opt.CHOICE, json.dumps(["\ud800"]), None, True), Delegate)
    with pytest.raises(RequestError):  # an artifact gone between admission and the engine: the request fails
        backend.triec_grammar(state, Opt.JSON, json.dumps({"x-triec-artifact": "nope"}), None, True)
    again = backend.triec_grammar(state, Opt.CHOICE, json.dumps(COLORS), None, True)
    assert isinstance(again, backend.TriecStructuredOutputGrammar) and again.key == g.key
    assert again.grammar.matcher.table is g.grammar.matcher.table  # the same text: the remembered grammar
    state.constraints(True).clear()  # the cache let it go: compiled again, not served from the memo
    fresh = backend.triec_grammar(state, Opt.CHOICE, json.dumps(COLORS), None, True)
    assert isinstance(fresh, Grammar) and fresh.grammar.matcher.table is not g.grammar.matcher.table
    bitmask = torch.full((2, (V + 31) // 32), -1, dtype=torch.int32)
    g.fill_bitmask(bitmask, 1)
    allowed = set(np.flatnonzero(np.unpackbits(bitmask[1].numpy().view(np.uint8), bitorder="little")[:V]).tolist())
    table = triec.compile(COLORS, state.constraints(True).vocab)
    assert allowed == set(table.allowed(table.start).tolist())
    assert bool((bitmask[0] == -1).all())  # other rows untouched


def test_admission() -> None:
    assert backend.claims(SO(choice=COLORS)) and backend.claims(SO(regex="(a|b)"))
    assert backend.claims(SO(json={"enum": COLORS}))
    assert not backend.claims(SO(regex="[ab]+")) and not backend.claims(SO(grammar='root ::= "a"'))
    assert not backend.claims(SO(choice=["ok", "\ud800"]))  # no UTF-8 text: xgrammar's, as without triec
    for so in (SO(choice=[f"v{i}" for i in range(100_001)]), SO(json={"enum": ["x" * (9 << 20)]})):
        with pytest.raises(backend.RequestRefused) as info:
            backend.claims(so)
        assert isinstance(info.value, VLLMClientError) and not isinstance(info.value, VLLMValidationError)
        assert "\n" not in str(info.value)
    with pytest.raises(backend.RequestRefused, match="cannot tell which model"):
        backend.claims(SO(json={"x-triec-artifact": "colors"}))


def model_config() -> SimpleNamespace:
    return SimpleNamespace(is_diffusion=False, tokenizer="qwen2", get_vocab_size=lambda: V)


def test_frontend_hook_under_auto(monkeypatch) -> None:
    """Through vLLM's own ``_validate_structured_outputs``: kept as a choice, refused as 400, others to xgrammar."""
    monkeypatch.setenv("TRIEC_MAX_CHOICES", "50")
    original = backend_xgrammar.validate_xgrammar_grammar
    monkeypatch.setattr(backend_xgrammar, "validate_xgrammar_grammar", patches.frontend_hook(original))
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
    with pytest.raises(backend.RequestRefused, match=r"serves no triec artifacts|no artifact named"):
        SamplingParams(structured_outputs=SO(json={"x-triec-artifact": "nope"}))._validate_structured_outputs(
            model_config(), config, object()
        )


def test_an_artifact_whose_eos_ids_do_not_stop_gets_the_processors_refusal(state, tmp_path, monkeypatch) -> None:
    """One door: {"x-triec-artifact": NAME} through the backend's frontend (vLLM's own ``_validate_structured_outputs``)
    and its engine is admitted by the serving core, as the processors' ``extra_args`` request is: an artifact whose
    EOS ids the request does not stop on gets the processors' refusal, word for word."""
    from triec.integrations import serving

    for name, eos in (("oddeos", 151644), ("colors", 151643)):  # 151644: an EOS id the model does not stop on
        vocab = triec.Vocabulary.load("qwen2", vocab_size=V, eos_token_ids=[eos])
        triec.compile(COLORS, vocab).save(tmp_path / f"{name}.triec")
    monkeypatch.setattr(serving, "_STORE", serving.ArtifactStore(tmp_path))
    original = backend_xgrammar.validate_xgrammar_grammar
    monkeypatch.setattr(backend_xgrammar, "validate_xgrammar_grammar", patches.frontend_hook(original))
    config, tokenizer = StructuredOutputsConfig(backend="auto"), SimpleNamespace(eos_token_id=151643)
    with pytest.raises(RequestError) as processors:  # the served model as the same frontend sees it
        served = serving.ServedModel("qwen2", V, 151643, ())
        serving.check_request(SamplingParams(extra_args={"triec": "oddeos"}), served, serving.store())
    assert "artifact 'oddeos' ends values with EOS ids [151644], but [151644] would not stop" in str(processors.value)
    with pytest.raises(backend.RequestRefused) as frontend:
        SamplingParams(structured_outputs=SO(json={"x-triec-artifact": "oddeos"}))._validate_structured_outputs(
            model_config(), config, tokenizer
        )
    assert str(frontend.value) == str(processors.value)
    with pytest.raises(RequestError) as engine:
        backend.triec_grammar(state, Opt.JSON, json.dumps({"x-triec-artifact": "oddeos"}), {151643}, True)
    assert str(engine.value) == str(processors.value)
    admitted = SamplingParams(structured_outputs=SO(json={"x-triec-artifact": "colors"}))
    admitted._validate_structured_outputs(model_config(), config, tokenizer)
    assert admitted.structured_outputs.json == {"x-triec-artifact": "colors"}
    colors = backend.triec_grammar(state, Opt.JSON, json.dumps({"x-triec-artifact": "colors"}), {151643}, True)
    assert isinstance(colors, backend.TriecStructuredOutputGrammar)


def _plugin_lines(monkeypatch) -> list[str]:
    """What ``plugin.register()`` logs with the switch on; whatever it installs is undone with the test."""
    from vllm.v1.structured_output import StructuredOutputManager

    for owner, name in (
        (backend_xgrammar.XgrammarBackend, "compile_grammar"),
        (StructuredOutputManager, "__init__"),
        (backend_xgrammar, "validate_xgrammar_grammar"),
        (internals.offline_llm_class(), "beam_search"),
    ):
        if hasattr(owner, name):  # put back at the end of the test, whatever register() installed
            monkeypatch.setattr(owner, name, getattr(owner, name))
    site = internals.sparse_site() if internals.HOOKS[3].mismatch() is None else None
    if site == "utils.xgr":
        utils = internals.structured_output_utils()
        monkeypatch.setattr(utils, "xgr", utils.xgr)
    elif site == "cpu_worker":
        worker = internals.cpu_worker_class()
        monkeypatch.setattr(worker, "apply_grammar_bitmask", worker.apply_grammar_bitmask)
    monkeypatch.setenv(plugin.ENV, "1")
    monkeypatch.setitem(plugin._state, "on", False)
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    plugin.log.addHandler(handler)
    try:
        plugin.register()
    finally:
        plugin.log.removeHandler(handler)
    return [r.getMessage() for r in records]


def test_plugin_is_off_without_the_switch_or_on_another_vllm(monkeypatch) -> None:
    import vllm

    before = backend_xgrammar.validate_xgrammar_grammar, backend_xgrammar.XgrammarBackend.compile_grammar
    monkeypatch.delenv(plugin.ENV, raising=False)
    plugin.register()
    assert not plugin.is_on()
    assert plugin.mismatch() is None  # this vLLM is one the replacements were written for
    assert plugin.plan().without == {}  # and every hook has its call site here
    assert internals.in_window(vllm.__version__)
    assert internals.tag_compiler(backend_xgrammar.XgrammarBackend) is not None
    monkeypatch.setattr(vllm, "__version__", "0.99.0")
    assert plugin.mismatch().startswith("vLLM 0.99.0 is outside the versions it was tested on (0.32.x, 0.33.x, 0.34.x)")
    monkeypatch.setenv(plugin.ALLOW_UNTESTED_ENV, "1")
    assert plugin.mismatch() is None  # the operator's override skips the version test, and only it
    monkeypatch.setattr(backend_xgrammar.XgrammarBackend, "compile_grammar", lambda self, request_type: None)
    assert plugin.mismatch() == (
        "XgrammarBackend.compile_grammar(self, request_type, grammar_spec, stop_token_ids) differs"
    )
    monkeypatch.setattr(backend_xgrammar.XgrammarBackend, "compile_grammar", before[1])
    monkeypatch.delenv(plugin.ALLOW_UNTESTED_ENV)
    assert _plugin_lines(monkeypatch) == [
        "triec vLLM backend stays off: vLLM 0.99.0 is outside the versions it was tested on (0.32.x, 0.33.x, 0.34.x): "
        "install one of those, or set TRIEC_VLLM_ALLOW_UNTESTED=1 to run it on this one where every other check "
        "passes; structured outputs are vLLM's own"
    ]
    assert not plugin.is_on()
    assert (backend_xgrammar.validate_xgrammar_grammar, backend_xgrammar.XgrammarBackend.compile_grammar) == before


def test_mismatch_never_raises_and_names_what_moved(monkeypatch) -> None:
    """A required call site that is gone (a module attribute deleted, a source that no longer says it) is the one
    line ``mismatch()`` returns, never an exception, and the backend stays off with it."""
    monkeypatch.delattr(backend_xgrammar, "validate_xgrammar_grammar")
    why = plugin.mismatch()
    assert (
        why is not None
        and why.startswith("validate_xgrammar_grammar(sampling_params): AttributeError")
        and "\n" not in why
    )
    lines = _plugin_lines(monkeypatch)
    assert len(lines) == 1 and lines[0].startswith("triec vLLM backend stays off: validate_xgrammar_grammar")
    assert not plugin.is_on()


def test_an_optimization_that_moved_is_left_out_in_one_line(monkeypatch) -> None:
    """The worker's sparse path and the start-up vocabulary build are optimizations: where their call sites differ,
    the backend is on without them, one line each, and the required hooks are installed."""
    from vllm.v1.structured_output import StructuredOutputManager

    monkeypatch.setattr(StructuredOutputManager, "__init__", lambda self, config, extra=None: None)
    site = internals.sparse_site()
    if site == "utils.xgr":
        monkeypatch.setattr(internals.structured_output_utils(), "apply_grammar_bitmask", lambda logits: None)
    else:
        monkeypatch.setattr(internals.cpu_worker_class(), "apply_grammar_bitmask", lambda self, logits: None)
    found = plugin.plan()
    assert found.off is None and found.hooks == ("frontend", "engine", "beam_search")
    assert set(found.without) == {"vocabulary", "sparse_apply"}
    lines = _plugin_lines(monkeypatch)
    assert plugin.is_on()
    assert lines[0] == (
        "triec vLLM backend on without vocabulary (StructuredOutputManager.__init__ (the vocabulary "
        "built at start-up)): StructuredOutputManager.__init__(self, vllm_config) differs"
    )
    assert lines[1].startswith("triec vLLM backend on without sparse_apply (the worker's host bitmask application")
    assert lines[2].startswith("triec vLLM backend on (vLLM ")
    assert getattr(backend_xgrammar.validate_xgrammar_grammar, "__triec__", False)
    assert getattr(backend_xgrammar.XgrammarBackend.compile_grammar, "__triec__", False)
    assert not getattr(StructuredOutputManager.__init__, "__triec__", False)


def test_the_beam_search_route_is_installed_and_falls_through(monkeypatch) -> None:
    """With the switch on, ``LLM.beam_search`` is the plugin's route: a request without a constraint, or in an
    engine without triec's beam processor (either interface's), reaches vLLM's own ``beam_search`` with its
    arguments as given; tests/test_vllm_beams.py runs the route in a real engine."""
    from vllm.entrypoints.llm import LLM

    lines = _plugin_lines(monkeypatch)
    assert getattr(LLM.beam_search, "__triec__", False) and not any("without beam_search" in x for x in lines)
    calls: list[tuple] = []

    def vllms(*args: object, **kwargs: object) -> str:
        calls.append((args, kwargs))
        return "vllm's"

    def engine(processors: object) -> SimpleNamespace:
        return SimpleNamespace(llm_engine=SimpleNamespace(model_config=SimpleNamespace(logits_processors=processors)))

    hooked = patches.beam_search_hook(vllms)
    stock, beam_engine = engine(None), engine([beams.PROCESSOR])
    plain = SimpleNamespace(structured_outputs=None)
    constrained = SimpleNamespace(structured_outputs=SO(choice=["a", "b"]))
    assert hooked(stock, ["p"], constrained, None, False, 3) == "vllm's"
    assert hooked(beam_engine, ["p"], plain) == "vllm's"
    assert hooked(beam_engine, ["p"], constrained, None, False, None, 2) == "vllm's"  # 0.34's priority, as given
    assert calls == [
        ((stock, ["p"], constrained, None, False, 3), {}),
        ((beam_engine, ["p"], plain, None, False, None), {}),
        ((beam_engine, ["p"], constrained, None, False, None, 2), {}),
    ]
    assert beams.is_beam_engine(beam_engine) and beams.is_beam_engine(engine([beams.PROCESSOR_V2]))
    assert not beams.is_beam_engine(stock) and not beams.is_beam_engine(engine(["some.module:Processor"]))
    v1 = internals.has_v1_processors()
    assert beams.engine_args(8)["logits_processors"] == [beams.PROCESSOR if v1 else beams.PROCESSOR_V2]
    assert beams.engine_args(8, model_runner_v2=True)["logits_processors"] == [beams.PROCESSOR_V2]
    assert beams.engine_args(8)["max_logprobs"] == 20 and beams.engine_args(16)["max_logprobs"] == 32


def test_a_tokenizer_triec_cannot_read_delegates(caplog) -> None:
    """No vocabulary (a tokenizer format triec does not decode): lists go to xgrammar, artifacts fail their request."""
    broken = backend.backend_state(SimpleNamespace(tokenizer="/nonexistent/tokenizer", get_vocab_size=lambda: V))
    assert isinstance(backend.triec_grammar(broken, Opt.CHOICE, json.dumps(COLORS), None, True), Delegate)
    with pytest.raises(RequestError, match="cannot read the served tokenizer"):
        backend.triec_grammar(broken, Opt.JSON, json.dumps({"x-triec-artifact": "colors"}), None, True)


# ----------------------------------------------------------------------------- tool calls through the schema layer

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


def _registry() -> list[tuple[str, dict]]:
    names = triec.synthetic.sets.tool_names(300)
    return [(n, WEATHER if i % 2 else ALERT) for i, n in enumerate(names)] + [("get_weather", WEATHER)]


def _compiler_like_vllms() -> object:
    """xgrammar's compiler on the tokenizer as vLLM's XgrammarBackend builds it (``TokenizerInfo.from_huggingface``)."""
    import tokenizers
    import transformers
    import xgrammar as xgr

    from triec.tokenizer.source import locate

    hf = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizers.Tokenizer.from_str(json.dumps(locate("qwen2").tokenizer_json))
    )
    return xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(hf, vocab_size=V), cache_enabled=False)


def _row(bitmask: torch.Tensor) -> np.ndarray:
    return np.flatnonzero(np.unpackbits(bitmask[0].numpy().view(np.uint8), bitorder="little")[:V])


@pytest.mark.parametrize("shape", ["required-one", "required-many", "hermes-one", "hermes-many"])
def test_tool_calls_are_served_and_equal_vllms_xgrammar(state, monkeypatch, shape: str) -> None:
    """vLLM's own tool-call constraints (``tool_choice="required"``'s schema, the strict hermes tag) over 301 tools:
    served by triec with any whitespace (no opt-in), every row equal to xgrammar's compiled the way vLLM compiles
    them, on vLLM's TokenizerInfo, along seeded walks with vLLM's stop ids."""
    import xgrammar as xgr
    from test_vllm_structured import hermes_tag, vllm_required_schema  # tests/ is on sys.path (rootdir imports)

    monkeypatch.delenv(backend.COMPACT_ENV, raising=False)
    compiler = _compiler_like_vllms()
    state.use_tokenizer_info(compiler)
    tools, many = _registry(), shape.endswith("many")
    if shape.startswith("required"):
        kind, spec = Opt.JSON, json.dumps(vllm_required_schema(tools, None if many else False))
        assert backend.claims(SO(json=spec), None, True)
        ctx = compiler.compile_json_schema(spec, any_whitespace=True)
    else:
        kind, spec = Opt.STRUCTURAL_TAG, json.dumps(hermes_tag(tools, stop_after_first=not many))
        assert backend.claims(SO(structural_tag=spec), None, True)
        ctx = compiler.compile_structural_tag(spec)
    stop = {151643, 151645}
    ours_b = torch.zeros((1, (V + 31) // 32), dtype=torch.int32)
    ref_b = xgr.allocate_token_bitmask(1, V)
    rng = np.random.default_rng(7)
    rows = 0
    for walk in range(6):
        ours = backend.triec_grammar(state, kind, spec, stop, True)
        assert isinstance(ours, backend.TriecStructuredOutputGrammar), ours
        ref = xgr.GrammarMatcher(ctx, override_stop_tokens=sorted(stop))
        for _ in range(90):
            ours.fill_bitmask(ours_b, 0)
            ref.fill_next_token_bitmask(ref_b, 0)
            a, b = _row(ours_b), _row(ref_b)
            assert np.array_equal(a, b), (shape, walk, rows, len(a), len(b), sorted(set(a) ^ set(b))[:8])
            rows += 1
            if ref.is_terminated():
                break
            t = int(rng.choice(a))
            assert ours.accept_tokens("r", [t]) and ref.accept_token(t)
    assert rows > 200


def test_a_legacy_tag_with_at_least_one_stays_xgrammars(state) -> None:
    """vLLM compiles the legacy ``structures``/``triggers`` tag without its ``at_least_one`` (SGLang with it): triec
    serves the legacy tag where the two agree and leaves the other to xgrammar, in the frontend and the engine."""
    doc = {
        "structures": [
            {"begin": '<tool_call>{"name": "f", "arguments": ', "schema": {"type": "object"}, "end": "}</tool_call>"}
        ],
        "triggers": ["<tool_call>"],
    }
    assert backend.claims(SO(structural_tag=json.dumps(doc)))
    served = backend.triec_grammar(state, Opt.STRUCTURAL_TAG, json.dumps(doc), None, True)
    assert isinstance(served, backend.TriecStructuredOutputGrammar)
    doc["at_least_one"] = True
    assert not backend.claims(SO(structural_tag=json.dumps(doc)))
    assert isinstance(backend.triec_grammar(state, Opt.STRUCTURAL_TAG, json.dumps(doc), None, True), Delegate)


def test_cpu_worker_sparse_hook_equals_vllms_own(monkeypatch) -> None:
    """0.34's host path (``CPUStructuredOutputsWorker.apply_grammar_bitmask``) with the sparse hook: logits equal
    vLLM's own method's on a batch of sparse, dense, all-allowed and inactive draft rows, unconstrained requests
    between them and requests in another order than the batch's."""
    if internals.HOOKS[3].mismatch() is not None or internals.sparse_site() != "cpu_worker":
        pytest.skip("this vLLM applies host bitmasks through structured_output.utils (test_vllm_structured)")
    from triec.runtime.torch import SPARSE_WORDS

    worker_class = internals.cpu_worker_class()
    original = getattr(worker_class.apply_grammar_bitmask, "__wrapped__", worker_class.apply_grammar_bitmask)
    hooked = patches.cpu_worker_hook(original)
    stride, words = 4, (V + 31) // 32
    worker = worker_class(64, V, torch.device("cpu"), stride)
    rng = np.random.default_rng(3)
    for trial in range(6):
        req_ids = [f"r{i}" for i in range(6)]
        counts = rng.integers(1, stride + 1, size=len(req_ids))  # logits rows per request: 1 + its drafts
        batch = SimpleNamespace(
            req_ids=req_ids, cu_num_logits=torch.from_numpy(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
        )
        grammar_ids = [req_ids[i] for i in rng.permutation(len(req_ids))[:4]]
        bm = np.zeros((len(grammar_ids) * stride, words), dtype=np.int32)
        for row in bm:
            kind = rng.integers(0, 4)
            if kind == 0:  # a trie state: a few dozen tokens
                ids = rng.choice(V, size=40, replace=False)
                np.bitwise_or.at(
                    row.view(np.uint32), ids >> 5, np.left_shift(np.uint32(1), (ids & 31).astype(np.uint32))
                )
            elif kind == 1:  # dense: more words than the sparse limit
                row[: SPARSE_WORDS + 100] = rng.integers(-(2**31), 2**31 - 1, size=SPARSE_WORDS + 100, dtype=np.int64)
            elif kind == 2:
                row[:] = -1
        logits = torch.from_numpy(rng.standard_normal((int(counts.sum()), V)).astype(np.float32))
        ours, theirs = logits.clone(), logits.clone()
        hooked(worker, ours, batch, grammar_ids, bm.copy())
        original(worker, theirs, batch, grammar_ids, bm.copy())
        assert torch.equal(torch.isinf(ours), torch.isinf(theirs)), trial
        assert torch.equal(ours[torch.isfinite(ours)], theirs[torch.isfinite(theirs)])
