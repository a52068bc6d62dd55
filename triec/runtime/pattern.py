"""The compiled pattern table: decode-time lookups for a regular language (a regex, a named format), numpy only.

A :class:`PatternTable` is the CSR rows of a minimal DFA's states over a vocabulary, as a
:class:`~triec.runtime.table.MaskTable` holds those of a trie's: ``allowed_offsets``, ``allowed_tokens``,
``allowed_next`` (the same invariants, except that ``allowed_next`` may lead back: a DFA has cycles) and the
accepting states, ascending (``value_state``, where EOS is allowed). The writer (:mod:`~triec.runtime.mask_writer`),
the device table (:mod:`~triec.runtime.torch`), the sparse rows (:mod:`~triec.runtime.word_masks`) and the
matcher read those arrays alone, so they serve it unchanged. The DFA's own byte transitions come along
(``dfa_offsets``, ``dfa_bytes``, ``dfa_next``: per state, its live bytes ascending and where each leads): they
describe states (a shortest prefix reaching each), force bytes (``jump_forward``) and let ``triec verify`` check
every row against the DFA. State 0 is the start. A pattern's language may be infinite: the table has no values.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from triec.errors import ArtifactContentError
from triec.runtime.arrays import content, contents
from triec.runtime.header import TableHeader
from triec.runtime.kinds import TableKind, Tokenization
from triec.runtime.mask_writer import MaskWriter
from triec.runtime.matcher import TableMatcher, whole_chars
from triec.runtime.states import StateQueries
from triec.runtime.token_classes import TokenClasses
from triec.runtime.word_masks import state_words

if TYPE_CHECKING:
    from triec.runtime.torch import TorchMaskTable


_DICT_ROW = 4096
"""A class table's row of at most this many tokens is a token -> next dict on its first advance (one lookup a
step, as a token-row table); a wider one keeps a dict of its classes (a dict of the vocabulary per state would
cost megabytes and milliseconds)."""
_WIDE: dict[int, int] = {}
"""The marker a wide class row's entry holds in ``_next_maps`` (no token is in it: every lookup misses)."""


class PatternTable(StateQueries):
    """Allowed tokens and transitions for every state of a regular language's minimal DFA.

    Built by ``triec.compile_pattern`` (:meth:`from_compile`) or ``triec.load`` (:meth:`from_artifact`).
    """

    kind: ClassVar[TableKind] = TableKind.PATTERN
    restrictable: ClassVar[Literal[False]] = False
    host_matched: ClassVar[Literal[False]] = False
    required_engine: ClassVar[str | None] = None
    canonical: ClassVar[bool] = False
    tokenization: ClassVar[Tokenization] = Tokenization.ANY

    def __init__(
        self,
        *,
        value_state: np.ndarray,
        dfa_offsets: np.ndarray,
        dfa_bytes: np.ndarray,
        dfa_next: np.ndarray,
        vocab_size: int,
        eos_token_ids: Sequence[int],
        tokenizer_fingerprint: str,
        allowed_offsets: np.ndarray | None = None,
        allowed_tokens: np.ndarray | None = None,
        allowed_next: np.ndarray | None = None,
        classes: TokenClasses | None = None,
        tokenizer_name: str = "",
        pattern: str = "",
        format_name: str | None = None,
        build_options: dict[str, Any] | None = None,
        source: str | None = None,
    ) -> None:
        given = allowed_offsets is not None and allowed_tokens is not None and allowed_next is not None
        if given == (classes is not None):
            raise TypeError("a pattern table takes its rows as token rows (allowed_*) or as token classes, one")
        self.classes = classes
        """The rows by token class (:mod:`triec.runtime.token_classes`, pattern format version 6), or ``None``
        where the table holds token rows (version 1, or built by hand)."""
        self._rows = (allowed_offsets, allowed_tokens, allowed_next) if given else None
        self.value_state = value_state
        """The accepting states, ascending (the name the runtime's behaviours read them by)."""
        self.dfa_offsets = dfa_offsets
        self.dfa_bytes = dfa_bytes
        self.dfa_next = dfa_next
        self.hold_header(
            TableHeader.of(vocab_size, eos_token_ids, tokenizer_fingerprint, tokenizer_name, build_options, source)
        )
        self.pattern = pattern
        """The regular expression compiled (for a named format: the regex it stands for)."""
        self.format_name = format_name
        """The named format (``"date"``...) it was compiled from, or ``None`` for a plain regex."""
        self._prefixes: list[bytes] | None = None
        self._next_maps: list[dict[int, int] | None] = [None] * self.num_states  # token (class) -> next, on use
        self._class_of: list[int] | None = None  # each token's class, as a list (a class table's advance)
        self._class_maps: dict[int, dict[int, int]] = {}  # a wide class row's class -> next, on use

    def _token_rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The token rows: stored, or expanded from the classes on first use (O(every allowed pair))."""
        if self._rows is None:
            assert self.classes is not None
            self._rows = self.classes.expand()
        rows = self._rows
        assert rows[0] is not None and rows[1] is not None and rows[2] is not None
        return rows[0], rows[1], rows[2]

    @property
    def allowed_offsets(self) -> np.ndarray:
        """Token rows' offsets [S + 1] (expanded from the classes on first use: O(every pair); the runtime's
        own behaviours read :attr:`classes` instead)."""
        return self._token_rows()[0]

    @property
    def allowed_tokens(self) -> np.ndarray:
        return self._token_rows()[1]

    @property
    def allowed_next(self) -> np.ndarray:
        return self._token_rows()[2]

    _checked = False  # every index known in range: compiled, or checked at load

    @classmethod
    def from_compile(cls, **fields: Any) -> PatternTable:
        """A compiled table: correct by construction."""
        table = cls(**fields)
        table._checked = True
        return table

    @classmethod
    def from_artifact(cls, *, table_header: TableHeader, verify: bool, **fields: Any) -> PatternTable:
        """A table over an artifact's sections, every index checked (and with ``verify`` every row against the DFA)."""
        table = cls(**table_header.derived(), **fields)
        table.hold_header(table_header)
        table.check_arrays(table_header.source or "", contents=verify)
        table._checked = True
        return table

    # ------------------------------------------------------------- shape

    @property
    def num_states(self) -> int:
        if self.classes is not None:
            return self.classes.num_states
        return int(self.allowed_offsets.shape[0]) - 1

    @property
    def num_allowed(self) -> int:
        """Allowed (state, token) pairs, EOS aside (counted from the classes without expanding them)."""
        if self.classes is not None:
            return self.classes.num_pairs
        return int(self.allowed_tokens.shape[0])

    @property
    def num_values(self) -> int:
        """Accepting states (a pattern's language has no list of values)."""
        return int(self.value_state.shape[0])

    @property
    def values(self) -> list[str]:
        raise TypeError("a pattern table has no list of values: its language is a regular expression's")

    @property
    def value_bytes(self) -> list[bytes]:  # type: ignore[override]  # StateQueries: an attribute; a pattern has no list
        raise TypeError("a pattern table has no list of values: its language is a regular expression's")

    def value(self, state: int) -> str | None:
        return None

    def __repr__(self) -> str:
        what = f"format={self.format_name!r}" if self.format_name else f"pattern={self.pattern!r:.60}"
        return (
            f"PatternTable({what}, states={self.num_states}, allowed={self.num_allowed}, "
            f"vocab_size={self.vocab_size}, eos={list(self.eos_token_ids)})"
        )

    # ------------------------------------------------------------- states

    _content = content
    _contents = contents

    def advance(self, state: int, token_id: int) -> int:
        """The state after ``token_id``; :data:`~triec.runtime.states.FINISHED` for EOS at an accepting state.

        A state's row becomes a token -> next dict on its first advance (a pattern table has few states), so a
        step is one lookup; a class table's wide row (over :data:`_DICT_ROW` tokens) keeps a class -> next dict
        instead (:meth:`_advance_class`). EOS, refusals and their messages are :meth:`StateQueries.advance`'s.
        """
        s = int(state)
        if 0 <= s < len(self._next_maps):
            found = self._next_maps[s]
            if found is None:
                found = self._next_maps[s] = self._next_map(s)
            hit = found.get(int(token_id))
            if hit is not None:
                return hit
            if found is _WIDE:
                return self._advance_class(s, token_id)
        return super().advance(state, token_id)

    def _next_map(self, s: int) -> dict[int, int]:
        if self.classes is not None and int(self.classes.state_pair_counts()[s]) > _DICT_ROW:
            return _WIDE
        toks, nxt = self.transitions(s)
        return dict(zip(toks.tolist(), nxt.tolist(), strict=True))

    def _advance_class(self, s: int, token_id: int) -> int:
        """:meth:`advance` over class rows: the token's class (a list read, built on first use), then the
        state's class -> next dict (a few dozen classes: built on first use)."""
        classes = self.classes
        assert classes is not None
        t = int(token_id)
        if 0 <= t < self.vocab_size:
            if self._class_of is None:
                self._class_of = classes.token_class.tolist()
            found = self._class_maps.get(s)
            if found is None:
                lo, hi = int(classes.class_offsets[s]), int(classes.class_offsets[s + 1])
                found = dict(zip(classes.class_ids[lo:hi].tolist(), classes.class_next[lo:hi].tolist(), strict=True))
                self._class_maps[s] = found
            hit = found.get(self._class_of[t])
            if hit is not None:
                return hit
        return super().advance(s, token_id)

    def _step(self, state: int, token: int) -> int:
        if self.classes is not None:
            return self.classes.step(state, token)
        return super()._step(state, token)

    def allowed_counts(self) -> np.ndarray:
        """Content tokens allowed in each state (int64 [S]), from the classes' sizes where the table has them
        (never expanding its rows)."""
        if self.classes is not None:
            return self.classes.state_pair_counts()
        return np.diff(self.allowed_offsets.astype(np.int64))

    def dense_dfa(self) -> np.ndarray:
        """The DFA as an int32 [S + 1, 256] table whose row S is a dead sink every missing edge leads to: a string
        runs from every state at once in one lookup per byte (numpy), dead where it reaches S."""
        n = self.num_states
        delta = np.full((n + 1, 256), n, dtype=np.int32)
        off = np.asarray(self.dfa_offsets, dtype=np.int64)
        src = np.repeat(np.arange(n, dtype=np.int64), off[1:] - off[:-1])
        delta[src, np.asarray(self.dfa_bytes, dtype=np.int64)] = np.asarray(self.dfa_next, dtype=np.int32)
        return delta

    def byte_step(self, state: int, byte: int) -> int:
        """The DFA's state after one byte, -1 where no string of the language continues that way."""
        s = self._check_state(state)
        lo, hi = int(self.dfa_offsets[s]), int(self.dfa_offsets[s + 1])
        i = lo + int(np.searchsorted(self.dfa_bytes[lo:hi], byte))
        return int(self.dfa_next[i]) if i < hi and int(self.dfa_bytes[i]) == byte else -1

    def run_bytes(self, data: bytes, state: int = 0) -> int:
        """The DFA's state after ``data`` from ``state`` (-1: no string of the language continues so)."""
        s = int(state)
        for b in data:
            if s < 0:
                break
            s = self.byte_step(s, b)
        return s

    def matches(self, text: str | bytes) -> bool:
        """Whether the whole of ``text`` is in the language."""
        s = self.run_bytes(text.encode("utf-8") if isinstance(text, str) else bytes(text))
        return s >= 0 and self.is_accepting(s)

    def prefix(self, state: int) -> bytes:
        """A shortest byte string leading from the start to ``state`` (states of a DFA have many; this describes it)."""
        s = self._check_state(state)
        if self._prefixes is None:
            found: list[bytes | None] = [None] * self.num_states
            found[0] = b""
            queue = [0]
            offsets, bytes_, nxt = self.dfa_offsets.tolist(), self.dfa_bytes.tolist(), self.dfa_next.tolist()
            for q in queue:
                base = found[q]
                assert base is not None
                for k in range(offsets[q], offsets[q + 1]):
                    t = nxt[k]
                    if found[t] is None:
                        found[t] = base + bytes((bytes_[k],))
                        queue.append(t)
            self._prefixes = [b if b is not None else b"" for b in found]
        return self._prefixes[s]

    def forced_bytes(self, state: int) -> bytes:
        """The bytes every continuation from ``state`` begins with (empty where stopping or a choice comes next)."""
        s = self._check_state(state)
        out = bytearray()
        seen = {s}
        while not self.is_accepting(s):
            lo, hi = int(self.dfa_offsets[s]), int(self.dfa_offsets[s + 1])
            if hi - lo != 1:
                break
            out.append(int(self.dfa_bytes[lo]))
            s = int(self.dfa_next[lo])
            if s in seen:
                break
            seen.add(s)
        return whole_chars(bytes(out))

    # ------------------------------------------------------------- serving

    def mask_writer(self, max_batch: int = 1) -> MaskWriter:
        """A writer of up to ``max_batch`` bitmask rows that clears only what it set (O(allowed) per fill)."""
        return MaskWriter(self, max_batch)  # type: ignore[arg-type]  # reads the CSR and value_state only

    def to_torch(self, device: Any = None, **options: Any) -> TorchMaskTable:
        """This table on a torch device (imports torch, so on use): batched fill, advance and logits masking."""
        from triec.runtime.torch import TorchMaskTable

        return TorchMaskTable(self, device, **options)  # type: ignore[arg-type]  # reads the arrays only

    def matcher(self) -> PatternMatcher:
        """A fresh matcher for one request."""
        return PatternMatcher(self)

    def check_indices(self) -> None:
        """:class:`ArtifactContentError` unless every index is in range: a no-op for compiled and loaded tables,
        a check for one built by hand (before a device upload trusts it)."""
        if not self._checked:
            self.check_arrays(self.source or "in-memory table")
            self._checked = True

    @property
    def served_nbytes(self) -> int:
        rows = (self.classes,) if self.classes is not None else self._token_rows()
        arrays = (
            *(a for a in rows if isinstance(a, np.ndarray)),
            self.value_state,
            self.dfa_offsets,
            self.dfa_bytes,
            self.dfa_next,
        )
        words = state_words(self)
        stored = sum(int(a.nbytes) for a in arrays) + (self.classes.nbytes if self.classes is not None else 0)
        shared = 0 if words.row_of is None else int(words.row_of.nbytes)
        return stored + shared + int(words.offsets.nbytes + words.words.nbytes + words.bits.nbytes)

    def check_arrays(self, source: str, *, contents: bool = False) -> None:
        """:class:`ArtifactContentError` unless every index the runtime follows is in range (every load); with
        ``contents``, also tokens (classes) ascending per state and never EOS, DFA bytes ascending per state
        (``verify``). That each row is the DFA's over the vocabulary is ``triec verify``'s check (it needs the
        tokenizer)."""

        def fail(section: str, what: str) -> ArtifactContentError:
            return ArtifactContentError(f"{source}: section {section}: {what}; the artifact is corrupt")

        s = self.num_states
        if s < 1:
            raise fail("class_offsets" if self.classes is not None else "allowed_offsets", "no state")
        if self.classes is not None:
            self._check_classes(fail, contents=contents)
        else:
            rows = self._token_rows()
            _check_rows(fail, ("allowed_offsets", "allowed_tokens", "allowed_next"), rows, self.vocab_size, s)
            if contents:
                _check_ascending(fail, "allowed_tokens", rows[0], rows[1])
                if rows[1].size and bool(np.isin(rows[1], self._eos).any()):
                    raise fail(
                        "allowed_tokens", "an EOS id is stored as content (EOS is allowed at accepting states only)"
                    )
        vs = self.value_state
        if vs.size and (int(vs.min()) < 0 or int(vs.max()) >= s or bool((np.diff(vs.astype(np.int64)) <= 0).any())):
            raise fail("value_state", f"expected strictly increasing accepting states in 0..{s - 1}")
        dof = self.dfa_offsets
        if dof.shape[0] != s + 1 or int(dof[0]) != 0 or int(dof[-1]) != self.dfa_bytes.shape[0]:
            raise fail("dfa_offsets", f"expected {s + 1} offsets from 0 to {self.dfa_bytes.shape[0]}")
        if bool((np.diff(dof.astype(np.int64)) < 0).any()):
            raise fail("dfa_offsets", "expected rising offsets")
        if self.dfa_next.size and (int(self.dfa_next.min()) < 0 or int(self.dfa_next.max()) >= s):
            raise fail("dfa_next", f"expected states in 0..{s - 1}")
        if contents:
            _check_ascending(fail, "dfa_bytes", dof, self.dfa_bytes)

    def _check_classes(self, fail: Callable[[str, str], ArtifactContentError], *, contents: bool) -> None:
        """The class layout's indices (every load): each class's members token ids, no id in two classes and
        no EOS id in any (EOS is allowed at accepting states only), each state's classes among those and its
        next states in range; with ``contents``, members and classes ascending."""
        c = self.classes
        assert c is not None
        m_off = np.asarray(c.member_offsets, dtype=np.int64)
        members = c.member_tokens
        if int(m_off[0]) != 0 or int(m_off[-1]) != members.shape[0] or bool((np.diff(m_off) < 0).any()):
            raise fail("member_offsets", f"expected offsets rising from 0 to {members.shape[0]}")
        if members.size and (int(members.min()) < 0 or int(members.max()) >= self.vocab_size):
            raise fail("member_tokens", f"expected token ids in 0..{self.vocab_size - 1}")
        if members.size and int(np.bincount(members, minlength=1).max()) > 1:
            raise fail("member_tokens", "a token id stands in two classes")
        if members.size and bool(np.isin(self._eos, members).any()):
            raise fail("member_tokens", "an EOS id has a class (EOS is allowed at accepting states only)")
        names = ("class_offsets", "class_ids", "class_next")
        _check_rows(fail, names, (c.class_offsets, c.class_ids, c.class_next), c.num_classes, self.num_states)
        if contents:
            _check_ascending(fail, "member_tokens", c.member_offsets, members)
            _check_ascending(fail, "class_ids", c.class_offsets, c.class_ids)

    def save(self, path: str | os.PathLike[str], *, compress: bool | None = None) -> int:
        """Write the artifact atomically (``"triec-pattern"``); ``compress`` (default: path ends in ``.zst``) wraps it in zstd."""
        from triec.artifact.formats import write_artifact

        return write_artifact(self, path, compress=compress)


def _check_rows(
    fail: Callable[[str, str], ArtifactContentError],
    names: tuple[str, str, str],
    rows: tuple[np.ndarray, np.ndarray, np.ndarray],
    num_items: int,
    num_states: int,
) -> None:
    """CSR rows whose offsets rise from 0 to their length, whose items lie in 0..num_items-1 and whose next
    states lie in 0..num_states-1: what every lookup indexes with (token rows or class rows alike)."""
    off, items, nxt = rows
    p = int(items.shape[0])
    if off.shape[0] != num_states + 1 or int(off[0]) != 0 or int(off[-1]) != p:
        raise fail(names[0], f"expected {num_states + 1} offsets rising from 0 to {p}")
    if bool((np.diff(off.astype(np.int64)) < 0).any()):
        raise fail(names[0], f"expected offsets rising from 0 to {p}")
    if nxt.shape[0] != p:
        raise fail(names[2], f"expected {p} next states")
    if p and (int(items.min()) < 0 or int(items.max()) >= num_items):
        raise fail(names[1], f"expected ids in 0..{num_items - 1}")
    if p and (int(nxt.min()) < 0 or int(nxt.max()) >= num_states):
        raise fail(names[2], f"expected states in 0..{num_states - 1}")


def _check_ascending(
    fail: Callable[[str, str], ArtifactContentError], name: str, offsets: np.ndarray, items: np.ndarray
) -> None:
    rising = np.diff(items.astype(np.int64)) > 0
    starts = np.zeros(items.shape[0], dtype=bool)
    starts[np.asarray(offsets[:-1], dtype=np.int64)[np.diff(offsets.astype(np.int64)) > 0]] = True
    if not bool((rising | starts[1:]).all()):
        raise fail(name, "expected strictly ascending items within each state")


class PatternMatcher(TableMatcher[Any]):
    """:class:`~triec.runtime.matcher.TableMatcher` over a pattern table; ``jump_forward`` follows the DFA."""

    table: PatternTable

    def jump_forward(self) -> bytes:
        """The bytes the pattern forces next (empty where stopping or a choice comes next)."""
        if self._done:
            return b""
        return self.table.forced_bytes(self.state)
