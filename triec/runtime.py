"""Decode-time lookups over compiled mask tables: numpy only.

A serving process imports this module (through ``triec.load``) and nothing
heavier. Every answer is a slice or a binary search into arrays that may be
memory-mapped from an artifact: ``allowed`` costs O(allowed tokens), never
O(vocabulary).

States are trie nodes numbered in preorder; state 0 is the empty prefix.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from triec.csr import concat_ranges
from triec.encoding import PLAIN, Encoding
from triec.errors import ArtifactContentError, TokenizerMismatch, TokenNotAllowed

if TYPE_CHECKING:
    from triec.mask_writer import MaskWriter
    from triec.restrict import RestrictedTable
    from triec.torch_table import TorchMaskTable

FINISHED = -1
"""What :meth:`MaskTable.advance` returns for an EOS token at an accepting state."""


class StateQueries:
    """What a table and a restricted view answer alike.

    Subclasses say which states exist (:meth:`_check_state`,
    :meth:`_check_states`) and which content tokens each allows
    (:meth:`_content`, :meth:`_contents`); acceptance, EOS, advancing and the
    bitmask rows follow from that and from ``value_state`` here, once.
    """

    start: int = 0
    """The state before any token: the empty prefix."""

    value_state: np.ndarray
    eos_token_ids: tuple[int, ...]
    _eos: np.ndarray
    encoding: Encoding = PLAIN
    """How values are spelled in the output (``prefix + spell(value) + suffix``); raw values by default."""
    _values: list[str] | None = None
    _strings: list[str] | None = None

    @property
    def num_values(self) -> int:
        return int(self.value_state.shape[0])

    @property
    def words_per_row(self) -> int:
        """int32 words in one bitmask row: ``ceil(vocab_size / 32)``."""
        return (int(self.vocab_size) + 31) // 32  # type: ignore[attr-defined]

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

    def _check_state(self, state: int) -> int:  # pragma: no cover - overridden
        """``state`` as an int, or IndexError when it is not a state here."""
        raise NotImplementedError

    def _check_states(self, states: np.ndarray) -> None:  # pragma: no cover - overridden
        """IndexError unless every one of ``states`` is a state here."""
        raise NotImplementedError

    def _content(self, state: int) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - overridden
        """(content tokens ascending, the state each leads to) of one checked state."""
        raise NotImplementedError

    def _contents(self, states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - overridden
        """(row index, content token) pairs of a batch of checked states."""
        raise NotImplementedError

    def value_index(self, state: int) -> int:
        """Index of the value ``state`` completes, or -1 when it is not accepting."""
        s = self._check_state(state)
        i = int(np.searchsorted(self.value_state, s))
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
        return np.union1d(content, self._eos).astype(np.int32)

    def advance(self, state: int, token_id: int) -> int:
        """The state after ``token_id``; :data:`FINISHED` for EOS at an accepting state.

        Raises :class:`TokenNotAllowed` for a token the state's mask does not allow.
        """
        tokens, nxt = self._content(self._live(state))
        t = int(token_id)
        if not 0 <= t < self.vocab_size:  # type: ignore[attr-defined]
            raise TokenNotAllowed(f"token {t} is outside the vocabulary (0..{self.vocab_size - 1})")  # type: ignore[attr-defined]
        i = int(np.searchsorted(tokens, t))
        if i < tokens.shape[0] and int(tokens[i]) == t:
            return int(nxt[i])
        if t in self.eos_token_ids and self.is_accepting(state):
            return FINISHED
        raise TokenNotAllowed(f"token {t} is not allowed in state {int(state)}{self._described(int(state))}")

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

        Row layout is xgrammar's, llguidance's and vLLM's: int32 words, token j
        is bit ``j & 31`` of word ``j >> 5``, 1 = allowed. Every word of the rows
        is written, so this costs O(rows x width); a decode loop that refills
        one buffer should use :meth:`MaskTable.mask_writer`, which is O(allowed).
        """
        st = _state_array(states)
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
        bits = np.left_shift(np.uint32(1), (tokens & 31).astype(np.uint32))
        np.bitwise_or.at(rows.reshape(-1).view(np.uint32), row * width + (tokens >> 5), bits)
        return rows

    def _accepting_mask(self, states: np.ndarray) -> np.ndarray:
        i = np.searchsorted(self.value_state, states)
        inside = i < self.num_values
        hit = np.zeros(states.shape[0], dtype=bool)
        hit[inside] = self.value_state[i[inside]] == states[inside]
        return hit

    def bitmask(self, state: int) -> np.ndarray:
        """One state's bitmask row (a fresh int32 array)."""
        out = np.empty((1, self.words_per_row), dtype=np.int32)
        return self.fill_bitmask([state], out)[0]


class MaskTable(StateQueries):
    """Allowed tokens and transitions for every prefix of a finite set of values.

    Arrays (little-endian; shared with the artifact sections of the same names):

    * ``allowed_offsets`` [S + 1], ``allowed_tokens`` [P], ``allowed_next`` [P]:
      the content tokens allowed in state s are
      ``allowed_tokens[allowed_offsets[s]:allowed_offsets[s + 1]]`` (ascending)
      and ``allowed_next`` holds the state each one leads to. EOS is not stored
      there; it is allowed exactly at accepting states.
    * ``value_state`` [K]: the state where value i ends (strictly increasing).
    * ``value_lcp`` [K] and ``state_byte`` [S]: enough to rebuild every value and
      every state's prefix (value i is value i-1's first ``value_lcp[i]`` bytes
      followed by the bytes of states ``value_state[i-1]+1 .. value_state[i]``).
    """

    def __init__(
        self,
        *,
        allowed_offsets: np.ndarray,
        allowed_tokens: np.ndarray,
        allowed_next: np.ndarray,
        value_state: np.ndarray,
        value_lcp: np.ndarray,
        state_byte: np.ndarray,
        vocab_size: int,
        eos_token_ids: Sequence[int],
        tokenizer_fingerprint: str,
        tokenizer_name: str = "",
        build_options: dict[str, Any] | None = None,
        source: str | None = None,
        values: list[str] | None = None,
        encoding: Encoding | None = None,
    ) -> None:
        self.allowed_offsets = allowed_offsets
        self.allowed_tokens = allowed_tokens
        self.allowed_next = allowed_next
        self.value_state = value_state
        self.value_lcp = value_lcp
        self.state_byte = state_byte
        self.vocab_size = int(vocab_size)
        self.eos_token_ids: tuple[int, ...] = tuple(int(e) for e in eos_token_ids)
        self.tokenizer_fingerprint = tokenizer_fingerprint
        self.tokenizer_name = tokenizer_name
        self.build_options = dict(build_options or {})
        self.source = source
        self.encoding = PLAIN if encoding is None else encoding
        self._eos = np.array(self.eos_token_ids, dtype=np.int32)
        self._values = values  # the user's values, when the caller already has them
        self._strings = None
        self._value_bytes: list[bytes] | None = None
        self._offsets_list: list[int] | None = None
        self._value_error: str | None = None  # why the value bytes are corrupt, once found
        self._indices_checked = False  # True once every index is known in range (compiled, or checked at load)

    # ------------------------------------------------------------- shape

    @property
    def num_states(self) -> int:
        return int(self.state_byte.shape[0])

    @property
    def num_allowed(self) -> int:
        """Allowed (state, content token) pairs, EOS not counted."""
        return int(self.allowed_tokens.shape[0])

    def __repr__(self) -> str:
        return (
            f"MaskTable(values={self.num_values}, states={self.num_states}, allowed={self.num_allowed}, "
            f"vocab_size={self.vocab_size}, eos={list(self.eos_token_ids)})"
        )

    # ------------------------------------------------------------- values

    @property
    def value_bytes(self) -> list[bytes]:  # type: ignore[override]
        """The compiled strings as UTF-8 bytes in table order (sorted), rebuilt once on first use.

        A loaded table's values are checked as they are rebuilt: strictly
        increasing, else :class:`~triec.errors.ArtifactContentError` (the
        loader checks only that every slice is in range; docs/decisions.md D3).
        """
        if self._value_bytes is None:
            if self._value_error is not None:  # found corrupt before: do not rebuild on every call
                raise ArtifactContentError(self._value_error)
            keys = _rebuild_values(self.value_state, self.value_lcp, self.state_byte)
            if not all(map(operator.lt, keys, keys[1:])):
                i = next(i for i in range(1, len(keys)) if keys[i - 1] >= keys[i])
                self._value_error = (
                    f"{self._where}: section state_byte: values {i - 1} and {i} are not in strictly increasing "
                    "byte order (the trie's preorder); the artifact is corrupt"
                )
                raise ArtifactContentError(self._value_error)
            self._value_bytes = keys
        return self._value_bytes

    @property
    def strings(self) -> list[str]:
        """The compiled strings (``encoding.spell`` of each value), sorted by their UTF-8 bytes; value i ends at ``value_state[i]``.

        Raises :class:`~triec.errors.ArtifactContentError` on first use when a
        loaded table's value bytes are not valid UTF-8 (checked lazily).
        """
        if self._strings is None:
            keys = self.value_bytes
            try:
                self._strings = [b.decode("utf-8") for b in keys]
            except UnicodeDecodeError as exc:
                i = next(i for i, b in enumerate(keys) if not _is_utf8(b))
                raise ArtifactContentError(
                    f"{self._where}: section state_byte: value {i} is not valid UTF-8 ({exc.reason}); the artifact is corrupt"
                ) from None
        return self._strings

    @property
    def values(self) -> list[str]:
        """The values as the user gave them, in table order (see :attr:`StateQueries.values`).

        Raises :class:`~triec.errors.ArtifactContentError` on first use when a
        loaded table's strings are not valid UTF-8 or not spelled as its
        encoding says (checked lazily).
        """
        if self._values is None:
            strings = self.strings
            if self.encoding.plain:
                self._values = strings
            else:
                try:
                    self._values = [self.encoding.unspell(t) for t in strings]
                except ValueError as exc:
                    raise ArtifactContentError(
                        f"{self._where}: section state_byte: a value is not spelled as header field 'encoding' says ({exc}); "
                        "the artifact is corrupt"
                    ) from None
        return self._values

    @property
    def _where(self) -> str:
        return self.source or "in-memory table"

    def _check_state(self, state: int) -> int:
        s = int(state)
        if not 0 <= s < self.num_states:
            raise IndexError(f"state {state} out of range (0..{self.num_states - 1}){_terminal_note(s)}")
        return s

    def _check_states(self, states: np.ndarray) -> None:
        if states.view(np.uint64).max() >= self.num_states:  # negatives read as unsigned are huge
            bad = int(states[(states < 0) | (states >= self.num_states)][0])
            raise IndexError(f"state {bad} out of range (0..{self.num_states - 1}){_terminal_note(bad)}")

    def _content(self, state: int) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = int(self.allowed_offsets[state]), int(self.allowed_offsets[state + 1])
        return self.allowed_tokens[lo:hi], self.allowed_next[lo:hi]

    def _contents(self, states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lo = self.allowed_offsets[states].astype(np.int64)
        counts = self.allowed_offsets[states + 1].astype(np.int64) - lo
        row = np.repeat(np.arange(states.shape[0], dtype=np.int64), counts)
        return row, self.allowed_tokens[concat_ranges(lo, counts)].astype(np.int64)

    def prefix(self, state: int) -> bytes:
        """The bytes read from the start to reach ``state``."""
        s = self._check_state(state)
        i = int(np.searchsorted(self.value_state, s))  # first value whose path ends at or below s
        end = int(self.value_state[i])
        value = self.value_bytes[i]
        return value[: len(value) - (end - s)] if s > 0 else b""

    def state_for_prefix(self, prefix: bytes | str) -> int | None:
        """The state reached by reading ``prefix``, or ``None`` if no value starts with it."""
        p = prefix.encode("utf-8") if isinstance(prefix, str) else bytes(prefix)
        import bisect

        values = self.value_bytes
        i = bisect.bisect_left(values, p)  # the first value with this prefix created its node
        if i == len(values) or not values[i].startswith(p):
            return None
        return int(self.value_state[i]) - (len(values[i]) - len(p))

    # ------------------------------------------------------------- serving (lazy imports: numpy stays the only import)

    def mask_writer(self, max_batch: int = 1) -> MaskWriter:
        """A writer of up to ``max_batch`` bitmask rows that clears only what it set (O(allowed) per fill)."""
        from triec.mask_writer import MaskWriter

        return MaskWriter(self, max_batch)

    def to_torch(self, device: Any = None, **options: Any) -> TorchMaskTable:
        """This table on a torch device (imports torch): batched fill, advance and logits masking."""
        from triec.torch_table import TorchMaskTable

        return TorchMaskTable(self, device, **options)

    def restrict(self, values: Iterable[str | bytes]) -> RestrictedTable:
        """A view allowing only ``values`` (a subset of this table's), built in O(subset bytes)."""
        from triec.restrict import RestrictedTable

        return RestrictedTable.build(self, values)

    # ------------------------------------------------------------- checks & I/O

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
            raise TokenizerMismatch(f"artifact allows EOS ids {list(self.eos_token_ids)}, the vocabulary uses {list(eos)}")
        width = getattr(fingerprint_or_vocab, "vocab_size", None)
        if width is not None and int(width) != self.vocab_size:
            raise TokenizerMismatch(f"artifact masks are {self.vocab_size} wide, the vocabulary is {width} wide")

    def save(self, path: str | os.PathLike[str], *, compress: bool | None = None) -> int:
        """Write the artifact atomically; ``compress`` (default: path ends in ``.zst``) wraps it in zstd.

        Returns the number of bytes written.
        """
        from triec.artifact import write_artifact

        return write_artifact(self, path, compress=compress)


def _terminal_note(state: int) -> str:
    return ": FINISHED (-1) ends a sequence and has no mask row" if state == FINISHED else ""


def _state_array(states: Sequence[int] | np.ndarray) -> np.ndarray:
    """States as a flat int64 array; an id that does not even fit int64 is out of range (IndexError)."""
    try:
        return np.asarray(states, dtype=np.int64).reshape(-1)
    except OverflowError:
        bad = next(x for x in np.asarray(states, dtype=object).reshape(-1) if not -(2**63) <= int(x) < 2**63)
        raise IndexError(f"state {bad} out of range: it does not even fit in int64") from None


def _is_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _rebuild_values(value_state: np.ndarray, value_lcp: np.ndarray, state_byte: np.ndarray) -> list[bytes]:
    """Each value is its predecessor's shared prefix plus the bytes of the states it created."""
    raw = state_byte.tobytes()
    ends = value_state.tolist()
    shared = value_lcp.tolist()
    out: list[bytes] = []
    prev_end = 0
    prev = b""
    for end, lcp in zip(ends, shared, strict=True):
        cur = prev[:lcp] + raw[prev_end + 1 : end + 1]
        out.append(cur)
        prev, prev_end = cur, end
    return out
