"""triec inside Outlines' generators, with the real SmolLM2 model (nox session ``outlines``: ``pytest -m outlines``).

Outlines' own path is the oracle: a ``Choice`` of the same values compiled by outlines-core must write the same
text as triec's processor (greedy), on Transformers (torch) and on LlamaCpp (numpy) where llama-cpp-python is
installed. On MLXLM outlines-core needs Metal, so there triec's processor is compared with triec's mlx-lm
integration driven directly.
"""

from __future__ import annotations

import enum
import sys
from pathlib import Path
from typing import Literal

import pytest

import triec
from triec.errors import RequestError

pytestmark = [pytest.mark.outlines, pytest.mark.model]
outlines = pytest.importorskip("outlines")

from outlines.types import Choice  # noqa: E402

from triec.integrations.outlines import processor, values_of  # noqa: E402

QUESTIONS = ("Which function computes a body mass index?", "Which tool gets the weather?")


def chat(question: str) -> str:
    return f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def hf_model(trained_model: Path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_pretrained(trained_model, dtype=torch.float32).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(trained_model)
    found = outlines.from_transformers(model, tokenizer)
    found.type_adapter.has_chat_template = False  # the prompts below are chat text already (and short)
    return found


# ------------------------------------------------------------------ output types


def test_values_of_reads_outlines_output_types() -> None:
    class Color(enum.Enum):
        RED = "red"
        GREEN = "green"

    assert values_of(["a", "b"]) == ["a", "b"]
    assert values_of(Choice(["x", "y"])) == ["x", "y"]
    assert values_of(Literal["p", "q"]) == ["p", "q"]
    assert values_of(Color) == ["red", "green"]
    assert values_of("tools.triec") is None and values_of(Path("tools.triec")) is None
    with pytest.raises(RequestError, match="strings"):
        values_of(Literal[1, 2])
    with pytest.raises(RequestError, match="no values"):
        values_of([])


# ------------------------------------------------------------------ Transformers (torch)


def test_transformers_writes_what_outlines_core_writes(hf_model, bfcl_names) -> None:
    values = bfcl_names[:300]
    ours = outlines.Generator(hf_model, processor=processor(hf_model, values))
    theirs = outlines.Generator(hf_model, Choice(values))  # outlines-core's index of the alternation
    for question in QUESTIONS:
        got = ours(chat(question), max_new_tokens=48)
        assert got == theirs(chat(question), max_new_tokens=48) and got in values
    prompts = [chat(q) for q in QUESTIONS]  # a batch: one state per row, left padding
    assert ours.batch(prompts, max_new_tokens=48) == theirs.batch(prompts, max_new_tokens=48)


def test_transformers_artifact_subset_and_think(hf_model, bfcl_names, trained_vocab, tmp_path) -> None:
    path = tmp_path / "names.triec"
    triec.compile(bfcl_names[:500], trained_vocab).save(path)
    subset = bfcl_names[100:110]
    got = outlines.Generator(hf_model, processor=processor(hf_model, str(path), values=subset))(
        chat(QUESTIONS[0]), max_new_tokens=48
    )
    assert got in subset
    spaced = triec.compile(bfcl_names[:50], trained_vocab, prefix=" ")
    think = outlines.Generator(hf_model, processor=processor(hf_model, spaced, trigger="Answer:"))
    text = think(
        chat("Which function computes a body mass index? Think, then write Answer: and the name."), max_new_tokens=64
    )
    if "Answer:" in text:  # within the budget: one value follows, then the end
        assert text.split("Answer:", 1)[1].strip() in bfcl_names[:50]


def test_transformers_refuses_another_tokenizers_table(hf_model, vocabs) -> None:
    with pytest.raises(RequestError, match="another tokenizer|wide"):
        processor(hf_model, triec.compile(["a", "b"], vocabs["gpt2"]))
    with pytest.raises(RequestError, match="Transformers, LlamaCpp and MLXLM"):
        processor(object(), ["a"])


# ------------------------------------------------------------------ MLXLM (mlx)


def test_mlxlm_equals_triecs_mlx_integration(trained_model, bfcl_names) -> None:
    """Outlines' own constrained path needs Metal on MLXLM (outlines-core's mlx kernel); triec's runs anywhere."""
    pytest.importorskip("mlx_lm")
    import mlx_lm

    from triec.integrations.mlx import MLXConstraint

    m, tok = mlx_lm.load(str(trained_model))
    model = outlines.from_mlxlm(m, tok)
    model.type_adapter.has_chat_template = False
    values = bfcl_names[:300]
    gen = outlines.Generator(model, processor=processor(model, values))
    direct = MLXConstraint(m, tok, triec.compile(values, triec.Vocabulary.load(trained_model)))
    for question in QUESTIONS:
        got = gen(chat(question), max_tokens=48)  # reset() before each: a new decoding
        want = mlx_lm.generate(m, tok, chat(question), max_tokens=48, logits_processors=[direct.processor()])
        assert got == want and got in values
    if sys.platform != "darwin":
        with pytest.raises(RuntimeError, match="Metal"):
            outlines.Generator(model, Choice(values))(chat(QUESTIONS[0]), max_tokens=8)


# ------------------------------------------------------------------ LlamaCpp (numpy)


def test_llama_cpp_writes_what_outlines_core_writes(bfcl_names) -> None:
    llama_cpp = pytest.importorskip("llama_cpp")
    from triec.eval.gguf_model import bundled_gguf

    llm = llama_cpp.Llama(str(bundled_gguf()), n_ctx=1024, n_threads=2, verbose=False, seed=0)
    model = outlines.from_llamacpp(llm, chat_mode=False)
    values = bfcl_names[:300]
    ours = outlines.Generator(model, processor=processor(model, values))
    theirs = outlines.Generator(model, Choice(values))
    for question in QUESTIONS:
        got = ours(chat(question), max_tokens=48, temperature=0)
        assert got == theirs(chat(question), max_tokens=48, temperature=0) and got in values
