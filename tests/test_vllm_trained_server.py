"""vLLM's OpenAI server with triec's backend and a trained model (SmolLM2-135M-Instruct, float32, greedy).

Requests as OpenAI clients send them: ``tools`` (500 real BFCL functions,
``strict: true``) with ``tool_choice="auto"`` and ``"required"``, which vLLM's
hermes parser turns into structural tags that triec serves (the log says so);
``choice`` and ``response_format`` over 1,998 names. Each output is compared token for token with xgrammar serving the
same language in the same server: the same prompt ids through the completions
API, the tag vLLM's own builder makes from the same tools, inside a one-element
``sequence`` (which triec leaves to xgrammar). A trained model also finishes
its calls, so ``required`` calls must parse and validate against the tool's
schema. Prefix caching is off. Requires vLLM, openai and the trained model.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from shared import bfcl_registry

pytestmark = [pytest.mark.vllm, pytest.mark.model]

pytest.importorskip("vllm")
openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

from benchmarks.vllm_server import SERVER_ENV, openai_server  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = Path(__file__).with_name("smollm_tools.jinja")
N_TOOLS = 500


def _tools_for(item: dict, registry: list[dict]) -> list[dict]:
    """The item's functions first (the template shows the first 8), then other BFCL functions, all strict."""
    by_name = {t["function"]["name"]: t for t in registry}
    first = [by_name[n] for n in item["candidates"]]
    rest = [t for t in registry if t["function"]["name"] not in item["candidates"]]
    tools = (first + rest)[:N_TOOLS]
    return [{"type": "function", "function": {**t["function"], "strict": True}} for t in tools]


def _questions() -> list[dict]:
    from triec.eval import bfcl

    registry = {t["function"]["name"] for t in bfcl_registry()}
    items = bfcl.convert("multiple", ROOT / "fixtures" / "eval" / "bfcl")
    return [i for i in items if all(n in registry for n in i["candidates"])][:3]


@pytest.fixture(scope="module")
def server(trained_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    root = tmp_path_factory.mktemp("trained_server")
    env = dict(os.environ, **SERVER_ENV, TRIEC_VLLM_BACKEND="1", TRIEC_VLLM_LOG="debug", VLLM_CPU_KVCACHE_SPACE="2")
    env.pop("VLLM_PLUGINS", None)
    log_path = root / "server.log"
    args = [
        "--model",
        str(trained_model),
        "--served-model-name",
        "smollm2",
        "--dtype",
        "float32",
        "--max-num-seqs",
        "4",
        "--max-model-len",
        "4096",
        "--enforce-eager",
        "--no-enable-prefix-caching",
        "--chat-template",
        str(TEMPLATE),
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
        "--structured-outputs-config",
        json.dumps({"backend": "xgrammar"}),
    ]
    with openai_server(args, env, log_path, timeout_s=600) as (client, _):
        yield {"client": client, "log": log_path}


def _vllm_tag(tools: list[dict], tool_choice: str) -> dict:
    """The structural tag vLLM's hermes builder makes of these strict tools."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionToolsParam
    from vllm.tool_parsers.structural_tag_registry import get_model_structural_tag

    params = [ChatCompletionToolsParam(type="function", function=t["function"]) for t in tools]
    tag = get_model_structural_tag("hermes", params, tool_choice, reasoning=False)
    assert tag is not None
    return tag.model_dump()


def _chat_then_reference(server, item: dict, tool_choice: str, max_tokens: int):
    client, log = server["client"], server["log"]
    tools = _tools_for(item, bfcl_registry())
    served = log.read_text().count("STRUCTURAL_TAG served by triec")
    ours = client.chat.completions.create(
        model="smollm2",
        messages=item["messages"][1:],
        tools=tools,
        tool_choice=tool_choice,
        temperature=0.0,
        max_tokens=max_tokens,
        extra_body={"return_token_ids": True},
    )
    assert log.read_text().count("STRUCTURAL_TAG served by triec") == served + 1
    tag = _vllm_tag(tools, tool_choice)
    wrapped = {"type": "structural_tag", "format": {"type": "sequence", "elements": [tag["format"]]}}
    ref = client.completions.create(
        model="smollm2",
        prompt=ours.prompt_token_ids,
        temperature=0.0,
        max_tokens=max_tokens,
        extra_body={"structured_outputs": {"structural_tag": json.dumps(wrapped)}, "return_token_ids": True},
    )
    assert "STRUCTURAL_TAG delegated to xgrammar" in log.read_text()
    return tools, ours.choices[0], ref.choices[0]


@pytest.mark.parametrize("index", [0, 1])
def test_auto_over_500_strict_tools_is_served_by_triec_and_equals_xgrammar(server, index: int) -> None:
    item = _questions()[index]
    _, ours, ref = _chat_then_reference(server, item, "auto", max_tokens=96)
    assert ours.token_ids == ref.token_ids, (ours.message, ref.text)


def test_required_calls_parse_validate_and_equal_xgrammar(server) -> None:
    """Every finished call parses and validates; a 135M model can loop inside a free string until max_tokens
    (then the output is cut, for xgrammar alike), so at least one of two questions must finish."""
    finished = 0
    for item in _questions()[:2]:
        tools, ours, ref = _chat_then_reference(server, item, "required", max_tokens=128)
        assert ours.token_ids == ref.token_ids, (ours.message, ref.text)
        if ours.finish_reason == "length":
            continue
        calls = ours.message.tool_calls or []
        assert calls and ours.finish_reason == "tool_calls", ours
        schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
        for call in calls:
            jsonschema.validate(json.loads(call.function.arguments), schemas[call.function.name])
        finished += 1
    assert finished >= 1


def test_choice_over_1998_names_equals_xgrammar(server) -> None:
    from vllm.v1.structured_output.utils import choice_as_grammar

    names = sorted({t["function"]["name"] for t in bfcl_registry()})
    client = server["client"]
    for item in _questions()[:2]:
        kw = {"model": "smollm2", "messages": item["messages"], "temperature": 0.0, "max_tokens": 32}
        ours = client.chat.completions.create(
            **kw, extra_body={"structured_outputs": {"choice": names}, "return_token_ids": True}
        )
        ref = client.chat.completions.create(
            **kw, extra_body={"structured_outputs": {"grammar": choice_as_grammar(names)}, "return_token_ids": True}
        )
        assert ours.choices[0].message.content in names
        assert ours.choices[0].token_ids == ref.choices[0].token_ids
    assert "served by triec" in server["log"].read_text()


def test_response_format_enum_over_1998_names_equals_xgrammar(server) -> None:
    """``response_format`` with a JSON-schema enum: served by triec (a JSON string of one name), equal to xgrammar
    serving the same language (the enum inside ``anyOf``, which triec leaves to xgrammar)."""
    names = sorted({t["function"]["name"] for t in bfcl_registry()})
    client, log = server["client"], server["log"]
    served = log.read_text().count("JSON served by triec")
    enum = {"type": "string", "enum": names}
    for item in _questions()[:2]:
        kw = {
            "model": "smollm2",
            "messages": item["messages"],
            "temperature": 0.0,
            "max_tokens": 40,
            "extra_body": {"return_token_ids": True},
        }
        ours = client.chat.completions.create(
            **kw, response_format={"type": "json_schema", "json_schema": {"name": "f", "schema": enum}}
        )
        ref = client.chat.completions.create(
            **kw, response_format={"type": "json_schema", "json_schema": {"name": "f", "schema": {"anyOf": [enum]}}}
        )
        assert json.loads(ours.choices[0].message.content) in names
        assert ours.choices[0].token_ids == ref.choices[0].token_ids
    assert log.read_text().count("JSON served by triec") >= served + 2
