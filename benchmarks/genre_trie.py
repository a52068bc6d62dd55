"""GENRE's published constraint structures, rebuilt for the ``beams`` suite's comparison.

GENRE (De Cao et al., "Autoregressive Entity Retrieval", ICLR 2021; github.com/facebookresearch/GENRE,
``genre/trie.py``, CC-BY-NC 4.0) constrains beam search with ``prefix_allowed_tokens_fn=lambda batch_id, sent:
trie.get(sent.tolist())`` over one of two tries of token-id sequences, each sequence one title's tokenization
(the decoder start token, the title's tokens, EOS):

* ``Trie``: nested Python dicts keyed by token id; ``get(prefix)`` walks the prefix one dict at a time
  (recursively, slicing the prefix) and returns the last dict's keys as a list, or ``[]`` off the trie;
* ``MarisaTrie``: each sequence spelled as a string (token id ``i`` as one character: ``chr(i)`` below 55,000,
  ``chr(i + 10,000)`` above, past the surrogates) in a ``marisa_trie.Trie``; ``get(prefix)`` lists every key
  below the prefix's string and collects the next character of each; the first two branches are cached.

What follows is that structure written anew (not GENRE's code): the same nesting, the same recursive walk and
slicing, the same string spelling, cache and key enumeration, so its per-call cost is GENRE's. One
tokenization per title, as GENRE builds it: the like-for-like triec table is ``tokenization="canonical"``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

Prefix = Sequence[int]


class DictTrie:
    """GENRE's ``Trie``: nested dicts of token ids, one path per sequence."""

    def __init__(self, sequences: Sequence[Sequence[int]]) -> None:
        self.trie_dict: dict[int, Any] = {}
        for sequence in sequences:
            node = self.trie_dict
            for token in sequence:
                child = node.get(token)
                if child is None:
                    child = node[token] = {}
                node = child

    def get(self, prefix: Prefix) -> list[int]:
        return _get_from_trie(list(prefix), self.trie_dict)


def _get_from_trie(prefix: list[int], trie_dict: dict[int, Any]) -> list[int]:
    """GENRE's ``Trie._get_from_trie``: recursive, one slice of the prefix a level."""
    if len(prefix) == 0:
        return list(trie_dict.keys())
    if prefix[0] in trie_dict:
        return _get_from_trie(prefix[1:], trie_dict[prefix[0]])
    return []


class MarisaTokenTrie:
    """GENRE's ``MarisaTrie``: sequences as strings in a marisa-trie, children found by listing the keys below."""

    def __init__(self, sequences: Sequence[Sequence[int]], max_token_id: int) -> None:
        import marisa_trie

        low = [chr(i) for i in range(min(max_token_id, 55_000))]
        high = [chr(i) for i in range(65_000, max_token_id + 10_000)] if max_token_id >= 55_000 else []
        self.int2char = low + high
        self.char2int = {self.int2char[i]: i for i in range(max_token_id)}
        self.zero_iter = sorted({s[0] for s in sequences})
        self.first_iter = sorted({s[1] for s in sequences if len(s) > 1})
        self.trie = marisa_trie.Trie("".join(self.int2char[i] for i in s) for s in sequences)

    def get(self, prefix: Prefix) -> list[int]:
        if len(prefix) == 0:
            return self.zero_iter
        if len(prefix) == 1 and list(prefix) == self.zero_iter:
            return self.first_iter
        key = "".join(self.int2char[i] for i in prefix)
        return list({self.char2int[e[len(key)]] for e in self.trie.keys(key) if len(e) > len(key)})


def sequences(token_ids: Sequence[Sequence[int]], start: int, eos: int) -> list[list[int]]:
    """GENRE's sequences: the decoder start token, a title's tokens, EOS."""
    return [[start, *ids, eos] for ids in token_ids]


def prefix_fn(
    trie: DictTrie | MarisaTokenTrie, prompt_length: int, start: int, dead: list[int]
) -> Callable[[int, Any], list[int]]:
    """GENRE's callback for a decoder-only model: the row's generated tokens after the decoder start token
    (GENRE's BART decoder input begins with it; here it stands first in every sequence).

    Off the trie GENRE's ``get`` returns ``[]``, which transformers' ``PrefixConstrainedLogitsProcessor`` rejects
    (a ``ValueError``: GENRE issues #51 and #59, transformers #28922). Beam search does put rows there: when fewer
    than 2W candidates are allowed it keeps ``-inf`` ones. The usual workaround stands in: ``dead`` (the EOS ids)."""

    def allowed(batch_id: int, sent: Any) -> list[int]:
        return trie.get([start, *sent[prompt_length:].tolist()]) or dead

    return allowed


def marisa_unavailable() -> str | None:
    try:
        import marisa_trie  # noqa: F401
    except ImportError:
        return "marisa-trie is not installed (pip install marisa-trie)"
    return None
