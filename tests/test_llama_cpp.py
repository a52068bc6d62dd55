"""triec inside llama-cpp-python, with the real SmolLM2 GGUF (in nox's ``tests``; ``nox -s llamacpp`` alone, torch-free).

llama.cpp is the oracle twice: its own ``llama_token_to_piece`` for the vocabulary, its own GBNF grammar for
the outputs (greedy decoding constrained by triec and by a GBNF alternation of the same values must write
the same tokens). Rows are checked against the numpy runtime state by state.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from shared import bfcl_registry, spell

import triec
from triec.engines.gbnf import alternation, literal
from triec.errors import RequestError, TokenizerMismatch

pytestmark = pytest.mark.llamacpp
llama_cpp = pytest.importorskip("llama_cpp")

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def llm(gguf: str):
    return llama_cpp.Llama(gguf, n_ctx=1024, n_threads=2, verbose=False, seed=0)


def chat(question: str) -> str:
    return f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"


def greedy(llm, prompt: str, limit: int = 40, **kwargs) -> list[int]:
    ids = llm.tokenize(prompt.encode(), add_bos=False, special=True)
    llm.reset()
    out: list[int] = []
    for tok in llm.generate(ids, temp=0.0, top_k=1, reset=True, **kwargs):
        if llama_cpp.llama_vocab_is_eog(llm._model.vocab, tok) or len(out) >= limit:
            break
        out.append(int(tok))
    return out


_TORCH_FREE = """
import sys

sys.modules["torch"] = sys.modules["transformers"] = None  # any import of either now fails
import llama_cpp

import triec
from triec.integrations.llama_cpp import LlamaCppConstraint

llm = llama_cpp.Llama(sys.argv[1], n_ctx=256, n_threads=2, verbose=False, seed=0)
values = ["get_weather", "get_time", "send_email"]
constraint = LlamaCppConstraint(llm, triec.compile(values, triec.Vocabulary.load(sys.argv[1])))
out = llm.create_completion("Which tool tells the time?", max_tokens=16, temperature=0.0, **constraint.generation_kwargs())
print(out["choices"][0]["text"])
"""


def test_the_integration_needs_neither_torch_nor_transformers(gguf: str) -> None:
    """What a llama.cpp user installs (triec, llama-cpp-python, numpy): with torch and transformers made
    unimportable, a constrained completion still ends in a value (the main suite's environment holds both)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _TORCH_FREE, gguf], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() in {"get_weather", "get_time", "send_email"}, proc.stdout


# ------------------------------------------------------------------ the vocabulary


def test_the_gguf_vocabulary_is_llama_cpps_byte_for_byte(llm, gguf_vocab) -> None:
    from triec.integrations.llama_cpp import check_vocabulary, token_pieces

    pieces = token_pieces(llm)
    assert len(pieces) == gguf_vocab.num_tokens == llm.n_vocab()
    assert pieces == list(gguf_vocab.token_bytes)  # every id, control tokens as nothing
    check_vocabulary(llm, gguf_vocab)


def test_another_vocabulary_is_one_clear_error(llm, vocabs) -> None:
    from triec.integrations.llama_cpp import check_vocabulary

    with pytest.raises(TokenizerMismatch, match="tokens"):
        check_vocabulary(llm, vocabs["gpt2"])


def test_an_artifact_for_another_tokenizer_is_refused(llm, vocabs, tmp_path) -> None:
    from triec.integrations.llama_cpp import LlamaCppConstraint

    path = tmp_path / "gpt2.triec"
    triec.compile(["get_weather", "get_time"], vocabs["gpt2"]).save(path)
    with pytest.raises(RequestError, match=str(path)):
        LlamaCppConstraint(llm, path)


def test_an_eos_llama_cpp_does_not_stop_on_is_refused(llm, gguf) -> None:
    from triec.integrations.llama_cpp import LlamaCppConstraint

    odd = triec.Vocabulary.load(gguf, eos_token_ids=[17])  # "!" as EOS: llama.cpp would never stop on it
    with pytest.raises(RequestError):
        LlamaCppConstraint(llm, triec.compile(["a", "b"], odd))


# ------------------------------------------------------------------ rows


def test_processor_rows_equal_the_numpy_runtime(llm, gguf_vocab, bfcl_names) -> None:
    from triec.integrations.llama_cpp import LlamaCppConstraint

    table = triec.compile(bfcl_names[:300], gguf_vocab)
    constraint = LlamaCppConstraint(llm, table)
    rng = np.random.default_rng(0)
    prompt = np.asarray(llm.tokenize(b"<|im_start|>user\nhi<|im_end|>\n", add_bos=False, special=True), dtype=np.intc)
    checked = 0
    for value in rng.choice(table.values, 25, replace=False):
        ids = spell(table, gguf_vocab, value.encode())
        d = constraint.generation_kwargs()
        process, stop = d["logits_processor"][0], d["stopping_criteria"][0]
        matcher = table.matcher()
        for n in range(len(ids) + 1):
            seq = np.concatenate([prompt, np.asarray(ids[:n], dtype=np.intc)])
            scores = rng.standard_normal(llm.n_vocab()).astype(np.float32)
            out = process(seq, scores.copy())
            allowed = np.flatnonzero(np.isfinite(out))
            assert allowed.tolist() == table.allowed(matcher.state).tolist()
            assert np.array_equal(out[allowed], scores[allowed])
            assert stop(seq, out) == (table.allowed(matcher.state).tolist() == list(table.eos_token_ids))
            checked += 1
            if n < len(ids):
                assert matcher.accept_token(ids[n])
    assert checked > 50


def test_a_refused_token_leaves_eos_only_and_stops(llm, gguf_vocab) -> None:
    from triec.integrations.llama_cpp import LlamaCppConstraint

    constraint = LlamaCppConstraint(llm, triec.compile(["alpha", "beta"], gguf_vocab))
    d = constraint.generation_kwargs()
    x = int(llm.tokenize(b"zzz", add_bos=False, special=False)[0])
    seq = np.asarray([1, 2, 3, x], dtype=np.intc)
    d["logits_processor"][0](seq[:3], np.zeros(llm.n_vocab(), np.float32))  # the prompt: 3 tokens
    out = d["logits_processor"][0](seq, np.zeros(llm.n_vocab(), np.float32))
    assert np.flatnonzero(np.isfinite(out)).tolist() == list(gguf_vocab.eos_token_ids)
    assert d["stopping_criteria"][0](seq, out)


# ------------------------------------------------------------------ generation, against GBNF


def test_gbnf_literals_escape_every_character() -> None:
    assert literal('a"b\\c') == '"a\\"b\\\\c"'
    assert literal("x\ny\t") == '"x\\x0Ay\\x09"'
    assert literal("é日🙂") == '"\\u00E9\\u65E5\\U0001F642"'
    assert alternation(["a", "a", ""]).count("|") == 1
    with pytest.raises(ValueError):
        alternation([])


@pytest.mark.parametrize("k", [50, 1998])
def test_greedy_outputs_equal_gbnf_and_end_in_a_value(llm, gguf_vocab, bfcl_names, k) -> None:
    from triec.integrations.llama_cpp import LlamaCppConstraint

    values = bfcl_names[:k]
    constraint = LlamaCppConstraint(llm, triec.compile(values, gguf_vocab))
    grammar = llama_cpp.LlamaGrammar.from_string(alternation(values), verbose=False)
    for question in (
        "Which function computes a body mass index?",
        "Name a function that sorts a list.",
        "Which tool gets the weather?",
    ):
        ours = greedy(llm, chat(question), **constraint.generation_kwargs())
        theirs = greedy(llm, chat(question), grammar=grammar)
        assert ours == theirs, (question, llm.detokenize(ours), llm.detokenize(theirs))
        assert llm.detokenize(ours).decode() in values


def test_unusual_values_equal_gbnf(llm, gguf_vocab) -> None:
    from triec.integrations.llama_cpp import LlamaCppConstraint

    values = ['say "hi"', "back\\slash", "naïve café", "日本語", "a\nb", "x", "xy"]
    constraint = LlamaCppConstraint(llm, triec.compile(values, gguf_vocab))
    grammar = llama_cpp.LlamaGrammar.from_string(alternation(values), verbose=False)
    for question in ("Pick the Japanese one.", "Pick the one with quotes.", "Pick the French one."):
        ours = greedy(llm, chat(question), **constraint.generation_kwargs())
        assert ours == greedy(llm, chat(question), grammar=grammar)
        assert llm.detokenize(ours).decode() in values


def test_chat_completion_restricted_and_think_then_answer(llm, gguf_vocab, bfcl_names) -> None:
    from triec.integrations.llama_cpp import LlamaCppConstraint

    table = triec.compile(bfcl_names[:500], gguf_vocab)
    subset = bfcl_names[100:110]
    narrow = LlamaCppConstraint(llm, table, values=subset)
    messages = [{"role": "user", "content": "Which function computes a body mass index? Name only."}]
    out = llm.create_chat_completion(messages, temperature=0, max_tokens=40, **narrow.generation_kwargs(chat=True))
    assert out["choices"][0]["message"]["content"] in subset
    assert out["choices"][0]["finish_reason"] == "stop"

    spaced = triec.compile(bfcl_names[:500], gguf_vocab, prefix=" ")
    think = LlamaCppConstraint(llm, spaced, trigger="Answer:")
    text = llm(
        chat("Which function computes a body mass index? Think, then write Answer: and the name."),
        temperature=0,
        max_tokens=120,
        **think.generation_kwargs(),
    )["choices"][0]["text"]
    if "Answer:" in text:  # the model wrote the trigger within the budget: one value follows, then the end
        assert text.split("Answer:", 1)[1].strip() in bfcl_names[:500]


def test_a_shortlist_with_its_escape_equals_gbnf_over_the_shortlist(llm, gguf_vocab, bfcl_names) -> None:
    """Issue 52, served: ``values=`` a request's shortlist (a retriever's top k, plus the escape value) of the
    artifact's values. Greedy outputs equal llama.cpp's own GBNF grammar over the shortlist, token for token; the
    escape alone writes the escape; a stranger, an empty list or a non-string is one RequestError, never the full
    set served instead; a lone string is one value (as vLLM's ``restrict`` reads it)."""
    from triec.integrations.llama_cpp import LlamaCppConstraint

    escape = "none_of_these"
    table = triec.compile([*bfcl_names[:500], escape], gguf_vocab)
    shortlist = [*bfcl_names[200:205], escape]
    grammar = llama_cpp.LlamaGrammar.from_string(alternation(shortlist), verbose=False)
    narrow = LlamaCppConstraint(llm, table, values=shortlist)
    assert sorted(narrow.table.values) == sorted(shortlist)
    for question in ("Which function computes a body mass index?", "Which tool gets the weather?"):
        ours = greedy(llm, chat(question), **narrow.generation_kwargs())
        assert ours == greedy(llm, chat(question), grammar=grammar), question
        assert llm.detokenize(ours).decode() in shortlist
    only = LlamaCppConstraint(llm, table, values=[escape])
    assert llm.detokenize(greedy(llm, chat("Which tool sorts a list?"), **only.generation_kwargs())) == b"none_of_these"
    assert list(LlamaCppConstraint(llm, table, values=escape).table.values) == [escape]
    for values, match in (
        ([*shortlist, "no_such_tool"], "values=: value 'no_such_tool' is not one of the table's values"),
        ([], "non-empty list of strings"),
        ([bfcl_names[0], 7], "holds int 7"),
    ):
        with pytest.raises(RequestError, match=match):
            LlamaCppConstraint(llm, table, values=values)


def test_canonical_tables_take_llama_cpps_own_tokenization(llm, gguf_vocab, bfcl_names) -> None:
    from triec.integrations.llama_cpp import LlamaCppConstraint, LlamaCppEncoder

    values = bfcl_names[:200]
    table = triec.compile(values, gguf_vocab, tokenization="canonical", encoder=LlamaCppEncoder(llm))
    assert table.canonical
    for value in values[:40]:  # each value's one path is llama.cpp's tokenization of it
        m = table.matcher()
        ids = llm.tokenize(value.encode(), add_bos=False, special=False)
        assert all(m.accept_token(t) for t in ids) and m.is_accepting(), value
    constraint = LlamaCppConstraint(llm, table)
    for question in ("Which function computes a body mass index?", "Which tool gets the weather?"):
        ours = greedy(llm, chat(question), **constraint.generation_kwargs())
        text = llm.detokenize(ours).decode()
        assert text in values and ours == llm.tokenize(text.encode(), add_bos=False, special=False)


def test_a_vocabulary_passed_in_is_checked(llm, vocabs) -> None:
    from triec.integrations.llama_cpp import LlamaCppConstraint

    with pytest.raises(TokenizerMismatch):
        LlamaCppConstraint(llm, triec.compile(["a", "b"], vocabs["gpt2"]), vocab=vocabs["gpt2"])


def test_a_tool_registry_schema_table(llm, gguf_vocab, bfcl_names) -> None:
    """A schema table (names in a trie, arguments in llguidance) through its matcher's rows."""
    pytest.importorskip("llguidance")
    from triec.integrations.llama_cpp import LlamaCppConstraint

    tools = bfcl_registry()[:20]
    table = triec.compile_tools(tools, gguf_vocab, format="object")
    constraint = LlamaCppConstraint(llm, table)
    ids = greedy(
        llm,
        chat("Call the function that computes a body mass index for 70 kg and 1.75 m."),
        limit=120,
        **constraint.generation_kwargs(),
    )
    m = table.matcher()
    assert all(m.accept_token(t) for t in ids)  # every token was allowed where it was written
    text = llm.detokenize(ids).decode("utf-8", "replace")
    names = {t["function"]["name"] for t in tools}
    assert text.startswith('{"name": "') and text[10:].split('"')[0] in names  # the trie's part: a registry name
    if len(ids) < 120:  # ended: one whole call of a registry tool (the 135M model may loop in its arguments)
        assert json.loads(text)["name"] in names


def test_format_fields_through_a_schema_table(llm, gguf_vocab) -> None:
    """Date and address fields served by their DFAs' tables (issue 44) through the processor's rows: the greedy
    output is one object whose strings match their formats."""
    import re

    pytest.importorskip("xgrammar")
    from triec.integrations.llama_cpp import LlamaCppConstraint

    schema = {
        "type": "object",
        "properties": {"day": {"type": "string", "format": "date"}, "ip": {"type": "string", "format": "ipv4"}},
        "required": ["day", "ip"],
    }
    table = triec.compile_schema(schema, gguf_vocab, engine="xgrammar")
    constraint = LlamaCppConstraint(llm, table)
    prompt = chat("When did the server at 10.0.0.1 last reboot? Answer in JSON with day and ip.")
    ids = greedy(llm, prompt, limit=60, **constraint.generation_kwargs())
    m = table.matcher()
    assert all(m.accept_token(t) for t in ids)  # every token was allowed where it was written
    doc = json.loads(llm.detokenize(ids).decode("utf-8"))
    assert re.fullmatch(triec.FORMATS["date"], doc["day"]) and re.fullmatch(triec.FORMATS["ipv4"], doc["ip"])


# ------------------------------------------------------------------ triec eval --engine llama.cpp


def test_eval_on_llama_cpp_equals_gbnf(gguf, tmp_path) -> None:
    from typer.testing import CliRunner

    from triec.cli import app
    from triec.eval import bfcl

    data = tmp_path / "m.jsonl"
    bfcl.write(bfcl.convert("multiple", ROOT / "fixtures" / "eval" / "bfcl")[:2], data)  # 2: 12 decodes
    out = tmp_path / "eval.json"
    got = CliRunner().invoke(
        app,
        [
            "eval",
            str(data),
            "-m",
            gguf,
            "--engine",
            "llama.cpp",
            "--modes",
            "free,trie,think,canonical",
            "--compare",
            "gbnf",
            "--threads",
            "2",
            "--think-budget",
            "24",
            "--json",
            str(out),
        ],
    )
    assert got.exit_code == 0, got.output
    doc = json.loads(out.read_text())
    assert doc["config"]["engine"] == "llama.cpp"
    for mode in ("trie", "think"):
        m = doc["modes"][mode]
        assert m["items"] == 2 and m["valid"] == 2 and m["identical_to_gbnf"] == 2, doc["items"]
    assert "identical_to_gbnf" not in doc["modes"]["free"] and "identical_to_xgrammar" not in doc["modes"]["trie"]
    assert doc["modes"]["canonical"]["valid"] == 2 and doc["modes"]["canonical"]["identical_to_trie"] is not None


def test_eval_compare_needs_the_matching_engine(gguf, tmp_path) -> None:
    from triec.errors import EvalError
    from triec.eval.run import EvalConfig

    with pytest.raises(EvalError, match=r"--compare gbnf needs --engine llama.cpp"):
        EvalConfig(compare_gbnf=True)
    with pytest.raises(EvalError, match="--compare xgrammar needs --engine transformers"):
        EvalConfig(compare_xgrammar=True, engine="llama.cpp")
    with pytest.raises(EvalError, match="--engine 'vllm'"):
        EvalConfig(engine="vllm")


def test_after_trigger_grammar_is_the_first_occurrence(llm) -> None:
    """The think grammar's free part is the trigger's KMP automaton: text holding the trigger early is refused."""
    from triec.engines.gbnf import after_trigger

    text = after_trigger("abab", ["x"])
    assert 's3 ::= "a" s1 | "b" answer' in text  # "aba" + "a": the longest border is "a"
    llama_cpp.LlamaGrammar.from_string(after_trigger("Answer:", ["x", 'y"z'], prefix=" "), verbose=False)
