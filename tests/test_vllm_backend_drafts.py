"""Drafts and reasoning through the installed vLLM's own ``StructuredOutputManager``: triec's grammar next to vLLM's
xgrammar, on whichever release is installed (0.32 to 0.34).

vLLM's manager drives a grammar on its own terms: it cuts a request's draft
tokens before scheduling (0.34's ``trim_spec_tokens`` keeps the grammar-valid
prefix plus the first refused token, and nothing once the grammar has
terminated; 0.32 and 0.33's ``validate_tokens`` the valid prefix), fills one row
per draft position plus the bonus row in ``grammar_bitmask`` (feeding the drafts
to ``accept_tokens`` and rolling them back; 0.34 fills every row after a refused
draft unconstrained), and with a reasoning parser decides where the grammar
starts (after an explicit end token; at an implicit one, a tool-call start that
is content too, which stays masked while reasoning where the grammar cannot
start with it). Here one manager holds two requests with the same constraint,
one compiled by triec's hook and one by vLLM's own ``compile_grammar``, and every
step both get the same drafts: trimmed drafts, every row and every
``accept_tokens`` answer must be equal, along seeded walks that reach rejected
drafts in the middle, drafts after termination and the end of reasoning.
"""

from __future__ import annotations

import json
from collections import namedtuple
from types import SimpleNamespace

import numpy as np
import pytest

pytestmark = pytest.mark.vllm

pytest.importorskip("vllm")

import torch  # noqa: E402
from test_vllm_backend_rows import (  # noqa: E402
    CASES,
    STOP,
    V,
    _original,
    _reference,
    _tools,
    _vllm_auto_tag,
    vllm_backend,  # noqa: E402, F401  (the fixture xgr takes)
)
from vllm.v1.structured_output.backend_types import StructuredOutputOptions as Opt  # noqa: E402

from triec.integrations.vllm import backend, internals, patches  # noqa: E402

K = 3  # draft tokens per step


@pytest.fixture(scope="module")
def xgr(vllm_backend):  # noqa: F811
    """vLLM's own XgrammarBackend, as tests/test_vllm_backend_rows.py builds it."""
    return vllm_backend


END = 820  # "####": this test's explicit reasoning end
CALL = 151657  # <tool_call>: an implicit reasoning end (it is the first content token too)
ReasoningEnd = namedtuple("ReasoningEnd", "offset implicit")


class Reasoner:
    """A reasoning parser as vLLM's manager reads one (0.34's interface; 0.32 and 0.33 use the streaming checks)."""

    reasoning_end_token_ids = frozenset({END, CALL})
    implicit_reasoning_end_token_ids = frozenset({CALL})

    def __init__(self, tokenizer: object = None, **kwargs: object) -> None:
        pass

    def is_reasoning_end(self, input_ids: list[int]) -> bool:
        return any(t in self.reasoning_end_token_ids for t in input_ids)

    def is_reasoning_end_streaming(self, input_ids: list[int], delta_ids: list[int]) -> bool:
        return any(t in self.reasoning_end_token_ids for t in delta_ids)

    def find_reasoning_end(self, token_ids: list[int]) -> ReasoningEnd:
        for i, t in enumerate(token_ids):
            if t in self.reasoning_end_token_ids:
                return ReasoningEnd(i, t == CALL)
        return ReasoningEnd(len(token_ids), False)


def _manager(reasoner: type | None) -> object:
    """vLLM's own manager with ``K`` speculative tokens (no tokenizer: the reasoner class is set directly)."""
    config = SimpleNamespace(
        parallel_config=SimpleNamespace(distributed_executor_backend="mp"),
        scheduler_config=SimpleNamespace(max_num_seqs=4),
        model_config=SimpleNamespace(skip_tokenizer_init=True, is_diffusion=False, get_vocab_size=lambda: V),
        structured_outputs_config=SimpleNamespace(
            enable_in_reasoning=False, reasoning_parser=None, reasoning_parser_plugin=None
        ),
        speculative_config=SimpleNamespace(num_speculative_tokens=K),
        num_speculative_tokens=K,
    )
    manager = internals.manager_class()(config)
    manager.reasoner_cls = reasoner
    manager.tokenizer = None
    return manager


def _request(rid: str, grammar: object) -> SimpleNamespace:
    tokens = [1, 2, 3]  # the prompt: reasoning has not ended in it
    so = SimpleNamespace(
        grammar=grammar,
        reasoning_ended=None,
        reasoning_parser_kwargs=None,
        reasoner=None,
        masked_reasoning_end_ids=None,
    )
    return SimpleNamespace(
        request_id=rid,
        use_structured_output=True,
        structured_output_request=so,
        prompt_token_ids=list(tokens),
        all_token_ids=tokens,
        _all_token_ids=tokens,
    )


def _allowed(row: np.ndarray) -> np.ndarray:
    return np.flatnonzero(np.unpackbits(row.view(np.uint8), bitorder="little")[:V])


def _has(row: np.ndarray, token: int) -> bool:
    return bool((int(row.view(np.uint32)[token >> 5]) >> (token & 31)) & 1)


def _refused(allowed: np.ndarray, rng: np.random.Generator) -> int | None:
    """A token the row refuses (None in free text, where every ordinary token is allowed)."""
    pool = np.setdiff1d(np.arange(151_643), allowed, assume_unique=True)
    pool = pool[pool != END]
    return int(rng.choice(pool)) if pool.size else None


def _drafts(ref: object, reasoning: bool, rng: np.random.Generator) -> list[int]:
    """``K`` drafts: while reasoning, free tokens with an end token somewhere; after, tokens the reference grammar
    allows (a stop token half the time it is allowed), now and then a refused one and anything after it."""
    if reasoning:
        out = [int(rng.integers(0, 151_643)) for _ in range(K)]
        if rng.random() < 0.5:
            out[int(rng.integers(0, K))] = END if rng.random() < 0.5 else CALL
        return out
    out, moved = [], 0
    b = torch.zeros((1, (V + 31) // 32), dtype=torch.int32)
    while len(out) < K and not ref.is_terminated():
        ref.fill_bitmask(b, 0)
        allowed = _allowed(b[0].numpy())
        refused = _refused(allowed, rng) if rng.random() < 0.2 else None
        if refused is not None:
            out.append(refused)
            break
        stops = [t for t in allowed.tolist() if t in STOP]
        t = int(rng.choice(stops)) if stops and rng.random() < 0.5 else int(rng.choice(allowed))
        out.append(t)
        assert ref.accept_tokens("draft", [t])
        moved += 1
    if moved:
        ref.rollback(moved)
    return out + [int(rng.integers(0, 151_643)) for _ in range(K - len(out))]


def _walk(
    xgr: object, kind: object, spec: str, reasoner: type | None, seed: int, walks: int = 10, steps: int = 40
) -> dict[str, int]:
    hooked = patches.compile_hook(_original(), internals.tag_compiler())
    manager = _manager(reasoner)
    manager.backend = xgr
    trim = internals.draft_trimmer(manager)
    rng = np.random.default_rng(seed)
    seen: dict = {"steps": 0, "refused_in_middle": 0, "after_termination": 0, "reasoning_rows": 0, "trimmed": 0}
    for walk in range(walks):
        ours, ref = hooked(xgr, kind, spec, STOP), _reference(xgr, kind, spec)
        assert isinstance(ours, backend.TriecStructuredOutputGrammar), ours
        reqs = {"o": _request("o", ours), "r": _request("r", ref)}
        for step in range(steps):
            if ref.is_terminated():
                assert ours.is_terminated()
                break
            reasoning = reasoner is not None and not reqs["r"].structured_output_request.reasoning_ended
            drafts = _drafts(ref, reasoning, rng)
            t_o, t_r = trim(reqs["o"], list(drafts)), trim(reqs["r"], list(drafts))
            assert t_o == t_r, (walk, step, drafts, t_o, t_r)
            seen["trimmed"] += len(t_o) < len(drafts)
            bm = manager.grammar_bitmask(reqs, ["o", "r"], {"o": list(t_o), "r": list(t_r)})
            n = len(t_o) + 1
            second = bm.shape[0] // 2  # 0.33+: a fixed block of K + 1 rows a request; 0.32: its n rows, packed
            for i in range(n):
                a, b = _allowed(bm[i]), _allowed(bm[second + i])
                assert np.array_equal(a, b), (walk, step, i, drafts, t_o, sorted(set(a.tolist()) ^ set(b.tolist()))[:8])
            seen["reasoning_rows"] += reasoning
            # the target model accepts a prefix of the drafts its rows allow, then samples the bonus token
            cut = 0
            while cut < len(t_o) and _has(bm[cut], t_o[cut]):
                cut += 1
            seen["refused_in_middle"] += 0 < cut < len(t_o)
            seen["after_termination"] += any(t in STOP for t in t_o[:cut]) and cut < len(t_o)
            cut = int(rng.integers(0, cut + 1))
            row = _allowed(bm[cut])
            if reasoning:
                row = row[~np.isin(row, [END, CALL])] if rng.random() < 0.7 else row
            bonus = int(rng.choice(row))
            tokens = list(t_o[:cut]) + [bonus]
            results = []
            for r in reqs.values():
                r.all_token_ids.extend(tokens)  # committed before the manager is told (spec_tokens_committed)
                results.append(manager.accept_tokens(r, tokens))
            assert results[0] == results[1], (walk, step, tokens, results)
            seen["steps"] += 1
        masked = [r.structured_output_request.masked_reasoning_end_ids for r in reqs.values()]
        assert masked[0] == masked[1], masked  # the implicit ends masked while reasoning: the grammar's answers
        seen["masked"] = masked[0] or ()
    return seen


DRAFT_CASES = ["choice", "choice-2000", "enum-json", "hermes-one", "hermes-many", "auto"]


@pytest.mark.parametrize("case", DRAFT_CASES)
def test_drafts_through_the_manager_equal_vllms_own_xgrammar(xgr, monkeypatch, case: str) -> None:
    monkeypatch.delenv(backend.COMPACT_ENV, raising=False)
    kind, spec = (
        (Opt.STRUCTURAL_TAG, _vllm_auto_tag(_tools(60))) if case == "auto" else (CASES[case][0], CASES[case][1]())
    )
    # the auto tag's free text allows nearly every token and never ends by itself: shorter walks
    seen = _walk(xgr, kind, spec, None, sum(map(ord, case)), *((3, 20) if case == "auto" else ()))
    assert seen["steps"] >= 6 and seen["trimmed"] >= 1, seen
    if case != "auto" and hasattr(internals.manager_class(), "trim_spec_tokens"):
        # 0.34 keeps the first refused draft (0.32/0.33 cut before it); free text refuses nothing
        assert seen["refused_in_middle"] >= 1, seen


@pytest.mark.parametrize("case", ["choice", "hermes-one"])
def test_reasoning_as_the_manager_decides_it(xgr, monkeypatch, case: str) -> None:
    """With a reasoning parser the manager masks nothing while reasoning but the implicit ends the grammar cannot
    start with (0.34 asks the grammar's ``validate_tokens([<tool_call>])``), then starts the grammar after ``####``
    or at ``<tool_call>``: triec's rows, masked ends and answers equal xgrammar's through it."""
    monkeypatch.delenv(backend.COMPACT_ENV, raising=False)
    kind, make = CASES[case]
    seen = _walk(xgr, kind, make(), Reasoner, 7 + len(case))
    assert seen["reasoning_rows"] >= 3 and seen["steps"] >= 6, seen
    if hasattr(internals.manager_class(), "trim_spec_tokens") and case == "choice":  # 0.34 reads implicit ends
        assert seen["masked"] == (CALL,), seen  # no choice value starts with <tool_call>: masked while reasoning


def test_accept_tokens_refusal_leaves_the_state(xgr) -> None:
    """0.34's contract on every release: ``accept_tokens`` that returns False (a refused token after valid ones)
    leaves the grammar where it was, for triec's grammar as for 0.34's xgrammar one."""
    spec = json.dumps(["red", "green", "blue"])
    ours = patches.compile_hook(_original(), internals.tag_compiler())(xgr, Opt.CHOICE, spec, STOP)
    before = torch.zeros((1, (V + 31) // 32), dtype=torch.int32)
    after = torch.zeros_like(before)
    ours.fill_bitmask(before, 0)
    red = int(_allowed(before[0].numpy())[0])
    assert not ours.accept_tokens("r", [red, 0, 0])
    ours.fill_bitmask(after, 0)
    assert torch.equal(before, after) and not ours.is_terminated()
