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


def test_the_semantic_section_checks_its_writers_and_renders_every_level() -> None:
    """A tiny catalog through every writer (their masks are checked equal before timing), as the suite renders it."""
    from benchmarks import beams_semantic

    rows = beams_semantic.rows(sizes={"items": 2_000, "requests": 4, "beams": 4, "repeat": 1, "marisa_rows": 4})
    assert {r["depth"] for r in rows} == {0, 1, 2, 3, 4}
    assert {"triec numpy", "dict trie"} <= {r["writer"] for r in rows}
    cells = [{"status": "ok", "section": "semantic", "load_average": [1.0, 1.0, 1.0], **r} for r in rows]
    table = beams_semantic.tables(cells)["semantic"]
    assert "2,000 items x 4 codes" in table and "16 rows a step (4 requests x 4 beams)" in table
    assert "| triec numpy |" in table and "depth 4 (EOS only)" in table


def test_the_vllm_section_says_why_it_cannot_run_and_renders_its_ratios() -> None:
    import importlib.util

    from benchmarks import beams_vllm
    from benchmarks.suites import beams

    why = beams_vllm.unavailable()
    if importlib.util.find_spec("vllm") is None:
        assert why is not None and "vllm" in why
        cells = beams._section_cells("vllm", beams.SECTIONS["vllm"], quick=True)
        assert [c["status"] for c in cells] == ["missing"]
        assert beams.tables({"cells": [{**c, "section": "vllm"} for c in cells]})["vllm"].startswith("Not measured")
    row = {"status": "ok", "quick": False, "load_average": [2.0, 2.0, 2.0], "steps": 32, "valid": 1.0}
    cells = [
        {
            **row,
            "engine": "triec",
            "method": "triec",
            "k": 10_000,
            "w": 16,
            "s_per_request": 0.5,
            "s_per_token": 2e-3,
            "beams": 16,
        },
        {
            **row,
            "engine": "triec",
            "method": "unconstrained",
            "k": None,
            "w": 16,
            "s_per_request": 0.4,
            "s_per_token": 2.5e-3,
            "beams": 16,
            "valid": None,
        },
        {
            **row,
            "engine": "stock",
            "method": "xgrammar",
            "k": 10_000,
            "w": 16,
            "s_per_request": 5.0,
            "s_per_token": 9e-2,
            "beams": 1,
        },
        {
            **row,
            "engine": "stock",
            "method": "unconstrained",
            "k": None,
            "w": 16,
            "s_per_request": 0.45,
            "s_per_token": 3e-3,
            "beams": 16,
            "valid": None,
        },
    ]
    table = beams_vllm.tables(cells)["vllm"]
    assert "| 10,000 | 16 | 0.500 | 5.000 | 0.450 | 10.0x | 0.80 | 32 / 32 | 16.0 / 1.0 | 100% / 100% |" in table
    assert "0.450 s a request at W = 16" in table


def test_a_section_run_merges_into_the_result_file(tmp_path: Any) -> None:
    """``--section NAME`` replaces that section's cells and keeps the others, each with the run it came from."""
    from benchmarks import command, results

    old = results.new("beams", {"quick": False})
    old["cells"] = [
        {"section": "linking", "status": "ok", "widths": {}},
        {"section": "model", "status": "ok"},
        {"section": "semantic", "status": "missing", "error": "not yet"},
    ]
    new = results.new("beams", {"quick": False})
    new["created"] = "2099-01-01T00:00:00Z"
    new["cells"] = [{"section": "semantic", "status": "ok", "writer": "w"}]
    merged = results.merge_sections(old, new, ["semantic"])
    assert [(c["section"], c["status"]) for c in merged["cells"]] == [
        ("linking", "ok"),
        ("model", "ok"),
        ("semantic", "ok"),
    ]
    assert merged["sections"]["linking"]["created"] == old["created"]
    assert merged["sections"]["semantic"]["created"] == "2099-01-01T00:00:00Z"
    quick = {**new, "settings": {"quick": True}}
    with pytest.raises(results.ResultError):
        results.merge_sections(old, quick, ["semantic"])
    say: list[str] = []
    assert command.run("beams", quick=True, out=None, write_docs=False, sections=["nosuch"], say=say.append) == 2
    assert "no section nosuch" in say[0]
    assert command.run("peers", quick=True, out=None, write_docs=False, sections=["x"], say=say.append) == 2
