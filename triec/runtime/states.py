"""What every table answers about its states: acceptance, allowed tokens, advancing, bitmask rows. numpy only.

A :class:`~triec.runtime.table.MaskTable` and a restricted view of one
(:class:`~triec.runtime.restrict.RestrictedTable`) say which states exist and
which content tokens each allows; :class:`StateQueries` derives the rest once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from triec._arrays import find_sorted
from triec.encoding import PLAIN, Encoding
from triec.errors import ArtifactContentError, TokenizerMismatch, TokenNotAllowed
from triec.runtime.bitmask import scatter_bits, words_for
from triec.runtime.header import HeaderFields, TableHeader

if TYPE_CHECKING:
    from triec.runtime.tails import TailLayout
    from triec.runtime.token_classes import TokenClasses

FINISHED = -1
"""What :meth:`MaskTable.advance` returns for an EOS token at an accepting state."""


def merge_sorted(content: np.ndarray, extra: np.ndarray) -> np.ndarray:
    """``content`` (ascending, unique) with the ids of ``extra`` it lacks, ascending int32: a merge, O(n)
    (``np.union1d`` sorts everything again; this is the allowed row of every accepting state)."""
    extra = np.unique(extra).astype(content.dtype, copy=False)
    at = np.searchsorted(content, extra)
    if content.size:
        extra_new = content[np.minimum(at, content.size - 1)] != extra
        at, extra = at[extra_new | (at == content.size)], extra[extra_new | (at == content.size)]
    return np.insert(content, at, extra).astype(np.int32, copy=False)


class StateQueries(HeaderFields):
    """What a table and a restricted view answer alike.

    Subclasses say which states exist (:meth:`_check_state`,
    :meth:`_check_states`) and which content tokens each allows
    (:meth:`_content`, :meth:`_contents`); acceptance, EOS, advancing and the
    bitmask rows follow from that and from ``value_state`` here, once.
    """

    start: int = 0
    """The state before any token: the empty prefix."""

    tails: TailLayout | None = None
    """The tail layout's rows (:mod:`triec.runtime.tails`, format version 4), ``None`` where every row is stored."""
    classes: TokenClasses | None = None
    """A pattern table's rows by token class (:mod:`triec.runtime.token_classes`), ``None`` elsewhere."""

    value_state: np.ndarray
    _eos: np.ndarray
    encoding: Encoding = PLAIN
    """How values are spelled in the output (``prefix + spell(value) + suffix``); raw values by default."""
    _values: list[str] | None = None
    _strings: list[str] | None = None

    def hold_header(self, table_header: TableHeader) -> None:
        """Hold ``table_header`` (the vocabulary, the build, where it was loaded from) and its EOS ids as an array."""
        self.table_header = table_header
        self._eos = np.array(table_header.eos_token_ids, dtype=np.int32)

    def check_tokenizer(self, fingerprint_or_vocab: Any) -> None:
        """Raise :class:`TokenizerMismatch` unless the vocabulary is the one compiled for.

        Accepts a fingerprint string or a :class:`~triec.Vocabulary`; for the
        latter the EOS ids and the mask width must match too.
        """
        fp = getattr(fingerprint_or_vocab, "fingerprint", fingerprint_or_vocab)
        if fp != self.tokenizer_fingerprint:
            raise TokenizerMismatch(
                f"artifact was compiled for tokenizer {self.tokenizer_fingerprint} "
                f"({self.tokenizer_name or 'unnamed'}), not {fp}: its masks would be wrong for this tokenizer"
            )
        eos = getattr(fingerprint_or_vocab, "eos_token_ids", None)
        if eos is not None and tuple(eos) != self.eos_token_ids:
            raise TokenizerMismatch(
                f"artifact allows EOS ids {list(self.eos_token_ids)}, the vocabulary uses {list(eos)}"
            )
        width = getattr(fingerprint_or_vocab, "vocab_size", None)
        if width is not None and int(width) != self.vocab_size:
            raise TokenizerMismatch(f"artifact masks are {self.vocab_size} wide, the vocabulary is {width} wide")

    @property
    def num_values(self) -> int:
        return int(self.value_state.shape[0])

    @property
    def words_per_row(self) -> int:
        """int32 words in one bitmask row: ``ceil(vocab_size / 32)``."""
        return words_for(self.vocab_size)

    value_bytes: list[bytes]

    @property
    def strings(self) -> list[str]:
        """The exact strings the masks spell, in table order: ``encoding.spell(value)`` of each value."""
        if self._strings is None:
            self._strings = [b.decode("utf-8") for b in self.value_bytes]
        return self._strings

    @property
    def values(self) -> list[str]:
        """The values as the user gave them, in table order (sorted by the UTF-8 bytes of their spellings).

        Equal to :attr:`strings` for a raw encoding without prefix or suffix;
        otherwise each string with the prefix, suffix and JSON quoting undone.
        """
        if self._values is None:
            strings = self.strings
            self._values = strings if self.encoding.plain else [self.encoding.unspell(t) for t in strings]
        return self._values

    def prefix(self, state: int) -> bytes:  # pragma: no cover - overridden
        raise NotImplementedError

    @property
    def num_states(self) -> int:  # pragma: no cover - overridden
        raise NotImplementedError

    def _check_state(self, state: int) -> int:
        """``state`` as an int, or IndexError when it is not a state here (states are ``0 .. num_states - 1``
        unless a subclass numbers them otherwise)."""
        s = int(state)
        if not 0 <= s < self.num_states:
            raise IndexError(f"state {state} out of range (0..{self.num_states - 1}){terminal_note(s)}")
        return s

    def _check_states(self, states: np.ndarray) -> None:
        """IndexError unless every one of ``states`` is a state here."""
        if states.view(np.uint64).max() >= self.num_states:  # negatives read as unsigned are huge
            bad = int(states[(states < 0) | (states >= self.num_states)][0])
            raise IndexError(f"state {bad} out of range (0..{self.num_states - 1}){terminal_note(bad)}")

    def _content(self, state: int) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - overridden
        """(content tokens ascending, the state each leads to) of one checked state."""
        raise NotImplementedError

    def transitions(self, state: int) -> tuple[np.ndarray, np.ndarray]:
        """(content tokens ascending, the state each leads to) of ``state``: one row of the table, as the schema
        layer's slots read it (no EOS ids; IndexError for a state that is not one here)."""
        return self._content(self._check_state(state))

    def _contents(self, states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - overridden
        """(row index, content token) pairs of a batch of checked states."""
        raise NotImplementedError

    def value_index(self, state: int) -> int:
        """Index of the value ``state`` completes, or -1 when it is not accepting."""
        s = self._check_state(state)
        i = find_sorted(self.value_state, s)
        return i if i < self.num_values and int(self.value_state[i]) == s else -1

    def is_accepting(self, state: int) -> bool:
        """True when the prefix of ``state`` is itself a value (EOS is allowed there)."""
        return self.value_index(state) >= 0

    def value(self, state: int) -> str | None:
        """The value ``state`` completes, or ``None``."""
        i = self.value_index(state)
        return None if i < 0 else self.values[i]

    def _live(self, state: int) -> int:
        if int(state) == FINISHED:
            raise TokenNotAllowed("the sequence already ended with EOS (state FINISHED): no token is allowed after it")
        return self._check_state(state)

    def allowed(self, state: int) -> np.ndarray:
        """Allowed token ids in ``state``, ascending int32, EOS ids included at accepting states."""
        content, _ = self._content(self._live(state))
        if self.value_index(state) < 0:
            return content
        return merge_sorted(content, self._eos)

    def advance(self, state: int, token_id: int) -> int:
        """The state after ``token_id``; :data:`FINISHED` for EOS at an accepting state.

        Raises :class:`TokenNotAllowed` for a token the state's mask does not allow.
        """
        s = self._live(state)
        t = int(token_id)
        if not 0 <= t < self.vocab_size:
            raise TokenNotAllowed(f"token {t} is outside the vocabulary (0..{self.vocab_size - 1})")
        found = self._step(s, t)
        if found >= 0:
            return found
        if t in self.eos_token_ids and self.is_accepting(state):
            return FINISHED
        raise TokenNotAllowed(f"token {t} is not allowed in state {int(state)}{self._described(int(state))}")

    def _step(self, state: int, token: int) -> int:
        """The state content token ``token`` (in the mask's range) leads to from checked ``state``, or -1."""
        tokens, nxt = self._content(state)
        i = find_sorted(tokens, token)
        if i < tokens.shape[0] and int(tokens[i]) == token:
            return int(nxt[i])
        return -1

    def _described(self, state: int) -> str:
        """`` (prefix b'...')`` for messages; empty when a loaded table's value bytes are corrupt."""
        try:
            return f" (prefix {self.prefix(state)!r})"
        except ArtifactContentError:
            return ""

    def walk(self, tokens: Iterable[int], state: int | None = None) -> int:
        """Advance through a token sequence and return the final state."""
        s = self.start if state is None else state
        for t in tokens:
            s = self.advance(s, t)
        return s

    def fill_bitmask(self, states: Sequence[int] | np.ndarray, out: np.ndarray) -> np.ndarray:
        """Write one bitmask row per state into ``out[:len(states)]`` and return that view.

        Row layout is xgrammar's, llguidance's and vLLM's (:mod:`triec.runtime.bitmask`),
        1 = allowed. Every word of the rows
        is written, so this costs O(rows x width); a decode loop that refills
        one buffer should use :meth:`MaskTable.mask_writer`, which is O(allowed).
        """
        st = state_array(states)
        n = st.shape[0]
        width = self.words_per_row
        if out.dtype != np.int32 or out.ndim != 2 or out.shape[1] != width or out.shape[0] < n:
            raise ValueError(f"out must be an int32 array of shape (>= {n}, {width}), got {out.dtype} {out.shape}")
        if n:
            self._check_states(st)
        rows = out[:n]
        if not rows.flags.c_contiguous:  # e.g. a column slice of a wider buffer: fill a copy, then assign
            rows[...] = self.fill_bitmask(st, np.empty((n, width), dtype=np.int32))
            return rows
        rows.fill(0)
        if n == 0:
            return rows
        row, tokens = self._contents(st)
        accepting = np.flatnonzero(self._accepting_mask(st))
        if accepting.size and self._eos.size:
            tokens = np.concatenate([tokens, np.tile(self._eos.astype(np.int64), accepting.size)])
            row = np.concatenate([row, np.repeat(accepting, self._eos.size)])
        return scatter_bits(rows, row, tokens)

    def _accepting_mask(self, states: np.ndarray) -> np.ndarray:
        i = self.value_state.searchsorted(states.astype(self.value_state.dtype))  # checked in range: no O(K) cast
        inside = i < self.num_values
        hit = np.zeros(states.shape[0], dtype=bool)
        hit[inside] = self.value_state[i[inside]] == states[inside]
        return hit

    def bitmask(self, state: int) -> np.ndarray:
        """One state's bitmask row (a fresh int32 array)."""
        out = np.empty((1, self.words_per_row), dtype=np.int32)
        row: np.ndarray = self.fill_bitmask([state], out)[0]  # numpy's stubs type an integer index as Any
        return row


def terminal_note(state: int) -> str:
    """The hint an IndexError adds when the state asked about is :data:`FINISHED`."""
    return ": FINISHED (-1) ends a sequence and has no mask row" if state == FINISHED else ""


def state_array(states: Sequence[int] | np.ndarray) -> np.ndarray:
    """States as a flat int64 array; an id that does not even fit int64 is out of range (IndexError)."""
    try:
        return np.asarray(states, dtype=np.int64).reshape(-1)
    except OverflowError:
        bad = next(x for x in np.asarray(states, dtype=object).reshape(-1) if not -(2**63) <= int(x) < 2**63)
        raise IndexError(f"state {bad} out of range: it does not even fit in int64") from None
