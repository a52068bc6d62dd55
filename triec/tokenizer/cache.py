"""The decoded vocabulary of a tokenizer file, cached on disk by the file's content.

Parsing a 150k-token ``tokenizer.json`` and decoding every piece costs about
0.3 s; loading the decoded bytes back costs a few milliseconds. The cache key
is the sha256 of the tokenizer file's bytes as stored (plus this cache's format
and the source of the decoding rules), so a file changed in place, under the
same path, gets a new key and is decoded afresh: a stale entry can never be
served. Hashing the file costs about 1 ms per MB here, cheaper than reasoning
about modification times, inodes and clocks (docs/decisions.md D14).

What is cached depends on the tokenizer file alone: bytes per id with special
added tokens and control pieces blanked (EOS ids are blanked later, by
:class:`~triec.tokenizer.vocabulary.Vocabulary`, because configs beside the file choose
them), the family, the added tokens' ids by content and the conventional EOS
guess. Entries are written atomically and verified on load
(:mod:`triec.disk_cache`); any doubt means decoding again.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from triec.disk_cache import cache_dir, load_arrays, save_arrays

if TYPE_CHECKING:
    from triec.tokenizer.source import TokenizerSource

CACHE_FORMAT = 1
_NAMES = ["blob", "offsets", "info"]


@dataclass(frozen=True)
class DecodedTokenizer:
    """What a tokenizer file alone says about its vocabulary."""

    blob: bytes  # every id's bytes concatenated; b"" for special added tokens and control pieces (EOS not yet blanked)
    offsets: np.ndarray  # int64 [N + 1]: id i is blob[offsets[i]:offsets[i + 1]]
    family: str
    added: dict[str, int]  # added token content -> id
    guessed_eos: list[int]  # EOS by the conventional names, for when no config says

    @property
    def token_bytes(self) -> list[bytes]:
        """Bytes per id (made on demand; :class:`~triec.tokenizer.vocabulary.Vocabulary` keeps them packed until needed)."""
        ends = self.offsets.tolist()
        return [self.blob[a:b] for a, b in itertools.pairwise(ends)]

    def ids_for_tokens(self, names: list[str], src: TokenizerSource) -> list[int]:
        """Ids of the named tokens; a name that is not an added token needs the parsed JSON (rare)."""
        if all(n in self.added for n in names):
            return [self.added[n] for n in names]
        from triec.tokenizer.token_bytes import ids_for_tokens

        return ids_for_tokens(src.tokenizer_json, names)


def decode(doc: dict[str, Any], label: str) -> DecodedTokenizer:
    """Decode a parsed tokenizer.json (pure)."""
    from triec.tokenizer.token_bytes import decode_token_bytes, guess_eos_token_ids

    token_bytes, family = decode_token_bytes(doc, label, [])
    added = {str(a.get("content")): int(a.get("id")) for a in doc.get("added_tokens") or []}
    lengths = np.fromiter(map(len, token_bytes), dtype=np.int64, count=len(token_bytes))
    offsets = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return DecodedTokenizer(b"".join(token_bytes), offsets, family, added, guess_eos_token_ids(doc))


@lru_cache(maxsize=1)
def _decoder_digest() -> str:
    """The decoding rules are part of the key: editing them invalidates every entry."""
    return hashlib.sha256(Path(__file__).with_name("token_bytes.py").read_bytes()).hexdigest()


def cache_key(src: TokenizerSource) -> str:
    return f"tokenizer-file:{'zstd' if src.compressed else 'json'}:{src.content_digest}:decoder:{_decoder_digest()}"


def _cache_path(key: str) -> Path:
    name = hashlib.sha256(key.encode()).hexdigest()
    return cache_dir() / "vocabularies" / f"v{CACHE_FORMAT}-{name}.npz"


def save_cached(decoded: DecodedTokenizer, key: str) -> Path | None:
    info = json.dumps({"family": decoded.family, "added": decoded.added, "guessed_eos": decoded.guessed_eos})
    arrays = {
        "blob": np.frombuffer(decoded.blob, dtype=np.uint8),
        "offsets": decoded.offsets,
        "info": np.frombuffer(info.encode(), dtype=np.uint8),
    }
    return save_arrays(_cache_path(key), key, CACHE_FORMAT, arrays)


def load_cached(key: str) -> DecodedTokenizer | None:
    """The cached entry if present and intact; ``None`` when in any doubt."""
    arrays = load_arrays(_cache_path(key), key, CACHE_FORMAT, _NAMES)
    if arrays is None:
        return None
    blob, offsets = arrays["blob"].tobytes(), arrays["offsets"]
    if offsets.ndim != 1 or offsets.shape[0] < 2 or offsets[0] != 0 or offsets[-1] != len(blob):
        return None
    if (np.diff(offsets) < 0).any():
        return None
    try:
        info = json.loads(arrays["info"].tobytes())
        return DecodedTokenizer(
            blob, offsets.astype(np.int64), str(info["family"]), dict(info["added"]), list(info["guessed_eos"])
        )
    except (ValueError, KeyError, TypeError):
        return None


def load_or_decode(src: TokenizerSource) -> DecodedTokenizer:
    """The disk cache, else a fresh decode (saved for next time)."""
    key = cache_key(src)
    found = load_cached(key)
    if found is None:
        found = decode(src.tokenizer_json, src.label)
        save_cached(found, key)
    return found
