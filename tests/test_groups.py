"""Group-then-value tables (issue 52, the paper's appendix I): one table spelling ``label + SEP + value``.

A grouped table is the table of its spelled strings, state by state (the grouping adds a header field, nothing
else); its answers split back to the value and its group; the state after ``label + SEP`` leads to that group's
values only. Groups files are refused line by line; separator and k-means groupings are deterministic. With the
trained 135M model, the groups strategy decodes valid values of the group it chose, every time.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner, Result

import triec
from triec.cli import app
from triec.compiler.entry import compile as compile_values
from triec.compiler.groups import (
    DEFAULT_SEPARATOR,
    MAX_LABEL_BYTES,
    check_label,
    cluster_labels,
    compile_grouped,
    groups_by_kmeans,
    groups_by_separator,
    groups_from_file,
    kmeans,
    label_problem,
    spell_grouped,
    term_vectors,
)
from triec.errors import ArtifactContentError, ValuesError
from triec.runtime.groups import group_labels, group_members, group_state, separator, split_answer

VALUES = [
    "slack.send_message",
    "slack.read_channel",
    "slack.list_users",
    "mail.send",
    "mail.search",
    "weather.today",
    "weather.forecast",
    "ping",
    "héllo.wörld",
    "calendar.create_event",
]
ARRAYS = ("allowed_offsets", "allowed_tokens", "allowed_next", "value_state", "value_lcp", "state_byte")


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def same_states(a: triec.MaskTable, b: triec.MaskTable) -> None:
    assert a.num_states == b.num_states and a.values == b.values
    for name in ARRAYS:
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    for s in range(a.num_states):
        assert np.array_equal(a.allowed(s), b.allowed(s)), s


# ---------------------------------------------------------------- the table


@pytest.mark.parametrize("layout", ["full", "tails"])
@pytest.mark.parametrize("encoding", ["raw", "json"])
def test_a_grouped_table_is_the_table_of_its_spelled_strings(
    vocab: triec.Vocabulary, layout: str, encoding: str
) -> None:
    group_of = groups_by_separator(VALUES, ".")
    grouped = compile_grouped(VALUES, group_of, vocab, layout=layout, encoding=encoding)
    fresh = compile_values(spell_grouped(VALUES, group_of), vocab, layout=layout, encoding=encoding)
    same_states(grouped, fresh)
    assert grouped.build_options == {**fresh.build_options, "groups": {"separator": " > ", "count": 6}}
    answers = {split_answer(grouped, text) for text in grouped.values}
    assert answers == {(group_of[v], v) for v in VALUES}
    for label, members in group_members(grouped).items():
        state = group_state(grouped, label)
        below = [grouped.values[i] for i in grouped.values_below(state)]
        assert [split_answer(grouped, t) for t in below] == [(label, v) for v in members]
        assert sorted(members) == sorted(v for v in VALUES if group_of[v] == label)


def test_groups_survive_save_and_load(tmp_path: Path, qwen2: triec.Vocabulary) -> None:
    table = compile_grouped(VALUES, groups_by_separator(VALUES, "."), qwen2, sep=" :: ")
    table.save(tmp_path / "g.triec")
    loaded = triec.load(tmp_path / "g.triec", verify=True)
    assert separator(loaded) == " :: " and loaded.build_options["groups"]["count"] == 6
    assert group_labels(loaded) == group_labels(table) == ["calendar", "héllo", "mail", "other", "slack", "weather"]
    assert split_answer(loaded, "slack :: slack.send_message") == ("slack", "slack.send_message")
    assert loaded.prefix(group_state(loaded, "mail")) == b"mail :: "
    with pytest.raises(ValuesError, match="no group"):
        group_state(loaded, "nope")


def test_a_plain_table_is_not_grouped(qwen2: triec.Vocabulary) -> None:
    table = compile_values(VALUES, qwen2)
    assert separator(table) is None
    with pytest.raises(ValuesError, match="not grouped"):
        split_answer(table, "slack > x")


def test_a_bad_groups_field_is_named(qwen2: triec.Vocabulary) -> None:
    table = compile_values(VALUES, qwen2)
    for bad in ([1], {"separator": "", "count": 1}, {"separator": " > ", "count": 0}, {"separator": 5}):
        table.build_options["groups"] = bad
        with pytest.raises(ArtifactContentError, match=r"build_options\.groups"):
            group_labels(table)
    table.build_options["groups"] = {"separator": "#", "count": 1}  # a value without it: corrupt
    with pytest.raises(ArtifactContentError, match="holds no label"):
        group_labels(table)


# ---------------------------------------------------------------- labels and files


@pytest.mark.parametrize(
    ("label", "sep", "why"),
    [
        ("", " > ", "empty"),
        ("a > b", " > ", "holds the separator"),
        ("a:", "::", "ends in its beginning"),  # 'a:' + '::' = 'a:::' finds '::' at 1, not 2
        ("x" * (MAX_LABEL_BYTES + 1), " > ", "at most"),
        (" padded", " > ", "whitespace"),
    ],
)
def test_labels_a_separator_cannot_follow_are_refused(label: str, sep: str, why: str) -> None:
    problem = label_problem(label, sep)
    assert problem is not None and why in problem
    with pytest.raises(ValuesError, match=why):
        spell_grouped(["v"], {"v": label}, sep)


def test_every_value_needs_a_group() -> None:
    with pytest.raises(ValuesError, match="has no group"):
        spell_grouped(["a", "b"], {"a": "x"})
    assert check_label("slack", DEFAULT_SEPARATOR) == "slack"


@pytest.mark.parametrize(
    ("text", "where", "why"),
    [
        ("a\tg\nb g\n", ":2:", "no tab"),
        ("a\tg\n\tg\n", ":2:", "empty value"),
        ("a\tg\nb\t\n", ":2:", "empty group"),
        ("a\tg\nb\th\na\th\n", ":3:", "at line 1"),
        ("a\tg > h\n", ":1:", "holds the separator"),
        ("a\t" + "x" * 300 + "\n", ":1:", "at most"),
        ("", "", "no 'value<TAB>group' lines"),
    ],
)
def test_groups_file_errors_name_the_line(tmp_path: Path, text: str, where: str, why: str) -> None:
    path = tmp_path / "g.tsv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValuesError) as info:
        groups_from_file(path)
    assert f"{path}{where}" in str(info.value) and why in str(info.value)


def test_groups_file_reads_crlf_repeats_and_tabs_in_values(tmp_path: Path) -> None:
    path = tmp_path / "g.tsv"
    path.write_bytes(b"a\tg\r\n\r\nb\tc\th\r\na\tg\n")
    assert groups_from_file(path) == {"a": "g", "b\tc": "h"}
    path.write_bytes(b"a\tg\nb\t\xff\n")
    with pytest.raises(ValuesError, match=r"g.tsv:2: not UTF-8"):
        groups_from_file(path)


def test_separator_grouping_has_one_catch_all() -> None:
    got = groups_by_separator(VALUES, ".")
    assert got == groups_by_separator(list(reversed(VALUES)), ".")
    assert got["slack.list_users"] == "slack" and got["ping"] == "other"
    assert groups_by_separator(["other.x", "y", ".z"], ".") == {"other.x": "other", "y": "other_2", ".z": "other_2"}


# ---------------------------------------------------------------- k-means


def test_kmeans_is_deterministic_and_finds_clear_clusters() -> None:
    rng = np.random.default_rng(3)
    centres = np.array([[10.0, 0.0], [0.0, 10.0], [-10.0, -10.0]])
    points = np.concatenate([c + rng.normal(size=(30, 2)) for c in centres])
    a, b = kmeans(points, 3, seed=1), kmeans(points, 3, seed=1)
    assert np.array_equal(a, b) and a[0] == 0
    assert [len(set(a[i * 30 : (i + 1) * 30].tolist())) for i in range(3)] == [1, 1, 1]
    assert len(set(a.tolist())) == 3
    with pytest.raises(ValuesError, match="choose 1 to 90"):
        kmeans(points, 91)
    with pytest.raises(ValuesError, match="NaN"):
        kmeans(np.full((3, 2), np.nan), 1)
    with pytest.raises(ValuesError, match="over the"):
        kmeans(np.zeros((1000, 1000)), 1000, iterations=30)  # 3e10 multiply-adds: refused before any


def test_kmeans_groups_are_labelled_by_a_members_word(bfcl_names: list[str]) -> None:
    names = bfcl_names[:400]
    vectors = term_vectors(names)
    got = groups_by_kmeans(names, vectors, seed=0)
    assert got == groups_by_kmeans(names, vectors, seed=0)
    labels = set(got.values())
    assert len(labels) == 20  # round(sqrt(400))
    for label in labels:
        assert label_problem(label, DEFAULT_SEPARATOR) is None
    spell_grouped(names, got)  # every label spells


def test_cluster_labels_are_unique() -> None:
    assert cluster_labels(["get_a", "get_b", "get_c", "x"], np.array([0, 0, 1, 1])) == ["get", "c"]
    assert cluster_labels(["get", "get"], np.array([0, 1])) == ["get", "get_2"]
    assert cluster_labels(["__", "--"], np.array([0, 1])) == ["group_1", "group_2"]


# ---------------------------------------------------------------- the CLI


def test_cli_compiles_and_inspects_a_grouped_table(tmp_path: Path) -> None:
    values = tmp_path / "v.txt"
    values.write_text("\n".join(VALUES) + "\n", encoding="utf-8")
    groups = tmp_path / "g.tsv"
    groups.write_text("".join(f"{v}\t{v.split('.')[0]}\n" for v in VALUES), encoding="utf-8")
    out = tmp_path / "g.triec"
    r = invoke("compile", str(values), "-t", "gpt2", "--groups", str(groups), "-o", str(out), "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["groups"] == {"separator": " > ", "count": 6}
    table = triec.load(out)
    assert {split_answer(table, t)[1] for t in table.values} == set(VALUES)
    r = invoke("inspect", str(out), "--json")
    assert r.exit_code == 0, r.output
    info = json.loads(r.stdout)["groups"]
    assert info["count"] == 6 and info["groups"][0] == {
        "label": "slack",
        "values": 3,
        "examples": ["slack.list_users", "slack.read_channel", "slack.send_message"],
    }
    assert "spelled 'group > value'" in invoke("inspect", str(out)).stdout
    for how in (["--group-separator", "."], ["--group-kmeans", "3"]):
        r = invoke("compile", str(values), "-t", "gpt2", *how, "-o", str(out), "--json")
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["groups"]["count"] == (6 if how[0] == "--group-separator" else 3)
    np.save(tmp_path / "vec.npy", np.eye(len(VALUES))[:, :4] + np.arange(len(VALUES))[:, None] // 5)
    r = invoke("compile", str(values), "-t", "gpt2", "--group-kmeans", "2", "--vectors", str(tmp_path / "vec.npy"))
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize(
    ("args", "groups_text", "fragments"),
    [
        (["--groups", "{g}"], "slack.send_message\tslack\nbad line\n", ["g.tsv:2:", "no tab"]),
        (["--groups", "{g}"], "ping\tp\n", ["value(s) have no group"]),
        (["--groups", "{g}", "--group-kmeans", "3"], "", ["pass one way of grouping"]),
        (["--vectors", "{g}"], "", ["--vectors: for grouped tables only"]),
        (["--group-kmeans", "2", "--vectors", "{g}"], "x", ["--vectors", "not a readable .npy"]),
        (["--group-separator", "_", "--group-join", "."], "", ["holds the separator"]),
        (["--group-kmeans", "0"], "", ["at least 1 group"]),
        (["--groups", "{g}", "--pattern", "a"], "", []),  # exit 2 whatever the message
    ],
)
def test_cli_refuses_bad_grouping_in_one_line_and_writes_nothing(
    tmp_path: Path, args: list[str], groups_text: str, fragments: list[str]
) -> None:
    values = tmp_path / "v.txt"
    values.write_text("\n".join(VALUES) + "\n", encoding="utf-8")
    g = tmp_path / "g.tsv"
    g.write_text(groups_text, encoding="utf-8")
    out = tmp_path / "out.triec"
    r = invoke("compile", str(values), "-t", "gpt2", "-o", str(out), *[a.format(g=g) for a in args])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and len(r.stderr.strip().splitlines()) == 1, r.stderr
    for fragment in fragments:
        assert fragment in r.stderr, r.stderr
    assert not out.exists() and not list(tmp_path.glob("*.tmp*"))


# ---------------------------------------------------------------- decoding with the trained model


@pytest.mark.model
def test_the_groups_strategy_always_answers_a_value_of_its_group(trained_model: Path) -> None:
    from triec.eval.bfcl import convert
    from triec.eval.data import parse_item
    from triec.eval.groups_strategy import GroupsStrategy, descriptions_of
    from triec.eval.run import EvalConfig, Evaluator

    docs = convert("simple_python", Path(__file__).resolve().parent.parent / "fixtures" / "eval" / "bfcl")
    items = [parse_item(d, "bfcl", i) for i, d in enumerate(docs)]
    candidates = tuple(dict.fromkeys([it.gold for it in items[:3]] + list(items[0].candidates or ())[:57]))
    items = [
        parse_item({**d, "candidates": list(candidates)}, "bfcl", i)
        for i, d in enumerate(docs[:3])
        if d["gold"] in candidates
    ]
    ev = Evaluator(trained_model, EvalConfig(modes=("trie",), max_new_tokens=32))
    strategy = GroupsStrategy(ev, descriptions=descriptions_of(items))
    table = strategy.table(candidates)
    members = group_members(table)
    assert len(members) == round(len(candidates) ** 0.5)  # G = sqrt(K)
    for item in items:
        got = strategy.answer(item)
        assert got.valid and got.group is not None and got.answer in members[got.group], got
        assert got.output == got.group + " > " + got.answer
        assert len(got.prompt_tokens) == 2 and got.steps == got.tokens + 1  # EOS once, at the end of round 2
