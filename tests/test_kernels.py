"""The fused Triton kernels (runtime/kernels.py) under Triton's interpreter, against the numpy runtime.

``TRITON_INTERPRET=1`` runs the same kernels a GPU runs, program by program, on CPU tensors. Every check
compares with the numpy table state by state: bitmask rows, masked logits (in order and through row
indices), every allowed transition, EOS at accepting and other states, refused tokens, FINISHED and
INVALID, out-of-range ids; on GPT-2, Qwen2 and Phi-3, K = 1,000 and 100,000, restricted subsets, canonical
tables, and several tables in one launch. ``benchmarks/gpu_check.py --device cpu --triton-interpret`` runs the
same kind of checks from the command line; on a GPU, without the interpreter.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import triec
from triec.synthetic.sets import tool_names

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module", autouse=True)
def interpreted():
    """Kernels interpreted on the CPU for this module only (the kernel and device caches reset around it)."""
    from triec.runtime import kernels
    from triec.runtime import torch as rt

    old = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    rt._KERNELS.clear()
    kernels._kernels.cache_clear()
    yield
    if old is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = old
    rt._KERNELS.clear()
    kernels._kernels.cache_clear()


def expected_next(table, states: np.ndarray, tokens: np.ndarray) -> list[int]:
    from triec.runtime.torch import INVALID

    out = []
    for s, t in zip(states.tolist(), tokens.tolist(), strict=True):
        if s == triec.FINISHED:
            out.append(triec.FINISHED)
        elif not 0 <= s < table.num_states:
            out.append(INVALID)
        else:
            try:
                out.append(table.advance(s, t))
            except triec.TokenNotAllowed:
                out.append(INVALID)
    return out


def check_table(table, rng: np.random.Generator, batch: int = 24) -> None:
    """Kernels equal the numpy runtime on sampled states (terminal ids included) of one table."""
    from triec.runtime.torch import INVALID

    dev = table.to_torch("cpu", kernels=True)
    assert dev.packed is not None
    states = np.concatenate(
        [
            [table.start],
            rng.integers(0, table.num_states, batch - 5),
            table.value_state[:1],
            [triec.FINISHED, INVALID, table.num_states + 7],
        ]
    ).astype(np.int64)
    st = torch.from_numpy(states)
    live = (states >= 0) & (states < table.num_states)
    terminal = np.zeros(table.words_per_row, dtype=np.int32)
    for e in table.eos_token_ids:
        terminal[e >> 5] |= np.int32(np.uint32(1 << (e & 31)).view(np.int32))
    want = np.stack(
        [
            table.fill_bitmask(np.array([s]), np.zeros((1, table.words_per_row), np.int32))[0] if ok else terminal
            for s, ok in zip(states.tolist(), live.tolist(), strict=True)
        ]
    )
    assert np.array_equal(dev.fill(st).numpy(), want)

    logits = torch.randn(states.size, table.vocab_size)
    masked = dev.mask_logits(logits.clone(), st)
    for i, s in enumerate(states.tolist()):
        allowed = table.allowed(s) if live[i] else np.asarray(sorted(table.eos_token_ids))
        got = torch.isfinite(masked[i]).nonzero().reshape(-1).numpy()
        assert np.array_equal(got, allowed), s
        assert torch.equal(masked[i, allowed], logits[i, allowed])
    rows = torch.from_numpy(rng.permutation(states.size))
    by_rows = dev.mask_rows(logits.clone(), rows, st)  # row rows[i] masked by states[i]
    assert torch.equal(by_rows[rows], table.to_torch("cpu", kernels=False).mask_logits(logits[rows].clone(), st))

    picks = np.array(
        [
            int(rng.choice(table.allowed(s))) if ok and table.allowed(s).size else 0
            for s, ok in zip(states.tolist(), live.tolist(), strict=True)
        ]
    )
    refused = rng.integers(0, table.vocab_size, states.size)
    eos = np.full(states.size, table.eos_token_ids[0])
    for tokens in (picks, refused, eos, np.full(states.size, table.vocab_size + 3), np.full(states.size, -5)):
        got = dev.advance(st, torch.from_numpy(tokens)).tolist()
        want_next = expected_next(table, states, np.clip(tokens, 0, None) if tokens[0] >= 0 else tokens)
        if tokens[0] < 0 or tokens[0] >= table.vocab_size:  # outside the vocabulary: refused, never an index
            want_next = [triec.FINISHED if s == triec.FINISHED else INVALID for s in states.tolist()]
        assert got == want_next

    pair_state = np.repeat(np.arange(table.num_states), np.diff(table.allowed_offsets.astype(np.int64)))
    sel = rng.choice(pair_state.size, min(pair_state.size, 4000), replace=False)
    got = dev.advance(torch.from_numpy(pair_state[sel]), torch.from_numpy(np.asarray(table.allowed_tokens)[sel]))
    assert np.array_equal(got.numpy(), np.asarray(table.allowed_next)[sel])


@pytest.mark.parametrize("name", ["gpt2", "qwen2", "phi3"])
def test_kernels_equal_the_numpy_runtime_at_k_1000(vocabs, name) -> None:
    check_table(triec.compile(tool_names(1_000), vocabs[name]), np.random.default_rng(1))


def test_kernels_equal_the_numpy_runtime_at_k_100000(vocabs) -> None:
    check_table(triec.compile(tool_names(100_000), vocabs["qwen2"]), np.random.default_rng(2), batch=16)


def test_kernels_on_restricted_canonical_and_wide_tables(vocabs) -> None:
    rng = np.random.default_rng(3)
    table = triec.compile(tool_names(2_000), vocabs["gpt2"])
    check_table(table.restrict(table.values[100:180]).compact(), rng)
    check_table(triec.compile(tool_names(300), vocabs["qwen2"], tokenization="canonical"), rng)
    spelled = triec.compile(["a", "ab", "abc", "", *tool_names(50)], vocabs["gpt2"], encoding="json")
    check_table(spelled, rng)  # "" is a value: the start state accepts
    dev = table.to_torch("cpu", kernels=True, narrow_words=2)  # most states wide: dense rows
    states = torch.from_numpy(rng.integers(0, table.num_states, 20))
    assert torch.equal(dev.fill(states), table.to_torch("cpu", kernels=False).fill(states))


def test_several_tables_in_one_launch(vocabs) -> None:
    from triec.runtime.torch import INVALID, TorchTableSet

    rng = np.random.default_rng(4)
    a = triec.compile(tool_names(800), vocabs["qwen2"])
    b = triec.compile(tool_names(200, seed=5), vocabs["qwen2"], prefix=" ")
    c = a.restrict(a.values[:30]).compact()
    tables = [a, b, c]
    fused = TorchTableSet(tables, "cpu", kernels=True)
    assert fused.packed is not None
    ids = rng.integers(0, 3, 48)
    states = np.array([rng.integers(0, tables[t].num_states) for t in ids.tolist()], dtype=np.int64)
    states[:3] = [triec.FINISHED, INVALID, 10**9]
    st, it = torch.from_numpy(states), torch.from_numpy(ids)
    for i, t in enumerate(ids.tolist()):
        row = fused.fill(it[i : i + 1], st[i : i + 1])
        assert torch.equal(row, tables[t].to_torch("cpu", kernels=False).fill(st[i : i + 1]))
    logits = torch.randn(48, a.vocab_size)
    masked = fused.mask_logits(logits.clone(), it, st)
    for i, (t, s) in enumerate(zip(ids.tolist(), states.tolist(), strict=True)):
        allowed = tables[t].allowed(s) if 0 <= s < tables[t].num_states else np.asarray(sorted(a.eos_token_ids))
        assert np.array_equal(torch.isfinite(masked[i]).nonzero().reshape(-1).numpy(), allowed)
    tokens = np.array(
        [
            int(tables[t].allowed(s)[0]) if 0 <= s < tables[t].num_states else 0
            for t, s in zip(ids.tolist(), states.tolist(), strict=True)
        ]
    )
    got = fused.advance(it, st, torch.from_numpy(tokens)).tolist()
    want = [
        expected_next(tables[t], np.array([s]), np.array([tok]))[0]
        for t, s, tok in zip(ids.tolist(), states.tolist(), tokens.tolist(), strict=True)
    ]
    assert got == want
    torch_path = TorchTableSet(tables, "cpu", kernels=False)
    assert torch.equal(torch_path.mask_logits(logits.clone(), it, st), masked)


def test_the_masking_path_uses_the_apply_kernel(vocabs) -> None:
    from triec.runtime.torch import apply_bitmask, apply_bitmask_rows, use_kernels

    assert use_kernels(torch.device("cpu"))
    rng = np.random.default_rng(6)
    for width, words in ((100, 4), (100, 3), (70, 3)):
        bits = torch.from_numpy(rng.integers(-(2**31), 2**31, (5, words)).astype(np.int32))
        logits = torch.randn(5, width)
        got = apply_bitmask(logits, bits, inplace=False)
        octets = np.unpackbits(bits.numpy().view(np.uint8), axis=1, bitorder="little")[:, :width].astype(bool)
        keep = np.zeros((5, width), dtype=bool)
        keep[:, : octets.shape[1]] = octets
        assert torch.equal(got, torch.where(torch.from_numpy(keep), logits, torch.tensor(float("-inf"))))
        rows = torch.tensor([4, 0, 2])
        sub = apply_bitmask_rows(logits.clone(), rows, bits[:3])
        want = torch.where(torch.from_numpy(keep[:3]), logits[rows], torch.tensor(float("-inf")))  # row rows[i], bits i
        assert torch.equal(sub[rows], want) and torch.equal(sub[[1, 3]], logits[[1, 3]])


def test_gpu_check_runs_the_kernels_under_the_interpreter(tmp_path) -> None:
    import subprocess
    import sys

    script = "benchmarks.gpu_check"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            script,
            "--device",
            "cpu",
            "--triton-interpret",
            "--tokenizers",
            "gpt2",
            "--ks",
            "300",
            "--batches",
            "3",
            "--sample",
            "64",
            "--tails-k",
            "300",
            "--vllm",
            "off",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[1],  # benchmarks/ is the checkout's
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "fused kernels: on (Triton interpreter)" in done.stdout
    assert (
        # the tool names, then 300 titles in the tail layout and the five formats' pattern tables: torch and kernels
        done.stdout.count("equal to the numpy runtime") == 2 + 2 * (1 + 5)
        and "one launch equal to a step per table" in done.stdout
    )


def test_vllm_batch_state_serves_every_table_in_one_launch(vocabs, tmp_path, monkeypatch) -> None:
    """The vLLM processors' shared step (BatchState) with two artifacts and a subset: the fused path (one
    TorchTableSet launch for all their rows) gives the logits and states the per-table path gives."""
    from triec.integrations.serving import ArtifactStore, TriecRequest
    from triec.integrations.vllm import batch as vllm_batch

    qwen2 = vocabs["qwen2"]
    triec.compile(tool_names(400), qwen2).save(tmp_path / "tools.triec")
    triec.compile(["red", "green", "blue", "cyan"], qwen2).save(tmp_path / "colors.triec")
    requests = [TriecRequest("tools"), TriecRequest("colors"), TriecRequest("tools", tuple(tool_names(400)[:9])), None]

    def run(fused: bool) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        from triec.runtime import torch as rt

        monkeypatch.setitem(rt._KERNELS, "cpu", fused)  # off: every table on the torch path, one after another
        batch = vllm_batch.BatchState(ArtifactStore(tmp_path), torch.device("cpu"), 4, qwen2.eos_token_ids)
        assert batch._fused is fused
        for slot, r in enumerate(requests):
            batch.assign(slot, r)
        rng = np.random.default_rng(9)
        logits_seen, states_seen = [], []
        slots = np.array([2, 0, 3, 1])
        for _ in range(6):
            logits = torch.from_numpy(rng.standard_normal((4, qwen2.vocab_size)).astype(np.float32))
            batch.mask(logits, np.arange(4), slots)
            logits_seen.append(logits.clone())
            batch.advance(slots, logits.argmax(1))
            states_seen.append(batch.states.clone())
        if fused:
            assert batch._set is not None and len(batch._set) == 3  # two artifacts and a subset, one set
        else:
            assert batch._set is None and all(t.packed is None for t in batch.tables.values())
        return logits_seen, states_seen

    fused_logits, fused_states = run(True)
    plain_logits, plain_states = run(False)
    assert all(torch.equal(a, b) for a, b in zip(fused_logits, plain_logits, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(fused_states, plain_states, strict=True))
