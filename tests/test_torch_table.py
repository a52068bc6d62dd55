"""The device table answers exactly like the numpy runtime, on CPU tensors here and on CUDA where present."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import triec
import triec.synthetic.sets

pytestmark = pytest.mark.torch

torch = pytest.importorskip("torch")

from triec.runtime.torch import INVALID, TorchMaskTable, use_kernels  # noqa: E402
from triec.runtime.word_masks import state_words  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MIXED = sorted(set(triec.synthetic.sets.tool_names(300)) | {"", "a", "ab", "abc", "é", "日本語", "x y", "slack"})


def _rows(table: triec.MaskTable, states: np.ndarray) -> np.ndarray:
    out = np.zeros((states.shape[0], table.words_per_row), dtype=np.int32)
    return table.fill_bitmask(states, out)


def assert_same_as_numpy(table: triec.MaskTable, dev: TorchMaskTable, chunk: int = 512) -> None:
    """Every state's row, every allowed transition, EOS everywhere, and disallowed tokens."""
    n = table.num_states
    for lo in range(0, n, chunk):
        states = np.arange(lo, min(n, lo + chunk))
        got = dev.fill(torch.from_numpy(states).to(dev.device)).cpu().numpy()
        assert np.array_equal(got, _rows(table, states)), f"rows of states {lo}.."
    pair_state = np.repeat(np.arange(n), np.diff(table.allowed_offsets.astype(np.int64)))
    nxt = dev.advance(
        torch.from_numpy(pair_state).to(dev.device), torch.from_numpy(table.allowed_tokens).to(dev.device)
    )
    assert np.array_equal(nxt.cpu().numpy(), table.allowed_next)
    every = torch.arange(n, device=dev.device)
    accepting = np.array([table.is_accepting(s) for s in range(n)])
    assert np.array_equal(dev.is_accepting(every).cpu().numpy(), accepting)
    for eos in table.eos_token_ids:
        got = dev.advance(every, torch.full((n,), eos, device=dev.device)).cpu().numpy()
        assert np.array_equal(got, np.where(accepting, triec.FINISHED, INVALID))
    rng = np.random.default_rng(0)
    probe = rng.integers(0, table.vocab_size, n)
    expected = []
    for s, t in zip(range(n), probe.tolist(), strict=True):
        try:
            expected.append(table.advance(s, t))
        except triec.TokenNotAllowed:
            expected.append(INVALID)
    got = dev.advance(every, torch.from_numpy(probe).to(dev.device)).cpu().numpy()
    assert np.array_equal(got, expected)


@pytest.mark.parametrize("narrow_words", [256, 2, 1])
def test_every_state_matches_numpy(vocab: triec.Vocabulary, narrow_words: int) -> None:
    """Small ``narrow_words`` forces many states into dense rows: both paths must agree with numpy."""
    table = triec.compile(MIXED, vocab)
    dev = table.to_torch("cpu", narrow_words=narrow_words)
    if narrow_words == 1:
        assert dev.wide_states.numel() > 0
    assert_same_as_numpy(table, dev)


def test_terminal_states_allow_only_eos_and_stay(qwen2: triec.Vocabulary) -> None:
    table = triec.compile(["yes", "no"], qwen2)
    dev = table.to_torch()
    terminals = torch.tensor([triec.FINISHED, INVALID])
    rows = dev.fill(terminals).numpy()
    for row in rows:
        ids = np.flatnonzero(np.unpackbits(row.view(np.uint8), bitorder="little"))
        assert ids.tolist() == list(table.eos_token_ids)
    assert dev.advance(terminals, torch.tensor([5, table.eos_token_ids[0]])).tolist() == [triec.FINISHED, INVALID]
    assert dev.advance(torch.tensor([0]), torch.tensor([table.vocab_size + 3])).tolist() == [INVALID]
    assert dev.advance(torch.tensor([0]), torch.tensor([-4])).tolist() == [INVALID]


def test_decode_loop_walks_each_row_to_its_value(qwen2: triec.Vocabulary) -> None:
    """Greedy steps over random logits, all rows at once: every row ends in exactly one value."""
    values = triec.synthetic.sets.tool_names(200)
    table = triec.compile(values, qwen2)
    dev = table.to_torch()
    gen = torch.Generator().manual_seed(0)
    states = dev.start_states(8)
    text: list[bytes] = [b""] * 8
    for _ in range(40):  # every token holds at least one byte: 40 steps finish every value
        logits = torch.randn(8, table.vocab_size, generator=gen)
        tokens = dev.mask_logits(logits, states).argmax(1)
        for i, (s, t) in enumerate(zip(states.tolist(), tokens.tolist(), strict=True)):
            if s >= 0 and t not in table.eos_token_ids:
                text[i] += qwen2.token_bytes[t]
        states = dev.advance(states, tokens)
    assert (states == triec.FINISHED).all()
    assert all(t.decode() in set(values) for t in text)


def test_apply_bitmask_matches_xgrammar_and_pads(qwen2: triec.Vocabulary) -> None:
    xgr = pytest.importorskip("xgrammar")
    table = triec.compile(MIXED, qwen2)
    dev = table.to_torch()
    states = torch.tensor([0, 1, int(table.value_state[3]), 17, triec.FINISHED])
    logits = torch.randn(5, table.vocab_size)
    ours = dev.mask_logits(logits.clone(), states)
    theirs = logits.clone()
    xgr.apply_token_bitmask_inplace(theirs, dev.fill(states))
    assert torch.equal(ours, theirs)
    for i, s in enumerate(states.tolist()[:4]):
        assert np.array_equal(np.flatnonzero(torch.isfinite(ours[i]).numpy()), table.allowed(s))
    wider = torch.cat([logits, torch.randn(5, 40)], dim=1)  # logits wider than the mask: extra columns blocked
    masked = dev.apply_bitmask(wider.clone(), dev.fill(states), inplace=False)
    assert torch.isinf(masked[:, table.vocab_size :]).all()
    assert torch.equal(masked[:, : table.vocab_size], ours)


@pytest.mark.parametrize("max_gather", [0, 1, 3, 100_000])
def test_mask_rows_keeps_exactly_the_allowed_logits(qwen2: triec.Vocabulary, max_gather: int) -> None:
    """Gather and bitmask paths alike: chosen rows keep their allowed logits, other rows are untouched."""
    table = triec.compile(MIXED, qwen2)
    dev = table.to_torch()
    rng = np.random.default_rng(max_gather)
    for _ in range(8):
        n = int(rng.integers(1, 12))
        states = rng.integers(-2, table.num_states, n)
        rows = rng.permutation(n + 4)[:n]
        logits = torch.randn(n + 4, table.vocab_size)
        before = logits.clone()
        assert dev.mask_rows(logits, torch.from_numpy(rows), torch.from_numpy(states), max_gather=max_gather) is logits
        for r, s in zip(rows.tolist(), states.tolist(), strict=True):
            want = np.array(table.eos_token_ids) if s < 0 else table.allowed(s)
            assert np.array_equal(np.flatnonzero(torch.isfinite(logits[r]).numpy()), want)
            assert torch.equal(logits[r, want], before[r, want])
        others = np.setdiff1d(np.arange(n + 4), rows)
        assert torch.equal(logits[others], before[others])
        every = before[:n].clone()  # rows=None: row i takes states[i]
        dev.mask_rows(every, None, torch.from_numpy(states), max_gather=max_gather)
        explicit = before[:n].clone()
        dev.mask_rows(explicit, torch.arange(n), torch.from_numpy(states), max_gather=max_gather)
        assert torch.equal(every, explicit)


def test_representation_bytes(qwen2: triec.Vocabulary) -> None:
    table = triec.compile(triec.synthetic.sets.tool_names(1000), qwen2)
    dev = table.to_torch(kernels=False)
    words = state_words(table).words.size
    assert dev.wide_states.numel() == 0  # tool names: no state sets more than 256 words
    # 12 bytes per allowed pair (key + next), 8 per (word, bits) pair, 5 per state, one zero row.
    expected = 12 * table.num_allowed + 8 * words + 5 * table.num_states + 4 * table.words_per_row
    assert expected <= dev.nbytes < expected + 1024
    if use_kernels(dev.device):  # CUDA, or Triton's interpreter: the kernels' packed copy is counted on top
        fused = table.to_torch()
        assert fused.packed is not None
        assert fused.nbytes == dev.nbytes + fused.packed.nbytes


@settings(max_examples=25, deadline=None)
@given(values=st.lists(st.text(alphabet="ab.é_ ", max_size=6), min_size=1, max_size=20), narrow=st.integers(1, 4))
def test_hypothesis_random_sets(vocabs: dict[str, triec.Vocabulary], values: list[str], narrow: int) -> None:
    table = triec.compile(values, vocabs["phi3"])
    assert_same_as_numpy(table, table.to_torch(narrow_words=narrow))


@pytest.mark.cuda
def test_cuda_matches_numpy(qwen2: triec.Vocabulary) -> None:
    table = triec.compile(MIXED, qwen2)
    assert_same_as_numpy(table, table.to_torch("cuda"))


def test_gpu_check_script_runs_on_cpu() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.gpu_check",
            "--device",
            "cpu",
            "--ks",
            "300",
            "--batches",
            "1,8",
            "--iters",
            "3",
            "--sample",
            "64",
            "--tails-k",
            "300",
        ],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],  # benchmarks/ is the checkout's
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "equal to the numpy runtime" in proc.stdout and "B=8" in proc.stdout


# ----------------------------------------------------------------------------- the one masking path (issue 34)


def _ref_masked(logits: np.ndarray, bitmask: np.ndarray) -> np.ndarray:
    """numpy reference: -inf where bit t of a row is 0, and past 32 x words."""
    bits = np.unpackbits(bitmask.view(np.uint8), axis=1, bitorder="little").astype(bool)
    out = np.full_like(logits, -np.inf)
    w = min(bits.shape[1], logits.shape[1])
    keep = bits[:, :w]
    out[:, :w][keep] = logits[:, :w][keep]
    return out


def test_masking_path_functions_equal_a_numpy_reference() -> None:
    from triec.runtime.torch import (
        SPARSE_WORDS,
        apply_bitmask,
        apply_bitmask_rows,
        apply_bitmask_sparse,
        keep_pairs,
        keep_tokens,
    )

    rng = np.random.default_rng(11)
    for width, words in ((100, 4), (150, 4), (1000, 40)):
        logits = rng.standard_normal((6, width)).astype(np.float32)
        bitmask = rng.integers(-(2**31), 2**31 - 1, size=(6, words), dtype=np.int64).astype(np.int32)
        bitmask[1] = 0
        bitmask[2] = -1
        ref = _ref_masked(logits, bitmask)
        out = apply_bitmask(torch.from_numpy(logits), torch.from_numpy(bitmask), inplace=False).numpy()
        assert np.array_equal(out, ref)
        rows = torch.tensor([4, 0, 3])
        sub = torch.from_numpy(logits.copy())
        apply_bitmask_rows(sub, rows, torch.from_numpy(bitmask[[4, 0, 3]]))
        expect = logits.copy()
        expect[[4, 0, 3]] = ref[[4, 0, 3]]
        assert np.array_equal(sub.numpy(), expect)
        # the sparse host path: xgrammar's semantics (rows of -1 untouched, nothing past `width` masked)
        sparse = torch.from_numpy(logits.copy())
        dense_rows: list[int] = []
        apply_bitmask_sparse(sparse, torch.from_numpy(bitmask), None, min(width, words * 32), dense_rows.extend)
        assert dense_rows == []  # at most SPARSE_WORDS words a row here
        assert words <= SPARSE_WORDS
        w = min(width, words * 32)
        assert np.array_equal(sparse.numpy()[:, :w], ref[:, :w]) and np.array_equal(
            sparse.numpy()[:, w:], logits[:, w:]
        )
        kept = torch.from_numpy(logits.copy())
        keep_tokens(kept, torch.tensor([5, 1]), torch.tensor([0, 7]))
        assert (
            np.isfinite(kept.numpy()[[5, 1]]).sum() == 4 and kept[5, 7] == logits[5, 7] and kept[1, 0] == logits[1, 0]
        )
        assert np.array_equal(kept.numpy()[[0, 2, 3, 4]], logits[[0, 2, 3, 4]])
        # each row its own ids (a beam's allowed set): the pairs kept, the listed rows -inf elsewhere, others untouched
        pairs = torch.from_numpy(logits.copy())
        keep_pairs(pairs, torch.tensor([2, 4]), torch.tensor([2, 2, 4]), torch.tensor([3, 9, 0]))
        expect = logits.copy()
        expect[[2, 4]] = -np.inf
        expect[2, [3, 9]], expect[4, 0] = logits[2, [3, 9]], logits[4, 0]
        assert np.array_equal(pairs.numpy(), expect)


def test_no_integration_masks_logits_by_itself() -> None:
    """Every bitmask-to-logits application goes through the runtime's functions: no integration or eval module
    fills logits with -inf or unpacks a bitmask against logits on its own (SGLang hands its buffer to SGLang's
    own kernel, its backend contract)."""
    import re
    from pathlib import Path

    root = Path(triec.__file__).resolve().parent
    offenders = []
    for path in [*(root / "integrations").rglob("*.py"), *(root / "eval").rglob("*.py")]:
        text = path.read_text()
        for pattern in (r"masked_fill_?\(", r"index_fill_\(", r"fill_\(float\(\"-inf\"\)\)", r"= float\(\"-inf\"\)"):
            if re.search(pattern, text):
                offenders.append(f"{path.relative_to(root)}: {pattern}")
    assert offenders == []
