"""End to end in a real vLLM engine on CPU: constrained and unconstrained requests in one batch, and every rejection.

One engine for the module (about 40 s to start): a tiny random-weight Llama
written by the test with the bundled Qwen2 tokenizer, ``max_num_seqs`` 8 so
that 40 requests join, leave and move within the persistent batch. Every
constrained output must be exactly one value of its artifact (text and token
bytes) ending with EOS (finish reason ``stop``), and every tool-call schema
output a JSON object naming a registry tool with arguments valid per the
schema (checked with ``jsonschema``); each admission check must
answer with vLLM's validation error while the engine keeps serving. Requires
vLLM (the ``vllm`` nox session); skipped elsewhere.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import triec
import triec.synthetic.sets

pytestmark = pytest.mark.vllm

pytest.importorskip("vllm")

from vllm import LLM, SamplingParams  # noqa: E402
from vllm.exceptions import VLLMValidationError  # noqa: E402

from benchmarks.tiny_llama import EOS_IDS, VOCAB_SIZE, make_tiny_llama  # noqa: E402
from triec.errors import RequestError  # noqa: E402
from triec.integrations import serving  # noqa: E402

COLORS = ["red", "green", "blue", "yellow", "purple", "re"]
TOOLS = ["get_weather", "get_forecast", "send_alert", "search"]
TOOL_CALL = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "enum": TOOLS},
        "arguments": {
            "type": "object",
            "properties": {
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
                "urgent": {"type": "boolean"},
            },
            "required": ["unit", "days", "urgent"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "arguments"],
    "additionalProperties": False,
}  # a finite language: even a random model's outputs end within max_tokens
EXTRACT = {
    "type": "object",
    "properties": {
        "codes": {
            "type": "array",
            "items": {"enum": [f"{c}{i:02d}.{d}" for c in "AJZ" for i in range(4) for d in range(3)]},
            "minItems": 1,
            "maxItems": 2,
        },
        "urgent": {"type": "boolean"},
    },
    "required": ["codes", "urgent"],
    "additionalProperties": False,
}  # an enum inside the structure, issue 20: a slot entered from the engine; a finite language too


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("vllm")
    model = make_tiny_llama(root / "model")
    vocab = triec.Vocabulary.load(model)
    assert vocab.vocab_size == VOCAB_SIZE and list(vocab.eos_token_ids) == EOS_IDS
    art = root / "artifacts"
    art.mkdir()
    tables = {
        "tools": triec.compile(triec.synthetic.sets.tool_names(1000), vocab),
        "colors": triec.compile(COLORS, vocab),
    }
    for name, table in tables.items():
        table.save(art / f"{name}.triec")
    triec.compile_schema(TOOL_CALL, vocab).save(art / "toolcall.triec")
    triec.compile_schema(EXTRACT, vocab, threshold=8).save(art / "extract.triec")
    gpt2 = triec.Vocabulary.load("gpt2", vocab_size=VOCAB_SIZE)
    triec.compile(COLORS, gpt2).save(art / "gpt2colors.triec")  # another tokenizer's masks
    odd = triec.Vocabulary.load(model, eos_token_ids=[151643, 151644])  # an EOS id this model never stops on
    triec.compile(COLORS, odd).save(art / "oddeos.triec")
    outside = root / "private.triec"
    tables["colors"].save(outside)
    os.symlink(outside, art / "escape.triec")
    return {"model": model, "art": art, "tables": tables, "vocab": vocab}


@pytest.fixture(scope="module")
def llm(served: dict[str, object]) -> Iterator[LLM]:
    os.environ["TRIEC_ARTIFACT_DIR"] = str(served["art"])  # read by the engine process it spawns
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    serving.reset_store(served["art"])  # this process is vLLM's frontend: admission reads the same directory
    engine = LLM(
        model=str(served["model"]),
        logits_processors=["triec.integrations.vllm:TriecLogitsProcessor"],
        max_num_seqs=8,
        max_model_len=256,
        enforce_eager=True,
        seed=0,
    )
    yield engine
    with contextlib.suppress(Exception):
        engine.llm_engine.engine_core.shutdown()


def value_of(output, vocab: triec.Vocabulary, values: set[str]) -> str | None:
    """The value the completion spells, when it is exactly one value followed by EOS and stopped there."""
    ids = list(output.token_ids)
    if output.finish_reason != "stop" or not ids or ids[-1] not in vocab.eos_token_ids:
        return None
    text = b"".join(vocab.token_bytes[t] for t in ids[:-1])
    if output.text.encode() != text or output.text not in values:
        return None
    return output.text


def test_mixed_batch_every_constrained_output_is_one_value(llm: LLM, served) -> None:
    tables, vocab = served["tables"], served["vocab"]
    subset = tables["tools"].values[100:104]
    kinds = [
        ({"triec": "tools"}, set(tables["tools"].values)),
        ({"triec": "colors"}, set(COLORS)),
        (None, None),
        ({"triec": "tools", "restrict": subset}, set(subset)),
    ]
    prompts, params, wanted = [], [], []
    for i in range(40):
        extra, values = kinds[i % 4]
        greedy = (i // 4) % 2 == 0
        prompts.append(f"Select a tool #{i}:")
        params.append(SamplingParams(max_tokens=40, temperature=0.0 if greedy else 1.0, seed=i, extra_args=extra))
        wanted.append(values)
    outputs = llm.generate(prompts, params, use_tqdm=False)
    picked: dict[str, list[str]] = {"tools": [], "colors": []}
    for out, values, p in zip(outputs, wanted, params, strict=True):
        completion = out.outputs[0]
        if values is None:
            assert value_of(completion, vocab, set(tables["tools"].values) | set(COLORS)) is None
            continue
        got = value_of(completion, vocab, values)
        assert got is not None, (p.extra_args, completion.text, completion.finish_reason, completion.token_ids)
        picked[p.extra_args["triec"]].append(got)
    assert len(set(picked["tools"])) > 3  # rows follow their own states: not one value for everyone


def test_rejections_answer_and_the_engine_keeps_serving(llm: LLM, served) -> None:
    bad = {
        "no path": {"triec": "../artifacts/colors"},
        "no artifact named": {"triec": "nope"},
        "link leading out": {"triec": "escape"},
        "another tokenizer": {"triec": "gpt2colors"},
        "would not stop": {"triec": "oddeos"},
        "not one of the table": {"triec": "colors", "restrict": ["teal"]},
        "needs 'triec'": {"restrict": ["red"]},
        "cannot narrow": {"triec": "toolcall", "restrict": ["search"]},
    }
    for message, extra in bad.items():
        with pytest.raises(VLLMValidationError, match=message):
            llm.generate(["x"], SamplingParams(max_tokens=8, extra_args=extra), use_tqdm=False)
    for message, kwargs in {"min_tokens": {"min_tokens": 2}, "would not stop": {"ignore_eos": True}}.items():
        with pytest.raises(VLLMValidationError, match=message):
            llm.generate(["x"], SamplingParams(max_tokens=8, extra_args={"triec": "colors"}, **kwargs), use_tqdm=False)
    out = llm.generate(["Pick a color:"], SamplingParams(max_tokens=8, extra_args={"triec": "colors"}), use_tqdm=False)
    assert value_of(out[0].outputs[0], served["vocab"], set(COLORS)) is not None


def test_tool_call_requests_in_a_mixed_batch(llm: LLM, served) -> None:
    """Schema rows (one matcher each) beside plain rows: every tool-call output parses and is valid per the schema."""
    jsonschema = pytest.importorskip("jsonschema")
    tables, vocab = served["tables"], served["vocab"]
    kinds = [
        ({"triec": "toolcall"}, None),
        ({"triec": "colors"}, set(COLORS)),
        (None, None),
        ({"triec": "toolcall"}, None),
        ({"triec": "tools"}, set(tables["tools"].values)),
        ({"triec": "extract"}, None),
    ]
    prompts, params = [], []
    for i in range(30):
        extra, _ = kinds[i % len(kinds)]
        greedy = (i // len(kinds)) % 2 == 0
        prompts.append(f"Call a tool #{i}:")
        params.append(SamplingParams(max_tokens=120, temperature=0.0 if greedy else 1.0, seed=i, extra_args=extra))
    outputs = llm.generate(prompts, params, use_tqdm=False)
    calls: list[dict] = []
    extracted: list[dict] = []
    for i, out in enumerate(outputs):
        completion = out.outputs[0]
        extra, values = kinds[i % len(kinds)]
        if extra is None:
            continue
        if values is not None:
            assert value_of(completion, vocab, values) is not None, (extra, completion.text)
            continue
        ids = list(completion.token_ids)
        assert completion.finish_reason == "stop" and ids[-1] in vocab.eos_token_ids, (completion.text, ids)
        text = b"".join(vocab.token_bytes[t] for t in ids[:-1])
        assert completion.text.encode() == text
        call = json.loads(text)
        if extra["triec"] == "extract":
            jsonschema.validate(call, EXTRACT)
            extracted.append(call)
            continue
        jsonschema.validate(call, TOOL_CALL)
        assert call["name"] in TOOLS
        calls.append(call)
    assert len(calls) == 10 and len({json.dumps(c) for c in calls}) > 2  # rows follow their own matchers
    assert len(extracted) == 5


def test_artifact_dir_must_be_set(served, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without TRIEC_ARTIFACT_DIR no name resolves (checked here without an engine)."""
    monkeypatch.delenv("TRIEC_ARTIFACT_DIR", raising=False)
    with pytest.raises(RequestError, match="TRIEC_ARTIFACT_DIR"):
        serving.ArtifactStore().table("colors")
