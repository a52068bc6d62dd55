"""Retrievers: rank a large set of values against a query, so that decoding is constrained to the best few.

A shortlist is only as good as its recall: the gold value must be in the top k
for the constrained choice to be right. Three ways to rank, one interface
(``rank(query)``: every value, best first; ``top(query, k)``: the first k):

* :class:`BM25`: lexical, over each value split into words (``get_weather`` and
  ``getWeather`` and ``weather.get`` all read "get weather") plus its
  description; bm25s (numpy; ``pip install 'triec[shortlist]'``, docs/decisions.md D38);
* :class:`Embedding`: cosine similarity of vectors from the user's ``encode``;
  :func:`model_encoder` makes one from the served model's own input embeddings
  (mean-pooled; nothing downloaded, no forward pass);
* :class:`ScoreFunction`: the user's own ``score(query, values) -> scores``.

Ties are broken by the values' order as given, so a ranking is deterministic.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from triec.errors import ValuesError

_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def words(value: str) -> str:
    """A value as the words it is made of: snake_case, camelCase, dots and dashes split, lowercased."""
    return " ".join(w.lower() for w in _WORDS.findall(value))


def _check(values: Sequence[str], descriptions: Sequence[str] | None) -> tuple[list[str], list[str]]:
    names = list(values)
    if not names:
        raise ValuesError("a retriever needs at least one value to rank")
    if len(set(names)) != len(names):
        dup = next(v for i, v in enumerate(names) if v in names[:i])
        raise ValuesError(f"value {dup!r} is listed twice: a retriever ranks distinct values")
    if descriptions is None:
        return names, [""] * len(names)
    described = list(descriptions)
    if len(described) != len(names):
        raise ValuesError(f"{len(described)} descriptions for {len(names)} values: give one per value (or '')")
    return names, described


def _ranked(values: list[str], scores: np.ndarray) -> list[str]:
    """Best first; equal scores in the values' own order (a stable sort of the negated scores)."""
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    return [values[int(i)] for i in order]


class _Retriever:
    values: list[str]

    def scores(self, query: str) -> np.ndarray:
        raise NotImplementedError

    def rank(self, query: str) -> list[str]:
        """Every value, best first (ties in the values' order): Recall@k is whether gold is in ``rank(q)[:k]``."""
        return _ranked(self.values, self.scores(query))

    def top(self, query: str, k: int) -> list[str]:
        """The ``k`` best values for ``query``, best first (all of them when there are fewer)."""
        if k < 1:
            raise ValuesError(f"top k must be at least 1, not {k}")
        return self.rank(query)[:k]


class BM25(_Retriever):
    """Okapi BM25 (bm25s) over each value's words and its description (English stopwords dropped)."""

    def __init__(self, values: Sequence[str], descriptions: Sequence[str] | None = None) -> None:
        try:
            import bm25s
        except ImportError as exc:
            raise ValuesError(f"the BM25 retriever needs bm25s: pip install 'triec[shortlist]' ({exc})") from exc
        self.values, described = _check(values, descriptions)
        self._bm25s = bm25s
        corpus = [f"{words(v)} {d}" for v, d in zip(self.values, described, strict=True)]
        tokens = bm25s.tokenize(corpus, stopwords="en", return_ids=False, show_progress=False)
        self._index = bm25s.BM25()
        self._index.index(tokens, show_progress=False)

    def scores(self, query: str) -> np.ndarray:
        (tokens,) = self._bm25s.tokenize([query], stopwords="en", return_ids=False, show_progress=False)
        known = [t for t in tokens if t in self._index.vocab_dict]
        if not known:  # no word in common: every value scores 0, the values' order stands
            return np.zeros(len(self.values))
        return np.asarray(self._index.get_scores(known), dtype=np.float64)


class Embedding(_Retriever):
    """Cosine similarity between ``encode([query])`` and ``encode(value texts)`` (the value's words and description)."""

    def __init__(
        self,
        values: Sequence[str],
        descriptions: Sequence[str] | None = None,
        *,
        encode: Callable[[list[str]], Any],
    ) -> None:
        self.values, described = _check(values, descriptions)
        self._encode = encode
        texts = [f"{words(v)}: {d}" if d else words(v) for v, d in zip(self.values, described, strict=True)]
        self._matrix = self._unit(encode(texts), len(texts))

    @staticmethod
    def _unit(vectors: Any, rows: int) -> np.ndarray:
        m = np.asarray(vectors, dtype=np.float32)
        if m.ndim != 2 or m.shape[0] != rows:
            raise ValuesError(f"encode returned shape {m.shape} for {rows} texts: expected ({rows}, dimensions)")
        norms = np.linalg.norm(m, axis=1, keepdims=True)
        unit: np.ndarray = m / np.where(norms > 0, norms, 1)
        return unit

    def scores(self, query: str) -> np.ndarray:
        q = self._unit(self._encode([query]), 1)[0]
        found: np.ndarray = self._matrix @ q
        return found


class ScoreFunction(_Retriever):
    """The user's own ranking: ``score(query, values)`` returns one score per value (higher is better)."""

    def __init__(self, values: Sequence[str], score: Callable[[str, list[str]], Any]) -> None:
        self.values, _ = _check(values, None)
        self._score = score

    def scores(self, query: str) -> np.ndarray:
        got = np.asarray(self._score(query, list(self.values)), dtype=np.float64)
        if got.shape != (len(self.values),):
            raise ValuesError(f"the scorer returned shape {got.shape} for {len(self.values)} values: one score each")
        return got


def model_encoder(model: Any, tokenizer: Any) -> Callable[[list[str]], np.ndarray]:
    """``encode`` from a transformers model's own input embeddings: each text's token rows, mean-pooled.

    No extra model and no forward pass: a lookup and a mean per text (the served model is already loaded).
    Crude beside a sentence encoder, but free; measured in docs/decisions.md D38.
    """
    import torch

    weight = model.get_input_embeddings().weight

    def encode(texts: list[str]) -> np.ndarray:
        rows = []
        with torch.no_grad():
            for text in texts:
                ids = tokenizer.encode(text, add_special_tokens=False) or [0]
                rows.append(weight[torch.tensor(ids)].float().mean(dim=0).numpy())
        return np.stack(rows)

    return encode
