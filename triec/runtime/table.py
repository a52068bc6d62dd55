"""The compiled mask table: decode-time lookups over six arrays, numpy only.

A serving process imports this module (through ``triec.load``) and nothing
heavier. Every answer is a slice or a binary search into arrays that may be
memory-mapped from an artifact: ``allowed`` costs O(allowed tokens), never
O(vocabulary).

States are trie nodes numbered in preorder; state 0 is the empty prefix. The trie is the values'
byte trie, or for a canonical table (``tokenization == "canonical"``) their token trie written one
state per byte (:mod:`triec.compiler.canonical`): the arrays and every lookup here are the same.

The table sits on top of the runtime: it composes the behaviours below it (the writer, the matcher,
restricted views, the checks), which read it as :class:`~triec.runtime.arrays.TableArrays` and
:class:`~triec.runtime.kinds.SetTable` and never import this module. Two imports are made on use:
:mod:`triec.runtime.torch` (torch is optional: ``import triec.runtime`` stays numpy-only) and
:mod:`triec.artifact.formats` (the artifact layer sits above; :meth:`MaskTable.save`).
"""

from __future__ import annotations

import bisect
import operator
import os
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Self

import numpy as np

from triec._arrays import find_sorted
from triec.encoding import PLAIN, Encoding
from triec.errors import ArtifactContentError
from triec.runtime.arrays import content, content_pairs, contents, rebuild_values
from triec.runtime.header import TableHeader
from triec.runtime.ids import check_ids_parents, check_ids_tree, ids_text, ids_value_bytes, rebuild_ids
from triec.runtime.kinds import TableKind, Tokenization
from triec.runtime.mask_writer import MaskWriter
from triec.runtime.matcher import TableMatcher
from triec.runtime.restrict import RestrictedTable
from triec.runtime.states import StateQueries, merge_sorted
from triec.runtime.tails import CanonicalTailLayout, TailIndex, TailLayout, full_rows
from triec.runtime.validate import check_indices, validate_contents
from triec.runtime.word_masks import state_words

if TYPE_CHECKING:
    from triec.runtime.torch import TorchMaskTable


class MaskTable(StateQueries):
    """Allowed tokens and transitions for every prefix of a finite set of values.

    Its six arrays (``allowed_offsets``, ``allowed_tokens``, ``allowed_next``,
    ``value_state``, ``value_lcp``, ``state_byte``) are described, with their
    invariants, in :mod:`triec.runtime.arrays`.

    Built by ``triec.compile`` (:meth:`from_compile`), ``triec.load``
    (:meth:`from_artifact`), :meth:`RestrictedTable.compact` (:meth:`derive`), or by hand.
    """

    kind: ClassVar[TableKind] = TableKind.MASKS
    restrictable: ClassVar[Literal[True]] = True
    host_matched: ClassVar[Literal[False]] = False
    required_engine: ClassVar[str | None] = None

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
        self.hold_header(
            TableHeader.of(vocab_size, eos_token_ids, tokenizer_fingerprint, tokenizer_name, build_options, source)
        )
        self.tokenization: Tokenization = Tokenization.of(self.build_options)
        """Which token sequences spell a value here: every one (``ANY``) or the encoder's own (``CANONICAL``)."""
        self.encoding = PLAIN if encoding is None else encoding
        self._values = values  # the user's values, when the caller already has them
        self._strings = None
        self._value_bytes: list[bytes] | None = None
        self._offsets_list: list[int] | None = None
        self._value_error: str | None = None  # why the value bytes are corrupt, once found
        self._key_index: dict[bytes, int] | None = None  # canonical tables: value bytes -> index
        self._value_ids: list[list[int]] | None = None  # ids tables: each value's token ids
        self._indices_checked = False  # True once every index is known in range (compiled, or checked at load)

    @classmethod
    def from_compile(cls, *, value_bytes: list[bytes] | None = None, **fields: Any) -> Self:
        """A compiled table: correct by construction, so it skips the index checks; ``value_bytes``, when the
        compiler has them, are its sorted keys (saves rebuilding them from the arrays)."""
        table = cls(**fields)
        table._value_bytes = value_bytes
        table._indices_checked = True
        return table

    @classmethod
    def from_artifact(cls, *, table_header: TableHeader, verify: bool, **fields: Any) -> MaskTable:
        """A table over an artifact's sections: every index checked (:func:`~triec.runtime.validate.check_indices`),
        and with ``verify`` every content check (:func:`~triec.runtime.validate.validate_contents`)."""
        table = cls(**table_header.derived(), **fields)
        table.hold_header(table_header)
        source = table_header.source or ""
        if verify:
            validate_contents(table, source)
        else:
            check_indices(table, source)
        if table.ids:
            table._check_ids(source, verify=verify)
        table._indices_checked = True
        return table

    def _check_ids(self, source: str, *, verify: bool) -> None:
        """An ids table's own checks (:mod:`triec.runtime.ids`): raw values, the full layout, its rows a tree (every
        load); with ``verify`` each state below its value's path, and the values rebuilt in token order."""
        if not self.encoding.plain:
            raise ArtifactContentError(f"{source}: header field 'encoding': an ids table's values are not spelled")
        if self.tails is not None or self.classes is not None:
            raise ArtifactContentError(f"{source}: an ids table is written in the full layout (format version 1) only")
        check_ids_tree(self, source)
        if verify:
            check_ids_parents(self, source)
            self.value_ids  # noqa: B018 - rebuilt in token order, or ArtifactContentError

    def derive(self, *, values: list[str] | None = None, **arrays: np.ndarray) -> MaskTable:
        """Another table over ``arrays`` for the same tokenizer, build options and encoding (a compacted subset)."""
        columns: dict[str, Any] = dict(arrays)  # the six array arguments, by name (mypy cannot match ** to them)
        return MaskTable(**columns, **self.table_header.derived(), values=values, encoding=self.encoding)

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
    def value_bytes(self) -> list[bytes]:  # type: ignore[override]  # StateQueries: an attribute RestrictedTable sets
        """The compiled strings as UTF-8 bytes in table order (sorted), rebuilt once on first use.

        A loaded table's values are checked as they are rebuilt: strictly
        increasing, else :class:`~triec.errors.ArtifactContentError` (the
        loader checks only that every slice is in range; docs/decisions.md D3).
        """
        if self._value_bytes is None:
            if self._value_error is not None:  # found corrupt before: do not rebuild on every call
                raise ArtifactContentError(self._value_error)
            # an ids table's: its token-id values joined by spaces (checked in token order as they are rebuilt)
            self._value_bytes = ids_value_bytes(self.value_ids) if self.ids else self._rebuild_checked()
        return self._value_bytes

    def _rebuild_checked(self) -> list[bytes]:
        """The value bytes rebuilt from ``state_byte``: strictly increasing (a byte trie) or distinct (a canonical
        token trie), else :class:`~triec.errors.ArtifactContentError`."""
        keys = rebuild_values(self)
        if self.canonical:  # a token trie: values in token order, so only distinct
            if len(set(keys)) != len(keys):
                self._value_error = (
                    f"{self._where}: section state_byte: two values of this canonical table spell the same "
                    "bytes; the artifact is corrupt"
                )
                raise ArtifactContentError(self._value_error)
        elif not all(map(operator.lt, keys, keys[1:])):
            i = next(i for i in range(1, len(keys)) if keys[i - 1] >= keys[i])
            self._value_error = (
                f"{self._where}: section state_byte: values {i - 1} and {i} are not in strictly increasing "
                "byte order (the trie's preorder); the artifact is corrupt"
            )
            raise ArtifactContentError(self._value_error)
        return keys

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
    def canonical(self) -> bool:
        """Whether states are token-trie nodes (:mod:`triec.compiler.canonical`, or an ids table's), not byte
        prefixes: values are in token order and one byte prefix may be several states or none."""
        return self.tokenization is not Tokenization.ANY

    @property
    def ids(self) -> bool:
        """Whether values are token-id sequences (:mod:`triec.compiler.ids`): one state per token, no bytes, a
        value's string its ids joined by spaces, depths counted in tokens."""
        return self.tokenization is Tokenization.IDS

    @property
    def value_ids(self) -> list[list[int]]:
        """An ids table's values as token-id lists, in table order (token order), rebuilt once from the rows: the
        token into each state is the one ``allowed_next`` leads to it by (:func:`~triec.runtime.ids.rebuild_ids`)."""
        if not self.ids:
            raise ValueError("value_ids: only an ids table (triec.compile_ids) has token-id values")
        if self._value_ids is None:
            if self._value_error is not None:
                raise ArtifactContentError(self._value_error)
            try:
                self._value_ids = rebuild_ids(self, self._where)
            except ArtifactContentError as exc:
                self._value_error = str(exc)
                raise
        return self._value_ids

    def find_value(self, key: bytes) -> int:
        """The index of the value spelled ``key`` (UTF-8 bytes of its string), or -1 when it is not one."""
        keys = self.value_bytes
        if self.canonical:  # token order: a dict, built once
            if self._key_index is None:
                self._key_index = {k: i for i, k in enumerate(keys)}
            return self._key_index.get(key, -1)
        i = bisect.bisect_left(keys, key)
        return i if i < len(keys) and keys[i] == key else -1

    def values_below(self, state: int) -> range:
        """The indices of the values whose path passes through ``state`` (a contiguous run in table order).

        Preorder keeps a state's values together; value i stays below it while its path leaves value
        i-1's at or below the state's depth (``value_lcp``). Holds for byte and token tries alike.
        """
        s = self._check_state(state)
        lo = find_sorted(self.value_state, s)
        depth = self.depth(s)
        if s == 0:
            return range(0, self.num_values)
        hi = lo + 1
        while hi < self.num_values and int(self.value_lcp[hi]) >= depth:
            hi += 1
        return range(lo, hi)

    @property
    def _where(self) -> str:
        return self.source or "in-memory table"

    _content = content  # the leaf's queries, as the hooks StateQueries calls (no extra call on the hot path)
    _contents = contents

    def content_pairs(self, states: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row index, content token, next state) int64 of a batch of checked states, row by row (restricted
        views and their compaction read rows through this, whatever the layout)."""
        return content_pairs(self, states)

    def depth(self, state: int) -> int:
        """How far ``state`` lies from the start: bytes, or tokens in an ids table (what ``value_lcp`` counts)."""
        s = self._check_state(state)
        if s == 0:
            return 0
        i = find_sorted(self.value_state, s)
        end = int(self.value_state[i])
        length = len(self.value_ids[i]) if self.ids else len(self.value_bytes[i])
        return length - (end - s)

    def prefix(self, state: int) -> bytes:
        """The bytes read from the start to reach ``state`` (an ids table's: its token ids joined by spaces)."""
        s = self._check_state(state)
        if self.ids:
            return ids_text(self.value_ids[find_sorted(self.value_state, s)][: self.depth(s)])
        i = find_sorted(self.value_state, s)  # first value whose path ends at or below s
        end = int(self.value_state[i])
        value = self.value_bytes[i]
        return value[: len(value) - (end - s)] if s > 0 else b""

    def state_for_prefix(self, prefix: bytes | str) -> int | None:
        """The state reached by reading ``prefix``, or ``None`` if no value starts with it."""
        p = prefix.encode("utf-8") if isinstance(prefix, str) else bytes(prefix)
        if self.canonical:
            raise ValueError(
                "state_for_prefix: this table is canonical, its states are token sequences, and one byte prefix "
                "may be reached by several or by none; follow token ids with table.walk(ids)"
            )
        values = self.value_bytes
        i = bisect.bisect_left(values, p)  # the first value with this prefix created its node
        if i == len(values) or not values[i].startswith(p):
            return None
        return int(self.value_state[i]) - (len(values[i]) - len(p))

    # ------------------------------------------------------------- serving

    def mask_writer(self, max_batch: int = 1) -> MaskWriter:
        """A writer of up to ``max_batch`` bitmask rows that clears only what it set (O(allowed) per fill)."""
        return MaskWriter(self, max_batch)

    def to_torch(self, device: Any = None, **options: Any) -> TorchMaskTable:
        """This table on a torch device (imports torch, so on use): batched fill, advance and logits masking."""
        from triec.runtime.torch import TorchMaskTable

        return TorchMaskTable(self, device, **options)

    def restrict(self, values: Iterable[str | bytes]) -> RestrictedTable[MaskTable]:
        """A view allowing only ``values`` (a subset of this table's), built in O(subset bytes)."""
        return RestrictedTable.build(self, values)

    # ------------------------------------------------------------- checks & I/O

    def check_indices(self) -> None:
        """Raise :class:`~triec.errors.ArtifactContentError` unless every index the runtime follows is in range.

        A no-op for compiled and loaded tables (known good); a table built by hand is checked
        (:func:`~triec.runtime.validate.check_indices`) before anything trusts its arrays, e.g. a device upload.
        """
        if not self._indices_checked:
            check_indices(self, self._where)
            if self.ids:
                self._check_ids(self._where, verify=False)

    def matcher(self) -> TableMatcher[MaskTable]:
        """A fresh matcher for one request (:class:`~triec.runtime.matcher.TableMatcher`)."""
        return TableMatcher(self)

    @property
    def served_nbytes(self) -> int:
        """What the serving caches count it as: its arrays, row words and value bytes."""
        arrays = (
            self.allowed_offsets,
            self.allowed_tokens,
            self.allowed_next,
            self.value_state,
            self.value_lcp,
            self.state_byte,
        )
        words = state_words(self)
        values = self.value_bytes
        return (
            sum(int(a.nbytes) for a in arrays)
            + int(words.offsets.nbytes + words.words.nbytes + words.bits.nbytes)
            + sum(len(v) for v in values)
            + 40 * len(values)
        )

    def save(self, path: str | os.PathLike[str], *, compress: bool | None = None) -> int:
        """Write the artifact atomically; ``compress`` (default: path ends in ``.zst``) wraps it in zstd.

        Returns the number of bytes written. (The artifact layer sits above this one: it reads
        tables. This is the one import from here upward, made on use; docs/architecture.md.)
        """
        from triec.artifact.formats import write_artifact

        return write_artifact(self, path, compress=compress)


def _is_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


class TailMaskTable(MaskTable):
    """A mask table in the tail layout (format version 4): rows of branching states stored, tail states' rows
    served from the value's bytes and the vocabulary's token index (:mod:`triec.runtime.tails`); a canonical table's
    from each value's tail tokens (``tail_tokens``/``tail_token_offsets``: :class:`CanonicalTailLayout`).

    State ids, values, acceptance and every answer equal those of the same set compiled in the present layout.
    ``branch_offsets``/``branch_tokens``/``branch_next`` are the stored rows (one per branching state, in state
    order); ``allowed_offsets``/``allowed_tokens``/``allowed_next`` are the present layout's arrays, expanded on
    first use (O(every pair): what a device upload or a whole-table check reads), so a reader written for the
    present layout reads this table exactly.
    """

    def __init__(
        self,
        *,
        allowed_offsets: np.ndarray,
        allowed_pairs: np.ndarray,
        far_pairs: np.ndarray,
        far_next: np.ndarray,
        token_index: TailIndex,
        tail_tokens: np.ndarray | None = None,
        tail_token_offsets: np.ndarray | None = None,
        **fields: Any,
    ) -> None:
        self._expanded: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._eos_row: np.ndarray | None = None
        self.token_index = token_index
        # MaskTable's three row arrays are this table's expanded ones (the properties below): its setters ignore them
        super().__init__(allowed_offsets=allowed_offsets, allowed_tokens=allowed_pairs, allowed_next=far_next, **fields)
        layout: dict[str, Any] = {
            "offsets": allowed_offsets,
            "pairs": allowed_pairs,
            "far_pairs": far_pairs,
            "far_next": far_next,
            "value_state": self.value_state,
            "value_lcp": self.value_lcp,
            "state_byte": self.state_byte,
            "index": token_index,
            "vocab_size": self.vocab_size,
        }
        if self.ids:
            raise ValueError("an ids table has no tail layout (its rows are its children: every row is stored)")
        if (tail_tokens is None or tail_token_offsets is None) == self.canonical:
            raise ValueError("a canonical tail table has tail_tokens and tail_token_offsets, any other none")
        self.tails: TailLayout = (
            CanonicalTailLayout(tail_tokens=tail_tokens, tail_token_offsets=tail_token_offsets, **layout)
            if tail_tokens is not None and tail_token_offsets is not None
            else TailLayout(**layout)
        )

    @property
    def allowed_offsets(self) -> np.ndarray:
        return self._full()[0]

    @allowed_offsets.setter
    def allowed_offsets(self, value: np.ndarray) -> None:
        pass

    @property
    def allowed_tokens(self) -> np.ndarray:
        return self._full()[1]

    @allowed_tokens.setter
    def allowed_tokens(self, value: np.ndarray) -> None:
        pass

    @property
    def allowed_next(self) -> np.ndarray:
        return self._full()[2]

    @allowed_next.setter
    def allowed_next(self, value: np.ndarray) -> None:
        pass

    def _full(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._expanded is None:
            self._expanded = full_rows(self.tails)
        return self._expanded

    @property
    def num_allowed(self) -> int:
        """Stored (branching) pairs: the header's ``num_allowed``; tail rows are not counted."""
        return self.tails.num_pairs

    @property
    def num_tail_states(self) -> int:
        return self.tails.num_tails

    def _step(self, state: int, token: int) -> int:
        return self.tails.step(state, token)

    def allowed(self, state: int) -> np.ndarray:
        """Allowed token ids in ``state``, ascending int32, EOS ids included at accepting states (one search of
        the values for the row and its acceptance; see :meth:`StateQueries.allowed`)."""
        tokens, accepting = self.tails.allowed_row(self._live(state))
        if not accepting:
            return tokens
        if not tokens.size:  # a value's last state (every tail ends in one): EOS alone
            if self._eos_row is None:
                self._eos_row = np.unique(self._eos).astype(np.int32)
                self._eos_row.flags.writeable = False
            return self._eos_row
        return merge_sorted(tokens, self._eos)

    def __repr__(self) -> str:
        return (
            f"TailMaskTable(values={self.num_values}, states={self.num_states}, tails={self.num_tail_states}, "
            f"stored={self.num_allowed}, vocab_size={self.vocab_size}, eos={list(self.eos_token_ids)})"
        )

    def expanded(self) -> MaskTable:
        """The same table in the present layout (every row stored; O(every pair))."""
        full = self._full()
        return MaskTable(
            allowed_offsets=full[0],
            allowed_tokens=full[1],
            allowed_next=full[2],
            value_state=self.value_state,
            value_lcp=self.value_lcp,
            state_byte=self.state_byte,
            **self.table_header.derived(),
            values=self._values,
            encoding=self.encoding,
        )

    def mask_writer(self, max_batch: int = 1) -> MaskWriter:
        """A writer of up to ``max_batch`` rows; tail rows computed as they are asked for (O(allowed) per fill)."""
        return MaskWriter(self, max_batch)

    @property
    def served_nbytes(self) -> int:
        tails = self.tails
        arrays = [
            tails.offsets,
            tails.pairs,
            tails.far_pairs,
            tails.far_next,
            self.value_state,
            self.value_lcp,
            self.state_byte,
        ]
        if isinstance(tails, CanonicalTailLayout):
            arrays += [tails.tail_tokens, tails.tail_token_offsets]
        return (
            sum(int(a.nbytes) for a in arrays)
            + self.token_index.nbytes
            + 40 * self.token_index.num_keys  # the lookup dict
            + 24 * self.num_values  # the layout's per-value arrays
        )
