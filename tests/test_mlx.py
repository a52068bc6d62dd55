"""triec inside mlx-lm, with the real SmolLM2 model (nox session ``mlx``: ``pytest -m mlx``).

The model is the trained-model fixture's directory (the GGUF converted once), loaded by mlx-lm as its llama
model; on Linux mlx's CPU build runs it (about 0.1 s a token). Oracles: the loaded tokenizer's own decoding for
the vocabulary, the table's ``allowed`` state by state for the rows, xgrammar's matcher (through xgrammar's mlx
kernel) for greedy outputs, token for token.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from shared import bfcl_registry, spell

import triec
from triec.errors import RequestError, TokenizerMismatch

pytestmark = [pytest.mark.mlx, pytest.mark.model]
mx = pytest.importorskip("mlx.core")
mlx_lm = pytest.importorskip("mlx_lm")

QUESTIONS = ("Which function computes a body mass index?", "Name a function that sorts a list.")


@pytest.fixture(scope="module")
def loaded(trained_model: Path):
    return mlx_lm.load(str(trained_model))


@pytest.fixture(scope="module")
def model(loaded):
    return loaded[0]


@pytest.fixture(scope="module")
def tok(loaded):
    return loaded[1]


def chat(tok, question: str) -> list[int]:
    """A short chat prompt (no system turn: mlx's CPU build reads a prompt at about 10 tokens a second)."""
    return tok.encode(f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)


def greedy(model, tok, prompt: list[int], processors: list, limit: int = 24) -> tuple[list[int], str | None]:
    """mlx-lm's own ``stream_generate``, greedy: the new tokens (EOS excluded) and the finish reason."""
    out, reason = [], None
    for r in mlx_lm.stream_generate(model, tok, prompt, max_tokens=limit, logits_processors=processors):
        reason = r.finish_reason
        if r.token in tok.eos_token_ids:
            break
        out.append(r.token)
    return out, reason


def xgrammar_processor(trained_model: Path, tok, values, mode: str = "trie", trigger: str = "Answer:"):
    """xgrammar's matcher filling the mask, xgrammar's mlx kernel applying it (what ``--compare xgrammar`` runs)."""
    xgr = pytest.importorskip("xgrammar")
    from transformers import AutoTokenizer

    from triec.eval.decode import XGrammarConstraint
    from triec.eval.mlx import XGrammarProcessor
    from triec.eval.run import xgrammar_structural_tag

    info = xgr.TokenizerInfo.from_huggingface(
        AutoTokenizer.from_pretrained(trained_model), vocab_size=len(tok), stop_token_ids=sorted(tok.eos_token_ids)
    )
    grammar = xgr.GrammarCompiler(info, max_threads=1).compile_structural_tag(
        xgrammar_structural_tag(mode, tuple(values), trigger)
    )
    vocab = triec.Vocabulary.load(trained_model)
    until = trigger.encode() if mode == "think" else None
    c = XGrammarConstraint(
        xgr.GrammarMatcher(grammar), info.vocab_size, len(tok), frozenset(tok.eos_token_ids), vocab.token_bytes, until
    )
    return XGrammarProcessor(c, info.vocab_size)


def kept(out) -> list[int]:
    return np.flatnonzero(np.isfinite(np.array(out.astype(mx.float32))).reshape(-1)).tolist()


# ------------------------------------------------------------------ the vocabulary and admission


def test_mlx_lm_runs_the_model_transformers_runs(model, tok, trained_model: Path) -> None:
    """The converted directory means one model to both loaders: mlx-lm's next-token log-probabilities after a chat
    prompt equal transformers' (the RoPE base written where mlx-lm reads it; with the base inside
    ``rope_parameters`` only, mlx-lm ran base 10,000 instead of 100,000 and differed by up to 3.3 nats)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    assert json.loads((trained_model / "config.json").read_text())["rope_theta"] == 100_000
    ids = chat(tok, QUESTIONS[0])
    theirs = transformers.AutoModelForCausalLM.from_pretrained(trained_model, dtype=torch.float32)
    with torch.no_grad():
        want = torch.log_softmax(theirs(torch.tensor([ids])).logits[0].double(), -1).numpy()
    got = np.array(model(mx.array([ids]))[0].astype(mx.float32))
    got = got - np.log(np.exp(got - got.max(-1, keepdims=True)).sum(-1, keepdims=True)) - got.max(-1, keepdims=True)
    assert np.abs(got[:, : want.shape[1]] - want).max() < 1e-3


def test_the_vocabulary_is_the_loaded_tokenizers(tok, trained_vocab) -> None:
    from triec.integrations.local import check_tokenizer, tokenizer_vocabulary

    check_tokenizer(tok, trained_vocab)  # every id with whole characters decodes to triec's bytes
    found = tokenizer_vocabulary(tok, vocab_size=len(tok), eos_token_ids=tok.eos_token_ids)
    assert found.fingerprint == trained_vocab.fingerprint


def test_another_vocabulary_is_one_clear_error(model, tok, trained_vocab, vocabs) -> None:
    from triec.integrations.mlx import MLXConstraint

    with pytest.raises(TokenizerMismatch, match="49,152 tokens, triec's vocabulary 50,257"):
        MLXConstraint(model, tok, triec.compile(["a", "b"], vocabs["gpt2"]), vocab=vocabs["gpt2"])
    spoiled = list(trained_vocab.token_bytes)
    i = next(i for i, b in enumerate(spoiled) if b == b"function")
    spoiled[i] = b"functions"  # one id misread: the same size, one wrong mask bit
    odd = triec.Vocabulary(spoiled, eos_token_ids=trained_vocab.eos_token_ids)
    with pytest.raises(TokenizerMismatch, match=f"token {i} as b'functions'.*1 of 49,152 ids differ"):
        MLXConstraint(model, tok, triec.compile(["a", "b"], odd), vocab=odd)


def test_an_artifact_for_another_tokenizer_is_refused(model, tok, vocabs, tmp_path) -> None:
    from triec.integrations.mlx import MLXConstraint

    path = tmp_path / "gpt2.triec"
    triec.compile(["get_weather", "get_time"], vocabs["gpt2"]).save(path)
    with pytest.raises(RequestError, match=str(path)):
        MLXConstraint(model, tok, path)


def test_an_eos_mlx_lm_does_not_stop_on_is_refused(model, tok, trained_model) -> None:
    from triec.integrations.mlx import MLXConstraint

    odd = triec.Vocabulary.load(trained_model, eos_token_ids=[17])  # "!" as EOS: mlx-lm would never stop on it
    with pytest.raises(RequestError, match=r"tokenizer.eos_token_ids"):
        MLXConstraint(model, tok, triec.compile(["a", "b"], odd))


# ------------------------------------------------------------------ rows, state by state


def test_rows_equal_the_table_state_by_state(model, tok, trained_vocab, bfcl_names) -> None:
    from triec.integrations.mlx import MLXConstraint

    table = triec.compile(bfcl_names[:300], trained_vocab)
    constraint = MLXConstraint(model, tok, table)
    rng = np.random.default_rng(0)
    prompt = chat(tok, "hi")
    checked = 0
    for value in rng.choice(table.values, 20, replace=False):
        ids = spell(table, trained_vocab, value.encode())
        p, matcher = constraint.processor(), table.matcher()
        for n in range(len(ids) + 2):
            seq = mx.array(prompt + ids[:n] + ([2] if n > len(ids) else []), dtype=mx.int32)
            logits = mx.array(rng.standard_normal((1, len(tok))).astype(np.float32))
            out = p(seq, logits)
            allowed = [2] if n > len(ids) else table.allowed(matcher.state).tolist()  # after EOS: EOS only
            assert kept(out) == allowed
            assert np.array_equal(np.array(out)[0, allowed], np.array(logits)[0, allowed])
            checked += 1
            if n < len(ids):
                assert matcher.accept_token(ids[n])
        assert p.matcher.is_terminated()
    assert checked > 60


def test_truncated_tokens_resync_and_a_new_prompt_restarts(model, tok, trained_vocab, bfcl_names) -> None:
    """Speculative decoding shortens ``tokens`` when drafts are rejected: the state follows back, then on."""
    from triec.integrations.mlx import MLXConstraint

    table = triec.compile(bfcl_names[:300], trained_vocab)
    p = MLXConstraint(model, tok, table).processor()
    a, b = [v for v in table.values if v.startswith("calculate_")][:2]
    ia, ib = spell(table, trained_vocab, a.encode()), spell(table, trained_vocab, b.encode())
    common = next(i for i, (x, y) in enumerate(zip(ia, ib, strict=False)) if x != y)
    assert 0 < common < min(len(ia), len(ib))
    prompt = chat(tok, "hi")
    zeros = mx.zeros((1, len(tok)))

    def rows_at(prefix: list[int]) -> list[int]:
        m = table.matcher()
        assert all(m.accept_token(t) for t in prefix)
        return table.allowed(m.state).tolist()

    for n in range(len(ia) + 1):  # a's tokens one by one
        assert kept(p(mx.array(prompt + ia[:n]), zeros)) == rows_at(ia[:n])
    assert kept(p(mx.array(prompt + ia[: common + 1]), zeros)) == rows_at(ia[: common + 1])  # rejected drafts
    assert kept(p(mx.array(prompt + ia[:common]), zeros)) == rows_at(ia[:common])
    for n in range(common + 1, len(ib) + 1):  # then b's tokens from where they part
        assert kept(p(mx.array(prompt + ib[:n]), zeros)) == rows_at(ib[:n])
    assert p.fed == len(ib)
    other = chat(tok, "ho")  # a new prompt of the same length: a new decoding
    assert len(other) == len(prompt)
    assert kept(p(mx.array(other + ia[:2]), zeros)) == table.allowed(0).tolist()
    assert p.start == len(other) + 2 and p.fed == 0 and p.seen == []
    p.reset()
    assert kept(p(mx.array(prompt), zeros)) == table.allowed(0).tolist()


def test_a_refused_token_leaves_eos_only(model, tok, trained_vocab) -> None:
    from triec.integrations.mlx import MLXConstraint

    p = MLXConstraint(model, tok, triec.compile(["alpha", "beta"], trained_vocab)).processor()
    x = tok.encode("zzz", add_special_tokens=False)[0]
    zeros = mx.zeros((1, len(tok)))
    p(mx.array([1, 2, 3]), zeros)
    assert kept(p(mx.array([1, 2, 3, x]), zeros)) == list(trained_vocab.eos_token_ids)
    assert (
        kept(p(mx.array([1, 2, 3]), zeros)) == triec.compile(["alpha", "beta"], trained_vocab).allowed(0).tolist()
    )  # rolled back


# ------------------------------------------------------------------ generation, against xgrammar


@pytest.mark.parametrize("k", [50, 1998])
def test_greedy_outputs_equal_xgrammar_and_end_in_a_value(
    model, tok, trained_vocab, bfcl_names, trained_model, k
) -> None:
    from triec.integrations.mlx import MLXConstraint

    values = bfcl_names[:k]
    constraint = MLXConstraint(model, tok, triec.compile(values, trained_vocab))
    for question in QUESTIONS:
        prompt = chat(tok, question)
        ours, reason = greedy(model, tok, prompt, [constraint.processor()], limit=48)
        theirs, _ = greedy(model, tok, prompt, [xgrammar_processor(trained_model, tok, values)], limit=48)
        assert ours == theirs, (question, tok.decode(ours), tok.decode(theirs))
        assert tok.decode(ours) in values and reason == "stop"


def test_speculative_decoding_follows_rejected_drafts(model, tok, trained_vocab, bfcl_names) -> None:
    """mlx-lm's speculative loop truncates ``tokens`` each round: the constrained output is greedy's own."""
    import copy

    import mlx.nn as nn

    from triec.integrations.mlx import MLXConstraint

    constraint = MLXConstraint(model, tok, triec.compile(bfcl_names[:500], trained_vocab))
    prompt = chat(tok, QUESTIONS[0])
    plain, _ = greedy(model, tok, prompt, [constraint.processor()], limit=32)
    draft = copy.deepcopy(model)
    nn.quantize(draft, group_size=64, bits=2)  # a poor draft: some of its tokens are rejected
    p = constraint.processor()
    rollbacks = []
    rollback = p.matcher.rollback
    p.matcher.rollback = lambda n: (rollbacks.append(n), rollback(n))  # type: ignore[method-assign]
    spec = []
    for r in mlx_lm.stream_generate(
        model, tok, prompt, max_tokens=32, draft_model=draft, num_draft_tokens=3, logits_processors=[p]
    ):
        if r.token in tok.eos_token_ids:
            break
        spec.append(r.token)
    assert spec == plain and tok.decode(spec) in bfcl_names[:500]
    assert rollbacks  # the state went back with the rejected drafts


def test_batch_generator_takes_a_processor_per_sequence(model, tok, trained_vocab, bfcl_names) -> None:
    from mlx_lm.generate import BatchGenerator

    from triec.integrations.mlx import MLXConstraint

    values = bfcl_names[:300]
    table = triec.compile(values, trained_vocab)
    constraint = MLXConstraint(model, tok, table)
    prompts = [chat(tok, q) for q in (*QUESTIONS, "Which tool gets the weather?")]
    gen = BatchGenerator(model, max_tokens=24, stop_tokens=[[t] for t in tok.eos_token_ids])
    uids = gen.insert(prompts, logits_processors=[*constraint.processors(2), []])  # the third one free
    out: dict[int, list[int]] = {u: [] for u in uids}
    done: set[int] = set()
    while len(done) < len(uids):
        for r in gen.next_generated():
            out[r.uid].append(r.token)
            if r.finish_reason is not None:
                done.add(r.uid)
    gen.close()
    for uid in uids[:2]:
        ids = out[uid]
        assert ids[-1] in tok.eos_token_ids and tok.decode(ids[:-1]) in values
        m = table.matcher()
        assert all(m.accept_token(t) for t in ids) and m.is_terminated()


def test_a_shortlist_with_its_escape_is_the_subsets_own_table(model, tok, trained_vocab, bfcl_names) -> None:
    """Issue 52, served: ``values=`` a request's shortlist (a retriever's top k, plus the escape value) of the
    artifact's values. The greedy output equals that of the shortlist compiled on its own, token for token, and is
    listed; the escape alone writes the escape; a stranger is one RequestError, never the full set served."""
    from triec.integrations.mlx import MLXConstraint

    escape = "none_of_these"
    table = triec.compile([*bfcl_names[:500], escape], trained_vocab)
    shortlist = [*bfcl_names[200:205], escape]
    prompt = chat(tok, QUESTIONS[0])
    ids, _ = greedy(model, tok, prompt, [MLXConstraint(model, tok, table, values=shortlist).processor()])
    alone = MLXConstraint(model, tok, triec.compile(shortlist, trained_vocab))
    assert ids == greedy(model, tok, prompt, [alone.processor()])[0] and tok.decode(ids) in shortlist
    only, _ = greedy(model, tok, prompt, [MLXConstraint(model, tok, table, values=[escape]).processor()])
    assert tok.decode(only) == escape
    with pytest.raises(RequestError, match="values=: value 'no_such_tool' is not one of the table's values"):
        MLXConstraint(model, tok, table, values=[*shortlist, "no_such_tool"])


def test_restricted_think_then_answer_and_canonical(model, tok, trained_vocab, bfcl_names, trained_model) -> None:
    from triec.integrations.mlx import MLXConstraint

    table = triec.compile(bfcl_names[:500], trained_vocab)
    subset = bfcl_names[100:110]
    ids, _ = greedy(model, tok, chat(tok, QUESTIONS[0]), [MLXConstraint(model, tok, table, values=subset).processor()])
    assert tok.decode(ids) in subset

    spaced = triec.compile(bfcl_names[:50], trained_vocab, prefix=" ")
    think = MLXConstraint(model, tok, spaced, trigger="Answer:")
    prompt = chat(tok, "Which function computes a body mass index? Think, then write Answer: and the name.")
    ours, _ = greedy(model, tok, prompt, [think.processor()], limit=48)
    theirs, _ = greedy(model, tok, prompt, [xgrammar_processor(trained_model, tok, bfcl_names[:50], "think")], limit=48)
    assert ours == theirs
    text = tok.decode(ours)
    if "Answer:" in text:  # the model wrote the trigger within the budget: one value follows, then the end
        assert text.split("Answer:", 1)[1].strip() in bfcl_names[:50]

    canonical = triec.compile(bfcl_names[:200], trained_vocab, tokenization="canonical")
    ids, _ = greedy(model, tok, chat(tok, QUESTIONS[0]), [MLXConstraint(model, tok, canonical).processor()])
    text = tok.decode(ids)
    assert text in bfcl_names[:200] and ids == tok.encode(text, add_special_tokens=False)


def test_a_tool_registry_schema_table(model, tok, trained_vocab) -> None:
    """A schema table (names in a trie, arguments in llguidance) through its matcher's rows."""
    pytest.importorskip("llguidance")
    from triec.integrations.mlx import MLXConstraint

    tools = bfcl_registry()[:20]
    table = triec.compile_tools(tools, trained_vocab, format="object")
    ids, _ = greedy(
        model,
        tok,
        chat(tok, "Call the function that computes a body mass index for 70 kg and 1.75 m."),
        [MLXConstraint(model, tok, table).processor()],
        limit=40,
    )
    m = table.matcher()
    assert all(m.accept_token(t) for t in ids)  # every token was allowed where it was written
    text = tok.decode(ids)
    names = {t["function"]["name"] for t in tools}
    assert text.startswith('{"name": "') and text[10:].split('"')[0] in names


# ------------------------------------------------------------------ triec eval --engine mlx


def test_eval_on_mlx_equals_xgrammar(trained_model, tmp_path) -> None:
    from typer.testing import CliRunner

    from triec.cli import app

    data = tmp_path / "q.jsonl"
    items = [
        ("bmi", "Which function computes a body mass index?", "calculate_bmi"),
        ("sort", "Which function sorts a list?", "sort_list"),
    ]
    candidates = ["calculate_bmi", "sort_list", "get_weather", "calculate_area", "sort_by_key"]
    data.write_text(
        "".join(
            json.dumps({"id": i, "prompt": f"Question: {q}\nFunction:", "gold": g, "candidates": candidates}) + "\n"
            for i, q, g in items
        )
    )
    out = tmp_path / "eval.json"
    got = CliRunner().invoke(
        app,
        [
            "eval",
            str(data),
            "-m",
            str(trained_model),
            "--engine",
            "mlx",
            "--modes",
            "trie,think,canonical",
            "--compare",
            "xgrammar",
            "--think-budget",
            "8",
            "--max-new-tokens",
            "12",
            "--json",
            str(out),
        ],
    )
    assert got.exit_code == 0, got.output
    doc = json.loads(out.read_text())
    assert doc["config"]["engine"] == "mlx"
    for mode in ("trie", "think"):
        m = doc["modes"][mode]
        assert m["items"] == 2 and m["identical_to_xgrammar"] == 2, doc["items"]
    assert doc["modes"]["trie"]["valid"] == 2 and doc["modes"]["canonical"]["valid"] == 2
