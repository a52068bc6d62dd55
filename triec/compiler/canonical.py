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

In the tail layout (format version 4, :func:`tail_table`), the states below which one value alone remains are not
stored: each such value keeps the canonical tokens that spell its tail (``tail_tokens``), and a tail state's row is
the next of them where it lies at a token boundary, nothing inside a chain
(:class:`~triec.runtime.tails.CanonicalTailLayout`).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from typing import Any

import numpy as np

from triec._arrays import concat_ranges
from triec.compiler.tails import branching_states, tail_lengths
from triec.encoding import Encoding
from triec.errors import ValuesError
from triec.runtime import MaskTable
from triec.runtime.table import TailMaskTable
from triec.runtime.tails import TailIndex, pack_pairs
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
    order: list[int] | None = None,
) -> MaskTable:
    """The mask table of the token trie over ``ids`` (``ids[i]`` spells ``keys[i]``; keys unique); ``order``, when
    given, is :func:`token_order` of ``ids``."""
    if order is None:
        order = token_order(ids)
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
        **vocab.table_fields(tokenization="canonical"),
        encoding=encoding,
    )


def token_order(ids: Sequence[list[int]]) -> list[int]:
    """The values' indices in table order: by token sequence (the token trie's preorder)."""
    return sorted(range(len(ids)), key=lambda i: ids[i])


def tail_table(full: MaskTable, seqs: Sequence[list[int]], vocab: Vocabulary, index: TailIndex) -> TailMaskTable:
    """The canonical table ``full`` (compiled, every row stored) in the tail layout: the branching states' rows
    packed, and each value's tail tokens, those of its canonical tokens ``seqs[i]`` (table order) that start at
    or past the depth where its tail hangs (a token boundary: where another value's path leaves it)."""
    vs = full.value_state
    keys = full.value_bytes
    k = len(keys)
    lengths = np.fromiter(map(len, keys), dtype=np.int64, count=k)
    tails = tail_lengths(full.value_lcp, lengths)
    branch = np.flatnonzero(branching_states(full.num_states, vs, tails))
    off = full.allowed_offsets.astype(np.int64)
    counts = off[branch + 1] - off[branch]
    pos = concat_ranges(off[branch], counts)
    stored = np.zeros(branch.shape[0] + 1, dtype=np.uint32)
    np.cumsum(counts, out=stored[1:], dtype=np.uint32)
    pairs, far_pairs, far_next = pack_pairs(
        stored, full.allowed_tokens[pos], full.allowed_next[pos], branch, vocab.vocab_size
    )
    per_value = np.fromiter(map(len, seqs), dtype=np.int64, count=k)
    flat = np.fromiter(chain.from_iterable(seqs), dtype=np.int64, count=int(per_value.sum()))
    width = np.fromiter(map(len, vocab.token_bytes), dtype=np.int64, count=len(vocab.token_bytes))[flat]
    owner = np.repeat(np.arange(k, dtype=np.int64), per_value)
    ends = np.cumsum(width)
    start = ends - width - np.concatenate([[0], ends])[np.cumsum(per_value) - per_value][owner]  # depth in value
    keep = (tails[owner] > 0) & (start >= (lengths - tails)[owner])
    tail_tokens = flat[keep].astype(np.int32)
    tail_offsets = np.zeros(k + 1, dtype=np.uint32)
    np.cumsum(np.bincount(owner[keep], minlength=k), out=tail_offsets[1:], dtype=np.uint32)
    assert int(width[keep].sum()) == int(tails.sum())  # every tail hangs at a token boundary
    tail_tokens.flags.writeable = False
    return TailMaskTable.from_compile(
        value_bytes=keys,
        allowed_offsets=stored,
        allowed_pairs=pairs,
        far_pairs=far_pairs,
        far_next=far_next,
        token_index=index,
        tail_tokens=tail_tokens,
        tail_token_offsets=tail_offsets,
        value_state=vs,
        value_lcp=full.value_lcp,
        state_byte=full.state_byte,
        **full.table_header.derived(),
        encoding=full.encoding,
    )
