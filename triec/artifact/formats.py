"""The artifact formats, by header name: each registers its reader and writer here; loading and saving dispatch here.

A format is a layout of sections and header fields on the container (:mod:`triec.artifact.container`):
``"triec-masks"`` (:mod:`triec.artifact.masks`) and ``"triec-schema"`` (:mod:`triec.schema.artifact`, a layer
above this one). Each module registers its :class:`ArtifactFormat` when imported. The loader meets a format by the name
in a file's header, and a writer by a table's kind, possibly before anything has imported the module that knows
it: :data:`BUILTIN` names each built-in format's module, imported on first use, so this layer reaches the schema
layer by a name, never by an import (docs/architecture.md, "Lazy edges").
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from triec.artifact import container
from triec.errors import ArtifactError, TokenizerMismatch
from triec.runtime.kinds import Table, TableKind

BUILTIN: dict[str, str] = {
    TableKind.MASKS.format_name: "triec.artifact.masks",
    TableKind.TOOL_SCHEMA.format_name: "triec.schema.artifact",
    TableKind.PATTERN.format_name: "triec.artifact.patterns",
}
"""Header format name -> the module that registers it (in this order in error messages)."""

Arrays = dict[str, Any]


@dataclass(frozen=True)
class ArtifactFormat:
    """One artifact layout: what it reads and writes, and how.

    ``parse(buf, header, data_start, version, source, verify, checksums)`` checks the header fields of its own and
    returns the sections as numpy views (the container checks the preamble, the header's CRC and the section
    table); ``build(header, arrays, version, source, verify)`` makes the table; ``encode(table)`` is the file's
    bytes, a pure function of the table.
    """

    name: str
    kind: TableKind
    versions: tuple[int, ...]
    parse: Callable[..., Arrays]
    build: Callable[..., Table]
    encode: Callable[[Any], bytes]


_REGISTRY: dict[str, ArtifactFormat] = {}


def register(fmt: ArtifactFormat) -> ArtifactFormat:
    """Make ``fmt`` known by its header name (a module registers its format when imported; again is a no-op)."""
    known = _REGISTRY.get(fmt.name)
    if known is not None and known != fmt:
        raise ValueError(f"artifact format {fmt.name!r} is registered twice")
    _REGISTRY[fmt.name] = fmt
    return fmt


def get(name: str) -> ArtifactFormat | None:
    """The registered format of that header name, importing a built-in one on first use; None for unknown names."""
    fmt = _REGISTRY.get(name)
    if fmt is None and name in BUILTIN:
        importlib.import_module(BUILTIN[name])
        fmt = _REGISTRY.get(name)
    return fmt


def for_table(table: Table) -> ArtifactFormat:
    fmt = get(table.kind.format_name)
    if fmt is None:  # a kind without a format: a bug, not bad input
        raise ArtifactError(f"no artifact format writes a {table.kind!s} table")
    return fmt


# ---------------------------------------------------------------- writing


def encode_artifact(table: Table) -> bytes:
    """The artifact's bytes, in the format of the table's kind: a pure function of the table (same table, same bytes)."""
    return for_table(table).encode(table)


def write_artifact(table: Table, path: str | os.PathLike[str], *, compress: bool | None = None) -> int:
    """Encode ``table`` and write it atomically (zstd-wrapped when ``compress``, by default for ``.zst``)."""
    return container.write(encode_artifact(table), path, compress=compress)


# ---------------------------------------------------------------- reading


def _format_of(header: dict[str, Any], version: int, source: str) -> ArtifactFormat:
    name = header.get("format")
    fmt = get(name) if isinstance(name, str) else None
    if fmt is None:
        expected = " or ".join(repr(n) for n in BUILTIN)
        raise container.fail(source, f"header field 'format': expected {expected}, found {name!r}")
    if version not in fmt.versions:
        holders = [n for n in BUILTIN if version in (get(n) or fmt).versions]
        raise container.fail(
            source,
            f"header field 'format': format version {version} holds "
            f"{' or '.join(map(repr, holders))} only, found {name!r}",
        )
    return fmt


def parse_artifact(buf: Any, source: str, *, verify: bool = False, checksums: bool = False) -> dict[str, Any]:
    """Validate the layout and return the header plus numpy views of the sections (``checksums``: their CRC-32s too)."""
    header, data_start, version = container.read_header(buf, source, verify=verify)
    fmt = _format_of(header, version, source)
    arrays = fmt.parse(buf, header, data_start, version, source, verify=verify, checksums=checksums)
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
        raise container.fail(source, "file is empty")
    header, data_start, version = container.read_header(buf, source, verify=verify)
    fmt = _format_of(header, version, source)
    arrays = fmt.parse(buf, header, data_start, version, source, verify=verify, checksums=checksums)
    table = fmt.build(header, arrays, version, source, verify=verify)
    if expect_fingerprint is not None and expect_fingerprint != table.tokenizer_fingerprint:
        raise TokenizerMismatch(
            f"{source}: compiled for tokenizer {table.tokenizer_fingerprint} ({table.tokenizer_name}), "
            f"expected {expect_fingerprint}"
        )
    return table
