"""The mask-table format (``"triec-masks"``): six sections and the header fields that describe them.

A plain artifact is a mask table (versions 1 and 2). A compiled schema (format
``"triec-schema"``) is the schema layer's own layout (:mod:`triec.schema.artifact`):
version 3, slots and grammars; files of the first schema layout (versions 1 and
2: the trie of the names followed by sections of its own) are still read. That
layer sits above this one, so it is imported where a table or a file of that
kind turns up, and nowhere else (docs/architecture.md, "Lazy edges").
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

from triec._version import __version__
from triec.artifact import container
from triec.artifact.container import ENCODED_FORMAT_VERSION, PLAIN_FORMAT_VERSION, SCHEMA_FORMAT_VERSION
from triec.encoding import Encoding
from triec.errors import ArtifactError, TokenizerMismatch
from triec.runtime.kinds import Table, TableKind
from triec.runtime.table import MaskTable

FORMAT_NAME = "triec-masks"

FORMAT_NAMES: dict[TableKind, str] = {TableKind.MASKS: FORMAT_NAME, TableKind.TOOL_SCHEMA: "triec-schema"}
"""The header ``format`` of each kind of table: the formats this loader recognises."""

# name -> dtype; the order is the order in the file.
SECTIONS: tuple[tuple[str, str], ...] = (
    ("allowed_offsets", "<u4"),
    ("allowed_tokens", "<i4"),
    ("allowed_next", "<i4"),
    ("value_state", "<i4"),
    ("value_lcp", "<i4"),
    ("state_byte", "|u1"),
)


def _expected_counts(num_states: int, num_allowed: int, num_values: int) -> dict[str, int]:
    return {
        "allowed_offsets": num_states + 1,
        "allowed_tokens": num_allowed,
        "allowed_next": num_allowed,
        "value_state": num_values,
        "value_lcp": num_values,
        "state_byte": num_states,
    }


def _schema_format() -> ModuleType:
    """The schema layer's format module (:mod:`triec.schema.artifact`): imported on use, it sits above this layer."""
    from triec.schema import artifact

    return artifact


# ---------------------------------------------------------------- writing


def encode_artifact(table: Table) -> bytes:
    """The artifact's bytes: a pure function of the table (same table, same bytes).

    A compiled schema (``table.kind`` is :attr:`TableKind.TOOL_SCHEMA`) is written as
    format ``"triec-schema"``, version 3, by the schema layer (:mod:`triec.schema.artifact`).
    """
    if table.kind is TableKind.TOOL_SCHEMA:
        return _schema_format().encode_schema_artifact(table)
    trie: MaskTable = table  # type: ignore[assignment]
    if trie.num_allowed >= 2**32:
        raise ArtifactError(f"{trie.num_allowed} allowed pairs exceed the format's u32 offsets")
    layout = list(SECTIONS)
    sources = {name: getattr(trie, name) for name, _ in SECTIONS}
    header: dict[str, Any] = {
        "format": FORMAT_NAMES[table.kind],
        "triec_version": __version__,
        "tokenizer": {"name": trie.tokenizer_name, "fingerprint": trie.tokenizer_fingerprint},
        "vocab_size": trie.vocab_size,
        "eos_token_ids": list(trie.eos_token_ids),
        "num_values": trie.num_values,
        "num_states": trie.num_states,
        "num_allowed": trie.num_allowed,
        "build_options": trie.build_options,
    }
    version = PLAIN_FORMAT_VERSION
    if not trie.encoding.plain:
        version = ENCODED_FORMAT_VERSION
        header["encoding"] = trie.encoding.to_header()
    return container.encode(header, [(name, dtype, sources[name]) for name, dtype in layout], version)


def write_artifact(table: Table, path: str | os.PathLike[str], *, compress: bool | None = None) -> int:
    """Encode ``table`` and write it atomically (zstd-wrapped when ``compress``, by default for ``.zst``)."""
    return container.write(encode_artifact(table), path, compress=compress)


# ---------------------------------------------------------------- reading


def _fail(source: str, message: str) -> ArtifactError:
    return container.fail(source, message)


def check_common_header(header: dict[str, Any], source: str) -> int:
    """The header fields every format shares (mask width, EOS ids, writer, build options); returns the width."""
    field, count = container.field, container.count
    vocab_size = count(header, "vocab_size", source, 2**31)
    if vocab_size < 1:
        raise _fail(source, "header field 'vocab_size': a mask is at least 1 token wide, found 0")
    eos = field(header, "eos_token_ids", list, source)
    if not eos:
        raise _fail(source, "header field 'eos_token_ids': empty; a table ends each value with an EOS id, so it "
                            "needs at least one")  # fmt: skip
    if not all(isinstance(e, int) and not isinstance(e, bool) and 0 <= e < vocab_size for e in eos):
        raise _fail(source, f"header field 'eos_token_ids': expected ids in 0..{vocab_size - 1}, found {eos!r}")
    field(header, "triec_version", str, source)
    field(header, "build_options", dict, source)
    tok = field(header, "tokenizer", dict, source)
    if not isinstance(tok.get("fingerprint"), str) or not isinstance(tok.get("name"), str):
        raise _fail(source, "header field 'tokenizer': expected name and fingerprint strings")
    return vocab_size


def parse_artifact(buf: Any, source: str, *, verify: bool = False, checksums: bool = False) -> dict[str, Any]:
    """Validate the layout and return the header plus numpy views of the sections (``checksums``: their CRC-32s too)."""
    header, data_start, version = container.read_header(buf, source, verify=verify)
    field, count = container.field, container.count
    kind = next((k for k, name in FORMAT_NAMES.items() if header.get("format") == name), None)  # any msgpack value
    if kind is None:
        expected_formats = " or ".join(repr(n) for n in FORMAT_NAMES.values())
        raise _fail(source, f"header field 'format': expected {expected_formats}, found {header.get('format')!r}")
    if version == SCHEMA_FORMAT_VERSION:
        if kind is not TableKind.TOOL_SCHEMA:
            raise _fail(source, f"header field 'format': format version {version} holds "
                                f"{FORMAT_NAMES[TableKind.TOOL_SCHEMA]!r} only, found {header['format']!r}")
        schema = _schema_format()
        check_common_header(header, source)
        layout, expected = schema.layout_counts(header, source)
        arrays = container.read_sections(buf, source, header, data_start, layout, expected, verify=verify,
                                     checksums=checksums)
        return {"header": header, "arrays": arrays, "format_version": version}
    check_common_header(header, source)
    num_states = count(header, "num_states", source, 2**31)
    num_allowed = count(header, "num_allowed", source)
    num_values = count(header, "num_values", source, 2**31)
    if num_states < 1 or num_values < 1:
        raise _fail(source, "header: an artifact holds at least one value and one state")
    if version == PLAIN_FORMAT_VERSION and "encoding" in header:
        raise _fail(source, f"header field 'encoding': needs format version {ENCODED_FORMAT_VERSION}, the file says {version}")
    if version == ENCODED_FORMAT_VERSION:
        try:
            encoding = Encoding.from_header(header.get("encoding"))
        except ValueError as exc:
            raise _fail(source, f"header field 'encoding': {exc}") from None
        if encoding.plain:
            raise _fail(source, f"header field 'encoding': a raw encoding without prefix or suffix is written as version {PLAIN_FORMAT_VERSION}")
    field(header, "sections", list, source)
    expected = _expected_counts(num_states, num_allowed, num_values)
    layout = list(SECTIONS)
    if kind is TableKind.TOOL_SCHEMA:  # the first schema layout (read, never written)
        schema = _schema_format()
        layout += schema.SCHEMA_SECTIONS
        expected.update(schema.expected_counts(header.get("schema"), source))
    elif "schema" in header:
        raise _fail(source, f"header field 'schema': only a {FORMAT_NAMES[TableKind.TOOL_SCHEMA]!r} artifact has one")
    arrays = container.read_sections(buf, source, header, data_start, layout, expected, verify=verify,
                                     checksums=checksums)
    return {"header": header, "arrays": arrays, "format_version": version}


def load(
    path: str | os.PathLike[str],
    *,
    verify: bool = False,
    expect_fingerprint: str | None = None,
    copy: bool = False,
) -> Table:
    """Open an artifact: memory-mapped (plain) or decompressed into memory (``.zst``).

    A mapped table reads the file's pages as it goes: truncating the file under
    it (writing it again in place) makes the next lookup fault with SIGBUS, and
    an in-place overwrite changes the table under its user. ``copy=True`` reads
    the file into private memory instead (about 1 ms per 5 MB) and checks every
    section's CRC-32 while at it: the table is then independent of the file.
    Long-running servers that replace artifacts should use it, or replace files
    only by writing a temporary file and renaming it over the old one (what
    :meth:`~triec.runtime.table.MaskTable.save` does).

    Layout, header CRC, section bounds and every value used as an index
    (:func:`triec.runtime.validate.check_indices`, about 0.6 ms at K = 100,000) are
    always checked, so a loaded table never indexes out of range; the value
    bytes are checked lazily (order and UTF-8, on first use). ``verify=True``
    also checks every section's CRC-32 and everything that makes the masks
    right (reads the whole file once). Failures raise subclasses of
    :class:`~triec.errors.ArtifactError` naming the file and the field.

    Returns a :class:`~triec.runtime.table.MaskTable`, or for a ``"triec-schema"``
    file a :class:`~triec.schema.table.SchemaTable` (``table.kind`` says which).
    """
    source = os.fspath(path)
    buf, _compressed = container.read_buffer(source, copy=copy)
    return load_buffer(buf, source, verify=verify, expect_fingerprint=expect_fingerprint, checksums=copy)


def load_buffer(
    buf: Any, source: str, *, verify: bool = False, expect_fingerprint: str | None = None, checksums: bool = False
) -> Table:
    """:func:`load` of an artifact's bytes already in memory (``buf``: bytes, mmap or zstd-wrapped bytes).

    ``source`` names it in errors; ``checksums`` checks the sections' CRC-32s
    (``verify`` does, and more).
    """
    if bytes(buf[: len(container.ZSTD_MAGIC)]) == container.ZSTD_MAGIC:
        import io

        buf = container.inflate(io.BytesIO(buf), source)  # bounded: a decompression bomb is refused early
    if len(buf) == 0:
        raise _fail(source, "file is empty")
    parsed = parse_artifact(buf, source, verify=verify, checksums=checksums)
    header, arrays = parsed["header"], parsed["arrays"]
    if parsed["format_version"] == SCHEMA_FORMAT_VERSION:
        schema_table = _schema_format().load_schema_artifact(header, arrays, source, verify=verify)
        if expect_fingerprint is not None and expect_fingerprint != schema_table.tokenizer_fingerprint:
            raise TokenizerMismatch(
                f"{source}: compiled for tokenizer {schema_table.tokenizer_fingerprint} ({schema_table.tokenizer_name}), "
                f"expected {expect_fingerprint}"
            )
        return schema_table
    table = MaskTable._from_artifact(
        **{name: arrays[name] for name, _ in SECTIONS},
        vocab_size=header["vocab_size"],
        eos_token_ids=header["eos_token_ids"],
        tokenizer_fingerprint=header["tokenizer"]["fingerprint"],
        tokenizer_name=header["tokenizer"]["name"],
        build_options=header["build_options"],
        encoding=Encoding.from_header(header["encoding"]) if "encoding" in header else None,
        header=header,
        format_version=parsed["format_version"],
        verify=verify,
        source=source,
    )
    if expect_fingerprint is not None and expect_fingerprint != table.tokenizer_fingerprint:
        raise TokenizerMismatch(
            f"{source}: compiled for tokenizer {table.tokenizer_fingerprint} ({table.tokenizer_name}), "
            f"expected {expect_fingerprint}"
        )
    if "schema" in header:
        return _schema_format().load_schema_table(table, header, arrays, source, verify=verify)
    return table
