"""Both vLLM processors, engine-free: random batch histories, every row's mask equal to the numpy table's.

The histories follow each interface's contract as vLLM's code states it: for
the V1 interface, batch updates (removed, then added, then moved one-way or
swapped), output lists that are live references, async scheduling's -1
placeholder patched before ``apply``, requests resumed with several outputs;
for Model Runner V2, recycled slots, tokens committed on the device
(``all_token_ids``, ``total_len``), rows reordered every step. The reference
is the numpy runtime (a restricted view for ``restrict`` requests) walking
each request's tokens, and for tool-call schema requests a fresh
``SchemaMatcher`` of a separately compiled table fed the same tokens; the
processors run on their own device tables and on the artifact they load.
Requires vLLM (the ``vllm`` nox session); skipped elsewhere.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import triec
import triec.synthetic.sets

pytestmark = pytest.mark.vllm

pytest.importorskip("vllm")
torch = pytest.importorskip("torch")

from vllm import SamplingParams  # noqa: E402

from triec.errors import RequestError  # noqa: E402
from triec.integrations import serving  # noqa: E402
from triec.integrations.vllm import TriecLogitsProcessorV2, internals  # noqa: E402

try:  # vLLM 0.34 removed the V1 interface: its tests are skipped there, and the import's one line is checked
    from triec.integrations.vllm import TriecLogitsProcessor
    from triec.integrations.vllm.v1 import BatchUpdate, MoveDirectionality
except ImportError as exc:
    V1_MISSING: str | None = str(exc)
else:
    V1_MISSING = None
needs_v1 = pytest.mark.skipif(V1_MISSING is not None, reason=f"no V1 interface on this vLLM: {V1_MISSING}")

V = 151_936
COLORS = ["red", "green", "blue", "yellow", "re", "gre"]
RESTRICT = tuple(triec.synthetic.sets.tool_names(300)[10:14])
TOOL_NAMES = ["get_user", "get_users", "send", "get", "search_files"]
TOOL_ARGS = {
    "type": "object",
    "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
    "required": ["query"],
    "additionalProperties": False,
}


CODES_SCHEMA = {
    "type": "object",
    "properties": {
        "note": {"type": "string", "maxLength": 8},
        "codes": {
            "type": "array",
            "items": {"enum": [f"{c}{i:02d}.{d}" for c in "AJ" for i in range(3) for d in range(2)]},
            "minItems": 1,
            "maxItems": 3,
        },
    },
    "required": ["note", "codes"],
}
"""An enum inside the structure (issue 20): rows in the engine, in the slot entered from it, and across both."""


def tool_schema(names: list[str], args: dict) -> dict:
    return {
        "type": "object",
        "properties": {"name": {"type": "string", "enum": names}, "arguments": args},
        "required": ["name", "arguments"],
    }


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory, qwen2: triec.Vocabulary) -> dict[str, triec.MaskTable]:
    vocab = triec.Vocabulary.load("qwen2", vocab_size=V)
    root = tmp_path_factory.mktemp("artifacts")
    tables = {
        "tools": triec.compile(triec.synthetic.sets.tool_names(300), vocab),
        "colors": triec.compile(COLORS, vocab),
        "toolcall": triec.compile_schema(tool_schema(TOOL_NAMES, TOOL_ARGS), vocab),
        "codes": triec.compile_schema(CODES_SCHEMA, vocab, threshold=8),
        "canonical": triec.compile(triec.synthetic.sets.tool_names(300), vocab, tokenization="canonical"),
    }
    for name, table in tables.items():
        table.save(root / f"{name}.triec")
    serving.reset_store(root)
    return tables


def fake_config(max_num_seqs: int = 8) -> SimpleNamespace:
    model = SimpleNamespace(
        tokenizer="qwen2",
        get_vocab_size=lambda: V,
        hf_config=SimpleNamespace(eos_token_id=[151643, 151645]),
        try_get_generation_config=lambda: {"eos_token_id": [151643, 151645]},
    )
    return SimpleNamespace(model_config=model, scheduler_config=SimpleNamespace(max_num_seqs=max_num_seqs))


class Req:
    """A request of the simulation: its arguments, tokens so far, and the reference table."""

    def __init__(self, rng: np.random.Generator, tables: dict[str, triec.MaskTable]) -> None:
        kind = int(rng.integers(0, 8))
        self.args = [
            None,
            {"triec": "tools"},
            {"triec": "colors"},
            {"triec": "tools", "restrict": list(RESTRICT)},
            {"triec": "toolcall"},
            {"triec": "codes"},
            {"triec": "canonical"},
            {"triec": "canonical", "restrict": list(RESTRICT)},
        ][kind]
        self.ref = None
        self.matcher = None  # a schema request's reference: a fresh matcher of the in-memory compiled table
        if kind in (4, 5):
            name = self.args["triec"]
            self.matcher = tables[name].matcher()
            self.ref = tables[name]
        elif kind == 1:
            self.ref = tables["tools"]
        elif kind == 2:
            self.ref = tables["colors"]
        elif kind == 3:
            self.ref = tables["tools"].restrict(RESTRICT)
        elif kind == 6:  # a canonical table (issue 29): each name's encoder tokens only
            self.ref = tables["canonical"]
        elif kind == 7:
            self.ref = tables["canonical"].restrict(RESTRICT)
        self.params = SamplingParams(extra_args=self.args)
        self.output: list[int] = []
        self.state = None if self.ref is None or self.matcher is not None else self.ref.start
        self.finished = False
        self.pending = -1

    def allowed(self) -> np.ndarray:
        assert self.ref is not None
        if self.matcher is not None:
            return self.matcher.allowed()
        if self.state == triec.FINISHED:
            return np.array(self.ref.eos_token_ids)
        return self.ref.allowed(self.state)

    def take(self, token: int) -> None:
        self.output.append(token)
        if self.matcher is not None and not self.finished:
            assert self.matcher.accept_token(token), (self.output, token)
            self.finished = self.matcher.is_terminated()
        elif self.ref is not None and not self.finished:
            self.state = self.ref.advance(self.state, token)
            self.finished = self.state == triec.FINISHED

    def resume_tokens(self, rng: np.random.Generator, n: int) -> None:
        """Outputs generated before a preemption: a valid prefix of a value."""
        for _ in range(n):
            if self.ref is None:
                self.take(int(rng.integers(0, 1000)))
                continue
            allowed = [t for t in self.allowed().tolist() if t not in self.ref.eos_token_ids]
            if not allowed:
                return
            self.take(int(rng.choice(allowed)))


def check_row(req: Req, row: torch.Tensor) -> None:
    finite = np.flatnonzero(torch.isfinite(row).numpy())
    if req.ref is None:
        assert finite.size == V, "an unconstrained row was masked"
    else:
        assert np.array_equal(finite, req.allowed()), (req.args, req.output)


def leave(req: Req) -> float:
    """The chance a request is aborted this step (schema requests rarely: their outputs take longer)."""
    return 0.03 if req.matcher is not None else 0.1


def sample(req: Req, row: torch.Tensor, rng: np.random.Generator) -> int:
    finite = np.flatnonzero(torch.isfinite(row).numpy())
    if req.matcher is not None and rng.random() < 0.6:  # schema rows: often the longest token, to reach every phase
        lengths = req.ref.vocab.__dict__.setdefault("_lengths", np.array([len(b) for b in req.ref.vocab.token_bytes]))
        return int(finite[np.argmax(lengths[finite])])
    return int(rng.choice(finite)) if req.ref is not None else int(rng.integers(0, 5000))


@needs_v1
@pytest.mark.parametrize("seed", range(4))
def test_v1_random_batch_updates(artifacts, seed: int) -> None:
    rng = np.random.default_rng(seed)
    proc = TriecLogitsProcessor(fake_config(), torch.device("cpu"), False)
    assert proc.is_argmax_invariant() is False
    batch: list[Req | None] = []
    checked, phases = 0, set()
    for _step in range(40):
        removed = [i for i, r in enumerate(batch) if r is not None and (r.finished or rng.random() < leave(r))]
        for i in removed:
            batch[i] = None
        added = []
        for _ in range(int(rng.integers(0, 4))):
            req = Req(rng, artifacts)
            if rng.random() < 0.3:
                req.resume_tokens(rng, int(rng.integers(1, 4)))
            index = batch.index(None) if None in batch else len(batch)  # the lowest free index first
            if index == len(batch):
                batch.append(None)
            batch[index] = req
            added.append((index, req.params, [1, 2, 3], req.output))
        moved = []
        while batch and batch[-1] is None:
            batch.pop()
        while None in batch:  # condense: the last request moves one-way into the lowest hole
            hole, last = batch.index(None), len(batch) - 1
            batch[hole] = batch.pop()
            moved.append((last, hole, MoveDirectionality.UNIDIRECTIONAL))
            while batch and batch[-1] is None:
                batch.pop()
        if len(batch) >= 2 and rng.random() < 0.5:  # reorder: swap two rows
            a, b = (int(x) for x in rng.choice(len(batch), 2, replace=False))
            batch[a], batch[b] = batch[b], batch[a]
            moved.append((a, b, MoveDirectionality.SWAP))
        update = BatchUpdate(batch_size=len(batch), removed=sorted(removed, reverse=True), added=added, moved=moved)
        proc.update_state(update if (removed or added or moved) else None)
        live: list[Req] = [r for r in batch if r is not None]
        for r in live:  # async scheduling: the -1 placeholder is patched just before sampling
            if r.output and r.output[-1] == -1:
                r.output.pop()
                r.take(r.pending)
        logits = torch.zeros(len(live), V)
        proc.apply(logits)
        for i, req in enumerate(live):
            check_row(req, logits[i])
            checked += req.ref is not None
            phases.add(req.matcher.phase if req.matcher is not None else "")
        for i, req in enumerate(live):
            token = sample(req, logits[i], rng)
            if rng.random() < 0.3:
                req.pending = token
                req.output.append(-1)
            else:
                req.take(token)
    assert checked > 20
    assert {"slot", "tail", "engine"} <= phases  # schema rows were checked in every phase


@needs_v1
def test_v1_placeholder_is_read_in_apply(artifacts) -> None:
    """A trailing -1 is not a token: the row keeps its state until the real token is written."""
    proc = TriecLogitsProcessor(fake_config(), torch.device("cpu"), False)
    table = artifacts["colors"]
    output: list[int] = []
    proc.update_state(BatchUpdate(1, [], [(0, SamplingParams(extra_args={"triec": "colors"}), [1], output)], []))
    logits = torch.zeros(1, V)
    proc.apply(logits)
    first = int(table.allowed(table.start)[0])
    output.append(-1)
    logits = torch.zeros(1, V)
    proc.apply(logits)
    assert np.array_equal(np.flatnonzero(torch.isfinite(logits[0]).numpy()), table.allowed(table.start))
    output[-1] = first
    logits = torch.zeros(1, V)
    proc.apply(logits)
    want = table.allowed(table.advance(table.start, first))
    assert np.array_equal(np.flatnonzero(torch.isfinite(logits[0]).numpy()), want)


class FakeReqStates:
    """Model Runner V2's request state, as the processor reads it: device tensors behind ``.gpu``."""

    def __init__(self, max_reqs: int, max_len: int = 256) -> None:
        self.device = torch.device("cpu")
        self.max_num_reqs = max_reqs
        self.vocab_size = V
        self.all_token_ids = SimpleNamespace(gpu=torch.zeros(max_reqs, max_len, dtype=torch.int32))
        self.prompt_len = SimpleNamespace(gpu=torch.zeros(max_reqs, dtype=torch.int32))
        self.prefill_len = SimpleNamespace(gpu=torch.zeros(max_reqs, dtype=torch.int32))
        self.total_len = SimpleNamespace(gpu=torch.zeros(max_reqs, dtype=torch.int32))


@pytest.mark.parametrize("seed", range(4))
def test_v2_random_slots(artifacts, seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    states = FakeReqStates(8)
    proc = TriecLogitsProcessorV2(fake_config(), states)
    slots: dict[int, Req] = {}
    checked, phases = 0, set()
    for _step in range(40):
        for s in [s for s, r in slots.items() if r.finished or rng.random() < leave(r)]:
            del slots[s]  # the runner frees the slot; the next occupant is announced by add_request
        free = [s for s in range(8) if s not in slots]
        for s in rng.permutation(free)[: int(rng.integers(0, 4))].tolist():
            req = Req(rng, artifacts)
            if rng.random() < 0.3:
                req.resume_tokens(rng, int(rng.integers(1, 4)))
            prompt = [int(x) for x in rng.integers(0, 1000, int(rng.integers(1, 6)))]
            tokens = prompt + req.output  # the prefill: prompt plus outputs kept across a preemption
            states.prompt_len.gpu[s] = len(prompt)
            states.total_len.gpu[s] = len(tokens)
            states.all_token_ids.gpu[s, : len(tokens)] = torch.tensor(tokens, dtype=torch.int32)
            assert proc.add_request(s, req.params) is (req.ref is not None)
            slots[s] = req
        proc.apply_staged_writes()
        order = rng.permutation(sorted(slots)).astype(np.int64)  # rows are reordered every step
        if order.size == 0:
            continue
        ctx = SimpleNamespace(idx_mapping_np=order, idx_mapping=torch.from_numpy(order))
        logits = torch.zeros(order.size, V)
        proc.apply(logits, ctx)
        for row, s in enumerate(order.tolist()):
            check_row(slots[s], logits[row])
            checked += slots[s].ref is not None
            phases.add(slots[s].matcher.phase if slots[s].matcher is not None else "")
        for row, s in enumerate(order.tolist()):  # post_update: commit the sampled token on the device
            token = sample(slots[s], logits[row], rng)
            slots[s].take(token)
            total = int(states.total_len.gpu[s])
            states.all_token_ids.gpu[s, total] = token
            states.total_len.gpu[s] = total + 1
    assert checked > 20
    assert {"slot", "tail", "engine"} <= phases  # schema rows were checked in every phase


def allowed_after(req: Req, drafts: list[int]) -> np.ndarray | None:
    """The reference row after ``drafts`` on top of the request's committed tokens; None once a draft is refused."""
    if req.matcher is not None:
        m = req.matcher.copy()
        for d in drafts:
            if not m.is_terminated() and not m.accept_token(d):
                return None
        return m.allowed()
    state = req.state
    for d in drafts:
        if state == triec.FINISHED:
            break
        if d not in req.ref.allowed(state).tolist():
            return None
        state = req.ref.advance(state, d)
    return np.array(req.ref.eos_token_ids) if state == triec.FINISHED else req.ref.allowed(state)


def draft_tokens(req: Req, rng: np.random.Generator, k: int) -> list[int]:
    """Up to k drafts: mostly a path the reference allows (EOS included), sometimes a token it refuses."""
    out: list[int] = []
    for _ in range(int(rng.integers(0, k + 1))):
        if req.ref is None or rng.random() < 0.1:
            out.append(int(rng.integers(0, 5000)))
            continue
        pool = allowed_after(req, out)
        if pool is None or pool.size == 0:
            out.append(int(rng.integers(0, 5000)))
            continue
        out.append(int(rng.choice(pool)))
    return out


@pytest.mark.parametrize("seed", range(2))
def test_v2_speculative_rows_are_masked_after_their_drafts(artifacts, seed: int) -> None:
    """Speculative decoding on Model Runner V2: one row per draft plus the bonus row, each masked at its own position.

    Each step the requests get up to k = 3 drafts (ngram/EAGLE proposals: mostly
    tokens the constraint allows, sometimes not); the rows are laid out as the
    runner does (``expanded_idx_mapping``, ``expanded_local_pos``, the input
    token of each row: the last committed token, then the drafts); the
    rejection sampler keeps a prefix of the drafts valid under their rows and
    samples the bonus from the next row; ``post_update`` commits all of them.
    """
    k = 3
    rng = np.random.default_rng(700 + seed)
    states = FakeReqStates(8)
    config = fake_config()
    config.speculative_config = SimpleNamespace(num_speculative_tokens=k)
    proc = TriecLogitsProcessorV2(config, states)
    slots: dict[int, Req] = {}
    checked = refused = multi = 0
    for _step in range(40):
        for s in [s for s, r in slots.items() if r.finished or rng.random() < leave(r)]:
            del slots[s]
        free = [s for s in range(8) if s not in slots]
        for s in rng.permutation(free)[: int(rng.integers(0, 4))].tolist():
            req = Req(rng, artifacts)
            if rng.random() < 0.3:
                req.resume_tokens(rng, int(rng.integers(1, 4)))
            prompt = [int(x) for x in rng.integers(0, 1000, int(rng.integers(1, 6)))]
            tokens = prompt + req.output
            states.prompt_len.gpu[s] = len(prompt)
            states.total_len.gpu[s] = len(tokens)
            states.all_token_ids.gpu[s, : len(tokens)] = torch.tensor(tokens, dtype=torch.int32)
            proc.add_request(s, req.params)
            slots[s] = req
        proc.apply_staged_writes()
        order = rng.permutation(sorted(slots)).astype(np.int64)
        if order.size == 0:
            continue
        drafts = {s: draft_tokens(slots[s], rng, k) for s in order.tolist()}
        row_slot, local, inputs = [], [], []
        for s in order.tolist():
            last = int(states.all_token_ids.gpu[s, int(states.total_len.gpu[s]) - 1])
            for j, t in enumerate([last] + drafts[s]):
                row_slot.append(s)
                local.append(j)
                inputs.append(t)
        ctx = SimpleNamespace(
            idx_mapping_np=order,
            idx_mapping=torch.from_numpy(order),
            expanded_idx_mapping=torch.tensor(row_slot),
            expanded_local_pos=torch.tensor(local),
            input_ids=torch.tensor(inputs),
        )
        logits = torch.zeros(len(row_slot), V)
        proc.apply(logits, ctx)
        row = 0
        for s in order.tolist():
            req, ds = slots[s], drafts[s]
            accepted = 0
            for j in range(len(ds) + 1):
                finite = np.flatnonzero(torch.isfinite(logits[row + j]).numpy())
                if req.ref is None:
                    assert finite.size == V
                else:
                    want = allowed_after(req, ds[:j])
                    if want is None:  # past a refused draft: rejected anyway; the row allows EOS only
                        assert set(finite.tolist()) <= {151643, 151645}
                        refused += 1
                    else:
                        assert np.array_equal(finite, want), (req.args, req.output, ds[:j])
                        checked += 1
                        multi += j > 0
                if j == accepted and j < len(ds) and np.isin(ds[j], finite) and rng.random() < 0.8:
                    accepted += 1  # the target agreed with this draft
            bonus = sample(req, logits[row + accepted], rng)
            commit = [*ds[:accepted], bonus]
            for t in commit:
                if not req.finished:
                    req.take(t)
                else:
                    req.output.append(t)
            total = int(states.total_len.gpu[s])
            states.all_token_ids.gpu[s, total : total + len(commit)] = torch.tensor(commit, dtype=torch.int32)
            states.total_len.gpu[s] = total + len(commit)
            row += len(ds) + 1
    assert checked > 50 and multi > 20 and refused > 0, (checked, multi, refused)


def test_v2_partial_prefill_does_not_advance(artifacts) -> None:
    """A step with no newly committed token (chunked prefill) leaves the state as it is."""
    states = FakeReqStates(2)
    proc = TriecLogitsProcessorV2(fake_config(2), states)
    states.prompt_len.gpu[1] = 3
    states.total_len.gpu[1] = 3
    proc.add_request(1, SamplingParams(extra_args={"triec": "colors"}))
    proc.apply_staged_writes()
    table = artifacts["colors"]
    ctx = SimpleNamespace(idx_mapping_np=np.array([1]), idx_mapping=torch.tensor([1]))
    for _ in range(3):
        logits = torch.zeros(1, V)
        proc.apply(logits, ctx)
        assert np.array_equal(np.flatnonzero(torch.isfinite(logits[0]).numpy()), table.allowed(table.start))


# ----------------------------------------------------------------------------- admission, engine-free


def test_parse_extra_args() -> None:
    parse = serving.parse_extra_args
    assert parse(None) is None and parse({}) is None and parse({"other": 1}) is None
    assert parse({"triec": "tools"}) == serving.TriecRequest("tools")
    assert parse({"triec": "tools", "restrict": ["b", "a", "b"]}) == serving.TriecRequest("tools", ("a", "b"))
    for bad in (
        {"triec": "../tools"},
        {"triec": "/etc/passwd"},
        {"triec": "a/b"},
        {"triec": ".hidden"},
        {"triec": ""},
        {"triec": 3},
        {"triec": ["tools"]},
        {"restrict": ["a"]},
        {"triec": "tools", "restrict": []},
        {"triec": "tools", "restrict": [1, 2]},
        {"triec": "tools", "restrict": {"a": 1}},
        {"triec": "a..b"},
    ):
        with pytest.raises(RequestError):
            parse(bad)


def test_store_refuses_paths_out(tmp_path: Path, artifacts) -> None:
    inside, outside = tmp_path / "served", tmp_path / "private"
    inside.mkdir()
    outside.mkdir()
    artifacts["colors"].save(outside / "secret.triec")
    artifacts["colors"].save(inside / "colors.triec")
    os.symlink(outside / "secret.triec", inside / "leak.triec")
    os.symlink(inside / "colors.triec", inside / "alias.triec")  # a link that stays inside is fine
    store = serving.ArtifactStore(inside)
    assert store.table("colors").values == artifacts["colors"].values
    assert store.table("alias").values == artifacts["colors"].values
    for name in ("leak", "missing", "../private/secret", str(outside / "secret")):
        with pytest.raises(RequestError):
            store.table(name)
    with pytest.raises(RequestError, match="TRIEC_ARTIFACT_DIR"):
        serving.ArtifactStore("").table("colors")
    (inside / "broken.triec").write_bytes(b"not an artifact")
    with pytest.raises(RequestError, match="not a valid triec artifact"):
        store.table("broken")


def test_check_request_rejections(artifacts) -> None:
    store = serving.store()
    served = serving.ServedModel("qwen2", V, 151643, (151643, 151645))
    ok = SamplingParams(extra_args={"triec": "colors"})
    assert serving.check_request(ok, served, store) == serving.TriecRequest("colors")
    assert serving.check_request(SamplingParams(), served, store) is None
    cases = {
        "no artifact named": SamplingParams(extra_args={"triec": "nope"}),
        "min_tokens": SamplingParams(extra_args={"triec": "colors"}, min_tokens=2, max_tokens=8),
        "stop_token_ids": SamplingParams(extra_args={"triec": "colors"}, ignore_eos=True),
        "not one of the table": SamplingParams(extra_args={"triec": "colors", "restrict": ["purple"]}),
    }
    for message, params in cases.items():
        with pytest.raises(RequestError, match=message):
            serving.check_request(params, served, store)
    # ignore_eos with the EOS ids as explicit stop ids is fine
    fine = SamplingParams(extra_args={"triec": "colors"}, ignore_eos=True, stop_token_ids=[151643, 151645])
    assert serving.check_request(fine, served, store) is not None
    gpt2 = serving.ServedModel("gpt2", V, 50256, (50256,))
    with pytest.raises(RequestError, match="another tokenizer"):
        params = SamplingParams(extra_args={"triec": "colors"}, stop_token_ids=[151643, 151645])
        serving.check_request(params, gpt2, store)
    narrow = serving.ServedModel("qwen2", 151_665, 151643, (151643, 151645))
    with pytest.raises(RequestError, match="wide"):
        serving.check_request(ok, narrow, store)
    with pytest.raises(RequestError, match="which model"):
        serving.check_request(ok, None, store)


@needs_v1
def test_engine_side_never_raises(artifacts) -> None:
    """A request that reaches the engine unchecked (artifact gone, bad args) ends with EOS; others are untouched."""
    proc = TriecLogitsProcessor(fake_config(), torch.device("cpu"), False)
    added = [
        (0, SamplingParams(extra_args={"triec": "gone"}), [1], []),
        (1, SamplingParams(extra_args={"triec": "../x"}), [1], []),
        (2, SamplingParams(), [1], []),
        (3, SamplingParams(extra_args={"triec": "colors"}), [1], []),
    ]
    proc.update_state(BatchUpdate(4, [], added, []))
    logits = torch.zeros(4, V)
    proc.apply(logits)
    for row in (0, 1):
        assert np.flatnonzero(torch.isfinite(logits[row]).numpy()).tolist() == [151643, 151645]
    assert bool(torch.isfinite(logits[2]).all())
    table = artifacts["colors"]
    assert np.array_equal(np.flatnonzero(torch.isfinite(logits[3]).numpy()), table.allowed(table.start))


@needs_v1
def test_device_tables_of_finished_subsets_are_dropped(artifacts) -> None:
    """Many different subsets over time: tables no slot uses are evicted, live rows keep theirs."""
    proc = TriecLogitsProcessor(fake_config(), torch.device("cpu"), False)
    proc.core.max_tables = 3
    tools = artifacts["tools"]
    keep = SamplingParams(extra_args={"triec": "tools", "restrict": list(tools.values[:3])})
    proc.update_state(BatchUpdate(1, [], [(0, keep, [1], [])], []))
    for i in range(8):
        subset = tools.values[10 + i : 12 + i]
        params = SamplingParams(extra_args={"triec": "tools", "restrict": subset})
        proc.update_state(BatchUpdate(2, [1] if i else [], [(1, params, [1], [])], []))
        logits = torch.zeros(2, V)
        proc.apply(logits)
        for row, values in ((0, tools.values[:3]), (1, subset)):
            view = tools.restrict(values)
            assert np.array_equal(np.flatnonzero(torch.isfinite(logits[row]).numpy()), view.allowed(view.start))
        assert len(proc.core.tables) <= 3 + 1


@needs_v1
def test_schema_admission_and_engine_side(artifacts) -> None:
    """Schema artifacts pass the same admission checks; ``restrict`` is refused; an off-schema token ends the row."""
    store = serving.store()
    served = serving.ServedModel("qwen2", V, 151643, (151643, 151645))
    ok = SamplingParams(extra_args={"triec": "toolcall"})
    assert serving.check_request(ok, served, store) == serving.TriecRequest("toolcall")
    cases = {
        "cannot narrow": SamplingParams(extra_args={"triec": "toolcall", "restrict": ["send"]}),
        "stop_token_ids": SamplingParams(extra_args={"triec": "toolcall"}, ignore_eos=True),
        "min_tokens": SamplingParams(extra_args={"triec": "toolcall"}, min_tokens=1, max_tokens=8),
    }
    for message, params in cases.items():
        with pytest.raises(RequestError, match=message):
            serving.check_request(params, served, store)
    with pytest.raises(RequestError, match="another tokenizer"):
        serving.check_request(ok, serving.ServedModel("gpt2", V, 151643, (151643, 151645)), store)
    proc = TriecLogitsProcessor(fake_config(), torch.device("cpu"), False)
    out0: list[int] = []
    out1: list[int] = []
    proc.update_state(BatchUpdate(2, [], [(0, ok, [1], out0), (1, ok, [1], out1)], []))
    logits = torch.zeros(2, V)
    proc.apply(logits)
    start = artifacts["toolcall"].matcher().allowed()
    allowed = np.flatnonzero(torch.isfinite(logits[0]).numpy())
    assert np.array_equal(allowed, start) and int(allowed[0]) != 0
    out0.append(0)  # "!" is not allowed where the schema starts: row 0 ends, row 1 goes on
    out1.append(int(allowed[0]))
    logits = torch.zeros(2, V)
    proc.apply(logits)
    assert np.flatnonzero(torch.isfinite(logits[0]).numpy()).tolist() == [151643, 151645]
    m = artifacts["toolcall"].matcher()
    assert m.accept_token(int(allowed[0]))
    assert np.array_equal(np.flatnonzero(torch.isfinite(logits[1]).numpy()), m.allowed())


@needs_v1
def test_caches_of_subsets_stay_within_their_byte_bounds(artifacts, tmp_path: Path) -> None:
    """A stream of large distinct subsets (the soak's finding): the store's compacted subsets and the device tables
    stay under their bounds in bytes (TRIEC_CACHE_BYTES), whatever their count bound, and every row stays right."""
    from triec.integrations.constraints import table_nbytes

    tools = artifacts["tools"]
    sample = tools.restrict(tools.values[:200]).compact()
    one = table_nbytes(sample)
    store = serving.ArtifactStore(serving.store().directory, max_subsets=10_000, max_subset_bytes=3 * one)
    proc = TriecLogitsProcessor(fake_config(), torch.device("cpu"), False)
    proc.core.store = store
    proc.core.max_tables = 10_000
    proc.core.max_table_bytes = 2 * sample.to_torch(torch.device("cpu")).nbytes
    rng = np.random.default_rng(3)
    for i in range(12):
        subset = sorted(rng.choice(tools.values, 200, replace=False).tolist())
        params = SamplingParams(extra_args={"triec": "tools", "restrict": subset})
        proc.update_state(BatchUpdate(1, [0] if i else [], [(0, params, [1], [])], []))
        logits = torch.zeros(1, V)
        proc.apply(logits)
        view = tools.restrict(subset)
        assert np.array_equal(np.flatnonzero(torch.isfinite(logits[0]).numpy()), view.allowed(view.start))
        assert store.subset_bytes() <= 3 * one and len(store._subsets) <= 3
        assert proc.core.table_bytes() <= proc.core.max_table_bytes


def test_v1_import_names_the_release_and_what_serves() -> None:
    """Where vLLM has no V1 interface (0.34), importing the V1 class fails with one line: the release, the module
    that is gone and what serves instead; where it has one, the class is that interface's subclass."""
    import vllm

    try:
        importlib.import_module("vllm.v1.sample.logits_processor")
    except ImportError:
        assert V1_MISSING is not None and "\n" not in V1_MISSING
        assert V1_MISSING.startswith(f"vLLM {vllm.__version__} has no V1 logits-processor interface")
        assert "TriecLogitsProcessorV2" in V1_MISSING and "x-triec-artifact" in V1_MISSING
        with pytest.raises(ImportError, match="has no V1 logits-processor interface"):
            internals.v1_processor_interface()
    else:
        assert V1_MISSING is None
        assert issubclass(TriecLogitsProcessor, internals.v1_processor_interface().LogitsProcessor)


# ----------------------------------------------------------------------------- the beam processor on Model Runner V2


def test_beam_processor_v2_rows_equal_the_reference_and_v1s() -> None:
    """``TriecBeamProcessorV2`` (what ``beams.engine_args`` loads on 0.34): by ``ctx.idx_mapping_np``, a beam row
    gets its full-vocabulary log-softmax on its allowed ids (ids off the row ignored) and ``-inf`` elsewhere, a
    log-probability row its log-softmax, repetition-penalty and plain rows nothing; ``add_request`` answers whether
    it changes a request's logits, and a recycled slot forgets its previous occupant. Where vLLM still has the V1
    interface, the V1 processor writes the same rows."""
    from triec.integrations.vllm.beam_processor_v2 import TriecBeamProcessorV2
    from triec.integrations.vllm.beams import ARG_ALLOWED, encode_allowed

    proc = TriecBeamProcessorV2(None, None)
    beam = SamplingParams(logprobs=8, extra_args={ARG_ALLOWED: encode_allowed(np.array([3, 5, 10, -1]))})
    by_slot = {
        4: beam,
        1: SamplingParams(logprobs=2),
        6: SamplingParams(),
        2: SamplingParams(logprobs=2, repetition_penalty=1.2),
    }
    assert proc.add_request(9, beam)
    assert not proc.add_request(9, SamplingParams())  # slot 9 recycled: its beam constraint is gone
    assert [proc.add_request(s, p) for s, p in by_slot.items()] == [True, True, False, False]
    order = np.array([2, 6, 4, 1, 9])  # batch position -> slot
    ctx = SimpleNamespace(idx_mapping_np=order, idx_mapping=torch.from_numpy(order))
    logits = torch.randn(5, 10)
    before = logits.clone()
    assert proc.apply(logits, ctx) is logits
    lsm = before.log_softmax(-1)
    allowed = [3, 5]
    assert torch.equal(logits[2, allowed], lsm[2, allowed])
    assert torch.isinf(logits[2, [t for t in range(10) if t not in allowed]]).all()
    assert torch.allclose(logits[3], lsm[3])
    assert torch.equal(logits[[0, 1, 4]], before[[0, 1, 4]])
    with pytest.raises(ValueError, match="int32 token ids as bytes"):
        TriecBeamProcessorV2.validate_params(SamplingParams(extra_args={ARG_ALLOWED: b"abc"}))
    if V1_MISSING is None:
        from triec.integrations.vllm.beam_processor import TriecBeamProcessor

        v1 = TriecBeamProcessor(None, torch.device("cpu"), False)
        added = [(i, by_slot.get(int(s), SamplingParams()), [], []) for i, s in enumerate(order.tolist())]
        v1.update_state(BatchUpdate(batch_size=5, removed=[], added=added, moved=[]))
        again = before.clone()
        v1.apply(again)
        assert torch.equal(again, logits)
