"""triec's offline beam search in vLLM (:func:`triec.integrations.vllm.beams.beam_search`) against vLLM's own
xgrammar beam search and a brute-force reference, in real CPU engines (tests/vllm_beams_driver.py, one subprocess,
two engines of the tiny random Llama in float32; about two minutes).

* ``enum``: a JSON string enum of 200 tool names, W = 4, two prompts. triec's beams (token ids and cumulative
  log-probabilities) equal the reference's; vLLM's xgrammar beam search returns fewer than W sequences: each beam
  keeps only the allowed tokens among its *raw* top-2W (and the greedy allowed one), so beams die while allowed
  tokens remain.
* ``tree``: 125 values grown from the model's own raw top tokens, so vLLM's filter keeps what an exact search
  keeps: there triec's beams equal vLLM's xgrammar beams exactly (every allowed set at most 16 tokens).
* an artifact by name, the same values as a triec table and as a ``choice`` (which vLLM's xgrammar beam search
  refuses): the same beams, every one a value then EOS.
* vLLM's own ``LLM.beam_search`` with the plugin's ``beam_search`` route: a ``choice`` gets triec's beams;
* the processor (and the route) leave vLLM's unconstrained beam search as in a stock engine.

Requires vLLM (the ``vllm`` nox session).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm

pytest.importorskip("vllm")

DRIVER = Path(__file__).with_name("vllm_beams_driver.py")
W = 4


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("beams")
    out = root / "report.json"
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1")
    env.pop("TRIEC_VLLM_BACKEND", None)  # stock vLLM's xgrammar beam search is the comparison
    proc = subprocess.run(
        [sys.executable, str(DRIVER), str(root), str(out)], env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return json.loads(out.read_text())


def same(a: list[dict], b: list[dict]) -> bool:
    return [s["ids"] for s in a] == [s["ids"] for s in b] and all(
        abs(x["cum"] - y["cum"]) <= 1e-4 for x, y in zip(a, b, strict=True)
    )


def test_enum_beams_equal_the_reference_and_are_values(report: dict) -> None:
    case = report["cases"]["enum"]
    values = {json.loads(v) for v in case["values"]}
    for ours, ref in zip(case["triec"], case["reference"], strict=True):
        assert len(ours) == W
        assert same(ours, ref), (ours, ref)
        for s in ours:
            assert s["ids"][-1] == report["eos"]
            assert json.loads(s["text"][s["text"].index('"') :]) in values


def test_xgrammar_top_2w_filter_kills_beams_triec_keeps_w(report: dict) -> None:
    case = report["cases"]["enum"]
    assert all(len(x) < W for x in case["xgrammar"]), case["xgrammar"]
    assert all(len(t) == W for t in case["triec"])


def test_tree_beams_equal_xgrammar_where_its_search_is_exact(report: dict) -> None:
    case = report["cases"]["tree"]
    for ours, xgr, ref in zip(case["triec"], case["xgrammar"], case["reference"], strict=True):
        assert len(ours) == W
        assert same(ours, xgr), (ours, xgr)
        assert same(ours, ref), (ours, ref)


def test_artifact_table_and_choice_agree(report: dict) -> None:
    art = report["artifact"]
    assert report["xgrammar_choice"].startswith("ValueError"), report["xgrammar_choice"]
    for by_name, table, choice in zip(art["by_name"], art["table"], art["choice"], strict=True):
        assert len(by_name) == W
        assert same(by_name, table) and same(by_name, choice)
        for s in by_name:
            assert s["ids"][-1] == report["eos"]
            assert any(s["text"].endswith(v) for v in art["values"])


def test_llm_beam_search_is_routed_to_triec_by_the_plugin_hook(report: dict) -> None:
    """``llm.beam_search(prompts, BeamSearchParams(structured_outputs=SO(choice=...)))`` in an engine built with
    ``engine_args`` and the plugin's ``beam_search`` route: the same beams as ``beams.beam_search``, where stock vLLM
    refuses the choice (``xgrammar_choice``)."""
    art = report["artifact"]
    for hooked, direct in zip(report["hooked_choice"], art["choice"], strict=True):
        assert len(hooked) == W and same(hooked, direct)


def test_unconstrained_beam_search_unchanged_by_the_processor(report: dict) -> None:
    for ours, stock in zip(report["unconstrained"], report["unconstrained_stock"], strict=True):
        assert same(ours, stock)


def test_processor_rows_without_an_engine() -> None:
    """Beam rows: log-softmax on allowed ids only (ids off the row ignored); log-probability rows: log-softmax;
    repetition-penalty and plain rows untouched; a swap carries each row's constraint."""
    import numpy as np
    import torch
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality

    from triec.integrations.vllm.beam_processor import TriecBeamProcessor
    from triec.integrations.vllm.beams import ARG_ALLOWED, encode_allowed

    proc = TriecBeamProcessor(None, torch.device("cpu"), False)
    beam = SamplingParams(logprobs=8, extra_args={ARG_ALLOWED: encode_allowed(np.array([3, 5, 10, -1]))})
    added = [
        (0, beam, [], []),
        (1, SamplingParams(logprobs=2), [], []),
        (2, SamplingParams(), [], []),
        (3, SamplingParams(logprobs=2, repetition_penalty=1.2), [], []),
    ]
    proc.update_state(BatchUpdate(batch_size=4, removed=[], added=added, moved=[]))
    logits = torch.randn(4, 10)
    before = logits.clone()
    proc.apply(logits)
    lsm = before.log_softmax(-1)
    assert torch.isinf(logits[0, [0, 1, 2, 4, 6, 7, 8, 9]]).all()
    assert torch.allclose(logits[0, [3, 5]], lsm[0, [3, 5]])
    assert torch.allclose(logits[1], lsm[1])
    assert torch.equal(logits[2], before[2]) and torch.equal(logits[3], before[3])
    proc.update_state(BatchUpdate(batch_size=4, removed=[], added=[], moved=[(0, 2, MoveDirectionality.SWAP)]))
    logits = before.clone()
    proc.apply(logits)
    assert torch.isinf(logits[2, 0]) and torch.allclose(logits[2, [3, 5]], before.log_softmax(-1)[2, [3, 5]])
    assert torch.equal(logits[0], before[0])
    with pytest.raises(ValueError):
        TriecBeamProcessor.validate_params(SamplingParams(extra_args={ARG_ALLOWED: "3,5"}))
