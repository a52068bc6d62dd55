"""``triec.compile``: values + vocabulary -> :class:`~triec.runtime.table.MaskTable`.

Pure functions: values in, arrays out. Reading files and writing artifacts
happen at the edges (:mod:`triec.compiler.values`, :mod:`triec.artifact`).
"""

from __future__ import annotations

import itertools
import operator
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from triec.compiler.keysort import SortedKeys, sort_unique
from triec.compiler.tails import compile_pieces, tail_lengths
from triec.compiler.walk import walk
from triec.encoding import PLAIN, RAW, Encoding, as_encoding
from triec.errors import EosTextWarning, ValuesError
from triec.keys import prepare_values, spell_all
from triec.runtime import MaskTable
from triec.runtime.ids import IDS_FINGERPRINT
from triec.runtime.kinds import TOKENIZATIONS, Tokenization
from triec.runtime.table import TailMaskTable
from triec.runtime.tails import TailIndex
from triec.tokenizer.vocabulary import Vocabulary
from triec.trie import Trie, build_trie_from_buffer, join_keys, longest_common_prefixes

IMPLEMENTATIONS = ("numpy", "reference")
LAYOUTS = ("auto", "full", "tails")
"""Where rows are stored: ``full`` every state's row (format versions 1 and 2), ``tails`` only the branching
states' (version 4: tail states' rows served from the values, :mod:`triec.runtime.tails`), ``auto`` the tail layout
where tails are most of the states and their rows outweigh the token index it stores (:func:`choose_layout`)."""
TAIL_SHARE = 0.5
"""``auto`` picks the tail layout only when at least this share of the states are tails."""
TAIL_STATES_PER_BYTE = 0.25
"""... and when the set has at least this many states per value byte (the paper's r): the full layout stores about
25 bytes per state, so below this it is under about 6 times the text and its sliced rows are kept (tool names:
r = 0.10 at K = 1,000,000; package names 0.44, titles 0.75)."""
MAX_VALUE_BYTES = 2**31 - 2
"""Most value bytes one table holds: states (at most bytes + 1) and value ids are int32 in the format."""
SMALL_SET = 500  # up to this many values, prepare_values (Python's sort) is faster than keysort
TINY_SET = 64  # up to this many values, LCPs in Python beat a dozen numpy calls


@dataclass
class CompileStats:
    """What a compile did and how long each phase took (seconds)."""

    num_values: int = 0
    duplicates: int = 0
    value_bytes: int = 0
    num_states: int = 0
    num_allowed: int = 0
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def sharing_ratio(self) -> float:
        """The paper's prefix-sharing ratio r = trie states / value bytes (lower = more sharing)."""
        return self.num_states / self.value_bytes if self.value_bytes else 1.0


def prepare_buffer(values: Iterable[str | bytes]) -> SortedKeys:
    """Like :func:`prepare_values`, into one sorted buffer: no ``bytes`` object per value.

    A list of ``str`` is joined and encoded once and sorted by
    :func:`triec.compiler.keysort.sort_unique` (a million values: about 60 MB and 1 s
    less than ``prepare_values``). Small sets (where Python's sort wins over a
    dozen numpy calls) and anything else (bytes, bad input) go through
    :func:`prepare_values`, which names the offending value.
    """
    items = values if isinstance(values, list) else list(values)
    if len(items) <= SMALL_SET:
        keys, dups = prepare_values(items)
        buf, offsets = join_keys(keys)
        tiny = len(keys) <= TINY_SET and buf.shape[0] <= 64 * TINY_SET
        lcp = _python_lcps(keys) if tiny else longest_common_prefixes(buf, offsets)
        return SortedKeys.contiguous(buf, offsets, lcp, dups, keys)
    try:
        joined = "".join([*items, "\0" * 8])  # 8 spare bytes: keysort reads 8 at a time, without a copy
        data = joined.encode("utf-8")
    except (TypeError, UnicodeEncodeError):
        keys, dups = prepare_values(items)
        buf, offsets = join_keys(keys)
        return SortedKeys.contiguous(buf, offsets, longest_common_prefixes(buf, offsets), dups)
    if not items:
        raise ValuesError("no values: a mask table needs at least one value")
    if joined.isascii():
        lengths = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
    else:
        lengths = np.fromiter(map(len, map(str.encode, items)), dtype=np.int64, count=len(items))
    del joined
    offsets = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    del lengths
    return sort_unique(np.frombuffer(data, dtype=np.uint8), offsets)


def _python_lcps(keys: list[bytes]) -> np.ndarray:
    lcp = [0]
    for a, b in itertools.pairwise(keys):
        n = min(len(a), len(b))
        i = 0
        while i < n and a[i] == b[i]:
            i += 1
        lcp.append(i)
    return np.array(lcp, dtype=np.int64)


def compile_keys(
    keys: list[bytes],
    vocab: Vocabulary,
    *,
    implementation: str = "numpy",
    stats: CompileStats | None = None,
    encoding: Encoding = PLAIN,
    progress: Callable[[int, int], None] | None = None,
) -> MaskTable:
    """Compile sorted, unique UTF-8 keys (the exact strings, already spelled with ``encoding``).

    ``progress(done, total)`` hears the walk's rounds (numpy path).
    """
    data, offsets = join_keys(keys)
    sk = SortedKeys.contiguous(data, offsets, longest_common_prefixes(data, offsets), 0, keys)
    return compile_sorted(sk, vocab, implementation=implementation, stats=stats, encoding=encoding, progress=progress)


def warn_eos_texts(data: bytes | np.ndarray, offsets: np.ndarray, vocab: Vocabulary) -> None:
    """Warn when an EOS id is an ordinary text token (``--eos 0`` on GPT-2 makes ``!`` end the output) whose text
    some values hold: the token is never content, so a value that only it can spell is never written.

    One ``bytes.find`` over the values' buffer per such EOS id: O(value bytes), no cost without them.
    """
    if not vocab.eos_texts:
        return
    buf = data if isinstance(data, bytes) else data.tobytes()
    for tid, text in sorted(vocab.eos_texts.items()):
        at = buf.find(text)
        if at < 0:
            continue
        i = int(np.searchsorted(offsets, at, side="right")) - 1
        example = buf[int(offsets[i]) : int(offsets[i + 1])]
        warnings.warn(eos_text_message(tid, text, example), EosTextWarning, stacklevel=3)


def eos_text_message(tid: int, text: bytes, example: bytes) -> str:
    """What :func:`warn_eos_texts` (and ``triec verify``) say about an EOS id that values hold as text."""
    return (
        f"EOS id {tid} is the text token {text!r}: it ends the output and is never part of a value, and values "
        f"hold its text (e.g. {example[:60]!r}); a value spelled only through it can never be written. "
        "Is it the model's end-of-sequence token? (--eos / eos_token_ids)"
    )


def compile_sorted(
    sk: SortedKeys,
    vocab: Vocabulary,
    *,
    implementation: str = "numpy",
    stats: CompileStats | None = None,
    encoding: Encoding = PLAIN,
    progress: Callable[[int, int], None] | None = None,
    layout: str = "auto",
) -> MaskTable:
    """Compile sorted, unique keys held in one buffer with their LCPs (:func:`prepare_buffer`).

    ``layout``: one of :data:`LAYOUTS` (the reference implementation writes the full layout)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, not {layout!r}")
    stats = stats if stats is not None else CompileStats()
    total = int(sk.offsets[-1])
    if total > MAX_VALUE_BYTES:
        raise ValuesError(
            f"{sk.offsets.shape[0] - 1:,} values of {total:,} bytes: over the {MAX_VALUE_BYTES:,}-byte limit "
            "(every byte can be a trie state, and state ids are int32)"
        )
    warn_eos_texts(sk.data, sk.offsets, vocab)
    if implementation == "numpy" and layout != "full":
        lengths = np.diff(sk.offsets)
        num_states = 1 + int((lengths - sk.lcp).sum())
        num_tails = int(tail_lengths(sk.lcp, lengths).sum())
        del lengths
        if layout == "tails" or choose_layout(num_states, num_tails, vocab.num_tokens, int(sk.offsets[-1])):
            return _compile_tail_layout(sk, vocab, stats, encoding, progress)
    t0 = time.perf_counter()
    automaton = vocab.automaton if implementation == "numpy" else None
    t1 = time.perf_counter()
    trie = build_trie_from_buffer(sk.data, sk.offsets, sk.lcp, sk.starts)
    keys, stats.duplicates = sk.keys, sk.duplicates
    del sk  # compile() passes it on without keeping it: the values buffer can go with the trie's copy
    t2 = time.perf_counter()
    stats.num_values = trie.num_keys
    stats.value_bytes = int(trie.key_offsets[-1])
    value_state, value_lcp = trie.terminal.astype(np.int32), trie.lcp.astype(np.int32)
    if implementation == "numpy":
        assert automaton is not None
        # the walk reads parents and bytes alone, the table value states and LCPs (now int32):
        # the value bytes and the per-value int64 arrays go before the walk
        empty = np.zeros(0, dtype=np.int64)
        trie = replace(
            trie,
            data=empty.view(np.uint8),
            key_offsets=empty,
            lcp=value_lcp,
            terminal=value_state,
            depth=empty,
            key_starts=empty,
        )
        tr = walk(trie, automaton, vocab.vocab_size, progress)
        offsets, tokens, next_state = tr.offsets, tr.tokens, tr.next_state
        del tr
    elif implementation == "reference":
        from triec.compiler.reference import reference_transitions

        offsets, tokens, next_state = reference_transitions(_keys_of(trie), vocab.token_bytes, trie.num_nodes)
    else:
        raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, not {implementation!r}")
    t3 = time.perf_counter()
    table = mask_table(trie, offsets, tokens, next_state, vocab, encoding, keys)
    stats.num_states = trie.num_nodes
    stats.num_allowed = table.num_allowed
    stats.phases.update({"automaton": t1 - t0, "trie": t2 - t1, "masks": t3 - t2})
    return table


def _compile_tail_layout(
    sk: SortedKeys,
    vocab: Vocabulary,
    stats: CompileStats,
    encoding: Encoding,
    progress: Callable[[int, int], None] | None,
) -> MaskTable:
    """The tail layout's table (:mod:`triec.compiler.tails`: piece by piece, memory bounded by a piece)."""
    t0 = time.perf_counter()
    vocab.automaton  # noqa: B018 - loaded or built before the clock of the pieces
    index = token_index(vocab)
    t1 = time.perf_counter()
    keys, stats.duplicates = sk.keys, sk.duplicates
    stats.num_values = int(sk.lcp.shape[0])
    stats.value_bytes = int(sk.offsets[-1])
    arrays = compile_pieces(sk, vocab, progress)
    del sk
    table = TailMaskTable.from_compile(
        value_bytes=keys,
        token_index=index,
        **arrays,
        **vocab.table_fields(),
        encoding=encoding,
    )
    stats.num_states = table.num_states
    stats.num_allowed = table.num_allowed
    stats.phases.update({"automaton": t1 - t0, "masks": time.perf_counter() - t1})
    return table


def mask_table(
    trie: Trie,
    offsets: np.ndarray,
    tokens: np.ndarray,
    next_state: np.ndarray,
    vocab: Vocabulary,
    encoding: Encoding = PLAIN,
    keys: list[bytes] | None = None,
) -> MaskTable:
    """The runtime table of a trie and its allowed transitions (CSR), stamped with the vocabulary it is for.

    Correct by construction (:meth:`MaskTable.from_compile`); ``keys`` are the trie's sorted keys when at hand.
    """
    return MaskTable.from_compile(
        value_bytes=keys,
        allowed_offsets=offsets.astype(np.uint32, copy=False),
        allowed_tokens=tokens.astype(np.int32, copy=False),
        allowed_next=next_state.astype(np.int32, copy=False),
        value_state=trie.terminal.astype(np.int32, copy=False),
        value_lcp=trie.lcp.astype(np.int32, copy=False),
        state_byte=trie.byte,
        **vocab.table_fields(),
        encoding=encoding,
    )


_INDEX: dict[str, TailIndex] = {}


def token_index(vocab: Vocabulary) -> TailIndex:
    """The vocabulary's :class:`TailIndex` (what a tail table stores), built once per fingerprint."""
    found = _INDEX.get(vocab.fingerprint)
    if found is None:
        if len(_INDEX) >= 4:
            _INDEX.clear()
        found = _INDEX[vocab.fingerprint] = TailIndex.of(vocab.token_bytes, vocab.eos_token_ids)
    return found


INDEX_BYTES_PER_TOKEN = 20
"""About what the token index stores per token (ids, offsets, bytes): :func:`choose_layout`'s estimate."""


def choose_layout(num_states: int, num_tails: int, num_tokens: int, value_bytes: int) -> bool:
    """``auto``'s choice, in O(K) before any trie is built: the tail layout when tails are at least
    :data:`TAIL_SHARE` of the states, the set has at least :data:`TAIL_STATES_PER_BYTE` states per value byte, and
    the tails' rows (at least 8 bytes each in the full layout: an offset and a pair) outweigh the token index twice
    (estimated at :data:`INDEX_BYTES_PER_TOKEN` a token)."""
    return (
        num_tails >= TAIL_SHARE * num_states
        and num_states >= TAIL_STATES_PER_BYTE * value_bytes
        and 8 * num_tails >= 2 * INDEX_BYTES_PER_TOKEN * num_tokens
    )


def _keys_of(trie: Trie) -> list[bytes]:
    raw = trie.data.tobytes()
    lengths = np.diff(trie.key_offsets).tolist()
    return [raw[a : a + n] for a, n in zip(trie.key_starts.tolist(), lengths, strict=True)]


def compile(
    values: Iterable[str | bytes],
    vocab: Vocabulary | str | None = None,
    *,
    encoding: str | Encoding = RAW,
    prefix: str = "",
    suffix: str = "",
    implementation: str = "numpy",
    stats: CompileStats | None = None,
    tokenization: str | Tokenization = Tokenization.ANY,
    progress: Callable[[int, int], None] | None = None,
    encoder: Any = None,
    layout: str = "auto",
) -> MaskTable:
    """Compile a finite set of strings into a :class:`MaskTable` for ``vocab``.

    ``vocab`` is a :class:`Vocabulary` or anything :meth:`Vocabulary.load`
    accepts (default: the bundled ``qwen2``). Each value is compiled as
    ``prefix + spelling + suffix``, the spelling being the value itself
    (``encoding="raw"``) or its JSON string literal (``encoding="json"``);
    ``table.values`` gives the values back as passed. Duplicates are dropped;
    the table's values are sorted by the UTF-8 bytes of their spellings.

    ``tokenization="any"`` allows every token sequence that spells a value (what grammar engines
    allow); ``"canonical"`` only the one the tokenizer's encoder produces for the whole spelled
    string (:mod:`triec.compiler.canonical`; the vocabulary must have an encoder, and values are then in
    token order). ``encoder`` replaces the vocabulary's encoder for canonical tables: anything with
    ``encode_batch(texts, add_special_tokens=False)`` returning objects with ``.ids`` (llama.cpp's own:
    :class:`triec.integrations.llama_cpp.LlamaCppEncoder`). ``progress(done, total)`` is called as the trie
    walk goes (``triec compile``'s bar). ``layout`` (:data:`LAYOUTS`): where rows are stored; ``auto`` stores
    only the branching rows (format version 4) where one value alone lies below most states (titles, names), every
    row otherwise, for canonical tables alike (their tails keep each value's tail tokens). Every layout answers alike,
    state by state.
    """
    enc = as_encoding(encoding, prefix, suffix)
    if tokenization not in TOKENIZATIONS:
        raise ValueError(f"tokenization must be one of {TOKENIZATIONS}, not {tokenization!r}")
    if not isinstance(vocab, Vocabulary):
        vocab = Vocabulary.load(vocab)
    stats = stats if stats is not None else CompileStats()
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, not {layout!r}")
    if tokenization == Tokenization.CANONICAL:
        return _compile_canonical(values, vocab, enc, stats, encoder, layout)
    # no local holds the prepared values: compile_sorted frees their buffer once the trie is built
    return compile_sorted(
        _prepare_timed(values, enc, stats),
        vocab,
        implementation=implementation,
        stats=stats,
        encoding=enc,
        progress=progress,
        layout=layout,
    )


def _compile_canonical(
    values: Iterable[str | bytes],
    vocab: Vocabulary,
    enc: Encoding,
    stats: CompileStats,
    encoder: Any = None,
    layout: str = "auto",
) -> MaskTable:
    """A canonical table: the full token trie table, then (``tails``, or ``auto`` under :func:`choose_layout`)
    its tail layout (:func:`triec.compiler.canonical.tail_table`)."""
    from triec.compiler.canonical import canonical_ids, tail_table, token_order, token_trie_table

    t0 = time.perf_counter()
    keys, stats.duplicates = prepare_values(spell_all(values, enc))
    t1 = time.perf_counter()
    ids = canonical_ids(keys, encoder if encoder is not None else vocab.encoder(), vocab)
    t2 = time.perf_counter()
    order = token_order(ids)
    table = token_trie_table(keys, ids, vocab, enc, order)
    t3 = time.perf_counter()
    stats.num_values, stats.value_bytes = len(keys), sum(map(len, keys))
    if layout != "full":
        lengths = np.fromiter(map(len, table.value_bytes), dtype=np.int64, count=len(keys))
        num_tails = int(tail_lengths(table.value_lcp, lengths).sum())
        if layout == "tails" or choose_layout(table.num_states, num_tails, vocab.num_tokens, stats.value_bytes):
            table = tail_table(table, [ids[k] for k in order], vocab, token_index(vocab))
    # token trie and rows at once; then the tail layout
    stats.phases.update({"values": t1 - t0, "encode": t2 - t1, "trie": t3 - t2, "masks": time.perf_counter() - t3})
    stats.num_states, stats.num_allowed = table.num_states, table.num_allowed
    return table


def _prepare_timed(values: Iterable[str | bytes], enc: Encoding, stats: CompileStats) -> SortedKeys:
    t0 = time.perf_counter()
    sk = prepare_buffer(spell_all(values, enc))
    stats.phases["values"] = time.perf_counter() - t0
    return sk


def compile_json_schema(
    schema: dict[str, Any] | str,
    vocab: Vocabulary | str | None = None,
    *,
    implementation: str = "numpy",
    stats: CompileStats | None = None,
    tokenization: str | Tokenization = Tokenization.ANY,
) -> MaskTable:
    """Compile the instances of a flat JSON Schema object (one string ``enum`` property, any ``const`` ones).

    The strings are xgrammar's compact JSON (``any_whitespace=False``):
    ``{"label": "x", "version": 1}``; ``table.values`` are the enum members.
    Any other schema raises :class:`~triec.errors.ValuesError` naming the
    unsupported keyword (see :mod:`triec.compiler.json_schema`). ``tokenization`` as for :func:`compile`
    (canonical: each whole instance's encoder tokens).
    """
    from triec.compiler.json_schema import parse_schema

    values, enc = parse_schema(schema)
    return compile(values, vocab, encoding=enc, implementation=implementation, stats=stats, tokenization=tokenization)


def compile_ids(
    items: Iterable[Sequence[int]],
    vocab: Vocabulary | str | None = None,
    *,
    vocab_size: int | None = None,
    eos_token_ids: Sequence[int] | None = None,
    name: str | None = None,
    stats: CompileStats | None = None,
) -> MaskTable:
    """Compile a semantic-ID catalog: each item a sequence of token ids, the table its token trie.

    No byte walk and no tokenizer: the mask width and the EOS ids are all it needs, from ``vocab`` (a
    :class:`Vocabulary` or anything :meth:`Vocabulary.load` accepts, which the table is then bound to, as
    ``triec.compile``'s are) or from ``vocab_size`` and ``eos_token_ids`` alone (the table's tokenizer fingerprint is
    then ``"none"`` and ``name`` its tokenizer name). With both, ``vocab_size``/``eos_token_ids`` override the
    vocabulary's. Every id must lie in ``0 .. vocab_size - 1`` and be no EOS id; duplicates are dropped (counted
    in ``stats.duplicates``), and an item may be a prefix of another (its state is accepting and has children).
    ``table.values`` are the items' ids joined by spaces in token order, ``table.value_ids`` the lists
    (:mod:`triec.compiler.ids`).
    """
    from triec.compiler.ids import check_items, ids_table, items_from_python

    fields = ids_fields(vocab, vocab_size, eos_token_ids, name)
    t0 = time.perf_counter()
    parsed = items_from_python(items)
    check_items(parsed, fields["vocab_size"], fields["eos_token_ids"])
    stats = stats if stats is not None else CompileStats()
    t1 = time.perf_counter()
    table, stats.duplicates = ids_table(parsed, fields)
    stats.num_values, stats.value_bytes = table.num_values, int(table.value_lcp.sum() + table.num_states - 1)
    stats.num_states, stats.num_allowed = table.num_states, table.num_allowed
    stats.phases.update({"values": t1 - t0, "trie": time.perf_counter() - t1})
    return table


def ids_fields(
    vocab: Vocabulary | str | None,
    vocab_size: int | None,
    eos_token_ids: Sequence[int] | None,
    name: str | None = None,
) -> dict[str, Any]:
    """An ids table's vocabulary fields (:meth:`Vocabulary.table_fields` with ``tokenization="ids"``): from a
    vocabulary, or from a width and EOS ids alone (fingerprint :data:`IDS_FINGERPRINT`)."""
    if vocab is None:
        if vocab_size is None or eos_token_ids is None:
            raise ValueError("compile_ids needs a vocab, or vocab_size and eos_token_ids")
        width = operator.index(vocab_size)
        eos = tuple(sorted({operator.index(e) for e in eos_token_ids}))
        if not 1 <= width < 2**31:
            raise ValueError(f"vocab_size must be in 1..{2**31 - 1}, not {width}")
        if not eos or not all(0 <= e < width for e in eos):
            raise ValueError(f"eos_token_ids must be at least one id in 0..{width - 1}, not {list(eos)}")
        return {
            "vocab_size": width,
            "eos_token_ids": eos,
            "tokenizer_fingerprint": IDS_FINGERPRINT,
            "tokenizer_name": name or "",
            "build_options": {"tokenization": Tokenization.IDS.value},
        }
    if not isinstance(vocab, Vocabulary):
        vocab = Vocabulary.load(vocab, vocab_size=vocab_size, eos_token_ids=eos_token_ids)
    elif vocab_size is not None or eos_token_ids is not None:
        raise ValueError("compile_ids: give vocab_size/eos_token_ids with a tokenizer name, not a loaded Vocabulary")
    fields = vocab.table_fields(tokenization=Tokenization.IDS.value)
    if name:
        fields["tokenizer_name"] = name
    return fields
