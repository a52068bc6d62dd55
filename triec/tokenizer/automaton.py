"""The per-tokenizer byte automaton: a trie of every distinct token's bytes.

Built once per decoded vocabulary (keyed by its fingerprint) and cached on disk,
because it costs about a second for a 150k vocabulary while a compile against
it costs milliseconds. Stored as flat arrays so that a batch of transitions is
one ``np.searchsorted`` on ``edge_keys``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Protocol

import numpy as np

from triec.disk_cache import cache_dir, load_arrays, save_arrays
from triec.trie import build_trie_from_buffer, join_keys, longest_common_prefixes

CACHE_FORMAT = 3


class TokenSource(Protocol):
    """What an automaton is built from and cached by: a decoded vocabulary's fingerprint and every id's bytes
    (:class:`~triec.tokenizer.vocabulary.Vocabulary`, which builds its automaton through this module)."""

    @property
    def fingerprint(self) -> str: ...

    @property
    def token_bytes(self) -> Sequence[bytes]: ...


@dataclass(frozen=True)
class VocabAutomaton:
    root_child: np.ndarray  # int32 [256]: node reached from the root by each byte, -1 if none
    edge_keys: np.ndarray  # int64 [E + 1], sorted: parent * 256 + byte per non-root node, then a sentinel
    edge_child: np.ndarray  # int64 [E + 1]: the node each edge key leads to (0 for the sentinel)
    has_child: np.ndarray  # bool [N]: node has at least one child
    node_key: np.ndarray  # int32 [N]: distinct token-bytes index ending at the node, -1 if none
    key_offsets: np.ndarray  # int32 [D + 1]: ids of distinct bytes d are key_ids[key_offsets[d]:...]
    key_ids: np.ndarray  # int32 [T]: token ids grouped by their bytes, ascending within a group
    max_token_len: int

    @property
    def num_nodes(self) -> int:
        return int(self.has_child.shape[0])

    @property
    def single_id(self) -> bool:
        """True when no two ids share bytes (lets the walk skip a CSR expansion)."""
        return int(self.key_offsets[-1]) == int(self.key_offsets.shape[0] - 1)


def build_automaton(token_bytes: Sequence[bytes]) -> VocabAutomaton:
    """Build the token trie; pure function of the decoded vocabulary."""
    ids = [i for i, b in enumerate(token_bytes) if b]
    ids.sort(key=token_bytes.__getitem__)  # stable: equal bytes keep ascending ids
    data, offsets = join_keys(list(map(token_bytes.__getitem__, ids)))
    # Equal neighbours share their whole length: group them without a Python loop.
    lengths = np.diff(offsets)
    lcp = longest_common_prefixes(data, offsets)
    first = np.ones(len(ids), dtype=bool)
    first[1:] = (lcp[1:] != lengths[1:]) | (lengths[1:] != lengths[:-1])
    starts = np.flatnonzero(first)
    key_offsets = np.append(starts, len(ids)).astype(np.int32)
    key_ids = np.array(ids, dtype=np.int32)
    key_lengths = lengths[starts]
    key_bytes = np.ascontiguousarray(data[np.repeat(first, lengths)])
    trie = build_trie_from_buffer(key_bytes, np.concatenate([[0], np.cumsum(key_lengths)]).astype(np.int64))
    num_keys = int(starts.shape[0])
    edge_keys, edge_child, node_key64, has_child = trie.edges()
    node_key = node_key64.astype(np.int32)
    root_child = np.full(256, -1, dtype=np.int32)
    at_root = np.nonzero(trie.parent == 0)[0]
    root_child[trie.byte[at_root]] = at_root
    max_len = int(key_lengths.max()) if num_keys else 0
    return VocabAutomaton(
        root_child=root_child,
        edge_keys=edge_keys,
        edge_child=edge_child,
        has_child=has_child,
        node_key=node_key,
        key_offsets=key_offsets,
        key_ids=key_ids,
        max_token_len=max_len,
    )


# ---------------------------------------------------------------- disk cache


def _cache_path(fingerprint: str) -> Path:
    digest = fingerprint.split(":", 1)[-1]
    return cache_dir() / "automata" / f"v{CACHE_FORMAT}-{digest}.npz"


_ARRAY_FIELDS = [f.name for f in fields(VocabAutomaton) if f.name != "max_token_len"]


def save_cached(automaton: VocabAutomaton, fingerprint: str) -> Path | None:
    """Write atomically (temporary file, then rename); a failure only costs the cache."""
    arrays = {name: getattr(automaton, name) for name in _ARRAY_FIELDS}
    arrays["max_token_len"] = np.array([automaton.max_token_len], dtype=np.int64)
    return save_arrays(_cache_path(fingerprint), fingerprint, CACHE_FORMAT, arrays)


def load_cached(fingerprint: str) -> VocabAutomaton | None:
    """The cached automaton if present and intact; ``None`` when in any doubt."""
    arrays = load_arrays(_cache_path(fingerprint), fingerprint, CACHE_FORMAT, [*_ARRAY_FIELDS, "max_token_len"])
    if arrays is None:
        return None
    max_len = arrays.pop("max_token_len")
    if max_len.shape != (1,):
        return None
    return VocabAutomaton(max_token_len=int(max_len[0]), **arrays)


_MEMORY: dict[str, VocabAutomaton] = {}


def load_or_build(vocab: TokenSource) -> VocabAutomaton:
    """In-process memo, then the disk cache, then a fresh build (saved for next time)."""
    fp = vocab.fingerprint
    found = _MEMORY.get(fp)
    if found is None:
        found = load_cached(fp)
        if found is None:
            found = build_automaton(vocab.token_bytes)
            save_cached(found, fp)
        _MEMORY[fp] = found
    return found
