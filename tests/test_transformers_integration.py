"""End to end: ``model.generate`` with the triec logits processor emits exactly one value, then EOS.

The model is a tiny Llama with random weights built from a config (nothing is
downloaded); the tokenizers are the real bundled Qwen2 and GPT-2 ones, loaded
into transformers from their tokenizer.json.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pytest

import triec
import triec.synthetic.sets
from triec.tokenizer.source import locate

pytestmark = pytest.mark.torch

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from triec.integrations.transformers import TriecLogitsProcessor  # noqa: E402

PROMPTS = ["Call the tool:", "Which tool should run?", "x", "Pick one tool for slack", "hello", "Answer with a name:"]


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    """Tiny models on a 2-core CI machine run several times faster on one thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def hf() -> dict[str, transformers.PreTrainedTokenizerFast]:
    out = {}
    for name in ("gpt2", "qwen2"):
        backend = tokenizers.Tokenizer.from_str(json.dumps(locate(name).tokenizer_json))
        tok = transformers.PreTrainedTokenizerFast(tokenizer_object=backend)
        tok.pad_token, tok.padding_side = "<|endoftext|>", "left"
        out[name] = tok
    return out


@pytest.fixture(scope="module")
def models(vocabs: dict[str, triec.Vocabulary]) -> dict[str, transformers.PreTrainedModel]:
    out = {}
    for name in ("gpt2", "qwen2"):
        vocab = vocabs[name]
        config = transformers.LlamaConfig(
            vocab_size=vocab.vocab_size,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=128,
            tie_word_embeddings=True,
            bos_token_id=None,
            eos_token_id=list(vocab.eos_token_ids),
            pad_token_id=vocab.eos_token_ids[0],
        )
        torch.manual_seed(0)
        out[name] = transformers.LlamaForCausalLM(config).eval()
    return out


def generate(model, tok, vocab: triec.Vocabulary, processor, *, sample: bool, max_new_tokens: int) -> list[list[int]]:
    enc = tok(PROMPTS, padding=True, return_tensors="pt")
    torch.manual_seed(1)
    out = model.generate(
        **enc,
        logits_processor=transformers.LogitsProcessorList(
            processor if isinstance(processor, list) else [processor] if processor else []
        ),
        max_new_tokens=max_new_tokens,
        do_sample=sample,
        top_k=0 if sample else None,
        eos_token_id=list(vocab.eos_token_ids),
        pad_token_id=vocab.eos_token_ids[0],
    )
    return out[:, enc["input_ids"].shape[1] :].tolist()


def value_then_eos(row: list[int], tok, vocab: triec.Vocabulary, values: set[str]) -> str | None:
    """The value the row spells before its first EOS (only padding after it), else None."""
    eos = [i for i, t in enumerate(row) if t in vocab.eos_token_ids]
    if not eos or any(t != vocab.eos_token_ids[0] for t in row[eos[0] + 1 :]):
        return None
    ids = row[: eos[0]]
    text = tok.decode(ids)
    if text not in values or b"".join(vocab.token_bytes[t] for t in ids) != text.encode():
        return None
    return text


CASES = [("qwen2", 10), ("qwen2", 1000), ("qwen2", 10_000), ("gpt2", 10), ("gpt2", 10_000)]


@pytest.mark.parametrize(("name", "k"), CASES)
def test_generate_emits_exactly_one_value(name: str, k: int, vocabs, hf, models) -> None:
    vocab, tok, model = vocabs[name], hf[name], models[name]
    values = triec.synthetic.sets.tool_names(k)
    table = triec.compile(values, vocab)
    budget = max(len(v.encode()) for v in values) + 1  # every content token holds at least one byte
    value_set = set(values)
    outputs = {}
    for sample in (False, True):
        rows = generate(model, tok, vocab, TriecLogitsProcessor(table), sample=sample, max_new_tokens=budget)
        outputs[sample] = [value_then_eos(row, tok, vocab, value_set) for row in rows]
        assert all(outputs[sample]), (sample, rows)
    if k >= 1000:  # sampled rows follow their own states: they do not all pick the same value
        assert len(set(outputs[True])) > 1
    # The same model without the processor: essentially never a value followed by EOS.
    free = [
        value_then_eos(row, tok, vocab, value_set)
        for sample in (False, True)
        for row in generate(model, tok, vocab, None, sample=sample, max_new_tokens=budget)
    ]
    assert sum(v is not None for v in free) <= 1


@pytest.mark.parametrize("name", ["qwen2", "gpt2"])
def test_generate_with_a_canonical_table_writes_the_encoders_tokens(name: str, vocabs, hf, models) -> None:
    """tokenization="canonical" through the same processor: every sampled row is a value's own tokenization, then EOS."""
    vocab, tok, model = vocabs[name], hf[name], models[name]
    values = triec.synthetic.sets.tool_names(1000)
    table = triec.compile(values, vocab, tokenization="canonical")
    encoder = vocab.encoder()
    for sample in (False, True):
        rows = generate(model, tok, vocab, TriecLogitsProcessor(table), sample=sample, max_new_tokens=40)
        for row in rows:
            value = value_then_eos(row, tok, vocab, set(values))
            assert value is not None, row
            cut = next(i for i, t in enumerate(row) if t in vocab.eos_token_ids)
            assert row[:cut] == encoder.encode(value, add_special_tokens=False).ids


def test_restricted_view_in_generate(vocabs, hf, models) -> None:
    vocab, tok, model = vocabs["qwen2"], hf["qwen2"], models["qwen2"]
    table = triec.compile(triec.synthetic.sets.tool_names(10_000), vocab)
    subset = table.values[5000:5004]
    rows = generate(model, tok, vocab, TriecLogitsProcessor(table.restrict(subset)), sample=True, max_new_tokens=40)
    assert {value_then_eos(row, tok, vocab, set(subset)) for row in rows} <= set(subset)
    assert all(value_then_eos(row, tok, vocab, set(subset)) for row in rows)


def test_a_shortlist_with_its_escape_is_the_subsets_own_table(vocabs, hf, models) -> None:
    """Issue 52, served: a request's shortlist (a retriever's top k, plus the escape value) is a view of the
    artifact's table. Greedy rows equal those of the shortlist compiled on its own (token for token), sampled rows
    end in a listed value, the escape alone writes the escape, and a stranger in the shortlist is refused."""
    vocab, tok, model = vocabs["qwen2"], hf["qwen2"], models["qwen2"]
    escape = "none_of_these"
    table = triec.compile([*triec.synthetic.sets.tool_names(10_000), escape], vocab)
    shortlist = [*table.values[4000:4005], escape]
    view = TriecLogitsProcessor(table.restrict(shortlist))
    alone = TriecLogitsProcessor(triec.compile(shortlist, vocab))
    greedy = generate(model, tok, vocab, view, sample=False, max_new_tokens=40)
    assert greedy == generate(model, tok, vocab, alone, sample=False, max_new_tokens=40)
    for row in greedy + generate(model, tok, vocab, view, sample=True, max_new_tokens=40):
        assert value_then_eos(row, tok, vocab, set(shortlist)) is not None, row
    only = generate(model, tok, vocab, TriecLogitsProcessor(table.restrict([escape])), sample=True, max_new_tokens=40)
    assert {value_then_eos(row, tok, vocab, {escape}) for row in only} == {escape}
    with pytest.raises(triec.ValueNotInTable, match="'no_such_tool'"):
        table.restrict([*shortlist[:2], "no_such_tool"])


def test_processor_follows_each_row_and_resets(vocabs) -> None:
    """Called as generate calls it: scores keep exactly each row's allowed tokens; a new prompt restarts."""
    vocab = vocabs["qwen2"]
    table = triec.compile(["slack.get_user", "slack.get_user_by_id", "github.create_issue"], vocab)
    proc = TriecLogitsProcessor(table)
    assert proc.supports_continuous_batching is False
    ids = torch.tensor([[7, 8, 9], [7, 8, 9]])
    states = [table.start, table.start]
    for _ in range(3):  # row 0 always takes its smallest allowed id, row 1 its largest
        scores = torch.zeros(2, vocab.vocab_size)
        out = proc(ids, scores)
        assert torch.equal(scores, torch.zeros_like(scores))  # the input is left untouched
        for row in range(2):
            assert np.array_equal(np.flatnonzero(torch.isfinite(out[row]).numpy()), table.allowed(states[row]))
        nxt = [int(table.allowed(s)[0 if row == 0 else -1]) for row, s in enumerate(states)]
        states = [table.advance(s, t) for s, t in zip(states, nxt, strict=True)]
        ids = torch.cat([ids, torch.tensor(nxt).unsqueeze(1)], dim=1)
    out = proc(torch.tensor([[1, 2]]), torch.zeros(1, vocab.vocab_size))  # another generate call: a fresh row
    assert np.array_equal(np.flatnonzero(torch.isfinite(out[0]).numpy()), table.allowed(table.start))


def test_generate_tool_calls_with_a_schema_table(vocabs, hf, models) -> None:
    """A compiled tool schema in generate: every row is one complete tool call, then EOS."""
    vocab, tok, model = vocabs["qwen2"], hf["qwen2"], models["qwen2"]
    names = triec.synthetic.sets.tool_names(1000)
    args = {
        "type": "object",
        "properties": {"flag": {"type": "boolean"}},
        "required": ["flag"],
        "additionalProperties": False,
    }
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "enum": names}, "arguments": args},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }
    table = triec.compile_schema(schema, vocab)
    budget = max(len(n.encode()) for n in names) + len('{"name": "", "arguments": {"flag": false}}') + 1
    for sample in (False, True):
        proc = TriecLogitsProcessor(table)
        rows = generate(model, tok, vocab, proc, sample=sample, max_new_tokens=budget)
        for row, m in zip(rows, proc.matchers, strict=True):
            eos = [i for i, t in enumerate(row) if t in vocab.eos_token_ids]
            assert eos, row
            text = b"".join(vocab.token_bytes[t] for t in row[: eos[0]]).decode()
            call = json.loads(text)
            assert text == json.dumps(call, ensure_ascii=False)  # compact convention: ", " and ": "
            assert call["name"] in names and isinstance(call["arguments"]["flag"], bool)
            # generate stops at EOS without calling the processor again: the matcher sits where EOS is allowed
            assert m.value == call["name"] and row[eos[0]] in m.allowed()


def test_generate_with_format_fields(vocabs, hf, models) -> None:
    """A schema of date, UUID and address fields, each served by its DFA's table (issue 44), in generate: every row
    is one complete object whose strings match their formats, then EOS."""
    import re

    pytest.importorskip("xgrammar")
    vocab, tok, model = vocabs["qwen2"], hf["qwen2"], models["qwen2"]
    kinds = {"day": "date", "id": "uuid", "ip": "ipv4"}
    schema = {
        "type": "object",
        "properties": {k: {"type": "string", "format": f} for k, f in kinds.items()},
        "required": list(kinds),
    }
    table = triec.compile_schema(schema, vocab, engine="xgrammar")
    assert [s.format_name for s in table.slots] == list(kinds.values())
    budget = len('{"day": "", "id": "", "ip": ""}') + 10 + 36 + 15 + 1  # every token holds a byte at least
    for sample in (False, True):
        proc = TriecLogitsProcessor(table)
        for row in generate(model, tok, vocab, proc, sample=sample, max_new_tokens=budget):
            eos = [i for i, t in enumerate(row) if t in vocab.eos_token_ids]
            assert eos, row
            doc = json.loads(b"".join(vocab.token_bytes[t] for t in row[: eos[0]]).decode())
            for key, fmt in kinds.items():
                assert re.fullmatch(triec.FORMATS[fmt], doc[key]), (fmt, doc[key])


def test_generate_with_a_tool_registry(vocabs, hf, models) -> None:
    """A tool registry in generate (vLLM's required format, each tool its own arguments): every row a JSON array of
    calls, each call's arguments valid for its own tool."""
    vocab, tok, model = vocabs["qwen2"], hf["qwen2"], models["qwen2"]
    tools = [
        {
            "name": f"tool_{i}",
            "parameters": {
                "type": "object",
                "properties": {f"arg{i}": {"type": "integer"}},
                "required": [f"arg{i}"],
                "additionalProperties": False,
            },
        }
        for i in range(50)
    ]
    table = triec.compile_tools(tools, vocab, format="vllm", parallel=False)
    proc = TriecLogitsProcessor(table)
    rows = generate(model, tok, vocab, proc, sample=True, max_new_tokens=60)
    ended = 0
    for row in rows:
        eos = [i for i, t in enumerate(row) if t in vocab.eos_token_ids]
        if not eos:
            continue  # a long integer: the budget ran out inside the arguments
        ended += 1
        calls = json.loads(b"".join(vocab.token_bytes[t] for t in row[: eos[0]]).decode())
        assert len(calls) == 1
        i = int(calls[0]["name"].split("_")[1])
        assert list(calls[0]["parameters"]) == [f"arg{i}"] and isinstance(calls[0]["parameters"][f"arg{i}"], int)
    assert ended > 0


class _WriteTheTrigger(transformers.LogitsProcessor):
    """A budget's end as an eval forces it: from step ``after`` on, the next byte of the trigger gets a large bonus."""

    def __init__(self, pieces: list[int], after: int) -> None:
        self.pieces, self.after, self.step = pieces, after, 0

    def __call__(self, input_ids, scores):
        k = self.step - self.after
        if 0 <= k < len(self.pieces):
            scores[:, self.pieces[k]] += 1e4
        self.step += 1
        return scores


def test_think_then_answer_processor_follows_each_row(vocabs) -> None:
    """Engine-free: the processor's rows are each row's TriggeredMatcher's, free text then the trigger then the set."""
    from triec.runtime.trigger import Triggered

    vocab = vocabs["qwen2"]
    values = ["Paris", "Rome", "Oslo"]
    table = triec.compile(values, vocab)
    proc = TriecLogitsProcessor(table, trigger="Answer:", vocab=vocab)
    ref = [Triggered(table, vocab, "Answer:").matcher() for _ in range(2)]
    ids = {b: i for i, b in enumerate(vocab.token_bytes) if b}
    script = [
        [ids[b"I"], ids[b" think"], ids[b" Answer"], ids[b":"], ids[b"R"], ids[b"ome"]],
        [
            ids[b"Answer"],
            ids[b":"],
            ids[b"Paris"],
            vocab.eos_token_ids[0],
            vocab.eos_token_ids[0],
            vocab.eos_token_ids[0],
        ],
    ]
    input_ids = torch.tensor([[5, 6], [5, 6]])
    for step in range(6):
        out = proc(input_ids, torch.zeros(2, vocab.vocab_size))
        for row in range(2):
            if ref[row].is_terminated():
                continue
            assert np.array_equal(np.flatnonzero(torch.isfinite(out[row]).numpy()), ref[row].allowed()), (step, row)
            assert ref[row].accept_token(script[row][step])
        input_ids = torch.cat([input_ids, torch.tensor([[script[0][step]], [script[1][step]]])], dim=1)
    assert ref[0].value == "Rome" and ref[1].is_terminated() and ref[1].value == "Paris"
    with pytest.raises(ValueError, match="vocab="):
        TriecLogitsProcessor(table, trigger="Answer:")


def test_generate_think_then_answer(vocabs, hf, models) -> None:
    """generate: free text, then the trigger (written by a budget-forcing processor in front), then one value, EOS."""
    vocab, tok, model = vocabs["qwen2"], hf["qwen2"], models["qwen2"]
    values = triec.synthetic.sets.tool_names(500)
    table = triec.compile(values, vocab)
    ids = {b: i for i, b in enumerate(vocab.token_bytes) if b}
    force = _WriteTheTrigger([ids[b"\n"], ids[b"Answer"], ids[b":"]], after=4)
    for sample in (False, True):
        force.step = 0
        proc = TriecLogitsProcessor(table, trigger="\nAnswer:", vocab=vocab)
        rows = generate(model, tok, vocab, [force, proc], sample=sample, max_new_tokens=60)
        for row in rows:
            eos = [i for i, t in enumerate(row) if t in vocab.eos_token_ids]
            assert eos, row
            text = b"".join(vocab.token_bytes[t] for t in row[: eos[0]])
            thought, sep, answer = text.partition(b"\nAnswer:")
            assert sep and b"\nAnswer:" not in thought and answer.decode() in values, text
