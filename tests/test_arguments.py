"""Arguments out of range: a clear ValueError / IndexError (or, on a device, INVALID in band), never garbage.

The numpy runtime, the mask writer and restricted views raise; the device
table cannot raise without a host synchronisation, so it maps every id outside
the table to the terminal row and to INVALID (docs/decisions.md D12) and
offers ``check_states`` for callers who want the exception.
"""

from __future__ import annotations

import numpy as np
import pytest

import triec
from triec.errors import ArtifactContentError, ValueNotInTable

VALUES = ["", "get", "get_user", "héllo", "list_files", "x"]
HOSTILE_STATES = [-3, -(2**31), -(2**62), 2**31 - 1, 2**40, 2**62]


@pytest.fixture(scope="module")
def table(vocabs: dict[str, triec.Vocabulary]) -> triec.MaskTable:
    return triec.compile(VALUES, vocabs["gpt2"])


def _row_ids(row: np.ndarray) -> list[int]:
    return np.flatnonzero(np.unpackbits(np.ascontiguousarray(row).view(np.uint8), bitorder="little")).tolist()


def test_numpy_runtime_states(table: triec.MaskTable) -> None:
    s = table.num_states
    for bad in [s, s + 1, -2, *HOSTILE_STATES, 2**70]:
        for call in (table.allowed, table.is_accepting, table.value, table.prefix, table.bitmask):
            with pytest.raises(IndexError, match=f"state {bad} out of range"):
                call(bad)
        with pytest.raises(IndexError):
            table.advance(bad, 0)
        with pytest.raises(IndexError, match="out of range"):
            table.fill_bitmask([0, bad], np.zeros((2, table.words_per_row), dtype=np.int32))
    with pytest.raises(IndexError, match=f"^state {s} out of range \\(0..{s - 1}\\)$"):
        table.allowed(s)
    with pytest.raises(triec.TokenNotAllowed, match="FINISHED"):
        table.allowed(triec.FINISHED)
    with pytest.raises(IndexError, match="FINISHED \\(-1\\) ends a sequence and has no mask row"):
        table.fill_bitmask([triec.FINISHED], np.zeros((1, table.words_per_row), dtype=np.int32))
    with pytest.raises(ValueError, match="out must be an int32 array"):
        table.fill_bitmask([0], np.zeros((1, table.words_per_row), dtype=np.int64))


def test_numpy_runtime_tokens(table: triec.MaskTable) -> None:
    for bad in [-1, table.vocab_size, 2**31, 2**70, -(2**70)]:
        with pytest.raises(triec.TokenNotAllowed, match=f"token {bad} is outside the vocabulary \\(0..50256\\)"):
            table.advance(table.start, bad)
    assert issubclass(triec.TokenNotAllowed, ValueError)


def test_mask_writer_states(table: triec.MaskTable) -> None:
    writer = table.mask_writer(4)
    for bad in [table.num_states, -1, *HOSTILE_STATES, 2**70]:
        with pytest.raises(IndexError, match=f"state {bad} out of range"):
            writer.fill([bad])
        with pytest.raises(IndexError, match=f"state {bad} out of range"):
            writer.fill([0, bad])
    with pytest.raises(ValueError, match="max_batch"):
        writer.fill([0] * 5)
    assert _row_ids(writer.fill([0])[0]) == table.allowed(0).tolist()  # exact after the errors


def test_restricted_view_arguments(table: triec.MaskTable) -> None:
    view = table.restrict(["get_user", "x"])
    outside = table.state_for_prefix("héllo")
    for bad in [outside, table.num_states, -2, *HOSTILE_STATES, 2**70]:
        with pytest.raises(IndexError, match="not a state of this subset"):
            view.allowed(bad)
        with pytest.raises(IndexError, match=f"state {bad} (is not a state of this subset|out of range)"):
            view.fill_bitmask([view.start, bad], np.zeros((2, view.words_per_row), dtype=np.int32))
    with pytest.raises(ValueNotInTable, match="'nope'") as info:
        table.restrict(["x", "nope"])
    assert isinstance(info.value, ValueError) and isinstance(info.value, triec.ValuesError)
    with pytest.raises(triec.TokenNotAllowed, match="outside the vocabulary"):
        view.advance(view.start, -1)


torch = pytest.importorskip("torch")


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def device(request: pytest.FixtureRequest) -> str:
    """CPU tensors everywhere; CUDA where present, where an index out of range would be a device-side assert."""
    return str(request.param)


def test_device_table_maps_out_of_range_states_to_invalid(table: triec.MaskTable, device: str) -> None:
    from triec.runtime.torch import INVALID

    dev = table.to_torch(device)
    s = table.num_states
    bad = [s, s + 1, -3, *HOSTILE_STATES]
    states = torch.tensor([0, triec.FINISHED, INVALID, *bad], device=device)
    rows = dev.fill(states).cpu().numpy()
    assert _row_ids(rows[0]) == table.allowed(0).tolist()
    eos_only = list(table.eos_token_ids)
    assert all(_row_ids(r) == eos_only for r in rows[1:]), "terminal and out-of-range rows allow EOS only"
    content = int(table.allowed(0)[0])
    for token in (content, table.eos_token_ids[0], -1, table.vocab_size, 2**62):
        got = dev.advance(states, torch.full((states.numel(),), token, device=device)).tolist()
        assert got[1:] == [triec.FINISHED] + [INVALID] * (1 + len(bad))
    assert dev.advance(states[:1], torch.tensor([content], device=device)).tolist() == [table.advance(0, content)]
    assert not dev.is_accepting(states[1:]).any()
    logits = torch.zeros(states.numel(), table.vocab_size, device=device)
    dev.mask_logits(logits, states)
    assert torch.isfinite(logits[1:]).sum(1).tolist() == [len(eos_only)] * (states.numel() - 1)
    # int32 states wrap nothing: the same answers
    assert torch.equal(dev.fill(states[:3].to(torch.int32)), dev.fill(states[:3]))
    if device == "cuda":  # and none of it needs the host: no synchronisation per step
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            dev.mask_logits(logits, states)
            dev.advance(states, states)
        finally:
            torch.cuda.set_sync_debug_mode("default")


def test_device_table_check_states_and_shapes(table: triec.MaskTable, device: str) -> None:
    from triec.runtime.torch import INVALID

    dev = table.to_torch(device)

    def tensor(values: list[int]) -> torch.Tensor:
        return torch.tensor(values, device=device)

    dev.check_states(tensor([0, table.num_states - 1, triec.FINISHED, INVALID]))
    for bad in [table.num_states, -3, 2**40]:
        with pytest.raises(ValueError, match=f"state {bad} out of range"):
            dev.check_states(tensor([0, bad]))
    with pytest.raises(ValueError, match="one token per state"):
        dev.advance(tensor([0, 0]), tensor([1]))
    with pytest.raises(ValueError, match="logits must be"):
        dev.mask_logits(torch.zeros(3, table.vocab_size, device=device), tensor([0, 0]))
    with pytest.raises(ValueError, match="out must be an int32 tensor"):
        dev.fill(tensor([0]), out=torch.zeros(1, 3, dtype=torch.int32, device=device))
    with pytest.raises(ValueError, match="int32 bitmask"):
        dev.apply_bitmask(
            torch.zeros(2, table.vocab_size, device=device),
            torch.zeros(1, table.words_per_row, dtype=torch.int32, device=device),
        )
    with pytest.raises(ValueError, match="batch_size"):
        dev.start_states(-1)


def test_to_torch_checks_a_hand_built_table(table: triec.MaskTable) -> None:
    """A table built by hand (not compiled, not loaded) is checked before anything is uploaded."""
    fields = {
        name: getattr(table, name).copy()
        for name in ("allowed_offsets", "allowed_tokens", "allowed_next", "value_state", "value_lcp", "state_byte")
    }
    fields["allowed_tokens"][0] = table.vocab_size
    bad = triec.MaskTable(
        **fields, vocab_size=table.vocab_size, eos_token_ids=table.eos_token_ids, tokenizer_fingerprint="x"
    )
    with pytest.raises(
        ArtifactContentError, match=r"in-memory table: section allowed_tokens: expected ids in 0..50256"
    ):
        bad.to_torch("cpu")
    fields["allowed_tokens"][0] = table.allowed_tokens[0]
    good = triec.MaskTable(
        **fields, vocab_size=table.vocab_size, eos_token_ids=table.eos_token_ids, tokenizer_fingerprint="x"
    )
    assert torch.equal(good.to_torch("cpu").fill(torch.tensor([0])), table.to_torch("cpu").fill(torch.tensor([0])))
    compact = table.restrict(["get", "x"]).compact()  # also built in memory, also checked, and fine
    assert compact.to_torch("cpu").num_states == compact.num_states
