"""``triec bfcl`` for choosing among thousands (issue 52): every one-call category, one candidate set shared by every
question (all of BFCL's function names, or a seeded K of them holding every kept gold), synthetic names past the
catalog, the values file for ``triec compile``, and the shared header line ``triec eval`` reads.

The sample in fixtures/eval/bfcl holds the first questions of each category (copied unchanged); the counts of the
full data are checked against the installed ``bfcl-eval`` when it is there (``pip install --no-deps bfcl-eval``).
"""

from __future__ import annotations

import json
import shutil
from importlib import metadata
from pathlib import Path

import pytest
from typer.testing import CliRunner

import triec
from triec.cli import app
from triec.eval import bfcl
from triec.eval.bfcl_catalog import ESCAPE, catalog, describe_synthetic
from triec.eval.data import load_items

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "fixtures" / "eval" / "bfcl"
SAMPLE_ITEMS = {
    "simple_python": 30,
    "simple_java": 10,
    "simple_javascript": 10,
    "multiple": 50,
    "live_simple": 10,
    "live_multiple": 10,
}


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """The sample, plus a file that is not JSON lines (as BFCL's format_sensitivity is) and a two-call question."""
    root = tmp_path / "bfcl"
    shutil.copytree(SAMPLE, root)
    (root / "BFCL_v4_format_sensitivity.json").write_text('{\n    "simple_python": ["simple_python_0"]\n}\n')
    two = json.loads((root / "BFCL_v4_parallel.json").read_text().splitlines()[0])
    truth = json.loads((root / "possible_answer" / "BFCL_v4_parallel.json").read_text().splitlines()[0])
    two["id"] = truth["id"] = "live_simple_two_calls"
    with (root / "BFCL_v4_live_simple.json").open("a") as f:
        f.write(json.dumps(two) + "\n")
    with (root / "possible_answer" / "BFCL_v4_live_simple.json").open("a") as f:
        f.write(json.dumps(truth) + "\n")
    return root


def sample_names() -> set[str]:
    return {
        f["name"]
        for path in SAMPLE.glob("BFCL_v4_*.json")
        for line in path.read_text().splitlines()
        for f in json.loads(line)["function"]
    }


def test_every_one_call_category_is_converted_and_what_is_skipped_is_counted(source: Path) -> None:
    data = bfcl.build("all", source, "all")
    assert {c: n.kept for c, n in data.counts.items()} == SAMPLE_ITEMS
    assert data.counts["live_simple"].questions == 11 and data.counts["live_simple"].not_one_call == 1
    assert sum(n.not_one_call for n in data.counts.values()) == 1
    assert len(data.items) == sum(SAMPLE_ITEMS.values())
    assert len(data.notes) == 1 and data.notes[0].startswith("skipped BFCL_v4_format_sensitivity.json (not JSON lines")
    # every name of every file (parallel's included), each with a description; the escape last in the values
    assert set(data.shared.names) == sample_names() and data.values() == [*sorted(sample_names()), ESCAPE]
    assert all(isinstance(d, str) for d in data.shared.descriptions.values())
    # all-candidates items list no functions (the question's own would give the gold away) and keep BFCL's offer
    item = next(i for i in data.items if i["id"] == "simple_python_0")
    assert item["messages"][0] == {"role": "system", "content": bfcl.SYSTEM_OPEN}
    assert item["offered"] == ["calculate_triangle_area"] and "candidates" not in item and item["query"]
    # a question's own system turn joins the one system message, first
    live = next(i for i in data.items if i["id"] == "live_multiple_1-0-1")
    assert [m["role"] for m in live["messages"]] == ["system", "user"]
    assert live["messages"][0]["content"].startswith(bfcl.SYSTEM_OPEN + "\n\n")


def test_single_categories_keep_their_own_candidates(source: Path) -> None:
    for category, n in SAMPLE_ITEMS.items():
        items = bfcl.convert(category, source)
        assert len(items) == n and all(i["gold"] in i["candidates"] for i in items), category
        per_item = category.endswith("multiple")
        assert all((i["candidates"] == [f["name"] for f in i["functions"]]) == per_item for i in items), category
    with pytest.raises(triec.ValuesError, match="'parallel' is not supported"):
        bfcl.build("parallel", source)


@pytest.mark.parametrize("k", [5, 40, 130])
def test_a_k_subset_holds_every_kept_gold_and_is_fixed_by_its_seed(source: Path, k: int) -> None:
    golds = {i["gold"] for i in bfcl.build("all", source).items}
    data = bfcl.build("all", source, k=k, seed=3)
    names = set(data.shared.names)
    assert len(names) == k == len(data.shared.names) and names <= sample_names()
    assert {i["gold"] for i in data.items} <= names and data.items
    if k >= len(golds):  # every question kept, the rest of the set drawn from the other names
        assert golds <= names and len(data.items) == sum(SAMPLE_ITEMS.values())
    else:  # K golds drawn, their questions kept, and said so
        assert names <= golds and any(f"holds {k} of the {len(golds)} distinct golds" in n for n in data.notes)
        assert sum(c.outside_k for c in data.counts.values()) == sum(SAMPLE_ITEMS.values()) - len(data.items)
    again = bfcl.build("all", source, k=k, seed=3)
    assert again.shared.names == data.shared.names and again.items == data.items
    other = bfcl.build("all", source, k=k, seed=4)
    assert other.shared.names != data.shared.names


def test_synthetic_distractors_pass_the_catalog(source: Path) -> None:
    data = bfcl.build("all", source, k=1_000, seed=1, distractors="synthetic")
    names = data.shared.names
    assert len(names) == len(set(names)) == 1_000 and sample_names() <= set(names) and ESCAPE not in names
    assert data.shared.synthetic == 1_000 - len(sample_names())
    made = [n for n in names if n not in sample_names()]
    assert all(data.shared.descriptions[n] == describe_synthetic(n) for n in made)
    assert describe_synthetic("slack.get_user_4821") == "Get a user in Slack (4821)."
    assert describe_synthetic("create_issue") == "Create an issue."
    assert bfcl.build("all", source, k=1_000, seed=1, distractors="synthetic").shared.names == names


def test_the_file_shares_its_candidates_in_one_header_line(source: Path, tmp_path: Path) -> None:
    out, values = tmp_path / "d.jsonl", tmp_path / "d.values.txt"
    res = CliRunner().invoke(app, ["bfcl", "all", "--source", str(source), "-o", str(out), "--k", "150"])
    assert res.exit_code == 0, res.output
    said, notes = " ".join(res.stdout.split()), " ".join(res.stderr.split())
    assert "150 shared candidates" in said and "live_simple: 10 of 11 questions, 1 not one call" in notes
    lines = out.read_text().splitlines()
    header = json.loads(lines[0])
    assert set(header) == {"shared", "about"} and len(lines) == 1 + sum(SAMPLE_ITEMS.values())
    assert all("candidates" not in json.loads(line) for line in lines[1:])
    assert values.read_text().splitlines() == [*header["shared"]["candidates"], ESCAPE]
    items = load_items(out)
    assert len(items) == sum(SAMPLE_ITEMS.values()) and all(i.candidates is items[0].candidates for i in items)
    assert len(items[0].candidates) == 150 and all(i.gold in i.candidates for i in items)
    docs = items[0].extra["functions"]
    assert [d["name"] for d in docs] == list(items[0].candidates) and all("description" in d for d in docs)
    assert items[3].extra["functions"] is docs and items[3].extra["category"] == "simple_python"
    assert len(load_items(out, limit=2)) == 2
    table = triec.compile(values.read_text().splitlines(), triec.Vocabulary.load("gpt2"))
    view = table.restrict(["calculate_triangle_area", ESCAPE])
    assert set(view.values) == {"calculate_triangle_area", ESCAPE}


def test_an_old_file_still_loads_and_a_header_is_first_or_nowhere(tmp_path: Path) -> None:
    old = tmp_path / "old.jsonl"
    bfcl.write(bfcl.convert("multiple", SAMPLE), old)
    assert len(load_items(old)) == 50 and load_items(old)[0].candidates[0] == "triangle_properties.get"
    shared = '{"shared": {"candidates": ["a", "b"], "note": 1}}\n'
    cases = {
        '{"prompt": "p", "gold": "a"}\n' + shared: r":2: a header \('shared'\) can only be the file's first line",
        shared + '{"prompt": "p", "gold": "c"}\n': r":2: 'gold' 'c' is not one of the shared candidates",
        '{"shared": []}\n{"prompt": "p", "gold": "a"}\n': r":1: field 'shared' must be an object",
        '{"shared": {"gold": "a"}}\n{"prompt": "p", "gold": "a"}\n': r":1: field 'shared' cannot hold 'gold'",
        '{"shared": {"candidates": [1]}}\n{"prompt": "p", "gold": "a"}\n': r":1: field 'shared.candidates'",
        shared: r"no items",
    }
    for text, match in cases.items():
        data = tmp_path / "d.jsonl"
        data.write_text(text)
        with pytest.raises(triec.ValuesError, match=match):
            load_items(data)
    data.write_text(shared + '{"prompt": "p", "gold": "c", "candidates": ["c", "d"]}\n{"prompt": "q", "gold": "b"}\n')
    own, common = load_items(data)
    assert own.candidates == ("c", "d") and common.candidates == ("a", "b") and own.extra == {"note": 1}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--k", "0"], "--k must be in 1..1,000,000, not 0"),
        (["--k", "-3"], "--k must be in 1..1,000,000, not -3"),
        (["--k", "5000"], "--distractors synthetic adds generated tool names"),
        (["--k", "5", "--candidates", "item"], "need --candidates all, not item"),
        (["--distractors", "lorem"], "'lorem': choose bfcl or synthetic"),
        (["--candidates", "some"], "candidates 'some'"),
    ],
)
def test_bad_options_are_one_line_exit_2_and_write_nothing(source: Path, tmp_path: Path, args, message) -> None:
    out = tmp_path / "x.jsonl"
    res = CliRunner().invoke(app, ["bfcl", "all", "--source", str(source), "-o", str(out), *args])
    assert res.exit_code == 2 and message in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.output
    assert "Traceback" not in res.output and not out.exists() and not (tmp_path / "x.values.txt").exists()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"id": "simple_java_x", "question": "hi", "function": []}', "field 'question' must be a list of turns"),
        ('{"id": "simple_java_x", "question": [[{"role": "user"}]], "function": []}', "string 'role' and 'content'"),
        ('{"id": "simple_java_x", "question": [[{"role": "user", "content": "q"}]], "function": [{}]}', "'function'"),
        ("[1, 2]", "expected a JSON object"),
        ('{"question": []}', "field 'id' must be a string"),
    ],
)
def test_a_malformed_bfcl_file_is_named_by_line(source: Path, tmp_path: Path, line: str, message: str) -> None:
    """A --source directory is input: a question of the wrong shape is one line naming FILE:LINE, not a KeyError."""
    with (source / "BFCL_v4_simple_java.json").open("a") as f:
        f.write(line + "\n")
    res = CliRunner().invoke(app, ["bfcl", "all", "--source", str(source), "-o", str(tmp_path / "x.jsonl")])
    assert res.exit_code == 2 and "BFCL_v4_simple_java.json:11: " in res.stderr and message in res.stderr, res.output
    assert "Traceback" not in res.output and not (tmp_path / "x.jsonl").exists()
    answers = source / "possible_answer" / "BFCL_v4_multiple.json"
    answers.write_text(answers.read_text() + '{"id": "multiple_x", "ground_truth": {"f": {}}}\n')
    with pytest.raises(triec.ValuesError, match=r"BFCL_v4_multiple.json:51: field 'ground_truth'"):
        bfcl.build("multiple", source)


def _installed() -> Path:
    try:
        metadata.distribution("bfcl-eval")
    except metadata.PackageNotFoundError:
        pytest.skip("bfcl-eval is not installed (pip install --no-deps bfcl-eval)")
    return bfcl.data_dir()


def test_the_installed_data_counts() -> None:
    """bfcl-eval 2026.3.23: 2,061 one-call questions in six categories, 878 distinct golds, 1,853 function names."""
    root = _installed()
    data = bfcl.build("all", root)
    kept = {c: n.kept for c, n in data.counts.items()}
    assert kept == {
        "simple_python": 400,
        "simple_java": 100,
        "simple_javascript": 50,
        "multiple": 200,
        "live_simple": 258,
        "live_multiple": 1053,
    }
    assert all(n.not_one_call == 0 and n.questions == n.kept for n in data.counts.values())
    assert len(data.shared.names) == 1_853 and len(catalog(root).descriptions) == 1_853
    assert len(data.shared.golds) == 878 and any("format_sensitivity" in n for n in data.notes)
    small = bfcl.build("all", root, k=100, seed=0)
    assert len(small.shared.names) == 100 and {i["gold"] for i in small.items} <= set(small.shared.names)
    assert set(small.shared.names) <= data.shared.golds and 0 < len(small.items) < 2_061
    big = bfcl.build("all", root, k=5_000, seed=0, distractors="synthetic")
    assert len(big.items) == 2_061 and len(set(big.shared.names)) == 5_000 and big.shared.synthetic == 3_147
