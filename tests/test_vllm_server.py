"""The OpenAI-compatible vLLM server with the triec processor, driven by the ``openai`` client.

The server runs in its own process group on 127.0.0.1 at a free port, with a
bounded start-up wait; the whole group is stopped at the end (vLLM's engine
and worker processes included). Requires vLLM and openai (the ``vllm`` nox
session); skipped elsewhere.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

import triec
import triec.synthetic.sets

pytestmark = pytest.mark.vllm

pytest.importorskip("vllm")
openai = pytest.importorskip("openai")

from benchmarks.tiny_llama import make_tiny_llama  # noqa: E402
from benchmarks.vllm_server import SERVER_ENV, openai_server  # noqa: E402

COLORS = ["red", "green", "blue", "yellow"]
ESCAPE = "none_of_these"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    root = tmp_path_factory.mktemp("server")
    model = make_tiny_llama(root / "model")
    vocab = triec.Vocabulary.load(model)
    art = root / "artifacts"
    art.mkdir()
    tools = triec.compile(triec.synthetic.sets.tool_names(1000), vocab)
    tools.save(art / "tools.triec")
    triec.compile(COLORS, vocab).save(art / "colors.triec")
    triec.compile([*triec.synthetic.sets.tool_names(1000, seed=5), ESCAPE], vocab).save(art / "catalog.triec")
    env = dict(os.environ, **SERVER_ENV, TRIEC_ARTIFACT_DIR=str(art), VLLM_CPU_KVCACHE_SPACE="1")
    args = [
        "--model",
        str(model),
        "--served-model-name",
        "tiny",
        "--logits-processors",
        "triec.integrations.vllm:TriecLogitsProcessor",
        "--max-num-seqs",
        "8",
        "--max-model-len",
        "256",
        "--enforce-eager",
    ]
    with openai_server(args, env, root / "server.log", timeout_s=60) as (client, proc):
        yield {"client": client, "tools": set(tools.values), "proc": proc}
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)  # nothing of the server is left


def complete(client, prompt: str, xargs: dict | None, **kwargs):
    extra = {"vllm_xargs": xargs} if xargs is not None else None
    return client.completions.create(model="tiny", prompt=prompt, max_tokens=40, extra_body=extra, **kwargs)


def test_constrained_completions_over_http(server) -> None:
    client = server["client"]
    for i in range(6):
        for name, values in (("tools", server["tools"]), ("colors", set(COLORS))):
            choice = complete(client, f"Select one #{i}:", {"triec": name}, temperature=0.0 if i % 2 else 1.0).choices[
                0
            ]
            assert choice.text in values and choice.finish_reason == "stop", (name, choice)
    restricted = complete(client, "Pick:", {"triec": "colors", "restrict": ["blue", "red"]}, temperature=1.0)
    assert restricted.choices[0].text in {"blue", "red"}


def test_unconstrained_completion_is_untouched(server) -> None:
    choice = complete(server["client"], "Select one:", None, temperature=0.0).choices[0]
    assert choice.finish_reason == "length" and choice.text not in server["tools"]


def test_bad_requests_get_400(server) -> None:
    client = server["client"]
    for xargs in ({"triec": "../etc/passwd"}, {"triec": "nope"}, {"triec": "colors", "restrict": ["teal"]}):
        with pytest.raises(openai.BadRequestError) as info:
            complete(client, "x", xargs)
        assert info.value.status_code == 400
    assert complete(client, "Pick:", {"triec": "colors"}).choices[0].text in COLORS  # still serving


def test_a_restricted_shortlist_with_its_escape(server) -> None:
    """Issue 52, served: a request carries its shortlist (a retriever's top k, plus the escape value) of an
    artifact's values in ``restrict``. Every answer is listed; the escape alone writes the escape; a shortlist
    naming a value outside the artifact is HTTP 400 naming it, not the full set served silently."""
    client = server["client"]
    names = sorted(triec.synthetic.sets.tool_names(1000, seed=5))
    shortlist = [*names[300:304], ESCAPE]
    for i in range(4):
        text = complete(client, f"Pick #{i}:", {"triec": "catalog", "restrict": shortlist}, temperature=1.0)
        assert text.choices[0].text in shortlist and text.choices[0].finish_reason == "stop"
    assert complete(client, "Pick:", {"triec": "catalog", "restrict": [ESCAPE]}).choices[0].text == ESCAPE
    with pytest.raises(openai.BadRequestError) as info:
        complete(client, "Pick:", {"triec": "catalog", "restrict": [*shortlist, "no_such_tool"]})
    assert info.value.status_code == 400 and "no_such_tool" in str(info.value)
    assert complete(client, "Pick:", {"triec": "catalog", "restrict": shortlist}).choices[0].text in shortlist
