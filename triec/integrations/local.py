"""What the in-process integrations share: a table admitted for one loaded model, and its vocabulary checked.

mlx-lm (:mod:`triec.integrations.mlx`) and Outlines' models (:mod:`triec.integrations.outlines`) decode in the
caller's process with a model and a Hugging Face tokenizer already loaded. Before anything is served:

* the vocabulary triec reads for the tokenizer's files is checked id by id against the loaded tokenizer's own
  decoding (:func:`check_tokenizer`: a difference would be wrong masks, so it is one clear
  :class:`~triec.errors.TokenizerMismatch`);
* the table (or an artifact path, loaded with its indices checked) is narrowed to ``values=`` when given and
  admitted by the serving core (:func:`triec.integrations.serving.admit`: mask width, tokenizer fingerprint,
  EOS ids the engine stops on, a schema table's engine installed);
* ``trigger=`` wraps it for think-then-answer (:class:`~triec.runtime.trigger.Triggered`).

:class:`Admitted` holds the result; each decoding takes one matcher from it (:meth:`Admitted.matcher`), so plain,
restricted, canonical, schema and think-then-answer tables are served through the same matcher calls.
Framework-free: the tokenizer is duck-typed (``backend_tokenizer``, ``batch_decode``, ``name_or_path``).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from triec.errors import RequestError, TokenizerMismatch
from triec.integrations.serving import ServedModel, admit, as_served_table, narrow

if TYPE_CHECKING:
    from triec.runtime.kinds import Table
    from triec.runtime.trigger import Triggered
    from triec.tokenizer.vocabulary import Vocabulary

__all__ = ["Admitted", "admit_local", "check_tokenizer", "table_vocabulary", "tokenizer_path", "tokenizer_vocabulary"]

_SPIECE = "\u2581"  # SentencePiece's space marker: its decoder drops the one that starts a text


def tokenizer_path(tokenizer: Any) -> str:
    """Where a Hugging Face tokenizer was loaded from (``name_or_path``): what triec reads its vocabulary from."""
    spec = getattr(tokenizer, "name_or_path", None)
    if not spec:
        raise TokenizerMismatch("the tokenizer does not say where it was loaded from (no name_or_path)")
    return str(spec)


def check_tokenizer(tokenizer: Any, vocab: Vocabulary) -> None:
    """TokenizerMismatch unless ``vocab`` spells every id as the loaded tokenizer decodes it.

    Every id with bytes in ``vocab`` is decoded alone by the tokenizer (its Rust backend when it has one: 0.1 s
    for 50K ids, 0.5 s for 150K); the text must be those bytes. Ids whose bytes are not whole UTF-8 characters
    (byte-level pieces) cannot be compared this way and are skipped, and a SentencePiece piece may lose its
    leading space (the decoder strips the one that starts a text). Special tokens are blank in triec's
    vocabulary and not compared.
    """
    n = len(tokenizer)
    where = getattr(tokenizer, "name_or_path", None) or "the tokenizer"
    if n != vocab.num_tokens:
        raise TokenizerMismatch(
            f"{where}: the loaded tokenizer has {n:,} tokens, triec's vocabulary {vocab.num_tokens:,}"
        )
    ours = vocab.token_bytes
    ids = [i for i, b in enumerate(ours) if b]
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        texts = backend.decode_batch([[i] for i in ids], skip_special_tokens=False)
    else:
        texts = tokenizer.batch_decode(
            [[i] for i in ids], skip_special_tokens=False, clean_up_tokenization_spaces=False
        )
    bad = [
        i
        for i, text in zip(ids, texts, strict=True)
        if text.encode("utf-8") != ours[i] and not _excused(tokenizer, i, ours[i], text)
    ]
    if bad:
        i = bad[0]
        theirs = (
            backend.decode([i], skip_special_tokens=False) if backend is not None else tokenizer.decode([i])
        ).encode()
        raise TokenizerMismatch(
            f"{where}: triec reads token {i} as {ours[i]!r}, the loaded tokenizer decodes it as {theirs!r} "
            f"({len(bad):,} of {n:,} ids differ): masks would be wrong, nothing is served"
        )


def _excused(tokenizer: Any, token: int, ours: bytes, text: str) -> bool:
    """A difference that is the decoder's, not the vocabulary's: a partial character, SentencePiece's first space."""
    try:
        want = ours.decode("utf-8")
    except UnicodeDecodeError:
        return True
    if want.startswith(" ") and text == want[1:]:
        piece = tokenizer.convert_ids_to_tokens(token)
        return isinstance(piece, str) and (piece.startswith(_SPIECE) or piece == "<0x20>")
    return False


_CHECKED: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()


def tokenizer_vocabulary(
    tokenizer: Any, *, vocab_size: int, eos_token_ids: Iterable[int], vocab: Vocabulary | None = None
) -> Vocabulary:
    """triec's vocabulary of a loaded tokenizer (read from ``name_or_path`` unless given), checked against it once
    per tokenizer object and fingerprint (:func:`check_tokenizer`)."""
    if vocab is None:
        from triec.tokenizer.vocabulary import Vocabulary

        vocab = Vocabulary.load(
            tokenizer_path(tokenizer), vocab_size=vocab_size, eos_token_ids=sorted(set(eos_token_ids))
        )
    try:
        seen = _CHECKED.setdefault(tokenizer, set())
    except TypeError:  # not weakly referenceable: checked every time
        seen = set()
    if vocab.fingerprint not in seen:
        check_tokenizer(tokenizer, vocab)
        seen.add(vocab.fingerprint)
    return vocab


def table_vocabulary(table: Table, vocab: Vocabulary, served: ServedModel) -> Vocabulary:
    """``vocab`` with the table's EOS ids (they are blank in a vocabulary: its fingerprint counts them), read
    again from the served tokenizer when the model's EOS ids differ from the table's."""
    eos = tuple(sorted(set(table.eos_token_ids)))
    if vocab.eos_token_ids == eos:
        return vocab
    from triec.tokenizer.vocabulary import Vocabulary

    return Vocabulary.load(served.tokenizer, vocab_size=served.vocab_size, eos_token_ids=eos)


@dataclass
class Admitted:
    """A table admitted for one model: what each decoding's matcher comes from and how its rows are masked."""

    table: Table
    """What decodes: the table, or its compacted subset."""
    vocab: Vocabulary
    width: int
    """The model's logits width (the table's masks are exactly this wide)."""
    eos: np.ndarray
    """The table's EOS ids, ascending: what a finished or refused decoding allows."""
    triggered: Triggered | None = None
    """Think-then-answer: free text until the trigger, then the table's values."""

    @property
    def by_rows(self) -> bool:
        """Rows come from a matcher's bitmask (a schema table's, think-then-answer's), not its allowed ids."""
        return self.table.host_matched or self.triggered is not None

    def matcher(self) -> Any:
        """A fresh matcher for one decoding (``allowed``, ``fill_bitmask``, ``accept_token``, ``rollback``...)."""
        return self.triggered.matcher() if self.triggered is not None else self.table.matcher()


def admit_local(
    source: Table | str | os.PathLike[str],
    served: ServedModel,
    stops: set[int],
    vocab: Vocabulary,
    *,
    values: list[str] | None = None,
    trigger: str | list[str] | None = None,
    fix_stops: str,
) -> Admitted:
    """A table (or an artifact path) served to one in-process model: loaded, narrowed, admitted, triggered.

    ``served`` is the model as admission sees it; ``vocab`` its checked vocabulary (recorded as the served
    fingerprint when it is as wide as the logits); ``stops`` the ids the engine ends generation on. Raises
    :class:`~triec.errors.RequestError` naming the first check that fails.
    """
    if isinstance(source, (str, os.PathLike)):
        from triec.artifact.formats import load

        what, parent = f"artifact {os.fspath(source)!r}", as_served_table(load(source))
    else:
        what, parent = f"table ({source.tokenizer_name or 'unnamed'})", as_served_table(source)
    if vocab.vocab_size == served.vocab_size:
        served.know(vocab)
    table = narrow(parent, values, what)
    admit(what, table, parent, served, stops, fix_stops=fix_stops)
    triggered = None
    if trigger is not None:
        if table.host_matched:
            raise RequestError(f"{what}: trigger= needs a table of values, not a {table.kind} table")
        from triec.runtime.trigger import Triggered

        triggered = Triggered(table, table_vocabulary(table, vocab, served), trigger)
    eos = np.asarray(sorted(set(table.eos_token_ids)), dtype=np.int64)
    return Admitted(table, vocab, served.vocab_size, eos, triggered)
