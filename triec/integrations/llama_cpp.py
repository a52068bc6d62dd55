"""llama-cpp-python: triec's masks as a ``logits_processor`` and a ``stopping_criteria`` of ``Llama``'s calls.

::

    llm = Llama("model.gguf")
    constraint = LlamaCppConstraint(llm, "tools.triec")
    llm.create_chat_completion(messages, temperature=0, **constraint.generation_kwargs(chat=True))

The vocabulary is read from the GGUF the model was loaded from (``llm.model_path``) and checked byte for byte
against llama.cpp's own ``llama_token_to_piece`` for every id, then the table is admitted by the serving core
(:func:`triec.integrations.serving.admit`: mask width, tokenizer fingerprint, EOS ids that end generation).
A step costs O(allowed) lookups plus one fill of the row (:mod:`triec.runtime.numpy`), no loop over the
vocabulary in Python.

llama-cpp-python calls the processor with every token of the sequence so far (prompt included) and the
scores of the next position; each call of :meth:`LlamaCppConstraint.generation_kwargs` makes one decoding's
state, which follows the tokens past the prompt. A sequence that does not extend the one it saw (a new
prompt) starts over from the start state.
"""

from __future__ import annotations

import ctypes
import os
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from triec.errors import RequestError, TokenizerMismatch
from triec.integrations.matchers import RequestMatcher
from triec.integrations.serving import ServedModel, admit, as_served_table, narrow, served_vocabulary
from triec.runtime.bitmask import words_for
from triec.runtime.numpy import apply_bitmask, keep_tokens

if TYPE_CHECKING:
    from triec.runtime.kinds import Table
    from triec.tokenizer.vocabulary import Vocabulary

__all__ = ["LlamaCppConstraint", "LlamaCppEncoder", "check_vocabulary", "eog_ids", "model_vocabulary", "token_pieces"]


def _llama_cpp() -> Any:
    try:
        import llama_cpp
    except ImportError as exc:  # pragma: no cover - the module is only useful with it
        raise ImportError(
            f"triec.integrations.llama_cpp needs llama-cpp-python: pip install 'triec[llamacpp]' ({exc})"
        ) from exc
    return llama_cpp


def llama_model(llm: Any) -> Any:
    """llama-cpp-python's model handle (``Llama._model``): its vocabulary queries (pieces, EOG, token text) have no
    public wrapper on ``Llama``. The one place triec reads it."""
    return llm._model


def token_pieces(llm: Any) -> list[bytes]:
    """Every id's bytes as llama.cpp writes them (``llama_token_to_piece``, control tokens as nothing)."""
    lc = _llama_cpp()
    vocab = llama_model(llm).vocab
    size = 64
    buf = ctypes.create_string_buffer(size)
    pieces = []
    for i in range(int(llm.n_vocab())):
        n = lc.llama_token_to_piece(vocab, i, buf, size, 0, False)
        if n < 0:  # longer than the buffer: -n is the length it needs
            size = -n
            buf = ctypes.create_string_buffer(size)
            n = lc.llama_token_to_piece(vocab, i, buf, size, 0, False)
        pieces.append(buf.raw[:n])
    return pieces


def eog_ids(llm: Any) -> set[int]:
    """The ids llama.cpp ends generation on (``llama_vocab_is_eog``: EOS, EOT and the model's other ends)."""
    lc = _llama_cpp()
    vocab = llama_model(llm).vocab
    return {i for i in range(int(llm.n_vocab())) if lc.llama_vocab_is_eog(vocab, i)}


def check_vocabulary(llm: Any, vocab: Vocabulary) -> None:
    """TokenizerMismatch unless ``vocab`` spells every id as llama.cpp does (a difference would be wrong masks)."""
    pieces = token_pieces(llm)
    where = getattr(llm, "model_path", "the model")
    if len(pieces) != vocab.num_tokens:
        raise TokenizerMismatch(
            f"{where}: llama.cpp has {len(pieces):,} tokens, triec's vocabulary {vocab.num_tokens:,}"
        )
    ours = vocab.token_bytes
    bad = [i for i, piece in enumerate(pieces) if piece != ours[i]]
    if bad:
        i = bad[0]
        raise TokenizerMismatch(
            f"{where}: triec reads token {i} as {ours[i]!r}, llama.cpp writes {pieces[i]!r} "
            f"({len(bad):,} of {len(pieces):,} ids differ): masks would be wrong, nothing is served"
        )


def model_vocabulary(llm: Any, eos_token_ids: list[int] | None = None) -> Vocabulary:
    """triec's vocabulary of the GGUF ``llm`` was loaded from, checked against llama.cpp's pieces.

    Its EOS ids are the GGUF's (``eos_token_ids`` overrides: :func:`eog_ids` gives every id llama.cpp ends
    generation on, the ids its own grammars allow at a complete value).
    """
    path = getattr(llm, "model_path", None)
    if not path or not os.path.isfile(path):
        raise TokenizerMismatch("the Llama object does not say which GGUF it was loaded from (model_path)")
    vocab = served_vocabulary(path, eos_token_ids=eos_token_ids)
    check_vocabulary(llm, vocab)
    _checked(llm).add(vocab.fingerprint)
    return vocab


_CHECKED: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()


def _checked(llm: Any) -> set[str]:
    """Fingerprints of the vocabularies already checked against this model's pieces."""
    found = _CHECKED.get(llm)
    if found is None:
        found = _CHECKED[llm] = set()
    return found


class LlamaCppEncoder:
    """llama.cpp's own tokenizer as the encoder of a canonical table (``triec.compile(..., tokenization="canonical",
    encoder=LlamaCppEncoder(llm))``): each value allowed only as ``llm.tokenize`` writes it. triec reads a GGUF's
    tokens, not its merges and pre-tokenizer, so this is how a GGUF gets canonical tables."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm

    def encode_batch(self, texts: list[str], add_special_tokens: bool = False) -> list[Any]:
        from types import SimpleNamespace

        return [
            SimpleNamespace(ids=list(self.llm.tokenize(t.encode("utf-8"), add_bos=add_special_tokens, special=False)))
            for t in texts
        ]


class _Decoding:
    """One decoding's state: the matcher, how many tokens past the prompt it has read."""

    def __init__(self, constraint: LlamaCppConstraint) -> None:
        self.c = constraint
        self.reset()

    def reset(self) -> None:
        """Start over: the next call's sequence is a new prompt (Outlines calls this before each generation)."""
        self.matcher: RequestMatcher = self.c.new_matcher()
        self.start: int | None = None  # the prompt's length, set by the first call
        self.read = 0
        self.last = -1
        self.refused = False  # a token the table does not allow was appended (by the caller): EOS only
        self._ids: tuple[int, np.ndarray] | None = None  # (tokens read, allowed ids): asked twice a step

    def sync(self, input_ids: np.ndarray) -> None:
        n = len(input_ids)
        if (
            self.start is None
            or n < self.start + self.read
            or (self.read and int(input_ids[self.start + self.read - 1]) != self.last)
        ):
            self.matcher = self.c.new_matcher()
            self.start, self.read, self.refused, self._ids = n, 0, False, None
        for t in input_ids[self.start + self.read :].tolist():
            if not self.refused and not self.matcher.accept_token(t):
                self.refused = True
            self.read += 1
            self.last = t

    def process(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        self.sync(input_ids)
        c = self.c
        if self.refused or self.matcher.is_terminated():
            return keep_tokens(scores, c._eos)
        if c._by_rows:
            self.matcher.fill_bitmask(c._row)
            return apply_bitmask(scores, c._row)
        return keep_tokens(scores, self.allowed())  # admitted: the mask is as wide as the scores

    def stop(self, input_ids: np.ndarray, logits: np.ndarray) -> bool:
        """True once the tokens read leave nothing but an EOS (a complete value that nothing extends), or none."""
        self.sync(input_ids)
        if self.refused or self.matcher.is_terminated():
            return True
        if self.c._by_rows:
            return False
        ids = self.allowed()
        return 0 < ids.size <= self.c._eos.size and bool(np.isin(ids, self.c._eos).all())

    def allowed(self) -> np.ndarray:
        if self._ids is None or self._ids[0] != self.read:
            self._ids = (self.read, self.matcher.allowed())
        return self._ids[1]


class LlamaCppConstraint:
    """A compiled table served to one llama-cpp-python ``Llama``: checked once, a fresh state per call.

    ``table``: a table, or an artifact path (loaded with its indices checked). ``values`` narrows it to a
    subset (a shortlist: a restricted view, compacted; a value the table does not hold is a RequestError); ``trigger`` serves think-then-answer (free text until the trigger,
    then one value; :class:`triec.Triggered`). Raises :class:`~triec.errors.TokenizerMismatch` when the GGUF's
    vocabulary is not llama.cpp's, and :class:`~triec.errors.RequestError` when the table was compiled for
    another vocabulary, is narrower than the logits, or ends values with an id llama.cpp does not stop on.
    """

    def __init__(
        self,
        llm: Any,
        table: Table | str | os.PathLike[str],
        *,
        values: list[str] | None = None,
        trigger: str | list[str] | None = None,
        vocab: Vocabulary | None = None,
    ) -> None:
        lc = _llama_cpp()
        if isinstance(table, (str, os.PathLike)):
            from triec.artifact.formats import load

            what, table = f"artifact {os.fspath(table)!r}", load(table)
        else:
            what = f"table ({table.tokenizer_name or 'unnamed'})"
        self.llm = llm
        if vocab is None:
            vocab = model_vocabulary(llm)
        elif vocab.fingerprint not in _checked(llm):
            check_vocabulary(llm, vocab)  # a vocabulary passed in is checked too, once per model
        _checked(llm).add(vocab.fingerprint)
        self.vocab = vocab
        width = int(llm.n_vocab())
        stops = eog_ids(llm)
        served = ServedModel(
            tokenizer=str(llm.model_path),
            vocab_size=width,
            eos_token_id=int(llm.token_eos()),
            generation_eos_ids=tuple(sorted(stops)),
        )
        if self.vocab.num_tokens == width:
            served.know(self.vocab)
        parent = as_served_table(table)
        table = narrow(parent, values, what)
        admit(what, table, parent, served, stops, fix_stops="llama.cpp ends generation on its EOG ids only")
        self.table = table
        self._triggered = None
        if trigger is not None:
            if table.host_matched:
                raise RequestError(f"{what}: trigger= needs a table of values, not a {table.kind} table")
            from triec.runtime.trigger import Triggered

            self._triggered = Triggered(table, self.vocab, trigger)
        self._eos = np.asarray(sorted(set(table.eos_token_ids)), dtype=np.intp)
        self._by_rows = table.host_matched or self._triggered is not None  # rows from a matcher's bitmask
        self._row = np.zeros(words_for(table.vocab_size), dtype=np.int32)
        self._lc = lc

    def new_matcher(self) -> RequestMatcher:
        """A fresh decoding's matcher: the table's, or think-then-answer's over it."""
        if self._triggered is not None:
            return self._triggered.matcher()
        return self.table.matcher()

    def decoding(self) -> _Decoding:
        """One decoding's state: ``process(input_ids, scores)`` (the logits processor), ``stop`` (the stopping
        criterion) and ``reset()``; :meth:`generation_kwargs` wraps one, Outlines' processor holds one."""
        return _Decoding(self)

    def generation_kwargs(self, *, chat: bool = False) -> dict[str, Any]:
        """``logits_processor`` and ``stopping_criteria`` for one call of ``Llama.__call__``, ``create_completion``
        or ``generate``, sharing one fresh decoding state; ``chat=True``: the processor alone, for
        ``create_chat_completion`` (which takes no stopping criteria; EOS ends the value there)."""
        d = self.decoding()
        kwargs: dict[str, Any] = {"logits_processor": self._lc.LogitsProcessorList([d.process])}
        if not chat:
            kwargs["stopping_criteria"] = self._lc.StoppingCriteriaList([d.stop])
        return kwargs


class LlamaCppScorer:
    """:func:`triec.rank`'s scorer for a ``Llama`` after ``prompt`` (token ids): one sequence in llama.cpp's KV
    cache, cut back (``n_tokens``) to the longest prefix it shares with the next path and the rest evaluated; the
    last position's logits read through ``llama_get_logits_ith`` (no ``logits_all`` needed), log-softmaxed over
    the whole vocabulary in float64. The model's cache holds the last path afterwards (``llm.reset()`` to drop it)."""

    def __init__(self, llm: Any, prompt: list[int]) -> None:
        from triec.integrations.rank_search import Sequential

        self.llm, self.lc, self.width = llm, _llama_cpp(), int(llm.n_vocab())
        llm.reset()
        self.sequence = Sequential(prompt, self._cut, self._feed)

    def _cut(self, n: int) -> None:
        self.llm.n_tokens = n

    def _feed(self, tokens: list[int]) -> np.ndarray:
        self.llm.eval(tokens)
        row = np.ctypeslib.as_array(self.lc.llama_get_logits_ith(self.llm.ctx, -1), shape=(self.width,))
        return np.array(row, dtype=np.float64)

    def logprobs(self, paths: Any) -> np.ndarray:
        return self.sequence.logprobs(paths)
