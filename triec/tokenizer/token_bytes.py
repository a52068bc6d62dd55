"""Turn a Hugging Face ``tokenizer.json`` into the exact bytes each token id emits.

Masks are byte-exact, so everything depends on this mapping. Two families of
tokenizers are supported, recognised from the ``decoder`` section:

* byte-level BPE (GPT-2, Qwen2, Llama-3): every character of a token stands for
  one byte through GPT-2's byte-to-unicode table (``Ġ`` is a space);
* SentencePiece (Llama-2, Phi-3, Mistral): ``▁`` is a space and, with byte
  fallback, ``<0xNN>`` is the single byte NN.

Tokens that emit nothing a value could contain get ``b""`` and are never
allowed: special added tokens, the end-of-sequence ids, and SentencePiece's
control pieces (``<unk>``, ``<s>``, ``</s>``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

from triec.errors import TokenizerError

MAX_TOKEN_IDS = 1 << 24
"""Most token ids a tokenizer may define (16.8M; real ones hold up to about 260k)."""

BYTE_LEVEL = "byte_level"
SENTENCEPIECE = "sentencepiece"

_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>\Z")
_SENTENCEPIECE_CONTROL = frozenset({"<unk>", "<s>", "</s>", "<pad>"})
_KNOWN_EOS = ("<|endoftext|>", "<|im_end|>", "<|end|>", "<|eot_id|>", "<|end_of_text|>", "</s>", "<eos>")


@lru_cache(maxsize=1)
def unicode_to_byte() -> dict[str, int]:
    """Inverse of GPT-2's ``bytes_to_unicode`` table (printable bytes map to themselves)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    table = {chr(b): b for b in printable}
    shift = 0
    for b in range(256):
        if b not in printable:
            table[chr(256 + shift)] = b
            shift += 1
    return table


def _decoder_types(spec: Any) -> list[str]:
    if not isinstance(spec, Mapping):
        return []
    kind = spec.get("type")
    if kind == "Sequence":
        return [t for d in spec.get("decoders") or [] for t in _decoder_types(d)]
    return [kind] if isinstance(kind, str) else []


def detect_family(tokenizer_json: Mapping[str, Any], source: str) -> str:
    """Which byte mapping the tokenizer's decoder implies."""
    types = _decoder_types(tokenizer_json.get("decoder"))
    if "ByteLevel" in types:
        return BYTE_LEVEL
    if "ByteFallback" in types or "Metaspace" in types or "Replace" in types:
        return SENTENCEPIECE
    raise TokenizerError(
        f"{source}: unsupported tokenizer decoder {types or 'none'}; "
        "triec supports byte-level BPE (ByteLevel) and SentencePiece (Metaspace/ByteFallback)"
    )


@lru_cache(maxsize=1)
def _byte_level_translation() -> dict[int, str]:
    """``str.translate`` table: each byte-level character to the Latin-1 character of its byte.

    Characters below U+0100 that are not in GPT-2's table map to U+FFFF, so that
    the Latin-1 encoding fails for them as it does for every other foreign
    character: one C-level pass per piece instead of a Python loop per character.
    """
    table = {ord(c): chr(b) for c, b in unicode_to_byte().items()}
    for code in range(256):
        table.setdefault(code, "\uffff")
    return table


def _byte_level(piece: str) -> bytes:
    try:
        return piece.translate(_byte_level_translation()).encode("latin-1")
    except UnicodeEncodeError:
        # Not a byte-level piece (an added token holding plain text): the
        # decoder passes such tokens through as their UTF-8 text.
        return piece.encode("utf-8")


def _sentencepiece(piece: str) -> bytes:
    if piece.startswith("<0x"):
        match = _BYTE_PIECE.match(piece)
        if match:
            return bytes([int(match.group(1), 16)])
    return piece.replace("\u2581", " ").encode("utf-8")


def model_vocab(tokenizer_json: Mapping[str, Any], source: str) -> dict[int, str]:
    """Map id -> piece for the model's vocabulary (BPE/WordPiece dict or Unigram list)."""
    model = tokenizer_json.get("model")
    if not isinstance(model, Mapping):
        raise TokenizerError(f"{source}: no 'model' section; is this a Hugging Face tokenizer.json?")
    vocab = model.get("vocab")
    try:
        if isinstance(vocab, Mapping):
            out = {_token_id(i): str(p) for p, i in vocab.items()}
        elif isinstance(vocab, list):  # Unigram: [[piece, score], ...]
            out = {i: str(entry[0]) for i, entry in enumerate(vocab)}
        else:
            raise TokenizerError(f"{source}: field model.vocab is missing or not a dict/list")
    except (TypeError, ValueError, IndexError, KeyError) as exc:
        raise TokenizerError(f"{source}: malformed model.vocab entry ({type(exc).__name__}: {exc})") from None
    return out


def _token_id(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"token id {value!r:.40} is not an integer")
    return value


def decode_token_bytes(
    tokenizer_json: Mapping[str, Any], source: str, eos_token_ids: Iterable[int]
) -> tuple[list[bytes], str]:
    """Bytes contributed by every id, ``b""`` for ids that never appear in a value."""
    family = detect_family(tokenizer_json, source)
    pieces = model_vocab(tokenizer_json, source)
    special: set[int] = set()
    for added in tokenizer_json.get("added_tokens") or []:
        try:
            tid, content = int(added["id"]), str(added["content"])
        except (KeyError, TypeError, ValueError) as exc:
            raise TokenizerError(f"{source}: malformed entry in added_tokens: {added!r}") from exc
        pieces[tid] = content
        if added.get("special", False):
            special.add(tid)
    if not pieces:
        raise TokenizerError(f"{source}: the tokenizer has an empty vocabulary")
    size = max(pieces) + 1
    if size > MAX_TOKEN_IDS:
        raise TokenizerError(
            f"{source}: token id {size - 1:,} is past the {MAX_TOKEN_IDS:,}-id limit (real tokenizers hold < 1M)"
        )
    if min(pieces) < 0:
        raise TokenizerError(f"{source}: negative token id {min(pieces)}")
    out = [b""] * size
    if family == BYTE_LEVEL:
        # _byte_level inlined: this loop runs once per token (150k for Qwen2) on a cold start.
        table, translate = _byte_level_translation(), str.translate
        for tid, piece in pieces.items():
            try:
                out[tid] = translate(piece, table).encode("latin-1")
            except UnicodeEncodeError:
                out[tid] = piece.encode("utf-8")
    else:
        for tid, piece in pieces.items():
            if piece not in _SENTENCEPIECE_CONTROL:
                out[tid] = _sentencepiece(piece)
    for tid in special:
        out[tid] = b""
    for tid in eos_token_ids:
        if 0 <= tid < size:
            out[tid] = b""
    return out, family


def guess_eos_token_ids(tokenizer_json: Mapping[str, Any]) -> list[int]:
    """EOS ids by the conventional names, when no config says otherwise."""
    by_content = {str(a.get("content")): int(a.get("id")) for a in tokenizer_json.get("added_tokens") or []}
    for name in _KNOWN_EOS:
        if name in by_content:
            return [by_content[name]]
    model = tokenizer_json.get("model") or {}
    vocab = model.get("vocab")
    if isinstance(vocab, Mapping):
        for name in _KNOWN_EOS:
            if name in vocab:
                return [int(vocab[name])]
    return []


def ids_for_tokens(tokenizer_json: Mapping[str, Any], names: Iterable[str]) -> list[int]:
    """Ids of the named tokens (added or model vocabulary), skipping unknown names."""
    lookup = {str(a.get("content")): int(a.get("id")) for a in tokenizer_json.get("added_tokens") or []}
    vocab = (tokenizer_json.get("model") or {}).get("vocab")
    out = []
    for name in names:
        if name in lookup:
            out.append(lookup[name])
        elif isinstance(vocab, Mapping) and name in vocab:
            out.append(int(vocab[name]))
    return out
