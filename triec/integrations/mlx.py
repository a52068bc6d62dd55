"""mlx-lm: triec's masks as a logits processor of ``generate``, ``stream_generate``, ``generate_step`` and
``BatchGenerator`` (Apple silicon's Metal, or mlx's CPU build on Linux).

::

    model, tokenizer = mlx_lm.load("path/to/model")
    constraint = MLXConstraint(model, tokenizer, "tools.triec")
    text = mlx_lm.generate(model, tokenizer, prompt, logits_processors=[constraint.processor()])

mlx-lm calls each processor with ``tokens`` (1-D: the prompt, then every token sampled so far) and the next
position's ``logits`` (1, V), and stops on ``tokenizer.eos_token_ids``. :class:`MLXConstraint` checks once per
model: triec's vocabulary of the tokenizer mlx-lm loaded, id by id against that tokenizer's own decoding, and
admission by the serving core (mask width = the model's logits, tokenizer fingerprint, every EOS id that ends a
value among ``tokenizer.eos_token_ids``; :mod:`triec.integrations.local`). Each :meth:`MLXConstraint.processor`
is one decoding: plain, restricted (``values=``), canonical and schema tables through the table's matcher,
think-then-answer with ``trigger=``. ``BatchGenerator`` takes one processor list per sequence
(:meth:`MLXConstraint.processors`).

The state follows ``tokens``: the first call's sequence is the prompt; a sequence that extends the previous
call's is followed token by token; a prefix of it (speculative decoding's rejected drafts) rolls the matcher
back; anything else (a new prompt) starts over, as :meth:`MLXProcessor.reset` does. A token the table does not
allow (appended by the caller) leaves EOS only.

Cost of a step. Host: the matcher's O(allowed) lookups and one copy of the allowed ids into an mlx array (4
bytes an id; a schema or think-then-answer row is one byte a token, unpacked from the matcher's bitmask by
:mod:`triec.runtime.bitmask`). Device: the row filled with ``-inf`` and the allowed columns gathered and
scattered back (a row: one select). The logits never leave the device. What mlx requires is reading the newest
token of ``tokens`` (and comparing ``tokens`` with the previous call's on the device: one bool), which waits for
the previous sample; the forward pass of the step is started first (``mx.async_eval``), so the host's work
overlaps it instead of adding to it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from triec.errors import RequestError
from triec.integrations.local import Admitted, admit_local, tokenizer_path, tokenizer_vocabulary
from triec.integrations.serving import ServedModel
from triec.runtime import bitmask

try:
    import mlx.core as mx
except ImportError as exc:  # pragma: no cover - the module is only useful with it
    raise ModuleNotFoundError(
        f"triec.integrations.mlx needs mlx and mlx-lm: pip install 'triec[mlx]' ({exc})", name=exc.name
    ) from exc

if TYPE_CHECKING:
    from triec.runtime.kinds import Table
    from triec.tokenizer.vocabulary import Vocabulary

__all__ = ["MLXConstraint", "MLXProcessor", "apply_bitmask", "keep_tokens", "logits_width"]


# ----------------------------------------------------------------------------- masking mlx arrays


def keep_tokens(logits: mx.array, ids: np.ndarray) -> mx.array:
    """``logits`` with every column of the last axis but ``ids`` set to ``-inf`` (a new array; ids inside the row).

    O(len(ids)) on the host (one copy of the ids), one fill plus a gather and a scatter of those columns on the
    device. What :func:`triec.runtime.numpy.keep_tokens` is for numpy rows."""
    index = mx.array(np.asarray(ids, dtype=np.int32))
    out = mx.full(logits.shape, -mx.inf, dtype=logits.dtype)
    out[..., index] = logits[..., index]
    return out


def apply_bitmask(logits: mx.array, row: np.ndarray) -> mx.array:
    """``logits`` with every column whose bit is clear in ``row`` (one bitmask row, :mod:`triec.runtime.bitmask`'s
    layout) set to ``-inf``; columns past the row's width are masked too. One byte a column crosses to the
    device."""
    width = logits.shape[-1]
    keep = np.zeros(width, dtype=bool)
    bits = bitmask.unpack(row, width)
    keep[: bits.shape[0]] = bits
    return mx.where(mx.array(keep), logits, mx.array(-mx.inf, dtype=logits.dtype))


# ----------------------------------------------------------------------------- one decoding


class MLXProcessor:
    """One decoding's logits processor: ``processor(tokens, logits) -> logits`` for mlx-lm (see the module).

    ``matcher`` is where the decoding stands; :meth:`reset` forgets it (the next call's sequence is a new prompt).
    """

    def __init__(self, admitted: Admitted) -> None:
        self.admitted = admitted
        self.reset()

    def reset(self) -> None:
        """Start over: the next call's ``tokens`` are a new prompt."""
        self.matcher = self.admitted.matcher()
        self.start = 0  # the prompt's length
        self.seen: list[int] = []  # the tokens read past the prompt
        self.fed = 0  # how many of them the matcher accepted (fewer: a refused token, EOS only from there)
        self._last: Any = None  # the previous call's ``tokens`` (an mlx array: held, not copied)
        self._row: np.ndarray | None = None

    def __call__(self, tokens: Any, logits: mx.array) -> mx.array:
        mx.async_eval(logits)  # the forward pass runs while the host follows the tokens
        self.sync(tokens)
        a = self.admitted
        if logits.shape[-1] != a.width:
            raise ValueError(f"triec: logits are {logits.shape[-1]} wide, the admitted table's masks {a.width}")
        if self.fed < len(self.seen) or self.matcher.is_terminated():
            return keep_tokens(logits, a.eos)
        if a.by_rows:
            if self._row is None:
                self._row = np.zeros(bitmask.words_for(a.width), dtype=np.int32)
            self.matcher.fill_bitmask(self._row)
            return apply_bitmask(logits, self._row)
        return keep_tokens(logits, self.matcher.allowed())

    def sync(self, tokens: Any) -> None:
        """Bring the matcher to ``tokens`` (1-D: prompt, then the sampled tokens): follow, roll back, or restart.

        The sequence is compared with the previous call's on the device (one comparison, O(length), which the
        step's attention over the same length dwarfs): equal up to the shorter one, it is followed (longer) or
        rolled back to (shorter); otherwise it is a new prompt.
        """
        n = len(tokens)
        last = self._last
        self._last = tokens
        if last is None:
            self.start = n
            return
        m = min(n, len(last))
        if m < self.start or not bool(mx.array_equal(tokens[:m], last[:m])):
            self.reset()
            self._last, self.start = tokens, n
            return
        k = n - self.start
        if k < len(self.seen):  # rejected drafts
            if k < self.fed:
                self.matcher.rollback(self.fed - k)
                self.fed = k
            del self.seen[k:]
        elif k > len(self.seen):
            self._feed(tokens[self.start + len(self.seen) : n].tolist())

    def _feed(self, new: Sequence[int]) -> None:
        for t in new:
            t = int(t)
            if self.fed == len(self.seen) and self.matcher.accept_token(t):
                self.fed += 1
            self.seen.append(t)


# ----------------------------------------------------------------------------- one model


def logits_width(model: Any, tokenizer: Any) -> int:
    """The width of ``model``'s logits: its config's ``vocab_size`` (mlx-lm models keep it in ``args``), else the
    tokenizer's size."""
    args = getattr(model, "args", None)
    width = getattr(args, "vocab_size", None) if args is not None else None
    return int(width) if width else len(tokenizer)


class MLXConstraint:
    """A compiled table served to one mlx-lm model and its tokenizer: checked once, a processor per decoding.

    ``table``: a table, or an artifact path (loaded with its indices checked). ``values`` narrows it to a subset
    (a shortlist, compacted; a value the table does not hold is a RequestError); ``trigger`` serves think-then-answer (free text until the trigger, then one value).
    ``vocab``: triec's vocabulary of the tokenizer (read from the tokenizer's ``name_or_path`` by default),
    checked against the loaded tokenizer either way. ``vocab_size``: the logits' width when the model does not
    say (:func:`logits_width`). Raises :class:`~triec.errors.TokenizerMismatch` when the vocabulary is not the
    tokenizer's, :class:`~triec.errors.RequestError` when the table was compiled for another vocabulary, is
    narrower than the logits, or ends values with an id mlx-lm does not stop on.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        table: Table | str | os.PathLike[str],
        *,
        values: list[str] | None = None,
        trigger: str | list[str] | None = None,
        vocab: Vocabulary | None = None,
        vocab_size: int | None = None,
    ) -> None:
        width = int(vocab_size) if vocab_size is not None else logits_width(model, tokenizer)
        stops = {int(t) for t in tokenizer.eos_token_ids}
        self.vocab = tokenizer_vocabulary(tokenizer, vocab_size=width, eos_token_ids=stops, vocab=vocab)
        served = ServedModel(
            tokenizer=tokenizer_path(tokenizer),
            vocab_size=width,
            eos_token_id=tokenizer.eos_token_id,
            generation_eos_ids=tuple(sorted(stops)),
        )
        self.admitted = admit_local(
            table,
            served,
            stops,
            self.vocab,
            values=values,
            trigger=trigger,
            fix_stops="mlx-lm ends generation on tokenizer.eos_token_ids: tokenizer.add_eos_token(id)",
        )

    @property
    def table(self) -> Table:
        """The table each decoding follows (the compacted subset when ``values`` narrowed it)."""
        return self.admitted.table

    def processor(self) -> MLXProcessor:
        """A fresh decoding: pass it in ``logits_processors=[...]`` of one ``generate`` or ``stream_generate``."""
        return MLXProcessor(self.admitted)

    def processors(self, n: int) -> list[list[MLXProcessor]]:
        """One processor list per sequence, for ``BatchGenerator.insert(..., logits_processors=...)`` (its
        ``stop_tokens`` must hold the table's EOS ids: mlx-lm's ``batch_generate`` passes the tokenizer's)."""
        return [[self.processor()] for _ in range(n)]


class MLXScorer:
    """:func:`triec.rank`'s scorer for an mlx-lm model after ``prompt`` (token ids): one sequence in a prompt
    cache (``make_prompt_cache``), trimmed back to the longest prefix it shares with the next path and the rest
    run; the last position's logits log-softmaxed over the whole vocabulary in float64."""

    def __init__(self, model: Any, prompt: list[int]) -> None:
        from mlx_lm.models.cache import can_trim_prompt_cache, make_prompt_cache

        from triec.integrations.rank_search import Sequential

        self.model = model
        self.cache = make_prompt_cache(model)
        if not can_trim_prompt_cache(self.cache):
            raise RequestError("rank needs a model whose prompt cache can be trimmed (mlx-lm's KVCache)")
        self.held = 0
        self.sequence = Sequential(prompt, self._cut, self._feed)

    def _cut(self, n: int) -> None:
        from mlx_lm.models.cache import trim_prompt_cache

        if self.held > n:
            trim_prompt_cache(self.cache, self.held - n)
        self.held = n

    def _feed(self, tokens: list[int]) -> np.ndarray:
        logits = self.model(mx.array([tokens]), cache=self.cache)[0, -1].astype(mx.float32)
        self.held += len(tokens)
        return np.array(logits, dtype=np.float64)

    def logprobs(self, paths: Any) -> np.ndarray:
        return self.sequence.logprobs(paths)
