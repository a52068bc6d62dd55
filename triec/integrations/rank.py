"""``triec.rank``: the k most probable values of a table under a model, with their log-probabilities.

The searches (:mod:`triec.integrations.rank_search`) are framework-free; each framework gives one thin
:class:`~triec.integrations.rank_search.Scorer` (the next-token log-softmax rows after a batch of token paths):
transformers (``TransformersScorer``: the prompt's KV cache run once and shared by every batch), llama.cpp
(``LlamaCppScorer``) and mlx-lm (``MLXScorer``), both one sequence whose cache is cut back to the longest prefix it
shares with the next path. The model is recognised by its class, and its framework is imported only then; any object
with a ``logprobs(paths)`` method is used as the scorer itself (``prompt`` then ``None``).

Tables: every table of states the runtime serves (a compiled set, JSON-quoted or canonical, the tail layout, a
restricted view, an upload to torch's). A pattern's set is open: its searches are bounded by ``max_expansions`` and
``max_tokens`` alone, and a value is the text of its path. A schema table (host-matched, a grammar of JSON text) and
think-then-answer have no table of states to search: refused.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from triec.errors import RequestError
from triec.integrations.rank_search import Path, Scorer, Space, beam, exact

METHODS = ("exact", "beam")
DEFAULT_MAX_EXPANSIONS = 10_000
DEFAULT_OPEN_TOKENS = 64
"""``max_tokens`` for a beam search over an open set (a pattern), whose longest value is unbounded."""


@dataclass(frozen=True)
class Ranked:
    """The values found, best first, with their scores (the best path's log-probability, EOS included) and paths.

    ``exact`` is true when the list is proven to be the ``k`` most probable values (or every value, where the set
    has fewer): the exact method within its bound. Where ``max_expansions`` was hit (``hit_bound``), the first
    ``proven`` entries are still the most probable values, exactly and in order; any after them are values that
    completed in the search, each scoring at least what is given (a better path may exist), in score order. A
    beam search is never proven (``exact`` false); its ``hit_bound`` says ``max_tokens`` stopped running beams.
    """

    values: list[str]
    scores: list[float]
    paths: list[Path]
    exact: bool
    proven: int
    expansions: int
    hit_bound: bool
    method: str

    @property
    def complete(self) -> bool:
        """The search ran to its end (no bound hit)."""
        return not self.hit_bound

    def items(self) -> list[tuple[str, float]]:
        """(value, score) pairs, best first."""
        return list(zip(self.values, self.scores, strict=True))

    def __len__(self) -> int:
        return len(self.values)


def rank(
    model: Any,
    prompt: str | Sequence[int] | None,
    table: Any,
    k: int = 5,
    *,
    tokenizer: Any = None,
    method: str = "exact",
    beams: int | None = None,
    max_expansions: int = DEFAULT_MAX_EXPANSIONS,
    batch: int = 8,
    max_tokens: int | None = None,
) -> Ranked:
    """The ``k`` most probable values of ``table`` after ``prompt``, best first.

    ``model``: a transformers causal LM (``tokenizer`` needed for a text prompt), a ``llama_cpp.Llama``, an mlx-lm
    model (with its tokenizer for a text prompt), or a scorer (``logprobs(paths)``; ``prompt`` ``None``). ``prompt``:
    text, or token ids used as given (a chat template's output, say). ``method="exact"``: best-first search, at most
    ``max_expansions`` rows (``batch`` paths a model call); ``method="beam"``: transformers' beam search of ``beams``
    beams (default ``k``; fewer distinct values than beams come back where one value is spelled several ways),
    at most ``max_tokens`` steps (default: the longest value's bytes, one token each at least).
    """
    if method not in METHODS:
        raise RequestError(f"method={method!r}: choose from {', '.join(METHODS)}")
    if k < 1 or max_expansions < 1 or batch < 1 or (beams is not None and beams < 1):
        raise RequestError("k, beams, max_expansions and batch must be at least 1")
    space = Space(_states(table))
    scorer = scorer_for(model, prompt, tokenizer)
    if method == "exact":
        found = exact(scorer, space, k, max_expansions=max_expansions, batch=batch)
        proven = found.proven
    else:
        steps = max_tokens if max_tokens is not None else _longest(space.table)
        found = beam(scorer, space, k, width=beams or k, max_tokens=steps)
        proven = 0
    return Ranked(
        values=found.values,
        scores=found.scores,
        paths=found.paths,
        exact=method == "exact" and not found.hit_bound,
        proven=proven,
        expansions=found.expansions,
        hit_bound=found.hit_bound,
        method=method,
    )


def _states(table: Any) -> Any:
    """The table of states to search: an upload's host table; refused where there is none."""
    if getattr(table, "host_matched", False):
        raise RequestError(
            "rank needs a table of states (a compiled set, a pattern or a view of one); a schema table is a grammar of "
            "JSON text with no finite list of values to rank: compile the enum itself with triec.compile"
        )
    if hasattr(table, "trigger") or hasattr(table, "automaton"):
        raise RequestError("rank ranks a table's values; think-then-answer (a trigger) has free text before them")
    host = getattr(table, "table", None)
    if host is not None and hasattr(table, "device") and not hasattr(table, "transitions"):
        table = host  # a TorchMaskTable: its numpy source
    if not all(hasattr(table, a) for a in ("transitions", "is_accepting", "eos_token_ids", "start")):
        raise RequestError(
            f"rank needs a table of states (a compiled set, a pattern or a view of one), not {type(table).__name__}"
        )
    if not tuple(table.eos_token_ids):
        raise RequestError("the table has no EOS ids: a value's score includes its closing EOS")
    return table


def _longest(table: Any) -> int:
    """Beam steps enough for every value (a token is one byte at least) and its EOS; an open set's default."""
    try:
        values = table.value_bytes
    except (AttributeError, NotImplementedError, TypeError):  # a pattern has no list of values
        return DEFAULT_OPEN_TOKENS
    if not values:
        return DEFAULT_OPEN_TOKENS
    return max(len(v) for v in values) + 1


def scorer_for(model: Any, prompt: str | Sequence[int] | None, tokenizer: Any = None) -> Scorer:
    """The framework's scorer for ``model`` after ``prompt``, recognised by the model's class."""
    if hasattr(model, "logprobs") and prompt is None:
        return model  # type: ignore[no-any-return]
    if prompt is None:
        raise RequestError("prompt is None, but the model is not a scorer (an object with logprobs(paths))")
    module = type(model).__module__
    if module.startswith("llama_cpp"):
        from triec.integrations.llama_cpp import LlamaCppScorer

        return LlamaCppScorer(model, _ids(prompt, lambda s: model.tokenize(s.encode(), add_bos=True, special=True)))
    if _is_instance(model, "mlx.nn", "Module"):
        from triec.integrations.mlx import MLXScorer

        return MLXScorer(model, _ids(prompt, _encoder(tokenizer)))
    if _is_instance(model, "torch.nn", "Module"):
        from triec.integrations.transformers import TransformersScorer

        return TransformersScorer(model, _ids(prompt, _encoder(tokenizer)))
    raise RequestError(
        f"rank does not know {module}.{type(model).__name__}: pass a transformers, llama.cpp or mlx-lm model, "
        "or a scorer (an object with logprobs(paths)) and prompt=None"
    )


def _is_instance(model: Any, module: str, name: str) -> bool:
    """``isinstance`` against a framework's class, only where the framework is already imported (a model of it
    exists then); nothing is imported here."""
    found = sys.modules.get(module)
    cls = getattr(found, name, None) if found is not None else None
    return isinstance(cls, type) and isinstance(model, cls)


def _encoder(tokenizer: Any) -> Any:
    def encode(text: str) -> list[int]:
        if tokenizer is None:
            raise RequestError("a text prompt needs tokenizer=; or pass the prompt's token ids")
        return list(tokenizer.encode(text))

    return encode


def _ids(prompt: str | Sequence[int], encode: Any) -> list[int]:
    ids = [int(t) for t in (encode(prompt) if isinstance(prompt, str) else prompt)]
    if not ids:
        raise RequestError("the prompt holds no token: the first value token needs a position to follow")
    return ids
