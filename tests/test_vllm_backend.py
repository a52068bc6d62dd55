"""triec's structured-outputs backend in a real vLLM CPU engine, next to xgrammar in the same batches.

Two engine processes (tests/vllm_backend_driver.py, started with
``TRIEC_VLLM_BACKEND=1``): one with ngram speculative decoding and compact
JSON, one plain (backend ``auto``) with the ``deepseek_r1`` reasoning parser, both
with ``TRIEC_VLLM_COMPACT_JSON=1``. In each, every
triec-served request (``choice``, a literal-alternation ``regex``, a ``json``
string enum, artifacts by name with and without a restriction) runs next to the
xgrammar-served request of the same language (``choice_as_grammar``, the
grammar stock vLLM rewrites a choice into, or the enum wrapped in ``anyOf``,
which triec does not take), plus delegated regex and object schemas. All
batches are greedy (the CPU spec-decoding bug vllm-project/vllm#55005 breaks
mixed batches for every backend). Requires vLLM (the ``vllm`` nox session).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm

pytest.importorskip("vllm")

DRIVER = Path(__file__).with_name("vllm_backend_driver.py")


def run(root: Path, mode: str) -> tuple[dict, str]:
    env = dict(
        os.environ,
        TRIEC_VLLM_BACKEND="1",
        TRIEC_VLLM_LOG="debug",
        TRIEC_MAX_CHOICES="20000",
        TRIEC_VLLM_COMPACT_JSON="1",
        VLLM_CPU_KVCACHE_SPACE="1",
    )
    env.pop("VLLM_PLUGINS", None)
    out = root / f"{mode}.json"
    proc = subprocess.run(
        [sys.executable, str(DRIVER), str(root), str(out), mode], env=env, capture_output=True, text=True, timeout=900
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    return json.loads(out.read_text()), log


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict, str]]:
    root = tmp_path_factory.mktemp("backend")
    return {mode: run(root, mode) for mode in ("spec", "plain")}


def pairs(report: dict) -> dict[tuple, dict[str, dict]]:
    out: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for c in report["cases"]:
        out[(c["group"], c["case"], c["prompt"])][c["side"]] = c
    return out


@pytest.mark.parametrize("mode", ["spec", "plain"])
def test_served_outputs_are_values_and_equal_xgrammar(runs, mode: str) -> None:
    report, log = runs[mode]
    n = 0
    for key, sides in pairs(report).items():
        if "triec" not in sides or "xgrammar" not in sides or key[0] == "tags":
            continue
        ours, ref = sides["triec"], sides["xgrammar"]
        assert ours["finish"] == "stop" and ours["text"] in ours["allowed"], (key, ours)
        assert ours["ids"] == ref["ids"], (key, ours["text"], ref["text"])  # token for token
        n += 1
    assert n == 16
    # the backend served exactly the triec side (and the reasoning requests), xgrammar everything else
    served = len(re.findall(r"served by triec", log))
    triec_side = sum(c["side"] == "triec" for c in report["cases"])
    compact = 2 if mode == "plain" else 0  # the object requests: triec's spelling only where whitespace is free
    assert served == triec_side + compact + 2, served  # + the 10,000-value list and the request after the refusals
    assert "GRAMMAR delegated to xgrammar" in log and "REGEX delegated to xgrammar" in log
    assert log.count("triec vLLM backend on") >= 2  # frontend and engine core (and the worker)


@pytest.mark.parametrize("mode", ["spec", "plain"])
def test_hermes_tool_calls_equal_xgrammar(runs, mode: str) -> None:
    """vLLM's strict hermes structural tag over 40 tools, served by the schema layer: token for token xgrammar's."""
    report, _ = runs[mode]
    n = 0
    for key, sides in pairs(report).items():
        if key[0] == "tags":
            ours, ref = sides["triec"], sides["xgrammar"]
            assert ours["ids"] == ref["ids"] and ours["text"].startswith("<tool_call>"), (
                key,
                ours["text"],
                ref["text"],
            )
            n += 1
    assert n == 4


def test_speculative_decoding_drafts_are_accepted_and_change_nothing(runs) -> None:
    spec, plain = runs["spec"][0], runs["plain"][0]
    stats = spec["spec"]
    assert stats["vllm:spec_decode_num_drafts"] > 0 and stats["vllm:spec_decode_num_accepted_tokens"] > 0, stats
    a, b = pairs(spec), pairs(plain)
    for key in a:
        if "triec" in a[key]:
            assert a[key]["triec"]["ids"] == b[key]["triec"]["ids"], key  # greedy: same tokens with or without drafts


def test_delegated_requests_in_the_same_batches(runs) -> None:
    for mode, (report, _) in runs.items():
        for c in report["cases"]:
            if c["group"] == "delegated_regex":
                assert re.fullmatch(r"[a-z]{2,6}-[0-9]{2}", c["text"]) and c["finish"] == "stop", c
            elif c["group"] == "delegated_json" and mode == "spec":  # compact JSON: a random model's object ends
                doc = json.loads(c["text"])
                assert c["finish"] == "stop" and isinstance(doc["n"], int) and isinstance(doc["ok"], bool), c


def test_compact_objects_opt_in(runs) -> None:
    """``TRIEC_VLLM_COMPACT_JSON=1``: triec's spelling where vLLM allows any whitespace, xgrammar's compact one otherwise."""
    for mode, (report, _) in runs.items():
        for c in [c for c in report["cases"] if c["group"] == "object"]:
            doc = json.loads(c["text"])
            assert c["finish"] == "stop" and doc["color"] in ("red", "green", "blue") and doc["v"] == 1, c
            spelled = json.dumps(doc) if mode == "plain" else json.dumps(doc, separators=(",", ":"))
            assert c["text"] == spelled, (mode, c["text"])


def test_reasoning_constrains_the_answer_after_thinking(runs) -> None:
    report, _ = runs["plain"]
    cases = [c for c in report["cases"] if c["group"] == "reasoning"]
    assert len(cases) == 3
    end = report["end_think"]
    for c in cases:
        assert end in c["ids"] and c["finish"] == "stop", c
        answer = c["text"].split("</think>", 1)[1]
        assert answer in c["allowed"], c  # thinking is free, the answer one value


def test_new_large_list_and_refusals(runs) -> None:
    for report, _ in runs.values():
        assert report["k10000"]["valid"], report["k10000"]
        r = report["refusals"]
        assert r["too_many"].startswith("RequestRefused: structured_outputs.choice holds 25000 values"), r
        assert r["bad_artifact"].startswith("RequestRefused:") and r["missing_artifact"].startswith("RequestRefused:")
        assert r["empty"].startswith("VLLMValidationError") and r["non_string"].startswith("ValidationError"), r
        assert report["after_refusals"] in ("red", "green", "blue", "re", "redder", "grün", 'say "hi"')
