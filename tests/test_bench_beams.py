"""The ``beams`` suite's peers are GENRE's structures: on titles tokenized by GPT-2's encoder, GENRE's dict trie
and marisa-trie allow exactly what triec's canonical table allows on the rows of a recorded beam search (triec's
byte trie a superset), and a section whose module is missing renders a note instead of failing."""

from __future__ import annotations

from typing import Any

import pytest

import triec
from triec.synthetic.sets import titles

pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def made() -> dict[str, Any]:
    import torch

    from benchmarks import genre_trie

    vocab = triec.Vocabulary.load("gpt2")
    values = titles(300, seed=7)
    eos = int(vocab.eos_token_ids[0])
    ids = [e.ids for e in vocab.encoder().encode_batch_fast(values, add_special_tokens=False)]
    seqs = genre_trie.sequences(ids, eos, eos)
    found: dict[str, Any] = {"eos": eos, "genre_dict": genre_trie.DictTrie(seqs), "vocab": vocab}
    if genre_trie.marisa_unavailable() is None:
        found["genre_marisa"] = genre_trie.MarisaTokenTrie(seqs, int(vocab.vocab_size))
    for mode in ("any", "canonical"):
        table = triec.compile(values, vocab, tokenization=mode)
        found[mode] = table
        found[f"{mode}_device"] = table.to_torch(torch.device("cpu"))
    return found


@pytest.mark.parametrize("width", [1, 4, 16])
def test_genre_structures_allow_what_the_canonical_table_allows(made: dict[str, Any], width: int) -> None:
    from benchmarks.beam_steps import record_beams
    from benchmarks.suites import beams

    vocab, eos, trie = made["vocab"], made["eos"], made["genre_dict"]
    prompt = [11, 12, 13]
    steps = record_beams(lambda b: trie.get([eos, *b]), prompt, width, 6, vocab.vocab_size, eos, seed=width)
    assert len(steps) == 6 and all(int(s.shape[0]) == width for s in steps)
    makers = beams._makers(made, len(prompt), width)
    assert set(beams._same_masks(makers, steps, vocab.vocab_size).values()) == {True}


def test_a_dead_row_gets_eos_from_genre_callbacks(made: dict[str, Any]) -> None:
    """Off the trie GENRE's get returns [] (transformers raises on it); the benchmark's callback gives EOS."""
    import torch

    from benchmarks import genre_trie

    eos = made["eos"]
    trie = made["genre_dict"]
    assert trie.get([eos, 0, 0, 0]) == []
    fn = genre_trie.prefix_fn(trie, 2, eos, [eos])
    assert fn(0, torch.tensor([5, 6, 0, 0, 0])) == [eos]


def test_missing_sections_render_a_note() -> None:
    from benchmarks.suites import beams

    cells = [
        {"section": s, "status": "missing", "error": f"benchmarks/beams_{s}.py is not in this checkout yet"}
        for s in beams.SECTIONS
    ]
    found = beams.tables({"cells": [{"section": "model", "status": "missing", "error": "no model"}, *cells]})
    assert found["model"].startswith("Not measured") and "no model" in found["model"]
    for s in beams.SECTIONS:
        assert found[s].startswith("Not measured") and f"beams_{s}.py" in found[s]
