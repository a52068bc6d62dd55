"""``triec eval --strategy`` (issue 52) with the trained model on BFCL's real functions: every strategy valid, the
cascade's escapes counted as widenings, and Recall@k as computed by hand for one item."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from triec.cli import app
from triec.errors import EvalError
from triec.eval import bfcl
from triec.eval.strategies import (
    Strategy,
    descriptions_of,
    listing,
    parse_strategies,
    reached,
    recall,
    with_listing,
)

BFCL = Path(__file__).resolve().parent.parent / "fixtures" / "eval" / "bfcl"
NAMES = ["get_weather", "send_email", "book_flight", "convert_currency"]
SHOTS = [
    {"role": "user", "content": "Play some jazz music."},
    {"role": "assistant", "content": "none_of_these"},
    {"role": "user", "content": "Order a pizza for me."},
    {"role": "assistant", "content": "none_of_these"},
    {"role": "user", "content": "Turn off the lights in the kitchen."},
    {"role": "assistant", "content": "none_of_these"},
]


# -- no model -------------------------------------------------------------------------------------------------------------
def test_strategies_parse_and_bad_ones_are_named() -> None:
    assert parse_strategies("full, shortlist:20,cascade:5,groups,groups:g.tsv") == (
        Strategy("full"),
        Strategy("shortlist", 20),
        Strategy("cascade", 5),
        Strategy("groups"),
        Strategy("groups", file="g.tsv"),
    )
    assert [s.label for s in parse_strategies(["cascade:5", "groups:g.tsv"])] == ["cascade:5", "groups:g.tsv"]
    named = parse_strategies("shortlist:20:names,cascade:5:names,shortlist:20,shortlist:20:none")
    assert named == (
        Strategy("shortlist", 20, listing="names"),
        Strategy("cascade", 5, listing="names"),
        Strategy("shortlist", 20),
        Strategy("shortlist", 20, listing="none"),
    )
    assert [s.label for s in named] == ["shortlist:20:names", "cascade:5:names", "shortlist:20", "shortlist:20:none"]
    for bad, match in [
        ("shortlist:20:brief", ":names or :none"),
        ("cascade:20:none", "after the size, :names \\("),  # a cascade's escape must be listed to be chosen
        ("cascade:names", "needs a size"),
        ("shortlist:20:names,shortlist:20:names", "twice"),
        ("", "names no strategy"),
        ("cascade", "needs a size"),
        ("shortlist:0", "needs a size"),
        ("shortlist:-3", "needs a size"),
        ("cascade:x", "needs a size"),
        ("full:3", "choose from"),
        ("top5", "choose from"),
        ("full,full", "twice"),
    ]:
        with pytest.raises(EvalError, match=match):
            parse_strategies(bad)


def test_a_bad_groups_file_is_refused_before_the_model_loads(tmp_path: Path) -> None:
    groups = tmp_path / "g.tsv"
    groups.write_text("red\tcolours\nblue\n")
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "Pick:", "gold": "red", "candidates": ["red", "blue"]}\n')
    args = ["eval", str(data), "--model", str(tmp_path / "none"), "--strategy", f"full,groups:{groups}"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2 and f"{groups}:2" in res.output and "Traceback" not in res.output, res.output


@pytest.mark.model
def test_groups_strategy_through_triec_eval(trained_model: Path, tmp_path: Path) -> None:
    """``--strategy groups:FILE`` end to end: two rounds per item (label, then value), every answer a candidate,
    the outcome carrying the label and the value as written."""
    data = tmp_path / "d.jsonl"
    bfcl.write(bfcl.convert("simple_python", BFCL)[:2], data)
    names = bfcl.convert("simple_python", BFCL)[0]["candidates"]
    groups = tmp_path / "g.tsv"
    groups.write_text("".join(f"{n}\t{'math' if n.startswith('math.') else 'other'}\n" for n in names))
    out = tmp_path / "r.json"
    args = ["eval", str(data), "--model", str(trained_model), "--strategy", f"groups:{groups}"]
    res = CliRunner().invoke(app, [*args, "--max-new-tokens", "24", "--json", str(out)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    (mode,) = doc["modes"]
    assert mode == f"groups:{groups}" and doc["modes"][mode]["valid"] == 2
    for o in doc["items"]:
        label, _, value = o["output"].partition(" > ")
        assert o["answer"] == value and value in names and label == ("math" if value.startswith("math.") else "other")


def test_recall_counts_gold_within_the_top_k() -> None:
    assert recall([1, 5, 6, 20, 21, 51]) == {"recall_at_5": 0.3333, "recall_at_20": 0.6667, "recall_at_50": 0.8333}


def test_reached_lists_the_levels_in_order() -> None:
    widths = [20, 40, 370]
    got = reached([(0, widths), (2, widths), (1, widths), (0, widths), (0, [20, 26]), (1, [20, 26])])
    assert list(got.items()) == [("k=20", 3), ("k=40", 1), ("full", 2)]


def test_the_listing_replaces_the_system_message_and_keeps_the_conversation() -> None:
    items = [bfcl.convert("multiple", BFCL)[0]]
    from triec.eval.data import parse_item

    item = parse_item(items[0], "x", 0)
    described = descriptions_of([item])
    names = [f["name"] for f in items[0]["functions"]]
    system = listing(names[:1], described, "none_of_these")
    assert system.splitlines()[1] == f"- {names[0]}: {described[names[0]].strip()}"
    assert system.splitlines()[2] == "- none_of_these: none of the functions above fits"
    got = with_listing(item, system)
    assert got.messages is not None and item.messages is not None
    assert got.messages[0] == {"role": "system", "content": system} and got.messages[1:] == item.messages[1:]


def test_bad_strategy_or_retriever_is_one_line_before_loading_a_model(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "Pick:", "gold": "red", "candidates": ["red", "blue"]}\n')
    model = str(tmp_path / "no-such-model")
    for args, match in [
        (["--strategy", "cascade:0"], "cascade needs a size of at least 1"),
        (["--strategy", "cascade:3", "--retriever", "tfidf"], "--retriever 'tfidf': choose from bm25, embed"),
    ]:
        res = CliRunner().invoke(app, ["eval", str(data), "--model", model, *args])
        assert res.exit_code == 2, res.output
        assert match in res.output and "Traceback" not in res.output and "no-such-model" not in res.output


# -- the trained model ------------------------------------------------------------------------------------------------------
@pytest.mark.model
def test_strategies_on_bfcl_are_valid_and_report_recall(trained_model: Path, tmp_path: Path) -> None:
    """Three simple_python questions over the category's 26 functions: full, a shortlist of 5, a cascade from 2.

    Item simple_python_2 (the hypotenuse of a right triangle, gold ``math.hypot``) is hand-checked: BM25 puts
    ``calculate_area`` first (its description shares "right", "triangle", "given", "lengths" with the question)
    and ``math.hypot`` second, so its rank is 2: inside Recall@5, and the cascade's first level (2) lists it."""
    data = tmp_path / "d.jsonl"
    bfcl.write(bfcl.convert("simple_python", BFCL)[:3], data)
    out = tmp_path / "r.json"
    args = ["eval", str(data), "--model", str(trained_model), "--strategy", "full,shortlist:5,cascade:2"]
    res = CliRunner().invoke(app, [*args, "--max-new-tokens", "24", "--json", str(out)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "triec eval" in res.stdout  # the summary table (its labels wrap at CI's 80 columns; the JSON has them)
    doc = json.loads(out.read_text())
    assert list(doc["modes"]) == ["full", "shortlist:5", "cascade:2"] and len(doc["items"]) == 9
    for strategy in doc["modes"].values():
        assert strategy["items"] == 3 and strategy["valid"] == 3
    hyp = {o["mode"]: o for o in doc["items"] if o["id"] == "simple_python_2"}
    assert hyp["cascade:2"]["retrieval_ranks"]["bm25"] == 2 and hyp["cascade:2"]["level_widths"] == [2, 4, 26]
    ranks = {o["id"]: o["retrieval_ranks"] for o in doc["items"] if o["mode"] == "shortlist:5"}
    for name in ("bm25", "embed"):
        assert doc["modes"]["shortlist:5"]["recall"][name] == recall([r[name] for r in ranks.values()])
    assert doc["modes"]["cascade:2"]["widened"] == sum(o["level"] > 0 for o in doc["items"] if o["mode"] == "cascade:2")
    assert "retrieval_ranks" not in hyp["full"]
    # 26 functions with their descriptions fit the default --list-budget: the full strategy lists them all
    assert hyp["full"]["listed"] == "descriptions" and "listed" not in hyp["shortlist:5"]


@pytest.mark.model
def test_the_cascade_counts_the_models_escapes_as_widenings(trained_model: Path) -> None:
    """Worked examples answered ``none_of_these`` lead the model to choose the escape: each one widens (k=1, then 2,
    then all four); every level's answer is valid and the tokens of every level are counted."""
    from triec.eval.data import parse_item
    from triec.eval.run import EvalConfig, Evaluator, evaluate, report_json

    messages = [*SHOTS, {"role": "user", "content": "Book a flight to Rome for tomorrow."}]
    item = parse_item({"id": "e", "messages": messages, "gold": "book_flight", "candidates": NAMES}, "x", 0)
    config = EvalConfig(modes=(), strategies=("cascade:1", "shortlist:1"), max_new_tokens=24)
    outcomes = evaluate(Evaluator(trained_model, config), [item])
    cascade, short = outcomes
    levels = cascade.output.split(" | ")
    assert levels[:-1] == ["none_of_these"] * cascade.level and cascade.level >= 1
    assert cascade.valid and cascade.answer in NAMES and cascade.level_widths == [1, 2, 4]
    assert short.valid and short.answer == "book_flight"  # BM25's top 1 ("book flight" in the question), no escape
    doc = report_json(outcomes, config, {})["modes"]["cascade:1"]
    assert doc["widened"] == 1 and doc["widening_rate"] == 1.0
    assert doc["reached"] == {("full" if cascade.level == 2 else "k=2"): 1}
    assert cascade.tokens > short.tokens  # the escapes the model wrote count


@pytest.mark.model
def test_canonical_strategy_tables_write_each_value_as_the_tokenizer_does(trained_model: Path) -> None:
    """``--strategy-tables canonical``: full and shortlist decode under canonical tables, so every answer is
    written in exactly the tokenizer's own tokens (with the byte trie the 135M model spells
    ``calculate_triangle_area`` in 9 tokens where its tokenizer uses 6)."""
    from triec.eval.data import parse_item
    from triec.eval.run import EvalConfig, Evaluator, evaluate
    from triec.eval.strategies import descriptions_of

    raw = bfcl.convert("simple_python", BFCL)[:3]
    items = [parse_item(r, "x", i) for i, r in enumerate(raw)]
    config = EvalConfig(modes=(), strategies=("full", "shortlist:5"), strategy_tables="canonical", max_new_tokens=24)
    evaluator = Evaluator(trained_model, config)
    evaluator.strategy_runner().descriptions = descriptions_of(items)
    outcomes = evaluate(evaluator, items)
    assert len(outcomes) == 6
    for o in outcomes:
        assert o.valid, o
        assert o.tokens == len(evaluator.tokenizer.encode(o.answer, add_special_tokens=False)), o
    with pytest.raises(EvalError, match="strategy-tables"):
        EvalConfig(modes=(), strategies=("full",), strategy_tables="bytes")


@pytest.mark.model
def test_names_listing_shows_the_same_shortlist_without_descriptions(trained_model: Path) -> None:
    """``shortlist:5:names`` lists the same five names as ``shortlist:5``, each line the bare name: the prompt a
    shortlist pays for in prefill is about a third as long on BFCL (233 against 617 tokens at K = 1,853).
    ``shortlist:5:none`` decodes the item's own prompt, unchanged, under the same five names."""
    from triec.eval.data import parse_item
    from triec.eval.run import EvalConfig, Evaluator
    from triec.eval.strategies import descriptions_of

    every = [parse_item(r, "x", i) for i, r in enumerate(bfcl.convert("simple_python", BFCL))]
    items = every[:1]
    config = EvalConfig(
        modes=(), strategies=("shortlist:5", "shortlist:5:names", "shortlist:5:none"), max_new_tokens=24
    )
    evaluator = Evaluator(trained_model, config)
    evaluator.strategy_runner().descriptions = shown = descriptions_of(every)  # each of the 26 functions
    prompts: list[Any] = []
    allowed: list[tuple[str, ...]] = []
    decode_on = evaluator.decode_on

    def spy(item: Any, table: Any, values: tuple[str, ...]) -> Any:
        prompts.append(item)
        allowed.append(values)
        return decode_on(item, table, values)

    evaluator.decode_on = spy  # type: ignore[method-assign]
    outcomes = evaluator.run(items[0])  # evaluate() would take the descriptions of its items alone
    assert [o.mode for o in outcomes] == ["shortlist:5", "shortlist:5:names", "shortlist:5:none"]
    assert all(o.valid for o in outcomes) and allowed[0] == allowed[1] == allowed[2] and len(allowed[0]) == 5
    assert prompts[2] is items[0]  # nothing listed: the item's own prompt
    systems = [p.messages[0]["content"] for p in prompts[:2]]
    described, bare = ([ln for ln in s.splitlines() if ln.startswith("- ")] for s in systems)
    assert len(described) == len(bare) == 5
    # the same names in the same order; each described line is the bare one then its description
    assert described == [f"{n}: {shown[n[2:]].strip()}" if shown.get(n[2:], "").strip() else n for n in bare]
    assert all(": " in ln for ln in described)
    assert len(evaluator.tokenizer.encode(systems[1])) < len(evaluator.tokenizer.encode(systems[0]))
