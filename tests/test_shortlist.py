"""Shortlists (issue 52): retrievers rank BFCL's real function names, and a cascade's views are exact.

Each level of a cascade is a restricted view of one table compiled with the escape value; it must equal compiling
that level's values (and the escape) alone, state by state, and the last level must never allow the escape. A real
greedy decode (a tiny random-weight Llama of gpt2's width) stays valid at every level.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from shared import bfcl_registry

import triec
from triec import shortlist
from triec.errors import ValueNotInTable, ValuesError

ARRAYS = ("allowed_offsets", "allowed_tokens", "allowed_next", "value_state", "value_lcp", "state_byte")


@pytest.fixture(scope="module")
def described() -> dict[str, str]:
    found: dict[str, str] = {}
    for tool in bfcl_registry():
        found.setdefault(tool["function"]["name"], tool["function"].get("description", ""))
    return found


@pytest.fixture(scope="module")
def gpt2() -> triec.Vocabulary:
    return triec.Vocabulary.load("gpt2")


@pytest.fixture(scope="module")
def table(bfcl_names: list[str], gpt2: triec.Vocabulary) -> triec.MaskTable:
    return triec.compile([*bfcl_names, shortlist.ESCAPE], gpt2)


def assert_equals_fresh(view: object, subset: list[str], vocab: triec.Vocabulary) -> None:
    fresh = triec.compile(subset, vocab)
    compact = view.compact()  # type: ignore[attr-defined]
    for name in ARRAYS:
        assert np.array_equal(getattr(compact, name), getattr(fresh, name)), name
    assert compact.values == fresh.values


# -- retrievers ---------------------------------------------------------------------------------------------------------
def test_words_split_every_naming_style() -> None:
    assert shortlist.words("get_weather.forecastDaily") == "get weather forecast daily"
    assert shortlist.words("HTTPServer-v2") == "http server v 2"


def test_bm25_ranks_the_value_whose_description_matches_first(described: dict[str, str]) -> None:
    names = list(described)
    bm25 = shortlist.BM25(names, [described[n] for n in names])
    query = "Calculate the body mass index of a person who weighs 70 kg and is 1.75 m tall."
    top = bm25.top(query, 5)
    assert top[0] in {n for n in names if "body mass index" in described[n].lower()}
    assert bm25.rank(query)[:5] == top and len(bm25.rank(query)) == len(names)
    # names alone: the words of the name are indexed ("determine_body_mass_index" reads "body mass index")
    assert "mass" in shortlist.words(shortlist.BM25(names).top("body mass index", 1)[0])


def test_rankings_are_deterministic_and_ties_keep_the_given_order() -> None:
    values = ["zeta", "alpha", "mid"]
    bm25 = shortlist.BM25(values)
    assert bm25.rank("nothing in common") == values  # all scores 0
    scorer = shortlist.ScoreFunction(values, lambda q, vs: [1.0, 2.0, 1.0])
    assert scorer.rank("q") == ["alpha", "zeta", "mid"]


def test_a_scorer_callable_is_used_as_given() -> None:
    seen: list[tuple[str, list[str]]] = []

    def score(query: str, values: list[str]) -> list[float]:
        seen.append((query, values))
        return [float(len(v)) for v in values]

    scorer = shortlist.ScoreFunction(["a", "abc", "ab"], score)
    assert scorer.top("the query", 2) == ["abc", "ab"]
    assert seen == [("the query", ["a", "abc", "ab"])]
    with pytest.raises(ValuesError, match="one score each"):
        shortlist.ScoreFunction(["a", "b"], lambda q, vs: [1.0]).rank("q")


def test_embedding_is_cosine_similarity_of_the_encoder() -> None:
    vectors = {"red apple": [1.0, 0.0], "blue sky": [0.0, 1.0], "q": [0.9, 0.1]}

    def encode(texts: list[str]) -> np.ndarray:
        return np.array([vectors[t] for t in texts])

    emb = shortlist.Embedding(["red_apple", "blueSky"], encode=encode)
    assert emb.rank("q") == ["red_apple", "blueSky"]
    with pytest.raises(ValuesError, match="shape"):
        shortlist.Embedding(["a"], encode=lambda texts: np.zeros(3))


@pytest.mark.torch
def test_model_encoder_ranks_with_the_models_input_embeddings(gpt2: triec.Vocabulary) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from test_beams import tiny_model

    model = tiny_model(gpt2.vocab_size, list(gpt2.eos_token_ids))

    class Tok:  # gpt2's ids from its own vocabulary: byte-level greedy longest match is enough for a lookup
        def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
            data, ids = text.encode(), []
            index = {b: i for i, b in enumerate(gpt2.token_bytes) if b}
            while data:
                n = max(n for n in range(1, min(len(data), 16) + 1) if data[:n] in index)
                ids.append(index[data[:n]])
                data = data[n:]
            return ids

    del torch, transformers
    encode = shortlist.model_encoder(model, Tok())
    emb = shortlist.Embedding(["get_weather", "send_email"], encode=encode)
    assert emb.rank("get weather")[0] == "get_weather"  # the same tokens: cosine 1


@pytest.mark.parametrize(
    ("values", "descriptions", "match"),
    [([], None, "at least one"), (["a", "a"], None, "twice"), (["a", "b"], ["x"], "1 descriptions for 2")],
)
def test_bad_retriever_input_is_named(values: list[str], descriptions: list[str] | None, match: str) -> None:
    with pytest.raises(ValuesError, match=match):
        shortlist.BM25(values, descriptions)
    with pytest.raises(ValuesError, match="at least 1"):
        shortlist.ScoreFunction(["a"], lambda q, vs: [0.0]).top("q", 0)


# -- the cascade ----------------------------------------------------------------------------------------------------------
def test_levels_double_from_k_to_the_full_set(table: triec.MaskTable, bfcl_names: list[str]) -> None:
    total = len(bfcl_names)
    assert shortlist.Cascade(table, bfcl_names, 20).levels == (20, 40, total)
    assert shortlist.Cascade(table, bfcl_names, 20, doublings=0).levels == (20, total)
    levels = shortlist.Cascade(table, bfcl_names, 100, doublings=None).levels
    assert levels == (100, 200, 400, 800, 1600, total)
    assert shortlist.Cascade(table, bfcl_names[:30], 20).levels == (20, 30, total)  # a short ranked list: all of it
    assert shortlist.Cascade(table, bfcl_names, total).levels == (total,)


def test_each_level_equals_compiling_its_values_and_the_last_never_allows_the_escape(
    table: triec.MaskTable, bfcl_names: list[str], described: dict[str, str], gpt2: triec.Vocabulary
) -> None:
    ranked = shortlist.BM25(bfcl_names, [described[n] for n in bfcl_names]).rank("get the weather forecast")
    cascade = shortlist.Cascade(table, ranked, 8)
    for level in range(len(cascade.levels) - 1):
        listed = cascade.listed(level)
        assert listed == ranked[: cascade.levels[level]] and shortlist.ESCAPE not in listed
        assert_equals_fresh(cascade.view(level), [*listed, shortlist.ESCAPE], gpt2)
    last = len(cascade.levels) - 1
    full = cascade.view(last)
    assert sorted(cascade.listed(last)) == sorted(bfcl_names) and cascade.listed(last)[:16] == ranked[:16]
    assert_equals_fresh(full, bfcl_names, gpt2)
    assert shortlist.ESCAPE not in full.values
    assert full.state_for_prefix(shortlist.ESCAPE) is None  # no state spells it: never allowed
    assert shortlist.Cascade(table, ranked, 4).view(2) is full  # one full view per table


@pytest.mark.torch
def test_a_real_decode_is_valid_at_every_level_through_the_widenings(
    table: triec.MaskTable, bfcl_names: list[str], gpt2: triec.Vocabulary
) -> None:
    """A tiny random Llama decodes each level greedily; the model's escapes widen, every answer is valid."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from test_beams import tiny_model

    from triec.eval.decode import Greedy

    model = tiny_model(gpt2.vocab_size, list(gpt2.eos_token_ids), seed=3)
    greedy = Greedy(model, list(gpt2.eos_token_ids))
    for seed in range(6):
        ranked = [str(v) for v in np.random.default_rng(seed).permutation(bfcl_names)]
        cascade = shortlist.Cascade(table, ranked, 3)
        pre = greedy.prefill([seed + 1, 2, 3])
        seen: list[str] = []

        def escaping(view: object, listed: list[str], pre: object = pre, seen: list[str] = seen) -> str:
            """The real decode, checked; then the escape in its place until the last level (forced widenings)."""
            text = _real(greedy, pre, view, gpt2)
            assert text in [*listed, shortlist.ESCAPE], text
            seen.append(text)
            return shortlist.ESCAPE if len(seen) < 3 else text

        result = shortlist.run(cascade, escaping)
        assert cascade.levels == (3, 6, len(bfcl_names)) and len(seen) == 3
        assert result.level == 2 and result.decodes == 3
        assert result.answer in bfcl_names and result.answer != shortlist.ESCAPE
        # the model's own choices: the run stops at the first level where it does not choose the escape
        own = shortlist.run(cascade, lambda view, listed, pre=pre: _real(greedy, pre, view, gpt2))
        assert own.answer in bfcl_names and own.decodes == own.level + 1
        assert own.answers[:-1] == (shortlist.ESCAPE,) * own.level


def _real(greedy: object, pre: object, view: object, vocab: triec.Vocabulary) -> str:
    """One greedy decode constrained to ``view``; the text must end with EOS."""
    from triec.eval.decode import TriecConstraint

    got = greedy.decode(pre, TriecConstraint(shortlist.compacted(view).matcher(), vocab.vocab_size), 64)  # type: ignore[attr-defined]
    assert got.finished
    return b"".join(vocab.token_bytes[t] for t in got.ids).decode()


def test_the_escape_may_share_a_prefix_with_a_value(gpt2: triec.Vocabulary) -> None:
    """An escape that is a prefix of a value (or the reverse) is still exact: EOS decides which was meant."""
    values = ["none", "none_of_these_tools", "get", "set"]
    table = triec.compile([*values, shortlist.ESCAPE], gpt2)
    cascade = shortlist.Cascade(table, ["none_of_these_tools", "none", "get", "set"], 1)
    assert_equals_fresh(cascade.view(0), ["none_of_these_tools", shortlist.ESCAPE], gpt2)
    assert_equals_fresh(cascade.view(len(cascade.levels) - 1), values, gpt2)
    full = cascade.view(len(cascade.levels) - 1)
    state = full.state_for_prefix(shortlist.ESCAPE)
    assert state is not None and not full.is_accepting(state)  # a prefix of a value, never an answer


# -- bounded input: every bad argument is one clear error ------------------------------------------------------------------
def test_bad_cascades_are_refused_by_name(
    table: triec.MaskTable, bfcl_names: list[str], gpt2: triec.Vocabulary
) -> None:
    total = len(bfcl_names)
    for k in (0, -1, total + 1):
        with pytest.raises(ValuesError, match=f"k must be between 1 and .*{total}"):
            shortlist.Cascade(table, bfcl_names, k)
    with pytest.raises(ValuesError, match="ranked list is empty"):
        shortlist.Cascade(table, [], 5)
    with pytest.raises(ValueNotInTable, match="'no_such_function'"):
        shortlist.Cascade(table, ["no_such_function", *bfcl_names[:5]], 5)
    with pytest.raises(ValuesError, match="holds the escape"):
        shortlist.Cascade(table, [shortlist.ESCAPE, *bfcl_names[:5]], 5)
    with pytest.raises(ValuesError, match="listed twice"):
        shortlist.Cascade(table, [bfcl_names[0], bfcl_names[0]], 1)
    with pytest.raises(ValuesError, match="doublings"):
        shortlist.Cascade(table, bfcl_names, 5, doublings=-1)
    without = triec.compile(bfcl_names[:50], gpt2)
    with pytest.raises(ValueNotInTable, match="escape value 'none_of_these' is not one of the table's values: compile"):
        shortlist.Cascade(without, bfcl_names[:50], 5)
    with pytest.raises(ValueNotInTable, match="'nope'"):  # restrict itself names the value
        table.restrict(["nope"])
    cascade = shortlist.Cascade(table, bfcl_names, 5)
    with pytest.raises(IndexError, match="levels 0 to 2"):
        cascade.view(3)
    pattern = triec.compile_pattern("[a-z]{1,3}", gpt2)
    assert not pattern.restrictable
    with pytest.raises(ValuesError, match="cannot be restricted"):
        shortlist.Cascade(pattern, ["a"], 1)


@settings(max_examples=25, deadline=None)
@given(
    values=st.lists(st.text(alphabet="ab._n", min_size=1, max_size=6), min_size=2, max_size=24, unique=True),
    seed=st.integers(0, 2**16),
    k=st.integers(1, 24),
    doublings=st.sampled_from([0, 1, 2, None]),
)
def test_any_cascade_equals_compiling_each_level(
    values: list[str], seed: int, k: int, doublings: int | None, gpt2: triec.Vocabulary
) -> None:
    """Random small sets over a tight alphabet (shared prefixes, the escape's letters): every level is exact."""
    values = [v for v in values if v != shortlist.ESCAPE]
    k = min(k, len(values))
    table = triec.compile([*values, shortlist.ESCAPE], gpt2)
    ranked = [values[i] for i in np.random.default_rng(seed).permutation(len(values))]
    cascade = shortlist.Cascade(table, ranked, k, doublings=doublings)
    assert cascade.levels[-1] == len(values) and list(cascade.levels) == sorted(set(cascade.levels))
    for level in range(len(cascade.levels)):
        last = level == len(cascade.levels) - 1
        listed = cascade.listed(level)
        assert sorted(listed) == sorted(values) if last else listed == ranked[: cascade.levels[level]]
        assert_equals_fresh(cascade.view(level), listed if last else [*listed, shortlist.ESCAPE], gpt2)
