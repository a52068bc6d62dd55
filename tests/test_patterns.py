"""Pattern tables (issue 44): every state reached along seeded walks allows exactly what llguidance and xgrammar allow
for the same regex, on real tokenizers; then the runtime surfaces (writer, matcher, artifact) on them.

xgrammar gets the regex as written (its ``compile_regex`` is the reference for the escapes' meaning: ``\\d`` is
``[0-9]``, ``.`` takes a newline); llguidance gets it spelled explicitly by triec's parser
(:func:`triec.compiler.regex.to_rust_regex`), since it reads ``\\d \\w \\s`` as Unicode classes and ``.`` without
newline. So xgrammar checks the parsing and the rows, llguidance the rows.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

import triec
from triec.compiler.pattern import FORMATS, compile_pattern
from triec.compiler.regex import parse, to_rust_regex
from triec.engines.llguidance import LLGuidanceEngine
from triec.engines.xgrammar import XGrammarEngine
from triec.runtime.bitmask import ids_of

REGEXES = [
    "[A-Z]{2}[0-9]{6}",
    "^[a-z0-9_-]{3,16}$",
    "(foo|bar)+baz?",
    "\\d{3}-\\d{4}",
    '[^"\\\\]{0,12}',
    "[\\w.+-]+@[\\w-]+\\.[a-z]{2,4}",
    "(?:[01]\\d|2[0-3]):[0-5]\\d",
    "x*y+z?",
    "[^a-c]{2}",
    "\\s?[+-]?\\d+(\\.\\d+)?",
    "é+ü?日本(語|人)",
    "[α-ωА-я]{1,3}",
    "[0-9a-f]{1,4}(:[0-9a-f]{1,4}){2}",
    ".{2}a",
    "(ab|a)(bc|c)",
]


class Oracles:
    def __init__(self, vocab: triec.Vocabulary) -> None:
        self.vocab = vocab
        self.ll = LLGuidanceEngine(vocab)
        self.xg = XGrammarEngine(vocab)

    def llguidance(self, regex: str):
        return self.ll.matcher(self.ll.compile_pattern(to_rust_regex(parse(regex))))

    def xgrammar(self, regex: str):
        return self.xg.matcher(self.xg.compile_pattern(regex))


@pytest.fixture(scope="module")
def oracles(vocabs: dict[str, triec.Vocabulary]) -> dict[str, Oracles]:
    return {name: Oracles(v) for name, v in vocabs.items()}


def _row(m, words: int) -> np.ndarray:
    row = np.zeros(words, dtype=np.int32)
    m.fill(row)
    return row


def walk_and_compare(table, oracle: Oracles, regex: str, seed: int, walks: int = 3, depth: int = 14) -> int:
    """Seeded walks; at every state the three allowed sets must be equal. Returns the states compared."""
    vocab = oracle.vocab
    words = table.words_per_row
    width = vocab.vocab_size
    rng = random.Random(seed)
    compared = 0
    for _ in range(walks):
        ll, xg = oracle.llguidance(regex), oracle.xgrammar(regex)
        state = table.start
        for _step in range(depth):
            mine = table.allowed(state)
            theirs_ll = ids_of(_row(ll, words), width)
            theirs_xg = ids_of(_row(xg, words), width)
            assert np.array_equal(mine, theirs_ll), (regex, table.prefix(state), _diff(vocab, mine, theirs_ll))
            assert np.array_equal(mine, theirs_xg), (regex, table.prefix(state), _diff(vocab, mine, theirs_xg))
            compared += 1
            content = [int(t) for t in mine if int(t) not in vocab.eos_token_ids]
            if not content:
                break
            # favour long tokens half of the time: they cross the most DFA states
            if rng.random() < 0.5:
                tok = max(rng.sample(content, min(8, len(content))), key=lambda t: len(vocab.token_bytes[t]))
            else:
                tok = rng.choice(content)
            assert ll.consume(tok) and xg.consume(tok)
            state = table.advance(state, tok)
    return compared


def _diff(vocab: triec.Vocabulary, a: np.ndarray, b: np.ndarray) -> str:
    only_a = np.setdiff1d(a, b)[:8].tolist()
    only_b = np.setdiff1d(b, a)[:8].tolist()
    tb = vocab.token_bytes
    return f"triec only {[tb[t] for t in only_a]} {only_a}, engine only {[tb[t] if t < len(tb) else t for t in only_b]} {only_b}"


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_formats_equal_llguidance_and_xgrammar(name: str, vocab: triec.Vocabulary, oracles) -> None:
    table = compile_pattern(format=name, vocab=vocab)
    oracle = oracles[next(k for k, v in oracles.items() if v.vocab is vocab)]
    assert walk_and_compare(table, oracle, FORMATS[name], seed=hash(name) % 1000, walks=4, depth=40) >= 10


@pytest.mark.parametrize("regex", REGEXES)
def test_regexes_equal_llguidance_and_xgrammar(regex: str, vocab: triec.Vocabulary, oracles) -> None:
    table = compile_pattern(regex, vocab)
    oracle = oracles[next(k for k, v in oracles.items() if v.vocab is vocab)]
    assert walk_and_compare(table, oracle, regex, seed=len(regex)) >= 1
