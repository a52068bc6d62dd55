"""triec.integrations.matchers: the request-level matcher and the one path that writes rows of host matchers.

Every row :class:`MatcherRows` writes (plain tables' in one gather, schema tables' through their mask writers,
think-then-answer's and any other matcher's own) must equal the matcher's own ``fill_bitmask``; a terminated
matcher's row allows the EOS ids given, alone.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

import triec
import triec.synthetic.sets
from triec.integrations.matchers import MatcherRows, RequestMatcher, fill_rows
from triec.runtime.bitmask import ids_of
from triec.runtime.matcher import TableMatcher

V = 151_936
COLORS = ["red", "green", "blue", "re", "gre", 'say "hi"', "naïve", "日本"]


@pytest.fixture(scope="module")
def served() -> triec.Vocabulary:
    return triec.Vocabulary.load("qwen2", vocab_size=V, eos_token_ids=[151643, 151645])


def walked(m: RequestMatcher, rng: random.Random, steps: int) -> RequestMatcher:
    """``m`` after up to ``steps`` random allowed tokens (it may end)."""
    for _ in range(steps):
        ids = m.allowed()
        if ids.size == 0 or m.is_terminated():
            break
        m.accept_token(int(rng.choice(ids)))
    return m


def own_row(m: RequestMatcher, words: int) -> np.ndarray:
    row = np.zeros(words, dtype=np.int32)
    m.fill_bitmask(row)
    return row


class _OwnRows(TableMatcher):
    """A matcher fill_rows does not batch (any other class): it must fill its own row."""


@pytest.mark.parametrize(("n", "contiguous"), [(24, True), (100, True), (100, False)])
def test_fill_rows_equals_each_matchers_own_row(served: triec.Vocabulary, n: int, contiguous: bool) -> None:
    """Few rows of a table (one slice each) and many (one gather and scatter); a buffer of any layout."""
    rng = random.Random(n)
    tables = [triec.compile(COLORS, served), triec.compile(triec.synthetic.sets.tool_names(200), served)]
    kinds = [_OwnRows if i % 7 == 3 else TableMatcher for i in range(n)]
    matchers = [walked(kind(tables[i % 2]), rng, rng.randint(0, 6)) for i, kind in enumerate(kinds)]
    assert any(m.is_terminated() for m in matchers) and any(type(m) is _OwnRows for m in matchers)
    width = tables[0].words_per_row
    out = np.full((n + 6, width), -1, dtype=np.int32) if contiguous else np.full((width, n + 6), -1, dtype=np.int32).T
    rows = rng.sample(range(n + 6), n)
    fill_rows(matchers, rows, out)
    for m, r in zip(matchers, rows, strict=True):
        assert np.array_equal(out[r], own_row(m, width)), r
    for r in set(range(n + 6)) - set(rows):
        assert (out[r] == -1).all()  # unlisted rows untouched


def test_matcher_rows_write_every_kind_as_its_own_row(served: triec.Vocabulary) -> None:
    """Plain, think-then-answer and (with an engine) schema matchers in one batch, in scattered rows; terminated ones
    allow the EOS ids given and nothing else."""
    from triec.runtime.trigger import Triggered

    rng = random.Random(5)
    table = triec.compile(COLORS, served)
    think = Triggered(triec.compile([" " + c for c in COLORS], served), served, "Answer:")
    matchers: list[RequestMatcher] = [walked(table.matcher(), rng, i % 5) for i in range(30)]
    matchers += [walked(think.matcher(), rng, i % 3) for i in range(6)]
    ended = think.matcher()
    for t in [*served.encoder().encode("Answer: red", add_special_tokens=False).ids, 151643]:
        assert ended.accept_token(t)
    matchers.append(ended)
    try:
        import llguidance  # noqa: F401

        schema = {
            "type": "object",
            "properties": {"name": {"type": "string", "enum": ["a", "b"]}, "arguments": {"type": "object"}},
            "required": ["name", "arguments"],
        }
        tool = triec.compile_schema(schema, served)
        matchers += [walked(tool.matcher(), rng, i) for i in range(4)]
    except ImportError:
        pass
    assert any(m.is_terminated() for m in matchers)
    words = table.words_per_row
    out = np.full((len(matchers) + 3, words), -1, dtype=np.int32)
    rows = rng.sample(range(len(matchers) + 3), len(matchers))
    got = MatcherRows().fill(matchers, out, rows, ended=[151643])
    assert got is out
    for m, r in zip(matchers, rows, strict=True):
        want = np.zeros(words, dtype=np.int32)
        if m.is_terminated():
            want[151643 // 32] = np.int32(np.uint32(1 << (151643 % 32)).view(np.int32))
        else:
            m.fill_bitmask(want)
        assert np.array_equal(out[r], want), (r, type(m).__name__)
    assert ids_of(out[rows[36]], V).tolist() == [151643]  # the think-then-answer matcher that ended


def test_one_schema_tables_rows_come_from_its_writer(served: triec.Vocabulary) -> None:
    pytest.importorskip("llguidance")
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "enum": ["a", "b"]}, "arguments": {"type": "object"}},
        "required": ["name", "arguments"],
    }
    tool = triec.compile_schema(schema, served)
    rng = random.Random(2)
    rows = MatcherRows()
    for n in (1, 3, 8):  # the writer grows with the batch
        matchers = [walked(tool.matcher(), rng, i) for i in range(n)]
        got = rows.fill(matchers)
        assert got.shape == (n, tool.words_per_row)
        for m, row in zip(matchers, got, strict=True):
            assert np.array_equal(row, own_row(m, tool.words_per_row))
    with pytest.raises(ValueError, match="needs out="):
        rows.fill([triec.compile(COLORS, served).matcher()])


def test_the_old_names_warn_and_are_the_new_objects() -> None:
    import triec.integrations.constraints as constraints
    import triec.integrations.matchers as matchers

    for old, new in (("Matcher", "RequestMatcher"), ("fill_rows", "fill_rows"), ("BATCH_ROWS", "BATCH_ROWS")):
        with pytest.warns(DeprecationWarning, match=rf"constraints\.{old} is deprecated .*matchers\.{new}$"):
            assert getattr(constraints, old) is getattr(matchers, new)
    with pytest.raises(AttributeError):
        constraints.Nothing  # noqa: B018
