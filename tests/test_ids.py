"""Semantic-ID catalogs (issue 51, item 4): ``triec.compile_ids`` and ``triec compile --ids``.

The oracle is written from the contract alone, over the item list: after prefix p the allowed ids are the next id
of every item extending p, plus the EOS ids iff p is an item. Every state of random catalogs (prefix items and
duplicates included) is compared with it, reached by walking the prefix's ids; then the artifact round trip, the
load checks on damaged files, the CLI's refusals, and transformers' beam search over an ids table against the same
``generate`` driven by a brute-force ``prefix_allowed_tokens_fn``.
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import triec
from triec.errors import ArtifactContentError, ValuesError

VOCAB, EOS = 64, [63]


def reference_allowed(items: list[tuple[int, ...]], prefix: tuple[int, ...], eos: list[int]) -> list[int]:
    n = len(prefix)
    out = {it[n] for it in items if len(it) > n and it[:n] == prefix}
    if prefix in items:
        out.update(eos)
    return sorted(out)


def random_catalog(rng: random.Random, k: int, codes: int = 6, longest: int = 5) -> list[list[int]]:
    items = [[rng.randrange(codes) * 7 % 60 for _ in range(rng.randrange(1, longest + 1))] for _ in range(k)]
    items += [it[: rng.randrange(1, len(it) + 1)] for it in rng.sample(items, k // 4)]  # prefixes of items
    items += rng.sample(items, k // 5)  # duplicates
    rng.shuffle(items)
    return items


@pytest.mark.parametrize("seed", range(12))
def test_every_state_equals_the_brute_force_reference(seed: int) -> None:
    rng = random.Random(seed)
    items = random_catalog(rng, rng.randrange(1, 80))
    table = triec.compile_ids(items, vocab_size=VOCAB, eos_token_ids=EOS)
    unique = sorted(set(map(tuple, items)))
    prefixes = {it[:d] for it in unique for d in range(len(it) + 1)}
    assert table.num_states == len(prefixes)  # one state per distinct prefix, nothing else
    assert table.value_ids == [list(it) for it in unique]
    assert table.values == [" ".join(map(str, it)) for it in unique]
    seen = set()
    for p in prefixes:
        s = table.walk(p)
        seen.add(s)
        assert table.allowed(s).tolist() == reference_allowed(unique, p, EOS), p
        assert table.is_accepting(s) == (p in unique)
        assert table.prefix(s) == " ".join(map(str, p)).encode()
        assert table.depth(s) == len(p)
    assert seen == set(range(table.num_states))
    rows = table.mask_writer(len(prefixes)).fill([table.walk(p) for p in sorted(prefixes)])
    for row, p in zip(rows, sorted(prefixes), strict=True):
        bits = np.unpackbits(row.view(np.uint8), bitorder="little")[:VOCAB]
        assert np.flatnonzero(bits).tolist() == reference_allowed(unique, p, EOS)


def test_round_trip_and_restrict(tmp_path: Path) -> None:
    rng = random.Random(3)
    items = random_catalog(rng, 60)
    table = triec.compile_ids(items, vocab_size=VOCAB, eos_token_ids=EOS, name="codes")
    path = tmp_path / "ids.triec"
    table.save(path)
    for verify in (False, True):
        loaded = triec.load(path, verify=verify)
        assert loaded.tokenization == "ids" and loaded.ids
        for name in ("allowed_offsets", "allowed_tokens", "allowed_next", "value_state", "value_lcp", "state_byte"):
            assert np.array_equal(getattr(loaded, name), getattr(table, name)), name
        assert loaded.values == table.values and loaded.tokenizer_name == "codes"
        assert loaded.tokenizer_fingerprint == "none"
    subset = table.values[::3]
    compact = table.restrict(subset).compact()
    direct = triec.compile_ids([list(map(int, v.split())) for v in subset], vocab_size=VOCAB, eos_token_ids=EOS)
    assert np.array_equal(compact.allowed_tokens, direct.allowed_tokens)
    assert np.array_equal(compact.value_lcp, direct.value_lcp)


def test_a_vocabulary_binds_the_table(vocabs: dict[str, triec.Vocabulary]) -> None:
    vocab = vocabs["gpt2"]
    table = triec.compile_ids([[10, 20], [10, 30, 40]], vocab)
    table.check_tokenizer(vocab)
    assert table.vocab_size == vocab.vocab_size and table.eos_token_ids == vocab.eos_token_ids
    assert table.build_options["tokenization"] == "ids"


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ([[1, 2], [3, 63]], "item 1: token id 63 is an EOS id"),
        ([[1, 64]], "item 0: token id 64 is outside the mask 0..63"),
        ([[1, -1]], "item 0: token id -1 is outside"),
        ([[1], []], "item 1: an empty item"),
        ([[1, 2.0]], "item 0: token id 2.0 is not an integer"),
        ([[True]], "item 0: token id True is not an integer"),
        (["12"], "item 0: expected a sequence of token ids"),
        ([], "no items"),
        ([[1] * 1025], "item 0: 1,025 ids: an item holds at most 1,024"),
    ],
)
def test_bad_items_are_refused_by_name(items: list, message: str) -> None:
    with pytest.raises(ValuesError, match=message.replace("(", r"\(").replace(".", r"\.")):
        triec.compile_ids(items, vocab_size=VOCAB, eos_token_ids=EOS)


def test_damaged_artifacts_are_refused(tmp_path: Path) -> None:
    table = triec.compile_ids([[1, 2, 3], [1, 4], [5]], vocab_size=VOCAB, eos_token_ids=EOS)
    nxt = table.allowed_next.copy()
    nxt[1] = nxt[2]  # a state entered twice, another never
    twice = table.derive(
        allowed_offsets=table.allowed_offsets,
        allowed_tokens=table.allowed_tokens,
        allowed_next=nxt,
        value_state=table.value_state,
        value_lcp=table.value_lcp,
        state_byte=table.state_byte,
    )
    with pytest.raises(ArtifactContentError, match="entered by"):
        twice.check_indices()
    lcp = table.value_lcp.copy()
    lcp[1] = 0  # [1, 4] now hangs from the start: a tree still, but not the values' preorder
    moved = table.derive(
        allowed_offsets=table.allowed_offsets,
        allowed_tokens=table.allowed_tokens,
        allowed_next=table.allowed_next,
        value_state=table.value_state,
        value_lcp=lcp,
        state_byte=table.state_byte,
    )
    path = tmp_path / "moved.triec"
    moved.save(path)
    with pytest.raises(ArtifactContentError, match="entered from state"):
        triec.load(path, verify=True)


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "triec.cli", *args], capture_output=True, text=True, cwd=cwd)


def test_cli_compiles_verifies_and_names_bad_lines(tmp_path: Path) -> None:
    (tmp_path / "items.txt").write_text("1 2 3\n1 2\n4 5 6\n1 2 3\n")
    done = _cli("compile", "--ids", "items.txt", "--vocab-size", "64", "--eos", "63", "-q", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    loaded = triec.load(tmp_path / "items.triec")
    assert loaded.values == ["1 2", "1 2 3", "4 5 6"]
    assert _cli("verify", "items.triec", "-q", cwd=tmp_path).returncode == 0
    cases = {
        "1 2\n\n3\n": "bad.txt:2: empty line",
        "1 2\n3 x\n": "bad.txt:2: 'x' is not a token id",
        "1 2\n3 63\n": "bad.txt:2: token id 63 is an EOS id",
        "1 2\n3 99\n": "bad.txt:2: token id 99 is outside the mask",
        "1 -2\n": "bad.txt:1: '-2' is not a token id",
        " ".join(["1"] * 1025) + "\n": "bad.txt:1: 1,025 ids on one line",
    }
    for text, message in cases.items():
        (tmp_path / "bad.txt").write_text(text)
        done = _cli("compile", "--ids", "bad.txt", "--vocab-size", "64", "--eos", "63", cwd=tmp_path)
        assert done.returncode == 2 and message in done.stderr, (text, done.stderr)
    done = _cli("compile", "--ids", "items.txt", cwd=tmp_path)
    assert done.returncode == 2 and "--vocab-size" in done.stderr
    done = _cli("compile", "--ids", "items.txt", "--vocab-size", "64", "--eos", "63", "--layout", "full", cwd=tmp_path)
    assert done.returncode == 2 and "--layout does not apply" in done.stderr


def test_transformers_beams_over_ids_equal_a_brute_force_prefix_fn() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.test_beams import beams, tiny_model
    from triec.integrations.transformers import TriecLogitsProcessor

    rng = random.Random(7)
    vocab, eos = 300, [299]
    items = sorted({tuple(rng.randrange(100 + 40 * d, 140 + 40 * d) for d in range(3)) for _ in range(150)})
    items += [it[:2] for it in items[:10]]  # prefix items
    unique = sorted(set(items))
    table = triec.compile_ids(items, vocab_size=vocab, eos_token_ids=eos)
    model = tiny_model(vocab, eos, seed=3)
    prompt = torch.tensor([[11, 22, 33]])

    def reference(batch_id: int, input_ids: torch.Tensor) -> list[int]:
        tokens = tuple(input_ids[prompt.shape[1] :].tolist())
        if any(t in eos for t in tokens):
            return eos
        return reference_allowed(unique, tokens, eos) or eos

    for width in (1, 2, 4, 8, 16):
        want = beams(model, prompt, width, prefix_allowed_tokens_fn=reference)
        got = beams(model, prompt, width, logits_processor=[TriecLogitsProcessor(table)])
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), width
        for row in got[0][:, prompt.shape[1] :].tolist():
            if eos[0] in row:
                assert tuple(row[: row.index(eos[0])]) in unique


@pytest.mark.parametrize("host", [True, False])
@pytest.mark.parametrize("narrow_words", [1, 256])
def test_the_torch_writer_equals_whole_row_fills_step_after_step(narrow_words: int, host: bool) -> None:
    """The device writer clears only what it set: after any sequence of fills (live, FINISHED, INVALID, out-of-range
    states; wide rows copied whole with ``narrow_words=1``) its rows equal ``fill``'s, which writes every word; both
    of its paths (torch ops, what a GPU runs; numpy views, a CPU's)."""
    torch = pytest.importorskip("torch")
    from triec.runtime.torch_writer import TorchMaskWriter

    rng = random.Random(narrow_words)
    tables = [
        triec.compile_ids(random_catalog(rng, 120, codes=40), vocab_size=VOCAB, eos_token_ids=EOS),
        triec.compile(["alpha", "beta", "gamma", "al", "b", "c", "zz"], "gpt2"),
    ]
    for table in tables:
        device = table.to_torch(narrow_words=narrow_words)
        writer = TorchMaskWriter(device, 48, host=host)  # host: numpy views (a CPU's default); else torch ops
        for _ in range(25):
            pick = [rng.randrange(table.num_states), -1, -2, 10**9]
            states = torch.tensor([rng.choice(pick[:1] * 6 + pick[1:]) for _ in range(rng.randrange(1, 49))])
            assert torch.equal(writer.fill(states), device.fill(states))
    with pytest.raises(ValueError, match="max_batch"):
        writer.fill(torch.zeros(49, dtype=torch.int64))
