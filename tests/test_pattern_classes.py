"""Pattern rows stored by token class (issue 49, format version 6): the patterns that allow most of the vocabulary
in most states (``.{0,n}``, ``[^a]{n}``: how schemas bound a string's length) compile to rows whose size follows
what they say, and those rows are exact.

The reference is independent of the class walk: every token's bytes run through the stored DFA from each state
(:func:`triec.verify.patterns.reference_rows`, one numpy pass per state), and for the smaller ones xgrammar's and
llguidance's masks along seeded walks (tests/test_patterns.py's ``walk_and_compare``). Pattern artifacts of
version 1 (token rows, fixtures/golden/*-v1.triec, written by the previous release) load and serve as before.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from test_patterns import Oracles, walk_and_compare

import triec
from triec.compiler.pattern import compile_pattern
from triec.verify.patterns import reference_rows

GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "golden"

LENGTH_BOUNDS = [".{0,100}", "[^a]{500}", "^.{1,255}$", ".{0,1000}"]


@pytest.fixture(scope="module")
def tables(qwen2: triec.Vocabulary) -> dict[str, triec.PatternTable]:
    return {regex: compile_pattern(regex, qwen2) for regex in LENGTH_BOUNDS}


def _sample_states(table: triec.PatternTable, k: int, seed: int) -> np.ndarray:
    """The first and last few states (where long tokens stop fitting) and a seeded sample between."""
    n = table.num_states
    rng = np.random.default_rng(seed)
    ends = np.concatenate([np.arange(min(4, n)), np.arange(max(0, n - 12), n)])
    return np.unique(np.concatenate([ends, rng.choice(n, size=min(k, n), replace=False)]))


@pytest.mark.parametrize("regex", LENGTH_BOUNDS)
def test_class_rows_equal_the_dfa_run_token_by_token(regex: str, tables, qwen2: triec.Vocabulary) -> None:
    table = tables[regex]
    assert table.classes is not None and table.classes.num_classes < 1000
    states = _sample_states(table, 16, seed=len(regex))
    for s, (toks, nxt) in zip(states.tolist(), reference_rows(table, qwen2, states), strict=True):
        mine, mine_next = table.transitions(s)
        assert np.array_equal(mine, toks) and np.array_equal(mine_next, nxt), (regex, s)
        # the class lookup (advance) agrees with the row, token by token, on a sample
        for i in np.linspace(0, toks.size - 1, num=min(40, toks.size), dtype=np.int64).tolist():
            assert table.advance(s, int(toks[i])) == int(nxt[i])
        refused = np.setdiff1d(np.arange(qwen2.vocab_size), np.concatenate([toks, qwen2.eos_token_ids]))
        for t in refused[:: max(1, refused.size // 20)].tolist():
            with pytest.raises(triec.TokenNotAllowed):
                table.advance(s, t)


@pytest.mark.engines
@pytest.mark.parametrize("regex", [".{0,100}", "[^a]{50}", "^.{1,40}$"])
def test_length_bounds_equal_llguidance_and_xgrammar(regex: str, vocab: triec.Vocabulary, oracles) -> None:
    table = compile_pattern(regex, vocab)
    oracle = oracles[next(k for k, v in oracles.items() if v.vocab is vocab)]
    assert walk_and_compare(table, oracle, regex, seed=7, walks=3, depth=30) >= 10


@pytest.mark.engines
@pytest.mark.parametrize("regex", ["[^a]{500}", ".{0,1000}"])
def test_the_issues_length_bounds_equal_xgrammar_on_qwen2(regex: str, tables, oracles) -> None:
    """The issue's own patterns (out of memory at 8 GB before): equal to xgrammar's and llguidance's masks along
    seeded walks from the start (the states near the bound, where long tokens stop fitting, are the reference
    test's: the first and last states of the DFA)."""
    assert walk_and_compare(tables[regex], oracles["qwen2"], regex, seed=11, walks=2, depth=40) >= 20


@pytest.fixture(scope="module")
def oracles(vocabs: dict[str, triec.Vocabulary]) -> dict[str, Oracles]:
    return {name: Oracles(v) for name, v in vocabs.items()}


def test_rows_size_follows_the_classes_not_the_vocabulary(tables, tmp_path: Path) -> None:
    """``.{0,100}`` on Qwen2 held 14.6 million (state, token) pairs, a 117 MB artifact in token rows; by class it
    is a tenth of that at most (the issue's target), and every size is recorded in the header."""
    table = tables[".{0,100}"]
    assert table.num_allowed > 14_000_000  # what token rows would hold
    path = tmp_path / "bounded.triec"
    size = table.save(path)
    assert size < 117_000_000 // 10
    back = triec.load(path, verify=True)
    assert back.format_version == 6 and back.num_allowed == table.num_allowed
    assert back.header is not None and back.header["num_class_pairs"] == table.classes.num_class_pairs
    for s in (0, 400, table.num_states - 1):
        assert np.array_equal(back.allowed(s), table.allowed(s))


def test_work_bound_refuses_before_the_work(qwen2: triec.Vocabulary) -> None:
    with pytest.raises(triec.PatternTooLarge, match="max_work"):
        compile_pattern(".{0,1000}", qwen2, max_work=100_000)
    assert compile_pattern("[0-9]{4}", qwen2, max_work=100_000).num_states == 5  # a small pattern fits


def test_writer_matcher_and_device_serve_shared_rows(tables) -> None:
    """States with the same live classes share one bitmask row in the writer and one dense row on the device;
    every row still equals the state's own allowed set."""
    from triec.runtime.bitmask import ids_of
    from triec.runtime.word_masks import state_words

    table = tables["[^a]{500}"]
    words = state_words(table)
    assert words.row_of is not None and int(words.row_of.max()) + 1 < table.num_states // 10
    states = _sample_states(table, 24, seed=3)
    writer = table.mask_writer(len(states))
    rows = writer.fill(states).copy()  # the writer's buffer: fill_one below rewrites it
    device = table.to_torch("cpu")
    dev_rows = device.fill(torch.from_numpy(states)).numpy()
    assert np.array_equal(rows, dev_rows)
    for i, s in enumerate(states.tolist()):
        assert np.array_equal(ids_of(rows[i], table.vocab_size), table.allowed(s))
        assert np.array_equal(writer.fill_one(s)[0], rows[i])
    # device advance: the allowed tokens move as the table does, the others are INVALID (-2)
    rng = np.random.default_rng(1)
    for s in states.tolist()[:8]:
        content, nxt = table.transitions(s)
        pick = rng.choice(content.size, size=16)
        got = device.advance(torch.full((16,), s), torch.from_numpy(content[pick].astype(np.int64)))
        assert got.tolist() == nxt[pick].tolist()
    assert device.nbytes < 64 * table.vocab_size  # a few dense rows, not one per state
    m = table.matcher()
    tok = int(table.transitions(0)[0][-1])
    assert m.accept_token(tok) and m.state == table.advance(0, tok)


@pytest.mark.parametrize("name", ["date-gpt2-v1.triec", "passport-gpt2-v1.triec"])
def test_version_1_pattern_artifacts_load_as_before(name: str, vocabs: dict[str, triec.Vocabulary]) -> None:
    """Written by the release before version 6: token rows, loaded into a table without classes that serves and
    re-saves byte for byte, and equal, state by state, to the same pattern compiled now."""
    path = GOLDEN / name
    old = triec.load(path, verify=True)
    assert old.format_version == 1 and old.classes is None
    from triec.artifact.patterns import encode_pattern

    assert encode_pattern(old) == path.read_bytes()
    new = compile_pattern(old.pattern, vocabs["gpt2"])
    assert new.classes is not None and new.num_states == old.num_states
    for s in range(old.num_states):
        assert np.array_equal(old.allowed(s), new.allowed(s))
        t_old, n_old = old.transitions(s)
        t_new, n_new = new.transitions(s)
        assert np.array_equal(t_old, t_new) and np.array_equal(n_old, n_new)


def test_a_schema_field_too_wide_for_a_slot_stays_in_the_engine(qwen2: triec.Vocabulary) -> None:
    """A schema slot stores token rows: ``.{0,300}`` (some 45 million pairs) is left to the engine with the reason,
    in a second instead of 29 s and 5 GB, and the date beside it is still served by its slot."""
    from triec.schema.compile import MAX_SLOT_PAIRS

    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "pattern": ".{0,300}"}, "d": {"type": "string", "format": "date"}},
        "required": ["name", "d"],
    }
    table = triec.compile_schema(schema, qwen2, engine="xgrammar")
    left = {p["pointer"]: p["reason"] for p in table.info["engine_patterns"]}
    assert list(left) == ["/properties/name"] and f"{MAX_SLOT_PAIRS:,}" in left["/properties/name"]
    assert [s["pointer"] for s in table.info["slots"]] == ["/properties/d"]


def test_verify_finds_class_rows_that_load_but_disagree_with_the_dfa(tmp_path: Path, qwen2: triec.Vocabulary) -> None:
    """A class row leading to the wrong (in-range) state loads, as any consistent table does; ``triec verify``
    finds it by recompiling the classes from the stored DFA, at every state (the brute-force rows are sampled)."""
    from typer.testing import CliRunner

    from triec.cli import app

    table = compile_pattern("[^a]{60}", qwen2)
    good = tmp_path / "good.triec"
    table.save(good)
    nxt = table.classes.class_next
    at = int(table.classes.class_offsets[37])  # a state deep in the DFA, rarely among the sampled rows
    nxt[at] = (int(nxt[at]) + 1) % table.num_states
    bad = tmp_path / "bad.triec"
    table.save(bad)
    runner = CliRunner()
    assert runner.invoke(app, ["verify", str(good), "--against", "reference"]).exit_code == 0
    result = runner.invoke(app, ["verify", str(bad), "--against", "reference", "--states", "4"])
    assert result.exit_code != 0 and "class rows differ" in result.stdout, result.stdout
