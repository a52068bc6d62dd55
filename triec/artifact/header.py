"""The header keys every artifact format shares: a table's :class:`~triec.runtime.header.TableHeader`, written and read.

Every format's header begins ``format``, ``triec_version``, ``tokenizer`` (``name``, ``fingerprint``),
``vocab_size``, ``eos_token_ids``; then the format's own counts; then ``build_options``; then what the format puts
after it (a mask table's ``encoding``, a schema table's ``schema`` map). :func:`encode_header` writes them in that
order (the order is part of the bytes: docs/format.md, fixtures/golden); :func:`check_common_header` checks them
when a file is parsed, :func:`read_table_header` reads them back when its table is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from triec._version import __version__
from triec.artifact import container
from triec.runtime.header import TableHeader


def encode_header(
    format_name: str, table: TableHeader, own: Mapping[str, Any], after: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A file's header: the shared keys of ``table`` with the format's ``own`` fields before ``build_options`` and
    ``after`` it, in the order written."""
    return {
        "format": format_name,
        "triec_version": __version__,
        "tokenizer": {"name": table.tokenizer_name, "fingerprint": table.tokenizer_fingerprint},
        "vocab_size": table.vocab_size,
        "eos_token_ids": list(table.eos_token_ids),
        **own,
        "build_options": table.build_options,
        **(after or {}),
    }


MAX_VOCAB_SIZE = 2**24
"""The widest mask a file may declare. Real vocabularies hold at most about 2^18 tokens; a header claiming 2^31
loaded, and serving it made each bitmask row 256 MB (a fuzzed file asked for 23 GB). docs/format.md rule 4."""


def check_common_header(header: dict[str, Any], source: str) -> int:
    """The header fields every format shares (mask width, EOS ids, writer, build options); returns the width."""
    field, count, fail = container.field, container.count, container.fail
    vocab_size = count(header, "vocab_size", source, MAX_VOCAB_SIZE + 1)
    if vocab_size < 1:
        raise fail(source, "header field 'vocab_size': a mask is at least 1 token wide, found 0")
    eos = field(header, "eos_token_ids", list, source)
    if not eos:
        raise fail(
            source,
            "header field 'eos_token_ids': empty; a table ends each value with an EOS id, so it needs at least one",
        )
    if not all(isinstance(e, int) and not isinstance(e, bool) and 0 <= e < vocab_size for e in eos):
        raise fail(source, f"header field 'eos_token_ids': expected ids in 0..{vocab_size - 1}, found {eos!r}")
    field(header, "triec_version", str, source)
    field(header, "build_options", dict, source)
    tok = field(header, "tokenizer", dict, source)
    if not isinstance(tok.get("fingerprint"), str) or not isinstance(tok.get("name"), str):
        raise fail(source, "header field 'tokenizer': expected name and fingerprint strings")
    return vocab_size


def read_table_header(header: dict[str, Any], version: int, source: str) -> TableHeader:
    """The table header of a file whose shared fields :func:`check_common_header` has checked (``source``: the
    name its table is known by, a schema slot's ``"path: slot i"``)."""
    return TableHeader.of(
        vocab_size=header["vocab_size"],
        eos_token_ids=header["eos_token_ids"],
        tokenizer_fingerprint=header["tokenizer"]["fingerprint"],
        tokenizer_name=header["tokenizer"]["name"],
        build_options=header["build_options"],
        source=source,
        header=header,
        format_version=version,
    )
