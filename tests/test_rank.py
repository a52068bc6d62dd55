"""``triec.rank``: the k most probable values, against references that share nothing with the searches.

The reference enumerates every token path of every value (every tokenization of its spelled bytes for an "any"
table, from the vocabulary's bytes alone; the tokenizer's own encoding for a canonical one), scores each by running
the model on the whole prompt + path + EOS (no cache, no padding), keeps each value's best path and sorts. The exact
search must give the same values and scores for every k; a beam search wide enough to hold every path must too;
a beam search of W beams must give the distinct values of transformers' own ``generate(num_beams=W)`` (with
``length_penalty=0``, the scoring both share). Models are tiny random-weight Llamas of each vocabulary's width
(tests/test_beams.py); the same weights in mlx-lm must rank the same; llama.cpp (the bundled SmolLM2 GGUF) is held
against its own brute force.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from test_beams import tiny_model  # noqa: E402

import triec  # noqa: E402
from triec.errors import RequestError  # noqa: E402
from triec.integrations.transformers import TriecLogitsProcessor, ranked_values  # noqa: E402
from triec.synthetic.sets import tool_names  # noqa: E402

pytestmark = pytest.mark.torch

VALUES = ["cat", "car", "cart", "dog", "do", "dot", "a", "ab", "cat-log", "über"]
PROMPT = [11, 22, 33, 44, 55]
KS = [1, 3, len(VALUES) + 3]


def tokenizations(data: bytes, vocab: triec.Vocabulary) -> list[tuple[int, ...]]:
    """Every token path spelling ``data``, from the vocabulary's bytes alone (EOS and empty tokens excluded)."""
    eos = set(vocab.eos_token_ids)
    by_bytes: dict[bytes, list[int]] = {}
    for i, b in enumerate(vocab.token_bytes):
        if b and i not in eos:
            by_bytes.setdefault(b, []).append(i)
    memo: dict[int, list[tuple[int, ...]]] = {len(data): [()]}

    def at(i: int) -> list[tuple[int, ...]]:
        if i not in memo:
            memo[i] = [
                (t, *rest)
                for n in range(1, len(data) - i + 1)
                for t in by_bytes.get(data[i : i + n], ())
                for rest in at(i + n)
            ]
        return memo[i]

    return at(0)


def torch_rows(model, seqs: list[list[int]]) -> list[np.ndarray]:
    """The log-softmax rows of each sequence run whole (sequences of one length in one batch: no cache, no pad)."""
    out: list[np.ndarray] = [np.empty(0)] * len(seqs)
    by_length: dict[int, list[int]] = {}
    for i, s in enumerate(seqs):
        by_length.setdefault(len(s), []).append(i)
    for group in by_length.values():
        for at in range(0, len(group), 64):
            part = group[at : at + 64]
            with torch.inference_mode():
                logits = model(torch.tensor([seqs[i] for i in part])).logits.double()
            for i, rows in zip(part, torch.log_softmax(logits, dim=-1).numpy(), strict=True):
                out[i] = rows
    return out


def brute_force(rows, prompt, paths_of: dict[str, list[tuple[int, ...]]], eos: list[int]) -> list[tuple[str, float]]:
    """Each value's best path, then its best EOS, sorted best first; ``rows(seqs)``: each whole sequence's
    log-softmax rows from the model."""
    flat = [(v, p) for v, ps in paths_of.items() for p in ps]
    at = len(prompt) - 1
    best: dict[str, float] = {}
    for (v, p), logp in zip(flat, rows([prompt + list(p) for _, p in flat]), strict=True):
        s = float(sum(logp[at + i, t] for i, t in enumerate(p)) + max(logp[at + len(p), e] for e in eos))
        best[v] = max(best.get(v, -math.inf), s)
    return sorted(best.items(), key=lambda kv: -kv[1])


def spellings(values: list[str], vocab: triec.Vocabulary, kind: str) -> dict[str, list[tuple[int, ...]]]:
    if kind == "canonical":
        enc = vocab.encoder()
        return {v: [tuple(enc.encode(v, add_special_tokens=False).ids)] for v in values}
    spell = (lambda v: json.dumps(v, ensure_ascii=False)) if kind == "json" else (lambda v: v)
    return {v: tokenizations(spell(v).encode(), vocab) for v in values}


def table_of(values: list[str], vocab: triec.Vocabulary, kind: str):
    if kind == "json":
        return triec.compile(values, vocab, encoding="json")
    if kind == "canonical":
        return triec.compile(values, vocab, tokenization="canonical")
    if kind == "tails":
        return triec.compile(values, vocab, layout="tails")
    return triec.compile(values, vocab)


def same(got, want, tol: float = 1e-4) -> None:
    assert [v for v, _ in got] == [v for v, _ in want]
    for (v, a), (_, b) in zip(got, want, strict=True):
        assert abs(a - b) < tol, (v, a, b)


@pytest.fixture(scope="module")
def models(vocabs):
    return {name: tiny_model(v.vocab_size, list(v.eos_token_ids), seed=7 + len(name)) for name, v in vocabs.items()}


@pytest.fixture(scope="module")
def references(vocabs, models):
    """(vocab, kind) -> the brute-force ranking of VALUES."""
    cache = {}

    def get(name: str, kind: str):
        key = (name, "any" if kind == "tails" else kind)
        if key not in cache:
            vocab = vocabs[name]
            rows = lambda seqs, m=models[name]: torch_rows(m, seqs)  # noqa: E731
            cache[key] = brute_force(rows, PROMPT, spellings(VALUES, vocab, key[1]), list(vocab.eos_token_ids))
        return cache[key]

    return get


@pytest.mark.parametrize("kind", ["plain", "json", "canonical", "tails"])
@pytest.mark.parametrize("name", ["gpt2", "qwen2", "phi3"])
def test_exact_top_k_equals_brute_force(name: str, kind: str, vocabs, models, references) -> None:
    vocab, model = vocabs[name], models[name]
    table = table_of(VALUES, vocab, kind)
    want = references(name, kind)
    for k, batch in [(k, 8) for k in KS] + [(len(VALUES), 1)]:
        got = triec.rank(model, PROMPT, table, k, batch=batch)
        assert got.exact and got.complete and got.proven == len(got) == min(k, len(VALUES))
        same(got.items(), want[:k])
        for value, path in zip(got.values, got.paths, strict=True):  # each path spells its value, then EOS
            assert path[-1] in vocab.eos_token_ids
            assert table.value(table.walk(path[:-1])) == value


@pytest.mark.parametrize("name", ["gpt2", "qwen2"])
def test_a_beam_wide_enough_for_every_path_equals_exact(name: str, vocabs, models, references) -> None:
    vocab, model = vocabs[name], models[name]
    table = triec.compile(VALUES, vocab)
    paths = sum(len(p) for p in spellings(VALUES, vocab, "plain").values()) * len(vocab.eos_token_ids)
    got = triec.rank(model, PROMPT, table, len(VALUES), method="beam", beams=paths)
    assert not got.exact and got.method == "beam"
    same(got.items(), references(name, "plain"))


def hf_beams(model, prompt: list[int], table, width: int, max_new_tokens: int) -> list[tuple[str, float]]:
    out = model.generate(
        torch.tensor([prompt]),
        num_beams=width,
        num_return_sequences=width,
        max_new_tokens=max_new_tokens,
        do_sample=False,
        length_penalty=0.0,
        early_stopping=False,
        return_dict_in_generate=True,
        output_scores=True,
        logits_processor=[TriecLogitsProcessor(table)],
    )
    found = ranked_values(table, out.sequences, out.sequences_scores, len(prompt))
    return [(v, s) for v, s in found if s > -1e8]  # rows transformers pads with -1e9 when too few beams live


@pytest.mark.parametrize("width", [1, 3, 8])
@pytest.mark.parametrize("name", ["gpt2", "qwen2", "phi3"])
def test_beam_equals_transformers_generate(name: str, width: int, vocabs, models) -> None:
    vocab, model = vocabs[name], models[name]
    values = tool_names(30, seed=3)
    for kind in ("plain", "canonical"):
        table = table_of(values, vocab, kind)
        longest = max(len(v.encode()) for v in values) + 1
        want = hf_beams(model, PROMPT, table, width, longest) if width > 1 else None
        got = triec.rank(model, PROMPT, table, width, method="beam", beams=width)
        assert set(got.values) <= set(values) and len(set(got.values)) == len(got.values)
        if want is not None:
            same(got.items(), want)
        else:  # one beam is greedy decoding: the path generate picks, token by token
            out = model.generate(
                torch.tensor([PROMPT]),
                max_new_tokens=longest,
                do_sample=False,
                logits_processor=[TriecLogitsProcessor(table)],
            )
            ids = out[0, len(PROMPT) :].tolist()
            assert list(got.paths[0]) == ids[: len(got.paths[0])]


def test_the_bound_is_reported_and_what_comes_back_is_values(vocabs, models, references) -> None:
    vocab, model = vocabs["qwen2"], models["qwen2"]
    table = triec.compile(VALUES, vocab)
    want = references("qwen2", "plain")
    full = triec.rank(model, PROMPT, table, 5)
    for bound in (1, 2, 5, 20):
        got = triec.rank(model, PROMPT, table, 5, max_expansions=bound, batch=1)
        assert got.expansions <= bound
        if got.expansions < full.expansions:
            assert got.hit_bound and not got.complete and not got.exact
        assert set(got.values) <= set(VALUES) and len(set(got.values)) == len(got.values)
        same(got.items()[: got.proven], want[: got.proven])  # the proven head is exact
        scored = dict(want)
        for v, s in got.items()[got.proven :]:  # the rest: real paths, at most their value's best
            assert s <= scored[v] + 1e-4
    assert triec.rank(model, PROMPT, table, 5, max_expansions=full.expansions, batch=1).exact


def test_restricted_views_and_device_tables(vocabs, models, references) -> None:
    vocab, model = vocabs["gpt2"], models["gpt2"]
    table = triec.compile([*VALUES, "zebra", "zeta"], vocab)
    want = references("gpt2", "plain")
    same(triec.rank(model, PROMPT, table.restrict(VALUES), 20).items(), want)
    same(triec.rank(model, PROMPT, triec.compile(VALUES, vocab).to_torch(), 4).items(), want[:4])


def test_a_pattern_is_bounded_and_gives_matching_text(vocabs, models) -> None:
    vocab, model = vocabs["gpt2"], models["gpt2"]
    table = triec.compile_pattern(pattern="(ab|cd)[0-9]{1,2}", vocab=vocab)
    got = triec.rank(model, PROMPT, table, 5, max_expansions=400)
    assert got.values and all(table.matches(v) for v in got.values)
    beams = triec.rank(model, PROMPT, table, 3, method="beam", beams=4, max_tokens=6)
    assert all(table.matches(v) for v in beams.values)


def test_refusals(vocabs, models) -> None:
    vocab, model = vocabs["qwen2"], models["qwen2"]
    schema = triec.compile_schema(
        {"type": "object", "properties": {"tool": {"type": "string", "enum": VALUES}}, "required": ["tool"]},
        vocab,
        engine="xgrammar",
        threshold=2,
    )
    with pytest.raises(RequestError, match="schema"):
        triec.rank(model, PROMPT, schema, 3)
    table = triec.compile(VALUES, vocab)
    with pytest.raises(RequestError, match="trigger"):
        triec.rank(model, PROMPT, triec.Triggered(table, vocab, "Answer:"), 3)
    with pytest.raises(RequestError, match="method"):
        triec.rank(model, PROMPT, table, 3, method="greedy")
    with pytest.raises(RequestError, match="tokenizer"):
        triec.rank(model, "a text prompt", table, 3)
    with pytest.raises(RequestError, match="at least 1"):
        triec.rank(model, PROMPT, table, 0)
    with pytest.raises(RequestError, match="does not know"):
        triec.rank(object(), PROMPT, table, 3)


def test_a_scorer_object_is_used_as_the_model(vocabs, models, references) -> None:
    """The core is framework-free: anything with logprobs(paths) ranks (here a uniform model: every value's score
    is its shortest path's length times -log V, EOS included)."""
    vocab = vocabs["gpt2"]
    table = triec.compile(VALUES, vocab)

    class Uniform:
        def logprobs(self, paths):
            return np.full((len(paths), vocab.vocab_size), -math.log(vocab.vocab_size))

    got = triec.rank(Uniform(), None, table, len(VALUES))
    shortest = {v: min(len(p) for p in ps) + 1 for v, ps in spellings(VALUES, vocab, "plain").items()}
    for v, s in got.items():
        assert s == pytest.approx(-shortest[v] * math.log(vocab.vocab_size))
    assert [shortest[v] for v in got.values] == sorted(shortest[v] for v in got.values)


# ------------------------------------------------------------------ mlx-lm: the same weights rank the same


def mlx_twin(model):
    """The tiny Llama's weights in mlx-lm's Llama."""
    mx = pytest.importorskip("mlx.core")
    llama = pytest.importorskip("mlx_lm.models.llama")
    c = model.config
    twin = llama.Model(
        llama.ModelArgs(
            model_type="llama",
            hidden_size=c.hidden_size,
            num_hidden_layers=c.num_hidden_layers,
            intermediate_size=c.intermediate_size,
            num_attention_heads=c.num_attention_heads,
            num_key_value_heads=c.num_key_value_heads,
            rms_norm_eps=c.rms_norm_eps,
            vocab_size=c.vocab_size,
            rope_theta=c.rope_parameters["rope_theta"] if getattr(c, "rope_parameters", None) else c.rope_theta,
            tie_word_embeddings=True,
        )
    )
    weights = [
        (k, mx.array(v.detach().float().numpy())) for k, v in model.state_dict().items() if k != "lm_head.weight"
    ]
    twin.load_weights(weights)
    return twin


@pytest.mark.mlx
@pytest.mark.parametrize("method", ["exact", "beam"])
def test_mlx_ranks_as_transformers_on_the_same_weights(method: str, vocabs, models, references) -> None:
    vocab, model = vocabs["phi3"], models["phi3"]
    twin = mlx_twin(model)
    table = triec.compile(VALUES, vocab)
    got = triec.rank(twin, PROMPT, table, 6, method=method, beams=8)
    want = triec.rank(model, PROMPT, table, 6, method=method, beams=8)
    same(got.items(), want.items())
    if method == "exact":
        same(got.items(), references("phi3", "plain")[:6])


# ------------------------------------------------------------------ llama.cpp: against its own brute force


@pytest.mark.llamacpp
def test_llama_cpp_exact_equals_its_own_brute_force(gguf: str, gguf_vocab) -> None:
    llama_cpp = pytest.importorskip("llama_cpp")
    llm = llama_cpp.Llama(gguf, n_ctx=256, n_threads=1, verbose=False, seed=0)
    full = llama_cpp.Llama(gguf, n_ctx=256, n_threads=1, verbose=False, seed=0, logits_all=True)
    values = ["get", "set", "sort"]
    prompt = llm.tokenize(
        b"<|im_start|>user\nWhich tool tells the time?<|im_end|>\n<|im_start|>assistant\n", add_bos=False, special=True
    )
    eos = [e for e in gguf_vocab.eos_token_ids]

    def rows(seqs: list[list[int]]) -> list[np.ndarray]:
        out = []
        for ids in seqs:  # each sequence from an empty cache
            full.reset()
            full.eval(ids)
            logits = np.asarray(full.scores[: len(ids)], dtype=np.float64)
            logp = logits - logits.max(-1, keepdims=True)
            out.append(logp - np.log(np.exp(logp).sum(-1, keepdims=True)))
        return out

    want = brute_force(rows, prompt, {v: tokenizations(v.encode(), gguf_vocab) for v in values}, eos)
    table = triec.compile(values, gguf_vocab)
    for k in (1, 4):
        got = triec.rank(llm, prompt, table, k)
        same(got.items(), want[:k], tol=2e-3)
    beams = triec.rank(llm, prompt, table, len(values), method="beam", beams=16)
    same(beams.items(), want, tol=2e-3)


# ------------------------------------------------------------------ fuzz: random sets, a seeded framework-free model


class Seeded:
    """A model as a function of the path alone: each row is a log-softmax of noise seeded by the path (sharp
    enough that paths differ), so the reference can score any path without the search."""

    def __init__(self, width: int, seed: int) -> None:
        self.width, self.seed = width, seed
        self.rows: dict[tuple[int, ...], np.ndarray] = {}

    def row(self, path: tuple[int, ...]) -> np.ndarray:
        if path not in self.rows:
            rng = np.random.default_rng([self.seed, len(path), *path])
            x = rng.normal(0.0, 3.0, self.width)
            self.rows[path] = x - x.max() - np.log(np.exp(x - x.max()).sum())
        return self.rows[path]

    def logprobs(self, paths):
        return np.stack([self.row(tuple(p)) for p in paths])


@pytest.mark.parametrize("seed", range(6))
def test_fuzz_exact_and_wide_beams_equal_enumeration(seed: int, vocabs) -> None:
    rng = np.random.default_rng(seed)
    vocab = vocabs[["gpt2", "qwen2", "phi3"][seed % 3]]
    alphabet = "ab-é"
    values = sorted({"".join(rng.choice(list(alphabet), rng.integers(1, 5))) for _ in range(rng.integers(2, 9))})
    kind = ["plain", "tails", "json"][seed % 3]
    table = table_of(values, vocab, kind)
    model = Seeded(vocab.vocab_size, seed)
    eos = list(vocab.eos_token_ids)
    best = {}
    for v, paths in spellings(values, vocab, kind).items():
        best[v] = max(
            sum(float(model.row(p[:i])[t]) for i, t in enumerate(p)) + max(float(model.row(p)[e]) for e in eos)
            for p in paths
        )
    want = sorted(best.items(), key=lambda kv: -kv[1])
    for k in (1, 2, len(values) + 1):
        got = triec.rank(model, None, table, k, batch=int(rng.integers(1, 6)))
        assert got.exact
        same(got.items(), want[:k], tol=1e-9)
    paths = sum(len(p) for p in spellings(values, vocab, kind).values()) * len(eos)
    same(triec.rank(model, None, table, len(values), method="beam", beams=paths).items(), want, tol=1e-9)


@pytest.mark.llamacpp
def test_eval_rank_mode_on_llama_cpp(gguf: str) -> None:
    """``triec eval --engine llama.cpp --beams 2 --top-k 2``'s rank mode: values of the item, best first."""
    pytest.importorskip("llama_cpp")
    from pathlib import Path

    from triec.eval import bfcl
    from triec.eval.data import parse_item
    from triec.eval.llama_cpp import LlamaCppEvaluator
    from triec.eval.run import EvalConfig

    source = Path(__file__).resolve().parent.parent / "fixtures" / "eval" / "bfcl"
    item = parse_item(bfcl.convert("multiple", source)[0], "bfcl:0", 0)
    evaluator = LlamaCppEvaluator(Path(gguf), EvalConfig(modes=("rank",), top_k=2, beams=2), n_ctx=1024)
    (got,) = evaluator.run(item)
    assert got.mode == "rank" and got.valid and got.ranked and set(got.ranked) <= set(item.candidates or ())
    assert got.ranked_scores == sorted(got.ranked_scores or [], reverse=True) and got.exact is False
