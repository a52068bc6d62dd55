"""Constrained beam search in transformers (issue 51): the processor follows each beam by its own tokens.

The reference is transformers' own ``prefix_allowed_tokens_fn`` driven by a brute-force rule written from the
contract alone (token t is allowed after p iff p + bytes(t) is a prefix of a value; the EOS ids iff p is a value;
a row with no allowed token, or after EOS, gets the EOS ids, as triec's dead and finished rows do): the same
``generate`` with :class:`TriecLogitsProcessor` must return the same sequences with the same scores, for W = 1 to
32, on three real tokenizers (a tiny random-weight Llama of each vocabulary's width: the model's preferences are
arbitrary, which is what a beam search over a trie must survive). Every finished sequence is a value then EOS.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import triec  # noqa: E402
from triec.integrations.transformers import (  # noqa: E402
    TriecLogitsProcessor,
    prefix_allowed_tokens_fn,
    ranked_values,
)
from triec.synthetic.sets import tool_names  # noqa: E402

pytestmark = pytest.mark.torch

WIDTHS = [1, 2, 4, 8, 16, 32]


def tiny_model(vocab_size: int, eos: list[int], seed: int = 0) -> object:
    config = transformers.LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=eos,
        pad_token_id=eos[0],
    )
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config).eval()
    model.generation_config = transformers.GenerationConfig(eos_token_id=eos, pad_token_id=eos[0])
    return model


class BruteForce:
    """The allowed set from the values' bytes alone: no trie, no table."""

    def __init__(self, values: list[str], vocab: triec.Vocabulary, prompt_length: int) -> None:
        self.values = [v.encode() for v in values]
        self.vocab = vocab
        self.eos = list(vocab.eos_token_ids)
        self.prompt_length = prompt_length
        self.by_bytes: dict[bytes, list[int]] = {}
        for i, b in enumerate(vocab.token_bytes):
            if b and i not in self.eos:
                self.by_bytes.setdefault(b, []).append(i)

    def __call__(self, batch_id: int, input_ids: torch.Tensor) -> list[int]:
        tokens = input_ids[self.prompt_length :].tolist()
        if any(t in self.eos for t in tokens):
            return self.eos
        p = b"".join(self.vocab.token_bytes[t] for t in tokens)
        allowed: set[int] = set()
        for v in self.values:
            if not v.startswith(p):
                continue
            if v == p:
                allowed.update(self.eos)
            rest = v[len(p) :]
            for n in range(1, len(rest) + 1):
                allowed.update(self.by_bytes.get(rest[:n], ()))
        return sorted(allowed) or self.eos


def beams(model, prompt, width: int, **processor) -> tuple[torch.Tensor, torch.Tensor]:
    out = model.generate(
        prompt,
        num_beams=width,
        num_return_sequences=width,
        max_new_tokens=12,
        do_sample=False,
        return_dict_in_generate=True,
        output_scores=True,
        **processor,
    )
    if width == 1:  # greedy: no beam scores; the processed log-probabilities of every step instead
        return out.sequences, torch.stack(out.scores, 1)
    return out.sequences, out.sequences_scores


@pytest.fixture(scope="module")
def setups(vocabs: dict[str, triec.Vocabulary]) -> dict[str, tuple]:
    values = tool_names(120, seed=5)
    out = {}
    for name, vocab in vocabs.items():
        table = triec.compile(values, vocab)
        model = tiny_model(vocab.vocab_size, list(vocab.eos_token_ids), seed=len(name))
        prompt = torch.tensor([[11, 22, 33, 44, 55]])
        out[name] = (values, vocab, table, model, prompt)
    return out


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", ["gpt2", "qwen2", "phi3"])
def test_beams_equal_a_brute_force_prefix_fn(name: str, width: int, setups) -> None:
    values, vocab, table, model, prompt = setups[name]
    reference = BruteForce(values, vocab, prompt.shape[1])
    want_seq, want_scores = beams(model, prompt, width, prefix_allowed_tokens_fn=reference)
    got_seq, got_scores = beams(model, prompt, width, logits_processor=[TriecLogitsProcessor(table)])
    assert torch.equal(got_seq, want_seq)
    assert torch.equal(got_scores, want_scores)
    eos = set(vocab.eos_token_ids)
    finished = 0
    for row in got_seq[:, prompt.shape[1] :].tolist():
        cut = next((i for i, t in enumerate(row) if t in eos), None)
        if cut is None:
            continue  # ran out of max_new_tokens (then transformers returns it unfinished)
        finished += 1
        text = b"".join(vocab.token_bytes[t] for t in row[:cut])
        assert text.decode() in values
    assert finished >= 1


def test_the_same_processor_follows_every_generate_call(setups) -> None:
    """One processor for two calls (the second with other beams): each call starts from its own prompt."""
    _, _, table, model, prompt = setups["gpt2"]
    processor = TriecLogitsProcessor(table)
    first = beams(model, prompt, 4, logits_processor=[processor])
    other = beams(model, prompt[:, :3], 8, logits_processor=[processor])
    assert torch.equal(first[0], beams(model, prompt, 4, logits_processor=[TriecLogitsProcessor(table)])[0])
    fresh = beams(model, prompt[:, :3], 8, logits_processor=[TriecLogitsProcessor(table)])
    assert torch.equal(other[0], fresh[0]) and torch.equal(other[1], fresh[1])


@pytest.mark.parametrize("kind", ["json", "canonical", "restricted", "schema", "pattern"])
def test_every_table_kind_under_beams_equals_its_prefix_fn(kind: str, setups) -> None:
    """The processor over beams equals transformers driven by :func:`prefix_allowed_tokens_fn` over the same table
    (a per-row walk from the tokens, one call a row): the state of every beam follows its own tokens."""
    values, vocab, table, model, prompt = setups["qwen2"]
    if kind == "json":
        t = triec.compile(values, vocab, encoding="json")
    elif kind == "canonical":
        t = triec.compile(values, vocab, tokenization="canonical")
    elif kind == "restricted":
        t = table.restrict(values[::3])
    elif kind == "pattern":
        t = triec.compile_pattern(format="date", vocab=vocab)
    else:
        t = triec.compile_schema(
            {"type": "object", "properties": {"tool": {"type": "string", "enum": values}}, "required": ["tool"]},
            vocab,
            engine="xgrammar",
            threshold=10,
        )
    for width in (3, 16):
        want = beams(model, prompt, width, prefix_allowed_tokens_fn=prefix_allowed_tokens_fn(t, prompt.shape[1]))
        got = beams(model, prompt, width, logits_processor=[TriecLogitsProcessor(t)])
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), (kind, width)


def test_think_then_answer_under_beams(setups) -> None:
    _, vocab, table, model, prompt = setups["qwen2"]
    for width in (2, 8):
        out = beams(
            model, prompt, width, logits_processor=[TriecLogitsProcessor(table, trigger="Answer:", vocab=vocab)]
        )
        assert out[0].shape[0] == width and torch.isfinite(out[1]).all()


def test_ranked_values_are_distinct_and_best_first(setups) -> None:
    """Beams over a byte trie spell one value several ways; ranked_values keeps each value once, at its best score,
    and only whole values; over a canonical table the beams are distinct values already."""
    values, vocab, table, model, prompt = setups["qwen2"]
    seq, scores = beams(model, prompt, 16, logits_processor=[TriecLogitsProcessor(table)])
    ranked = ranked_values(table, seq, scores, prompt.shape[1])
    names = [v for v, _ in ranked]
    assert names and len(set(names)) == len(names) and set(names) <= set(values)
    assert [s for _, s in ranked] == sorted((s for _, s in ranked), reverse=True)
    canonical = triec.compile(values, vocab, tokenization="canonical")
    seq, scores = beams(model, prompt, 16, logits_processor=[TriecLogitsProcessor(canonical)])
    eos = set(vocab.eos_token_ids)
    finished = {tuple(t for t in r if t not in eos) for r in seq[:, prompt.shape[1] :].tolist() if eos & set(r)}
    texts = [b"".join(vocab.token_bytes[t] for t in path) for path in finished]
    assert len(texts) == len(set(texts))  # one token path per value (a beam may repeat it with each EOS id)
    assert len(ranked_values(canonical, seq, scores, prompt.shape[1])) == len(finished)
