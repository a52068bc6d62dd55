"""Think-then-answer (``triec.runtime.trigger``): free text until a trigger, then one value, then EOS.

Every row is checked against an independent byte-level reference (token t is
allowed after text s iff s + t holds no trigger and t is not EOS, or the first
trigger in s + t is followed by a prefix of a value; after the trigger the
table's own language), along seeded walks that go through partial triggers,
tokens spanning free text and the trigger, the trigger and the value, and
through rollbacks. xgrammar's ``triggered_tags`` (one tag: the trigger, then the
values) is the engine oracle for the same rows, EOS aside: xgrammar lets free
text end, think-then-answer does not (an answer must come).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import triec
from triec.runtime.trigger import TriggerAutomaton, Triggered

VALUES = ["yes", "no", "maybe", "Paris", "New York", "nope", "n/a", "42"]
TRIGGERS = {"gpt2": ["Answer:"], "qwen2": ["Answer:", "\n\nFinal:"], "phi3": ["Answer:"]}


def reference_row(vocab: triec.Vocabulary, values: list[bytes], triggers: list[bytes], text: bytes) -> set[int]:
    """The allowed set after ``text`` by brute force over the vocabulary."""

    def first_trigger_end(u: bytes) -> int:
        ends = [u.find(t) + len(t) for t in triggers if u.find(t) >= 0]
        return min(ends) if ends else -1

    end = first_trigger_end(text)
    out: set[int] = set()
    if end >= 0:  # answering: the table's language after the trigger
        rest = text[end:]
        if rest in values:
            out |= set(vocab.eos_token_ids)
        for i, tb in enumerate(vocab.token_bytes):
            if tb and any(v.startswith(rest + tb) for v in values):
                out.add(i)
        return out
    keep = text[len(text) - max(map(len, triggers)) + 1 :] if len(text) >= max(map(len, triggers)) else text
    for i, tb in enumerate(vocab.token_bytes):  # no trigger in text: only its last few bytes can start one
        if i in vocab.eos_token_ids:
            continue
        u = keep + tb
        e = first_trigger_end(u)
        if e < 0 or any(v.startswith(u[e:]) for v in values):
            out.add(i)
    return out


def test_automaton_reports_the_first_completion() -> None:
    a = TriggerAutomaton([b"abab", b"ba"])
    q, k, end = a.feed(0, b"xab")
    assert k == -1 and a.prefixes[q] == b"ab"
    _q2, k, end = a.feed(q, b"a")  # "aba": "ba" completes first
    assert a.triggers[k] == b"ba" and end == 1
    q, k, _ = a.feed(0, b"aab")
    assert k == -1 and a.prefixes[q] == b"ab"
    _, k, end = a.feed(0, b"zzabab!")
    assert a.triggers[k] == b"ba" and end == 5  # "zzab" + "a": "ba" ends just past offset 4, before "abab" could


@pytest.mark.parametrize("name", sorted(TRIGGERS))
def test_rows_equal_the_reference_along_walks(vocabs, name: str) -> None:
    vocab = vocabs[name]
    table = triec.compile(VALUES, vocab)
    triggers = [t.encode() for t in TRIGGERS[name]]
    trig = Triggered(table, vocab, TRIGGERS[name])
    values = [v.encode() for v in VALUES]
    interesting = [
        i
        for i, tb in enumerate(vocab.token_bytes)
        if tb and any(p in tb for t in triggers for p in (t[:3], t[-3:], b":", b"Answer"))
    ]
    rng = np.random.default_rng(len(name))
    rows = completed = 0
    for walk in range(6):
        m = trig.matcher()
        text = b""
        texts: list[bytes] = []
        for _step in range(14):
            allowed = set(m.allowed().tolist())
            assert allowed == reference_row(vocab, values, triggers, text), (name, walk, text)
            buf = np.zeros(table.words_per_row, dtype=np.int32)
            m.fill_bitmask(buf)
            bits = np.flatnonzero(np.unpackbits(buf.view(np.uint8), bitorder="little"))
            assert set(bits.tolist()) == allowed
            rows += 1
            if not allowed:
                break
            pick = [t for t in interesting if t in allowed]
            t = int(rng.choice(pick)) if pick and rng.random() < 0.5 else int(rng.choice(sorted(allowed)))
            if t in vocab.eos_token_ids:
                assert m.accept_token(t) and m.is_terminated()
                assert m.value is not None and m.value.encode() in values
                completed += 1
                break
            assert m.accept_token(t)
            texts.append(text)
            text += vocab.token_bytes[t]
            if rng.random() < 0.15 and texts:  # roll back one token now and then
                m.rollback(1)
                text = texts.pop()
        assert not m.accept_token(10**7)
    assert rows > 40


def test_a_forced_trigger_lands_in_the_table(qwen2) -> None:
    """Spanning tokens: free text + trigger + value start in one token, and a trigger whose rest no value allows."""
    table = triec.compile(VALUES, qwen2)
    trig = Triggered(table, qwen2, "Answer: ")
    tb = qwen2.token_bytes
    ids = {b: i for i, b in enumerate(tb) if b}
    m = trig.matcher()
    for piece in (b"I", b" think", b".", b" Answer", b":", b" ", b"Par", b"is"):
        assert m.accept_token(ids[piece]), piece
    assert m.phase == "answer" and m.value == "Paris"
    assert set(m.allowed().tolist()) == set(qwen2.eos_token_ids)
    m.rollback(3)
    assert m.phase == "free" and trig.automaton.prefixes[m.q] == b"Answer:"
    assert not m.accept_token(ids[b" x"]), "a space completes the trigger, then x: no value starts so"
    assert m.accept_token(ids[b" "]) and m.phase == "answer"
    bad = [
        i for i, b in enumerate(tb) if b.startswith(b" ") and b[1:2] not in (b"y", b"n", b"m", b"P", b"N", b"4", b"")
    ]
    assert not any(m.fork().accept_token(t) for t in bad[:200])
    fresh = trig.matcher()
    assert fresh.validate_tokens([ids[b"Answer"], ids[b":"], ids[b" yes"]]) == 3 and fresh.num_accepted == 0


@pytest.mark.engines
def test_free_rows_equal_xgrammars_triggered_tags_but_eos(vocabs) -> None:
    """xgrammar's ``triggered_tags`` with one tag (begin = the trigger, content = the values), stop after it."""
    xgr = pytest.importorskip("xgrammar")
    vocab = vocabs["gpt2"]
    table = triec.compile(VALUES, vocab)
    trig = Triggered(table, vocab, "Answer:")
    content = {"type": "or", "elements": [{"type": "const_string", "value": v} for v in VALUES]}
    tag = {
        "type": "structural_tag",
        "format": {
            "type": "triggered_tags",
            "triggers": ["Answer:"],
            "tags": [{"type": "tag", "begin": "Answer:", "content": content, "end": ""}],
            "at_least_one": False,
            "stop_after_first": True,
        },
    }
    info = xgr.TokenizerInfo(
        list(vocab.token_bytes),
        vocab_type=xgr.VocabType.RAW,
        vocab_size=vocab.vocab_size,
        stop_token_ids=list(vocab.eos_token_ids),
    )
    compiled = xgr.GrammarCompiler(info).compile_structural_tag(json.dumps(tag))
    ids = {b: i for i, b in enumerate(vocab.token_bytes) if b}
    for pieces in (
        [],
        [b"Hello", b" Answer"],
        [b"An", b"sw", b"er", b":"],
        [b"x", b"Answer", b":", b"4"],
        [b"Answer", b":", b"Par"],
    ):
        m, ref = trig.matcher(), xgr.GrammarMatcher(compiled)
        for p in pieces:
            assert m.accept_token(ids[p]) and ref.accept_token(ids[p]), p
        buf = xgr.allocate_token_bitmask(1, vocab.vocab_size)
        ref.fill_next_token_bitmask(buf, 0)
        theirs = set(
            np.flatnonzero(np.unpackbits(buf[0].numpy().view(np.uint8), bitorder="little")[: vocab.vocab_size]).tolist()
        )
        ours = set(m.allowed().tolist())
        eos = set(vocab.eos_token_ids)
        assert ours - eos == theirs - eos, (pieces, sorted(ours ^ theirs)[:8])
