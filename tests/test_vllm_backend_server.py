"""The OpenAI server with triec's structured-outputs backend (``TRIEC_VLLM_BACKEND=1``), through the openai client.

Standard requests only: ``structured_outputs.choice``, ``response_format`` with
an enum schema or an artifact by name, ``tools`` with ``tool_choice="required"``
(the hermes tool parser with a Qwen2.5-style chat template, strict tool calling
off so vLLM asks for its JSON schema, which is delegated to xgrammar until the
schema layer compiles registries), and every refusal as HTTP 400 while the
server keeps serving. Backend ``xgrammar`` with ``disable_any_whitespace`` (a
random model then ends its JSON). The same process-group handling as
tests/test_vllm_server.py. Requires vLLM and openai (the ``vllm`` nox session).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import triec
import triec.synthetic.sets

pytestmark = pytest.mark.vllm

pytest.importorskip("vllm")
openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

from vllm.v1.structured_output.utils import choice_as_grammar  # noqa: E402

from benchmarks.tiny_llama import make_tiny_llama  # noqa: E402
from benchmarks.vllm_server import SERVER_ENV, TOOLS, openai_server  # noqa: E402

COLORS = ["red", "green", "blue", "re", "redder"]
TEMPLATE = Path(__file__).with_name("qwen25_tools.jinja")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    root = tmp_path_factory.mktemp("backend_server")
    model = make_tiny_llama(root / "model")
    art = root / "artifacts"
    art.mkdir()
    triec.compile(COLORS, triec.Vocabulary.load(model)).save(art / "colors.triec")
    env = dict(
        os.environ,
        **SERVER_ENV,
        TRIEC_VLLM_BACKEND="1",
        TRIEC_VLLM_LOG="debug",
        TRIEC_MAX_CHOICES="5000",
        TRIEC_ARTIFACT_DIR=str(art),
        VLLM_ENFORCE_STRICT_TOOL_CALLING="0",
        VLLM_CPU_KVCACHE_SPACE="1",
    )
    env.pop("VLLM_PLUGINS", None)
    log_path = root / "server.log"
    args = [
        "--model",
        str(model),
        "--served-model-name",
        "tiny",
        "--max-num-seqs",
        "8",
        "--max-model-len",
        "512",
        "--enforce-eager",
        "--chat-template",
        str(TEMPLATE),
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
        "--structured-outputs-config",
        json.dumps({"backend": "xgrammar", "disable_any_whitespace": True}),
    ]
    with openai_server(args, env, log_path, timeout_s=120) as (client, _):
        yield {"client": client, "log": log_path}


def complete(client, so: dict, prompt: str = "Pick one:", **kw):
    kw.setdefault("max_tokens", 24)
    return client.completions.create(
        model="tiny",
        prompt=prompt,
        temperature=0.0,
        extra_body={"structured_outputs": so, "return_token_ids": True},
        **kw,
    ).choices[0]


def chat(client, **kw):
    kw.setdefault("max_tokens", 40)
    return client.chat.completions.create(model="tiny", temperature=0.0, **kw).choices[0]


def test_choice_equals_xgrammar_token_for_token(server) -> None:
    client = server["client"]
    for i in range(3):
        prompt = f"Colors: {', '.join(COLORS[i:])}. Pick #{i}:"
        ours = complete(client, {"choice": COLORS}, prompt)
        ref = complete(client, {"grammar": choice_as_grammar(COLORS)}, prompt)  # what stock vLLM makes of a choice
        assert ours.text in COLORS and ours.finish_reason == "stop", ours
        assert ours.token_ids == ref.token_ids, (ours.text, ref.text)
    msg = chat(
        client,
        messages=[{"role": "user", "content": "Pick a color"}],
        extra_body={"structured_outputs": {"choice": COLORS}},
    )
    assert msg.message.content in COLORS and msg.finish_reason == "stop"


def test_response_format_enum_and_artifact(server) -> None:
    client = server["client"]
    messages = [{"role": "user", "content": "Pick a color"}]
    enum = {"type": "string", "enum": COLORS}
    ours = chat(
        client, messages=messages, response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": enum}}
    )
    ref = chat(
        client,
        messages=messages,
        response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": {"anyOf": [enum]}}},
    )
    assert json.loads(ours.message.content) in COLORS and ours.message.content == ref.message.content
    named = chat(
        client,
        messages=messages,
        response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": {"x-triec-artifact": "colors"}}},
    )
    assert named.message.content in COLORS and named.finish_reason == "stop"
    log = server["log"].read_text()
    assert log.count("JSON served by triec") >= 2 and "JSON delegated to xgrammar" in log


def check_calls(choice) -> list[tuple[str, dict]]:
    calls = [(t.function.name, json.loads(t.function.arguments)) for t in choice.message.tool_calls or []]
    by_name = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    assert calls and choice.finish_reason == "tool_calls", choice
    for name, args in calls:
        jsonschema.validate(args, by_name[name])
    return calls


def test_tools_required(server) -> None:
    client = server["client"]
    for i, content in enumerate(("Weather in Paris?", "Raise an alert", "Anything")):
        choice = chat(
            client,
            messages=[{"role": "user", "content": content}],
            tools=TOOLS,
            tool_choice="required",
            parallel_tool_calls=False,
            max_tokens=80,
        )
        assert len(check_calls(choice)) == 1, i


def test_mixed_concurrent_batch(server) -> None:
    """Triec-served, delegated and free requests at once, so the engine batches them together."""
    client = server["client"]
    jobs = []
    for i in range(4):
        jobs.append(("choice", lambda i=i: complete(client, {"choice": COLORS}, f"Color #{i}:")))
        jobs.append(("regex", lambda i=i: complete(client, {"regex": r"[a-z]{2,6}-[0-9]{2}"}, f"Code #{i}:")))
        jobs.append(("enum", lambda i=i: complete(client, {"json": {"enum": COLORS}}, f"JSON color #{i}:")))
        jobs.append(
            (
                "tools",
                lambda i=i: chat(
                    client,
                    messages=[{"role": "user", "content": f"Call #{i}"}],
                    tools=TOOLS,
                    tool_choice="required",
                    parallel_tool_calls=False,
                    max_tokens=80,
                ),
            )
        )
        jobs.append(
            (
                "free",
                lambda i=i: client.completions.create(
                    model="tiny", prompt=f"Free #{i}:", max_tokens=8, temperature=0.0
                ).choices[0],
            )
        )
    with ThreadPoolExecutor(len(jobs)) as pool:
        results = list(pool.map(lambda job: (job[0], job[1]()), jobs))
    import re

    for kind, r in results:
        if kind == "choice":
            assert r.text in COLORS and r.finish_reason == "stop"
        elif kind == "regex":
            assert re.fullmatch(r"[a-z]{2,6}-[0-9]{2}", r.text)
        elif kind == "enum":
            assert json.loads(r.text) in COLORS
        elif kind == "tools":
            check_calls(r)
        else:
            assert r.finish_reason == "length"


BAD = {
    "empty choice": {"structured_outputs": {"choice": []}},
    "non-string member": {"structured_outputs": {"choice": ["red", 3]}},
    "over the limit": {"structured_outputs": {"choice": [f"v{i}" for i in range(6000)]}},
    "enum over the limit": {"structured_outputs": {"json": {"enum": [f"v{i}" for i in range(6000)]}}},
    "artifact path": {"structured_outputs": {"json": {"x-triec-artifact": "../colors"}}},
    "missing artifact": {"structured_outputs": {"json": {"x-triec-artifact": "nope"}}},
}


def test_refusals_are_400_and_the_server_keeps_serving(server) -> None:
    client = server["client"]
    for name, body in BAD.items():
        with pytest.raises(openai.BadRequestError) as info:
            client.completions.create(model="tiny", prompt="x", max_tokens=4, extra_body=body)
        assert info.value.status_code == 400, name
        if name.endswith("the limit"):
            assert "holds 6000 values; this server compiles at most 5000" in str(info.value), str(info.value)
    bad_tools = [  # schemas the engine rejects: a dangling $ref, a broken pattern
        [
            {
                "type": "function",
                "function": {
                    "name": "f",
                    "parameters": {"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}},
                },
            }
        ],
        [
            {
                "type": "function",
                "function": {
                    "name": "f",
                    "parameters": {"type": "object", "properties": {"x": {"type": "string", "pattern": "(("}}},
                },
            }
        ],
    ]
    for tools in bad_tools:
        with pytest.raises(openai.BadRequestError) as info:
            chat(
                client,
                messages=[{"role": "user", "content": "x"}],
                tools=tools,
                tool_choice="required",
                parallel_tool_calls=False,
            )
        assert info.value.status_code == 400
    assert complete(client, {"choice": COLORS}).text in COLORS  # still serving, and correctly


def test_auto_tool_calls_over_500_tools_equal_xgrammar_token_for_token(server) -> None:
    """``tool_choice="auto"`` with 500 strict tools, as vLLM's hermes parser constrains it (the structural tag
    built by vLLM's own builder): served by triec (its log says so), token for token equal to xgrammar serving
    the same language (the same tag inside a one-element ``sequence``, which triec leaves to xgrammar)."""
    from test_vllm_backend_rows import _vllm_auto_tag  # tests/ is on sys.path

    params = {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    }
    tag = _vllm_auto_tag([(name, params) for name in triec.synthetic.sets.tool_names(500)])
    doc = json.loads(tag)
    wrapped = json.dumps({"type": "structural_tag", "format": {"type": "sequence", "elements": [doc["format"]]}})
    client = server["client"]
    before = server["log"].read_text().count("STRUCTURAL_TAG served by triec")
    for prompt in ('Which tool? Think first, then call it: <tool_call>\n{"name": "', "Hello"):
        ours = complete(client, {"structural_tag": tag}, prompt, max_tokens=40)
        ref = complete(client, {"structural_tag": wrapped}, prompt, max_tokens=40)
        assert ours.token_ids == ref.token_ids, (ours.text, ref.text)
    log = server["log"].read_text()
    assert log.count("STRUCTURAL_TAG served by triec") >= before + 2 and "STRUCTURAL_TAG delegated to xgrammar" in log
