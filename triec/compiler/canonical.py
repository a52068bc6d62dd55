"""Canonical-only tables: each value's own encoder tokenization and nothing else (paper, appendix H.9).

The default table (``tokenization="any"``) allows every token sequence that spells a value. A
canonical table allows exactly one per value: what the tokenizer's encoder produces for the whole
spelled string (prefix, value, suffix, JSON quoting). That language is not a function of the bytes
read so far (``abc`` = ``a b c`` and ``abd`` = ``ab d`` must not admit ``ab c``), so its states are
nodes of a trie over token ids (GENRE's construction), not of the byte trie.

It is still an ordinary :class:`~triec.runtime.table.MaskTable`, same arrays, same artifact format:
every token edge of the token trie is written as a chain of one state per byte (``state_byte``), the
edge's token allowed at the chain's first state and leading to its last; the states inside a chain
allow nothing. Numbered in preorder with siblings by token id, ``value_state`` still increases and
``value_lcp[i]`` is the depth (in bytes) where value i's path leaves value i-1's, so values and
prefixes rebuild as for the byte trie. What differs: values are in token order, not byte order, and
two states may share a byte prefix; the header's ``build_options.tokenization`` says which.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from typing import Any

import numpy as np

from triec.encoding import Encoding
from triec.errors import ValuesError
from triec.runtime import MaskTable
from triec.tokenizer.vocabulary import Vocabulary


def canonical_ids(keys: Sequence[bytes], encoder: Any, vocab: Vocabulary) -> list[list[int]]:
    """Each key's encoder tokenization (one batch call), checked to spell the key byte for byte.

    A key the encoder does not spell back (a normalizer that rewrites it, a special token inside it)
    has no canonical tokenization in this vocabulary: :class:`ValuesError` names it.
    """
    texts = [k.decode("utf-8") for k in keys]
    encode = getattr(encoder, "encode_batch_fast", encoder.encode_batch)
    ids = [e.ids for e in encode(texts, add_special_tokens=False)]
    token_bytes = vocab.token_bytes
    n = len(token_bytes)
    # all at once: every id in range, each value's tokens as long as its key, and all tokens spell all keys
    counts = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    flat = np.fromiter(chain.from_iterable(ids), dtype=np.int64, count=int(counts.sum()))
    if flat.size == 0 or (flat.min() >= 0 and flat.max() < n):
        widths = np.fromiter(map(len, token_bytes), dtype=np.int64, count=n)[flat]
        spelled = np.zeros(len(ids), dtype=np.int64)
        np.add.at(spelled, np.repeat(np.arange(len(ids)), counts), widths)
        lengths = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
        if np.array_equal(spelled, lengths) and b"".join(map(token_bytes.__getitem__, flat.tolist())) == b"".join(keys):
            return ids
    for key, seq, text in zip(keys, ids, texts, strict=True):  # name the first value that is not spelled back
        if all(0 <= t < n for t in seq) and b"".join([token_bytes[t] for t in seq]) == key:
            continue
        bad = next((t for t in seq if not 0 <= t < n or not token_bytes[t]), None)
        if bad is not None:
            why = f"token id {bad}, which is never part of a value (a special or end token)"
        else:
            respelled = b"".join([token_bytes[t] for t in seq]).decode("utf-8", "replace")
            why = f"tokens that spell {respelled!r} (the encoder's normalizer rewrites it)"
        raise ValuesError(
            f"value {text!r}: {vocab.name}'s encoder turns it into {why}; it has no canonical tokenization here "
            "(use tokenization='any')"
        )
    return ids


def token_trie_table(
    keys: Sequence[bytes],
    ids: Sequence[list[int]],
    vocab: Vocabulary,
    encoding: Encoding,
) -> MaskTable:
    """The mask table of the token trie over ``ids`` (``ids[i]`` spells ``keys[i]``; keys unique)."""
    order = sorted(range(len(ids)), key=lambda i: ids[i])
    token_bytes = vocab.token_bytes
    state_byte = bytearray(b"\0")  # state 0: the root (its byte is never read)
    src: list[int] = []  # one entry per token edge: the state it leaves, its token, the state it reaches
    tok: list[int] = []
    dst: list[int] = []
    value_state = np.empty(len(ids), dtype=np.int32)
    value_lcp = np.empty(len(ids), dtype=np.int32)
    node = [0]  # node[d]: the state after the current path's first d tokens
    depth = [0]  # depth[d]: its depth in bytes
    prev: Sequence[int] = ()
    for i, k in enumerate(order):
        seq = ids[k]
        shared = 0
        limit = min(len(seq), len(prev))
        while shared < limit and seq[shared] == prev[shared]:
            shared += 1
        del node[shared + 1 :], depth[shared + 1 :]
        value_lcp[i] = depth[shared]
        for t in seq[shared:]:
            b = token_bytes[t]
            first = len(state_byte)
            state_byte += b
            src.append(node[-1])
            tok.append(t)
            dst.append(first + len(b) - 1)
            node.append(first + len(b) - 1)
            depth.append(depth[-1] + len(b))
        value_state[i] = node[-1]
        prev = seq
    num_states = len(state_byte)
    src_a = np.asarray(src, dtype=np.int64)
    at = np.argsort(src_a, kind="stable")  # siblings keep their token order
    offsets = np.zeros(num_states + 1, dtype=np.uint32)
    np.cumsum(np.bincount(src_a, minlength=num_states), out=offsets[1:])
    return MaskTable.from_compile(
        value_bytes=[keys[k] for k in order],
        allowed_offsets=offsets,
        allowed_tokens=np.asarray(tok, dtype=np.int32)[at],
        allowed_next=np.asarray(dst, dtype=np.int32)[at],
        value_state=value_state,
        value_lcp=value_lcp,
        state_byte=np.frombuffer(bytes(state_byte), dtype=np.uint8),
        vocab_size=vocab.vocab_size,
        eos_token_ids=vocab.eos_token_ids,
        tokenizer_fingerprint=vocab.fingerprint,
        tokenizer_name=vocab.name,
        build_options={
            "tokenizer_family": vocab.family,
            "tokenizer_tokens": vocab.num_tokens,
            "tokenization": "canonical",
        },
        encoding=encoding,
    )
