"""The decoded vocabulary: the exact bytes every token id emits, plus EOS and mask width."""

from __future__ import annotations

import hashlib
import itertools
import os
import struct
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from triec.errors import TokenizerError
from triec.tokenizer.automaton import VocabAutomaton, load_or_build

_FINGERPRINT_TAG = b"triec-vocabulary-v1\x00"


def _fingerprint_packed(blob: bytes, offsets: np.ndarray, blank: Sequence[int]) -> str:
    """:func:`fingerprint_token_bytes` of the packed bytes with the ids ``blank`` emptied, without a list of bytes."""
    lengths = np.diff(offsets).astype(np.uint32)
    n = int(lengths.shape[0])
    cuts = sorted(i for i in set(blank) if 0 <= i < n)
    lengths[cuts] = 0
    h = hashlib.sha256(_FINGERPRINT_TAG)
    h.update(struct.pack("<I", n))
    h.update(lengths.astype("<u4").tobytes())
    view, pos = memoryview(blob), 0
    for i in cuts:
        h.update(view[pos : int(offsets[i])])
        pos = int(offsets[i + 1])
    h.update(view[pos:])
    return "sha256:" + h.hexdigest()


def fingerprint_token_bytes(token_bytes: Sequence[bytes]) -> str:
    """sha256 over every id's bytes, length-prefixed, in id order.

    Two vocabularies with the same fingerprint produce the same masks for the
    same values, which is what the automaton cache and artifacts rely on.
    """
    h = hashlib.sha256(_FINGERPRINT_TAG)
    h.update(struct.pack("<I", len(token_bytes)))
    h.update(struct.pack(f"<{len(token_bytes)}I", *map(len, token_bytes)))
    h.update(b"".join(token_bytes))
    return "sha256:" + h.hexdigest()


class Vocabulary:
    """Token bytes by id, the EOS ids, and the width of the model's logits.

    ``token_bytes[i]`` is ``b""`` for ids that can never be part of a value
    (special tokens, EOS ids, control pieces); ids from ``len(token_bytes)`` to
    ``vocab_size`` are padding and never allowed.
    """

    _source: Any = None  # the TokenizerSource it was loaded from (Vocabulary.load): what encoder() builds on

    eos_texts: dict[int, bytes]
    """EOS ids that are also text tokens, with their text: blanked here (an EOS ends a value, never part of
    one), so a value spelled only through that text cannot be written (``build.compile`` warns)."""

    def __init__(
        self,
        token_bytes: Sequence[bytes],
        *,
        eos_token_ids: Iterable[int],
        vocab_size: int | None = None,
        name: str = "custom",
        family: str = "custom",
    ) -> None:
        tokens = list(token_bytes)
        self._setup(len(tokens), eos_token_ids, vocab_size, name, family)
        self.eos_texts = {tid: bytes(tokens[tid]) for tid in self.eos_token_ids if tid < len(tokens) and tokens[tid]}
        for tid in self.eos_token_ids:
            if tid < len(tokens):
                tokens[tid] = b""  # EOS ends a value; it is never part of one
        self._token_bytes: tuple[bytes, ...] | None = tuple(tokens)
        self._packed: tuple[bytes, np.ndarray] | None = None
        self.fingerprint = fingerprint_token_bytes(self._token_bytes)

    def _setup(
        self, num_tokens: int, eos_token_ids: Iterable[int], vocab_size: int | None, name: str, family: str
    ) -> None:
        eos = tuple(sorted(set(int(i) for i in eos_token_ids)))
        width = num_tokens if vocab_size is None else int(vocab_size)
        if width < num_tokens:
            raise TokenizerError(
                f"vocab_size {width} is smaller than the tokenizer's {num_tokens} tokens; "
                "it must be at least the number of token ids"
            )
        if width >= 2**31:
            raise TokenizerError(f"vocab_size {width} does not fit in int32 token ids")
        for tid in eos:
            if not 0 <= tid < width:
                raise TokenizerError(f"EOS token id {tid} is outside the vocabulary (0..{width - 1})")
        self.eos_token_ids: tuple[int, ...] = eos
        self.eos_texts = {}
        self.vocab_size = width
        self.name = name
        self.family = family
        self._num_tokens = num_tokens
        self._automaton: VocabAutomaton | None = None

    @classmethod
    def _from_packed(
        cls,
        blob: bytes,
        offsets: np.ndarray,
        *,
        eos_token_ids: Iterable[int],
        vocab_size: int | None,
        name: str,
        family: str,
    ) -> Vocabulary:
        """From every id's bytes concatenated (id i is ``blob[offsets[i]:offsets[i + 1]]``), EOS ids not yet emptied.

        Equal to ``Vocabulary(list_of_bytes, ...)``, but the 150k ``bytes``
        objects are made only when :attr:`token_bytes` is first read: a compile
        whose automaton is cached never needs them.
        """
        self = cls.__new__(cls)
        self._setup(int(offsets.shape[0]) - 1, eos_token_ids, vocab_size, name, family)
        n = int(offsets.shape[0]) - 1
        spans = {tid: (int(offsets[tid]), int(offsets[tid + 1])) for tid in self.eos_token_ids if tid < n}
        self.eos_texts = {tid: bytes(blob[a:b]) for tid, (a, b) in spans.items() if b > a}
        self._token_bytes = None
        self._packed = (blob, offsets)
        self.fingerprint = _fingerprint_packed(blob, offsets, self.eos_token_ids)
        return self

    @property
    def token_bytes(self) -> tuple[bytes, ...]:
        """The bytes each id emits; ``b""`` for ids that are never part of a value."""
        if self._token_bytes is None:
            assert self._packed is not None
            blob, offsets = self._packed
            ends = offsets.tolist()
            tokens = [blob[a:b] for a, b in itertools.pairwise(ends)]
            for tid in self.eos_token_ids:
                if tid < len(tokens):
                    tokens[tid] = b""
            self._token_bytes = tuple(tokens)
            self._packed = None
        return self._token_bytes

    @property
    def num_tokens(self) -> int:
        """Ids defined by the tokenizer (the mask may be wider: ``vocab_size``)."""
        return self._num_tokens

    def table_fields(self, **build_options: Any) -> dict[str, Any]:
        """What a table compiled for this vocabulary records of it, as a table constructor's keyword arguments: the
        mask width, the EOS ids, the fingerprint and name, and the build options (the tokenizer's family and token
        count, then ``build_options``)."""
        return {
            "vocab_size": self.vocab_size,
            "eos_token_ids": self.eos_token_ids,
            "tokenizer_fingerprint": self.fingerprint,
            "tokenizer_name": self.name,
            "build_options": {"tokenizer_family": self.family, "tokenizer_tokens": self.num_tokens, **build_options},
        }

    def __repr__(self) -> str:
        return (
            f"Vocabulary(name={self.name!r}, tokens={self.num_tokens}, vocab_size={self.vocab_size}, "
            f"eos={list(self.eos_token_ids)}, fingerprint={self.fingerprint[:19]}...)"
        )

    @classmethod
    def load(
        cls,
        tokenizer: str | os.PathLike[str] | None = None,
        *,
        vocab_size: int | None = None,
        eos_token_ids: Iterable[int] | None = None,
    ) -> Vocabulary:
        """Load a bundled name (``gpt2``, ``qwen2``), a tokenizer.json path or directory, a GGUF file, or a Hub id.

        EOS ids default to the model's generation config when one is found,
        else to the tokenizer's conventional end token. ``vocab_size`` pads the
        mask to the model's logits width (default: the model config's
        ``vocab_size`` when found, else the tokenizer's size).
        """
        from triec.tokenizer.cache import load_or_decode
        from triec.tokenizer.source import locate

        src = locate(tokenizer)
        decoded = load_or_decode(src)
        if eos_token_ids is not None:
            eos = list(eos_token_ids)
        else:
            eos = src.eos_ids or decoded.ids_for_tokens(src.eos_names, src) or decoded.guessed_eos
        if not eos:
            raise TokenizerError(f"{src.name}: cannot tell the end-of-sequence token; pass eos_token_ids / --eos")
        num_tokens = int(decoded.offsets.shape[0]) - 1
        width = vocab_size
        if width is None and src.model_vocab_size and src.model_vocab_size >= num_tokens:
            width = src.model_vocab_size
        vocab = cls._from_packed(
            decoded.blob, decoded.offsets, eos_token_ids=eos, vocab_size=width, name=src.name, family=decoded.family
        )
        return vocab.with_source(src)

    def with_source(self, source: Any) -> Vocabulary:
        """Record the tokenizer file this vocabulary was decoded from (its encoder, for canonical tables); returns
        ``self``."""
        self._source = source
        return self

    def encoder(self) -> Any:
        """The tokenizer's own encoder (a ``tokenizers.Tokenizer``), for canonical tokenization.

        Built once per tokenizer file and process (0.6 s for Qwen2's: parsing its merges), shared by every
        vocabulary loaded from it.

        Raises :class:`TokenizerError` for a vocabulary that has none: one built from token bytes, or a GGUF's.
        """
        src = self._source
        if src is None:
            raise TokenizerError(
                f"vocabulary {self.name!r} was built from token bytes: it has no encoder, so canonical tokenization "
                "is not defined for it; load it from a tokenizer.json (Vocabulary.load)"
            )
        from triec.tokenizer.encoder import encoder_for

        return encoder_for(src)

    @property
    def automaton(self) -> VocabAutomaton:
        """The vocabulary's byte automaton, built once (disk-cached) per fingerprint."""
        if self._automaton is None:
            self._automaton = load_or_build(self)
        return self._automaton
