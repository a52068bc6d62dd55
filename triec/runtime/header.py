"""The header fields every table kind holds: one typed record, written and read by every artifact format.

A mask table, a pattern table and a schema table each describe the vocabulary they were compiled for (the mask
width, the EOS ids, the tokenizer's fingerprint and name), how they were built (``build_options``) and, once
loaded, where from (the artifact's path, its header and format version). :class:`TableHeader` holds them;
:class:`HeaderFields` (:class:`VocabularyFields`, a schema table's) gives a table the attribute names integrations and tests read (``table.vocab_size``,
``table.eos_token_ids``...), delegating to it. The artifact formats write and read it through
:mod:`triec.artifact.header` (its keys, in file order). A leaf: the standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TableHeader:
    """What a table records of its vocabulary and its build, and where it was loaded from.

    ``source``, ``header`` and ``format_version`` are ``None`` for a table compiled (or derived) in this process.
    """

    vocab_size: int
    """The mask width: token ids run from 0 to ``vocab_size - 1``."""
    eos_token_ids: tuple[int, ...]
    tokenizer_fingerprint: str
    tokenizer_name: str = ""
    build_options: dict[str, Any] = field(default_factory=dict)
    """How it was compiled (the header's ``build_options``: ``tokenization``, ``tokenizer_tokens``...)."""
    source: str | None = None
    """The artifact it was loaded from."""
    header: dict[str, Any] | None = None
    """The artifact header it was loaded with."""
    format_version: int | None = None
    """The artifact format version it was loaded from."""

    @classmethod
    def of(
        cls,
        vocab_size: int,
        eos_token_ids: Iterable[int],
        tokenizer_fingerprint: str,
        tokenizer_name: str = "",
        build_options: Mapping[str, Any] | None = None,
        source: str | None = None,
        header: dict[str, Any] | None = None,
        format_version: int | None = None,
    ) -> TableHeader:
        """A header from a table constructor's loose arguments: the width an int, the EOS ids a tuple of ints, the
        build options a copy."""
        return cls(
            vocab_size=int(vocab_size),
            eos_token_ids=tuple(int(e) for e in eos_token_ids),
            tokenizer_fingerprint=tokenizer_fingerprint,
            tokenizer_name=tokenizer_name,
            build_options=dict(build_options or {}),
            source=source,
            header=header,
            format_version=format_version,
        )

    def derived(self) -> dict[str, Any]:
        """The constructor arguments of a table derived from this one's (a compacted subset, another layout): the
        same vocabulary and build, not loaded from any artifact."""
        return {
            "vocab_size": self.vocab_size,
            "eos_token_ids": self.eos_token_ids,
            "tokenizer_fingerprint": self.tokenizer_fingerprint,
            "tokenizer_name": self.tokenizer_name,
            "build_options": self.build_options,
        }


class VocabularyFields:
    """The vocabulary's fields of a table's header as its attributes (read-only), read from :attr:`table_header`."""

    table_header: TableHeader

    @property
    def vocab_size(self) -> int:
        return self.table_header.vocab_size

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return self.table_header.eos_token_ids

    @property
    def tokenizer_fingerprint(self) -> str:
        return self.table_header.tokenizer_fingerprint

    @property
    def tokenizer_name(self) -> str:
        return self.table_header.tokenizer_name


class HeaderFields(VocabularyFields):
    """Every field of a table's header as its attributes (read-only): the vocabulary's, the build's, the load's."""

    @property
    def build_options(self) -> dict[str, Any]:
        return self.table_header.build_options

    @property
    def source(self) -> str | None:
        """The artifact this table was loaded from; ``None`` when it was not loaded."""
        return self.table_header.source

    @property
    def header(self) -> dict[str, Any] | None:
        """The artifact header this table was loaded with; ``None`` when it was not loaded."""
        return self.table_header.header

    @property
    def format_version(self) -> int | None:
        """The artifact format version this table was loaded from; ``None`` when it was not loaded."""
        return self.table_header.format_version
