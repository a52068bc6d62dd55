"""The ``triec-schema`` artifact: a compiled schema's slots and grammars on the container (docs/format.md).

Version 3 (written; version 5 where a slot holds a pattern) lays every slot and every grammar out in a fixed number
of sections, whatever their number (:mod:`~triec.schema.artifact.layout`). Versions 1 and 2 (the first schema layout,
D19) are read, never written, and converted on load (:mod:`~triec.schema.artifact.legacy`). Each job has its module:

* :mod:`~triec.schema.artifact.layout`: the sections, the slot and grammar tables' columns, the header's totals;
* :mod:`~triec.schema.artifact.encode`: the writer;
* :mod:`~triec.schema.artifact.load`: the reader of versions 3 and 5, over checked sections;
* :mod:`~triec.schema.artifact.checks`: the header's ``schema`` map, the tables' counts, each slot's indices and
  (``verify``) contents, what the serving path reads besides;
* :mod:`~triec.schema.artifact.legacy`: the first layout, its checks and its conversion.

numpy only, like the loader: no engine is imported before a matcher is made. This module registers the format with
:mod:`triec.artifact.formats`, which loading and saving dispatch through (``table.kind`` is
``TableKind.TOOL_SCHEMA``, or the header's format is this one); the first layout's mask sections are read by
:mod:`triec.artifact.masks`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from triec.artifact import container, formats, masks
from triec.artifact.container import (
    ENCODED_FORMAT_VERSION,
    PLAIN_FORMAT_VERSION,
    SCHEMA_FORMAT_VERSION,
    SCHEMA_PATTERNS_FORMAT_VERSION,
)
from triec.artifact.header import check_common_header
from triec.runtime.kinds import TableKind
from triec.schema.artifact.checks import layout_counts
from triec.schema.artifact.encode import encode_schema_artifact
from triec.schema.artifact.layout import FORMAT_NAME
from triec.schema.artifact.legacy import SCHEMA_SECTIONS, expected_counts, load_schema_table
from triec.schema.artifact.load import load_schema_artifact
from triec.schema.table import SchemaTable

__all__ = ["FORMAT", "FORMAT_NAME", "build_schema", "parse_schema_sections"]


def parse_schema_sections(
    buf: Any,
    header: dict[str, Any],
    data_start: int,
    version: int,
    source: str,
    *,
    verify: bool = False,
    checksums: bool = False,
) -> dict[str, np.ndarray]:
    """Version 3's (or 5's) sections, or the first layout's (a mask table's six, then ten of its own); checked, as
    views."""
    if version not in (SCHEMA_FORMAT_VERSION, SCHEMA_PATTERNS_FORMAT_VERSION):
        return masks.parse_sections(
            buf,
            header,
            data_start,
            version,
            source,
            verify=verify,
            checksums=checksums,
            extra_layout=SCHEMA_SECTIONS,
            extra_counts=lambda h: expected_counts(h.get("schema"), source),
        )
    check_common_header(header, source)
    layout, expected = layout_counts(header, source, version)
    return container.read_sections(
        buf, source, header, data_start, layout, expected, verify=verify, checksums=checksums
    )


def build_schema(
    header: dict[str, Any], arrays: dict[str, np.ndarray], version: int, source: str, *, verify: bool = False
) -> SchemaTable:
    if version in (SCHEMA_FORMAT_VERSION, SCHEMA_PATTERNS_FORMAT_VERSION):
        return load_schema_artifact(header, arrays, source, verify=verify, version=version)
    trie = masks.build_table(header, arrays, version, source, verify=verify)
    return load_schema_table(trie, header, arrays, source, verify=verify)


FORMAT = formats.register(
    formats.ArtifactFormat(
        name=FORMAT_NAME,
        kind=TableKind.TOOL_SCHEMA,
        versions=(PLAIN_FORMAT_VERSION, ENCODED_FORMAT_VERSION, SCHEMA_FORMAT_VERSION, SCHEMA_PATTERNS_FORMAT_VERSION),
        parse=parse_schema_sections,
        build=build_schema,
        encode=encode_schema_artifact,
    )
)
