"""A GGUF file's tokenizer, as the ``tokenizer.json`` document it stands for.

llama.cpp and Ollama users hold ``.gguf`` files, not ``tokenizer.json``. A GGUF
keeps its tokenizer in the metadata section at the head of the file: the
tokens in id order, a type per token (normal, control, user-defined, byte...),
the model kind (``gpt2`` = byte-level BPE, ``llama`` = SentencePiece) and the
special ids. This module reads only that section, through ``mmap`` (the
tensors behind it are never touched), and writes the equivalent
``tokenizer.json`` fields, so the decoding rules of
:mod:`triec.tokenizer.token_bytes` apply unchanged and a GGUF equals its
``tokenizer.json`` twin token by token (tests/test_gguf.py).

Why not the ``gguf`` package's ``GGUFReader``: it parses every field and tensor
header up front, 6.2 s on SmolLM2's 98 MB file against 0.17 s here (D26).
"""

from __future__ import annotations

import mmap
import re
import struct
from pathlib import Path
from typing import Any

from triec.errors import TokenizerError

MAGIC = b"GGUF"
MAX_KV = 1 << 20  # metadata pairs; real files hold a few dozen
MAX_ARRAY = 1 << 24  # entries in one array (tokens, merges)

# GGUF value types (ggml/gguf.h): scalar formats by type id; 8 is a string, 9 an array.
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9

# tokenizer.ggml.token_type (llama.cpp's llama_token_type)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
_BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")


class _Cursor:
    def __init__(self, buf: Any, label: str) -> None:
        self.buf, self.pos, self.label = buf, 0, label

    def unpack(self, fmt: str) -> tuple[Any, ...]:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.buf):
            raise TokenizerError(f"{self.label}: GGUF metadata runs past the end of the file (truncated?)")
        out = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return out

    def string(self) -> str:
        (n,) = self.unpack("<Q")
        if self.pos + n > len(self.buf):
            raise TokenizerError(f"{self.label}: GGUF string of {n:,} bytes runs past the end of the file")
        raw = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TokenizerError(
                f"{self.label}: a GGUF string at byte {self.pos - n:,} is not UTF-8 ({exc.reason})"
            ) from None

    def value(self, kind: int, key: str) -> Any:
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item, n = self.unpack("<IQ")
            if n > MAX_ARRAY:
                raise TokenizerError(f"{self.label}: GGUF field {key!r} holds {n:,} entries (limit {MAX_ARRAY:,})")
            if item == _STRING:
                return [self.string() for _ in range(n)]
            if item not in _SCALARS:
                raise TokenizerError(f"{self.label}: GGUF field {key!r} is an array of unsupported type {item}")
            return list(self.unpack(f"<{n}{_SCALARS[item]}"))
        if kind not in _SCALARS:
            raise TokenizerError(f"{self.label}: GGUF field {key!r} has unknown value type {kind}")
        return self.unpack("<" + _SCALARS[kind])[0]


def read_metadata(path: Path) -> dict[str, Any]:
    """Every metadata key of a GGUF file (versions 2 and 3), tensors untouched."""
    label = str(path)
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            cur = _Cursor(buf, label)
            magic, version = cur.unpack("<4sI")
            if magic != MAGIC:
                raise TokenizerError(f"{label}: not a GGUF file (magic {magic!r}, expected {MAGIC!r})")
            if version not in (2, 3):
                raise TokenizerError(f"{label}: GGUF version {version} is not supported (2 and 3 are)")
            _n_tensors, n_kv = cur.unpack("<QQ")
            if n_kv > MAX_KV:
                raise TokenizerError(f"{label}: GGUF header claims {n_kv:,} metadata pairs")
            out: dict[str, Any] = {}
            for _ in range(n_kv):
                key = cur.string()
                (kind,) = cur.unpack("<I")
                out[key] = cur.value(kind, key)
            return out
    except (OSError, ValueError) as exc:  # ValueError: mmap of an empty file
        raise TokenizerError(f"{label}: cannot read GGUF file ({exc})") from exc


def _field(meta: dict[str, Any], key: str, kind: type, label: str) -> Any:
    if key not in meta:
        raise TokenizerError(f"{label}: GGUF has no {key!r}; a tokenizer needs it")
    value = meta[key]
    if not isinstance(value, kind):
        raise TokenizerError(f"{label}: GGUF field {key!r} is {type(value).__name__}, expected {kind.__name__}")
    return value


def eos_ids(meta: dict[str, Any], label: str = "GGUF") -> list[int]:
    """End-of-generation ids as llama.cpp reads them: EOS, end-of-turn and end-of-message when present.

    A key that is present with another type than an integer id is an error naming it (it was skipped, and the
    table silently ended values on fewer ids than the model stops on)."""
    keys = ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id")
    out = []
    for k in keys:
        if k not in meta:
            continue
        v = meta[k]
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise TokenizerError(f"{label}: GGUF field {k!r} is {v!r:.40} ({type(v).__name__}), expected a token id")
        out.append(v)
    return sorted(set(out))


def tokenizer_json(meta: dict[str, Any], label: str) -> dict[str, Any]:
    """The ``tokenizer.json`` fields triec decodes, from a GGUF's tokenizer metadata (pure).

    The vocabulary is written in the list form (id order), so two ids with the
    same text stay two ids. Control, unknown and unused tokens become special
    added tokens (never part of a value), user-defined ones plain added tokens,
    as Hugging Face's converters write them.
    """
    model = _field(meta, "tokenizer.ggml.model", str, label)
    tokens = _field(meta, "tokenizer.ggml.tokens", list, label)
    types = meta.get("tokenizer.ggml.token_type") or [NORMAL] * len(tokens)
    if len(types) != len(tokens):
        raise TokenizerError(f"{label}: GGUF has {len(tokens):,} tokens but {len(types):,} token types")
    bad = next((i for i, t in enumerate(tokens) if not isinstance(t, str)), None)
    if bad is not None:
        raise TokenizerError(
            f"{label}: GGUF field 'tokenizer.ggml.tokens': token {bad} is {tokens[bad]!r:.40} "
            f"({type(tokens[bad]).__name__}), expected a string"
        )
    bad = next(
        (
            i
            for i, (t, k) in enumerate(zip(tokens, types, strict=True))
            if k == BYTE and _BYTE_TOKEN.fullmatch(t) is None
        ),
        None,
    )
    if bad is not None:
        raise TokenizerError(
            f"{label}: GGUF token {bad} is of type byte but reads {tokens[bad]!r:.40}; a byte token "
            "is written <0xNN> with two hexadecimal digits"
        )
    if model == "gpt2":
        decoder: dict[str, Any] = {"type": "ByteLevel"}
    elif model == "llama":
        decoder = {"type": "Sequence", "decoders": [{"type": "Replace"}, {"type": "ByteFallback"}]}
    else:
        raise TokenizerError(
            f"{label}: GGUF tokenizer model {model!r} is not supported; triec reads 'gpt2' (byte-level BPE) "
            "and 'llama' (SentencePiece)"
        )
    added = [
        {"id": i, "content": tok, "special": kind != USER_DEFINED}
        for i, (tok, kind) in enumerate(zip(tokens, types, strict=True))
        if kind in (UNKNOWN, CONTROL, USER_DEFINED, UNUSED)
    ]
    return {
        "model": {"type": "gguf-" + model, "vocab": [[tok, 0.0] for tok in tokens]},
        "decoder": decoder,
        "added_tokens": added,
    }
