"""What kind of table a compiled table is, and what every kind answers.

Two kinds exist: a :class:`~triec.runtime.table.MaskTable` (the states of a
finite set of strings) and a :class:`~triec.schema.table.SchemaTable` (an enum
field of such a set, then a grammar engine). What differs between them for a
server is an attribute or a method of :class:`Table` (``restrictable``,
``host_matched``, ``required_engine``, ``matcher()``, ``served_nbytes``), so the
integrations ask the table, never branch on its ``kind``.

:class:`SetTable` is what the runtime's own behaviours (matchers, restricted views, think-then-answer, the
device upload) ask of a mask table, so that none of them imports the table class.
"""

from __future__ import annotations

import os
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from triec.runtime.arrays import TableArrays

if TYPE_CHECKING:
    from typing import Self

    import numpy as np

    from triec.encoding import Encoding


class TableKind(StrEnum):
    """A table's kind; a ``str``, so ``TableKind.TOOL_SCHEMA == "tool-schema"`` (the string ``SchemaTable.kind`` was before)."""

    MASKS = "masks"
    """:class:`~triec.runtime.table.MaskTable`: per-state masks of a finite set (``triec.compile``)."""

    TOOL_SCHEMA = "tool-schema"
    """:class:`~triec.schema.table.SchemaTable`: an enum field, then an engine (``triec.compile_schema``)."""

    PATTERN = "pattern"
    """:class:`~triec.runtime.pattern.PatternTable`: the minimal DFA of a regex or named format (``triec.compile_pattern``)."""

    @property
    def format_name(self) -> str:
        """The header ``format`` its artifacts are written in (:mod:`triec.artifact.formats` knows each one)."""
        return _FORMAT_NAMES[self]


_FORMAT_NAMES = {
    TableKind.MASKS: "triec-masks",
    TableKind.TOOL_SCHEMA: "triec-schema",
    TableKind.PATTERN: "triec-pattern",
}


class Tokenization(StrEnum):
    """Which token sequences a mask table allows for a value; a ``str`` (the header's ``build_options.tokenization``)."""

    ANY = "any"
    """Every token sequence that spells the value (what grammar engines allow); states are byte prefixes."""

    CANONICAL = "canonical"
    """The value's own encoder tokenization only; states are token-trie nodes (:mod:`triec.compiler.canonical`)."""

    IDS = "ids"
    """Values given as token-id sequences (semantic IDs): states are token-trie nodes, one per token edge, with no
    bytes (:mod:`triec.compiler.ids`)."""

    @classmethod
    def of(cls, build_options: dict[str, Any]) -> Tokenization:
        """From build options (absent in tables and artifacts older than the option: ``ANY``); ValueError if unknown."""
        found = build_options.get("tokenization", "any")
        try:
            return cls(found)
        except ValueError:
            raise ValueError(
                f"'tokenization': expected {' or '.join(map(repr, TOKENIZATIONS))}, found {found!r:.40}"
            ) from None


TOKENIZATIONS: tuple[str, ...] = tuple(t.value for t in Tokenization)


class Table(Protocol):
    """The surface every kind of table has: its kind, its tokenizer, its mask width, saving."""

    kind: ClassVar[TableKind]

    # restrictable and host_matched are class attributes of each kind, typed there as literals so that testing one
    # narrows a union of the kinds (``if table.restrictable: table.restrict(...)``); read-only properties here.
    @property
    def restrictable(self) -> bool:
        """``restrict(values)`` narrows it to a subset of its values (a table of values; not a schema table)."""
        ...

    @property
    def host_matched(self) -> bool:
        """Its rows come from one host matcher per request (a schema table's engine); else from its arrays, which
        ``to_torch`` uploads to a device."""
        ...

    @property
    def source(self) -> str | None:
        """The artifact it was loaded from, ``None`` when compiled in this process."""
        ...

    @property
    def header(self) -> dict[str, Any] | None:
        """The artifact header it was loaded with, ``None`` when compiled in this process."""
        ...

    @property
    def vocab_size(self) -> int: ...

    @property
    def words_per_row(self) -> int: ...

    @property
    def eos_token_ids(self) -> tuple[int, ...]: ...

    @property
    def tokenizer_fingerprint(self) -> str: ...

    @property
    def tokenizer_name(self) -> str: ...

    @property
    def num_values(self) -> int: ...

    @property
    def num_states(self) -> int: ...

    @property
    def required_engine(self) -> str | None:
        """The grammar engine its rows need installed (a schema table's), None for none."""
        ...

    @property
    def served_nbytes(self) -> int:
        """An estimate of the memory it holds while served: what the serving caches count it as."""
        ...

    def matcher(self) -> Any:
        """A fresh matcher for one request: ``allowed``, ``accept_token``, ``rollback``, ``fill_bitmask``..."""
        ...

    def check_tokenizer(self, fingerprint_or_vocab: Any) -> None: ...

    def mask_writer(self, max_batch: int = 1) -> Any: ...

    def save(self, path: str | os.PathLike[str], *, compress: bool | None = None) -> int: ...


class SetTable(TableArrays, Protocol):
    """A compiled set's table: its arrays (:class:`~triec.runtime.arrays.TableArrays`) and the queries the
    runtime's behaviours ask of it. :class:`~triec.runtime.table.MaskTable` is the one implementation."""

    start: int
    """The state before any token."""

    @property
    def encoding(self) -> Encoding: ...

    @property
    def tokenization(self) -> Tokenization: ...

    @property
    def canonical(self) -> bool: ...

    @property
    def tokenizer_fingerprint(self) -> str: ...

    @property
    def value_bytes(self) -> list[bytes]: ...

    @property
    def values(self) -> list[str]: ...

    def prefix(self, state: int) -> bytes: ...

    def state_for_prefix(self, prefix: bytes | str) -> int | None: ...

    def find_value(self, key: bytes) -> int: ...

    def value(self, state: int) -> str | None: ...

    def is_accepting(self, state: int) -> bool: ...

    def allowed(self, state: int) -> np.ndarray: ...

    def content_pairs(self, states: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row index, content token, next state) int64 of a batch of states in range, row by row."""
        ...

    def check_tokenizer(self, fingerprint_or_vocab: Any) -> None: ...

    def check_indices(self) -> None: ...

    def derive(self, *, values: list[str] | None = None, **arrays: np.ndarray) -> Self:
        """Another table over ``arrays`` (a compacted subset) for the same tokenizer, build options and encoding."""
        ...
