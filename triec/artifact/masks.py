"""The mask-table format (``"triec-masks"``, versions 1 and 2): six sections and the header fields that describe them.

A plain artifact is a mask table. This module registers the format's reader and writer with
:mod:`triec.artifact.formats`, which ``triec.load`` and ``table.save`` dispatch through; the schema
layer's format (``"triec-schema"``, :mod:`triec.schema.artifact`) registers its own, and reads the
first schema layout (a mask table's sections followed by sections of its own) with :func:`parse_sections`
and :func:`build_table` from here.
"""

from __future__ import annotations

from typing import Any

from triec.artifact import container, formats
from triec.artifact.container import ENCODED_FORMAT_VERSION, PLAIN_FORMAT_VERSION, TAILS_FORMAT_VERSION
from triec.artifact.formats import encode_artifact, load, load_buffer, parse_artifact, write_artifact
from triec.artifact.header import check_common_header, encode_header, read_table_header
from triec.encoding import Encoding
from triec.errors import ArtifactError
from triec.runtime.kinds import TableKind, Tokenization
from triec.runtime.table import MaskTable, TailMaskTable
from triec.runtime.tails import CanonicalTailLayout, TailIndex

__all__ = [
    "FORMAT_NAME",
    "SECTIONS",
    "build_table",
    "check_common_header",
    "encode_artifact",
    "encode_masks",
    "load",
    "load_buffer",
    "parse_artifact",
    "parse_sections",
    "write_artifact",
]

FORMAT_NAME = TableKind.MASKS.format_name

# name -> dtype; the order is the order in the file.
SECTIONS: tuple[tuple[str, str], ...] = (
    ("allowed_offsets", "<u4"),
    ("allowed_tokens", "<i4"),
    ("allowed_next", "<i4"),
    ("value_state", "<i4"),
    ("value_lcp", "<i4"),
    ("state_byte", "|u1"),
)
TAIL_LAYOUT: tuple[tuple[str, str], ...] = (
    ("allowed_offsets", "<u4"),
    ("allowed_pairs", "<u4"),
    ("far_pairs", "<u4"),
    ("far_next", "<i4"),
    ("value_state", "<i4"),
    ("value_lcp", "<i4"),
    ("state_byte", "|u1"),
    ("token_key_offsets", "<u4"),
    ("token_key_bytes", "|u1"),
    ("token_id_offsets", "<u4"),
    ("token_ids", "<i4"),
)
"""Version 4 (the tail layout): the stored rows of the branching states (packed pairs, far targets), the trie's
three sections, the vocabulary's token index (docs/format.md)."""
TAIL_COUNTS = ("num_branch_states", "num_far", "num_token_keys", "num_token_bytes", "num_token_ids")
"""Version 4's header fields beyond version 1's, in this order after ``num_allowed``."""
CANONICAL_TAILS: tuple[tuple[str, str], ...] = (
    ("tail_token_offsets", "<u4"),
    ("tail_tokens", "<i4"),
)
"""Version 4 of a canonical table (``build_options.tokenization == "canonical"``): after :data:`TAIL_LAYOUT`, each
value's tail tokens (docs/format.md); their count in header field ``num_tail_tokens``, after ``num_token_ids``."""


def _expected_counts(num_states: int, num_allowed: int, num_values: int) -> dict[str, int]:
    return {
        "allowed_offsets": num_states + 1,
        "allowed_tokens": num_allowed,
        "allowed_next": num_allowed,
        "value_state": num_values,
        "value_lcp": num_values,
        "state_byte": num_states,
    }


# ---------------------------------------------------------------- writing


def table_sections(table: MaskTable) -> tuple[list[tuple[str, str]], dict[str, Any]]:
    """The sections a mask table is written as, in file order ((name, dtype) each), and the array of each."""
    tails = table.tails
    if tails is None:
        return list(SECTIONS), {name: getattr(table, name) for name, _ in SECTIONS}
    ix = tails.index
    sources = {
        "allowed_offsets": tails.offsets,
        "allowed_pairs": tails.pairs,
        "far_pairs": tails.far_pairs,
        "far_next": tails.far_next,
        "value_state": table.value_state,
        "value_lcp": table.value_lcp,
        "state_byte": table.state_byte,
        "token_key_offsets": ix.key_offsets,
        "token_key_bytes": ix.key_bytes,
        "token_id_offsets": ix.id_offsets,
        "token_ids": ix.ids,
    }
    layout = list(TAIL_LAYOUT)
    if isinstance(tails, CanonicalTailLayout):
        sources["tail_token_offsets"] = tails.tail_token_offsets
        sources["tail_tokens"] = tails.tail_tokens
        layout += CANONICAL_TAILS
    return layout, sources


def encode_masks(trie: MaskTable) -> bytes:
    """A mask table's artifact bytes: a pure function of the table (same table, same bytes)."""
    if trie.num_allowed >= 2**32:
        raise ArtifactError(f"{trie.num_allowed} allowed pairs exceed the format's u32 offsets")
    layout, sources = table_sections(trie)
    tails = trie.tails
    counts: dict[str, Any] = {
        "num_values": trie.num_values,
        "num_states": trie.num_states,
        "num_allowed": trie.num_allowed,
    }
    if tails is not None:
        counts.update(
            {
                "num_branch_states": tails.num_branch,
                "num_far": int(tails.far_pairs.shape[0]),
                "num_token_keys": tails.index.num_keys,
                "num_token_bytes": int(tails.index.key_bytes.shape[0]),
                "num_token_ids": int(tails.index.ids.shape[0]),
            }
        )
        if isinstance(tails, CanonicalTailLayout):
            counts["num_tail_tokens"] = tails.num_tail_tokens
    header = encode_header(FORMAT_NAME, trie.table_header, counts)
    version = PLAIN_FORMAT_VERSION if tails is None else TAILS_FORMAT_VERSION
    if not trie.encoding.plain:
        version = ENCODED_FORMAT_VERSION if tails is None else TAILS_FORMAT_VERSION
        header["encoding"] = trie.encoding.to_header()
    return container.encode(header, [(name, dtype, sources[name]) for name, dtype in layout], version)


# ---------------------------------------------------------------- reading


def _fail(source: str, message: str) -> ArtifactError:
    return container.fail(source, message)


def parse_sections(
    buf: Any,
    header: dict[str, Any],
    data_start: int,
    version: int,
    source: str,
    *,
    verify: bool = False,
    checksums: bool = False,
    extra_layout: tuple[tuple[str, str], ...] = (),
    extra_counts: Any = None,
) -> dict[str, Any]:
    """The six sections, checked against the header's counts and encoding; numpy views.

    ``extra_layout`` follows them in the first schema layout, each section's count given by
    ``extra_counts(header)`` (called after the mask fields are checked, so errors come in file order).
    """
    field, count = container.field, container.count
    check_common_header(header, source)
    try:
        Tokenization.of(header["build_options"])
    except ValueError as exc:
        raise _fail(source, f"header field 'build_options': {exc}") from None
    if Tokenization.of(header["build_options"]) is Tokenization.IDS and version != PLAIN_FORMAT_VERSION:
        raise _fail(
            source, f"an ids table (build_options.tokenization 'ids') is format version {PLAIN_FORMAT_VERSION} only"
        )
    num_states = count(header, "num_states", source, 2**31)
    num_allowed = count(header, "num_allowed", source)
    num_values = count(header, "num_values", source, 2**31)
    if num_states < 1 or num_values < 1:
        raise _fail(source, "header: an artifact holds at least one value and one state")
    if version == PLAIN_FORMAT_VERSION and "encoding" in header:
        raise _fail(
            source, f"header field 'encoding': needs format version {ENCODED_FORMAT_VERSION}, the file says {version}"
        )
    if version == ENCODED_FORMAT_VERSION or (version == TAILS_FORMAT_VERSION and "encoding" in header):
        try:
            encoding = Encoding.from_header(header.get("encoding"))
        except ValueError as exc:
            raise _fail(source, f"header field 'encoding': {exc}") from None
        if encoding.plain and version == ENCODED_FORMAT_VERSION:
            raise _fail(
                source,
                f"header field 'encoding': a raw encoding without prefix or suffix is written as version {PLAIN_FORMAT_VERSION}",
            )
    field(header, "sections", list, source)
    expected = _expected_counts(num_states, num_allowed, num_values)
    layout = list(SECTIONS) + list(extra_layout)
    if version == TAILS_FORMAT_VERSION:
        if extra_layout:
            raise _fail(source, f"format version {TAILS_FORMAT_VERSION} holds a mask table only")
        branch, far, keys, key_bytes, ids = (count(header, name, source, 2**32) for name in TAIL_COUNTS)
        if not 1 <= branch <= num_states:
            raise _fail(source, f"header field 'num_branch_states': expected 1..{num_states}, found {branch}")
        expected.update(
            {
                "allowed_offsets": branch + 1,
                "allowed_pairs": num_allowed,
                "far_pairs": far,
                "far_next": far,
                "token_key_offsets": keys + 1,
                "token_key_bytes": key_bytes,
                "token_id_offsets": keys + 1,
                "token_ids": ids,
            }
        )
        layout = list(TAIL_LAYOUT)
        if Tokenization.of(header["build_options"]) is Tokenization.CANONICAL:  # each value's tail tokens after
            expected.update(
                {
                    "tail_token_offsets": num_values + 1,
                    "tail_tokens": count(header, "num_tail_tokens", source, 2**32),
                }
            )
            layout += CANONICAL_TAILS
        elif "num_tail_tokens" in header:
            raise _fail(source, "header field 'num_tail_tokens': only a canonical table's tail layout has one")
    else:
        for name in (*TAIL_COUNTS, "num_tail_tokens"):
            if name in header:
                raise _fail(source, f"header field {name!r}: only a version-{TAILS_FORMAT_VERSION} artifact has one")
    if extra_counts is not None:
        expected.update(extra_counts(header))
    elif "schema" in header:
        raise _fail(source, f"header field 'schema': only a {TableKind.TOOL_SCHEMA.format_name!r} artifact has one")
    return container.read_sections(
        buf, source, header, data_start, layout, expected, verify=verify, checksums=checksums
    )


def build_table(
    header: dict[str, Any], arrays: dict[str, Any], version: int, source: str, *, verify: bool = False
) -> MaskTable:
    """The mask table over checked sections (its indices checked; with ``verify`` everything that makes masks right)."""
    if version == TAILS_FORMAT_VERSION:
        return TailMaskTable.from_artifact(
            **{name: arrays[name] for name, _ in TAIL_LAYOUT[:7]},
            token_index=TailIndex(
                key_offsets=arrays["token_key_offsets"],
                key_bytes=arrays["token_key_bytes"],
                id_offsets=arrays["token_id_offsets"],
                ids=arrays["token_ids"],
            ),
            **{name: arrays[name] for name, _ in CANONICAL_TAILS if name in arrays},
            table_header=read_table_header(header, version, source),
            verify=verify,
            encoding=Encoding.from_header(header["encoding"]) if "encoding" in header else None,
        )
    return MaskTable.from_artifact(
        **{name: arrays[name] for name, _ in SECTIONS},
        table_header=read_table_header(header, version, source),
        verify=verify,
        encoding=Encoding.from_header(header["encoding"]) if "encoding" in header else None,
    )


FORMAT = formats.register(
    formats.ArtifactFormat(
        name=FORMAT_NAME,
        kind=TableKind.MASKS,
        versions=(PLAIN_FORMAT_VERSION, ENCODED_FORMAT_VERSION, TAILS_FORMAT_VERSION),
        parse=parse_sections,
        build=build_table,
        encode=encode_masks,
    )
)
