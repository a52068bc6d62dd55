"""The pattern-table format (``"triec-pattern"``, versions 1 and 6): the sections and the header fields that
describe them.

The rows of a regular language's minimal DFA over a vocabulary (:class:`~triec.runtime.pattern.PatternTable`).
Version 6 (written) stores them by token class (:mod:`triec.runtime.token_classes`): ``token_class`` and the
class rows ``class_offsets`` / ``class_ids`` / ``class_next``; version 1 (read) stored token rows,
``allowed_offsets`` / ``allowed_tokens`` / ``allowed_next`` as in ``"triec-masks"``. Both then hold
``accepting`` (the accepting states, ascending) and the DFA's own byte transitions as CSR (``dfa_offsets``,
``dfa_bytes``, ``dfa_next``). The header names the regex (``pattern.regex``) and the named format it came from
(``pattern.format``, or nil). Registered with :mod:`triec.artifact.formats` when imported.
"""

from __future__ import annotations

from typing import Any

from triec.artifact import container, formats
from triec.artifact.container import PATTERN_CLASSES_FORMAT_VERSION, PLAIN_FORMAT_VERSION
from triec.artifact.header import check_common_header, encode_header, read_table_header
from triec.errors import ArtifactContentError, ArtifactError
from triec.named_formats import FORMAT_NAMES, FORMATS
from triec.runtime.kinds import TableKind
from triec.runtime.pattern import PatternTable
from triec.runtime.token_classes import TokenClasses

FORMAT_NAME = TableKind.PATTERN.format_name

_DFA: tuple[tuple[str, str], ...] = (
    ("accepting", "<i4"),
    ("dfa_offsets", "<u4"),
    ("dfa_bytes", "|u1"),
    ("dfa_next", "<i4"),
)
SECTIONS: tuple[tuple[str, str], ...] = (
    ("allowed_offsets", "<u4"),
    ("allowed_tokens", "<i4"),
    ("allowed_next", "<i4"),
    *_DFA,
)
"""Version 1: token rows."""
CLASS_SECTIONS: tuple[tuple[str, str], ...] = (
    ("member_offsets", "<u4"),
    ("member_tokens", "<i4"),
    ("class_offsets", "<u4"),
    ("class_ids", "<i4"),
    ("class_next", "<i4"),
    *_DFA,
)
"""Version 6: class rows."""


def encode_pattern(table: PatternTable) -> bytes:
    """A pattern table's artifact bytes: a pure function of the table (version 6 where it holds classes, version 1
    where it holds token rows: a table loaded from version 1, or built by hand)."""
    classes = table.classes
    counts: dict[str, Any] = {"num_states": table.num_states, "num_allowed": table.num_allowed}
    arrays: dict[str, Any] = {
        "accepting": table.value_state,
        "dfa_offsets": table.dfa_offsets,
        "dfa_bytes": table.dfa_bytes,
        "dfa_next": table.dfa_next,
    }
    if classes is None:
        if table.num_allowed >= 2**32:
            raise ArtifactError(f"{table.num_allowed} allowed pairs exceed the format's u32 offsets")
        arrays |= {n: getattr(table, n) for n in ("allowed_offsets", "allowed_tokens", "allowed_next")}
        sections, version = SECTIONS, PLAIN_FORMAT_VERSION
    else:
        if classes.num_class_pairs >= 2**32:
            raise ArtifactError(f"{classes.num_class_pairs} class pairs exceed the format's u32 offsets")
        counts["num_classes"] = classes.num_classes
        counts["num_class_members"] = int(classes.member_tokens.shape[0])
        counts["num_class_pairs"] = classes.num_class_pairs
        names = ("member_offsets", "member_tokens", "class_offsets", "class_ids", "class_next")
        arrays |= {n: getattr(classes, n) for n in names}
        sections, version = CLASS_SECTIONS, PATTERN_CLASSES_FORMAT_VERSION
    counts |= {
        "num_accepting": int(table.value_state.shape[0]),
        "num_dfa_edges": int(table.dfa_bytes.shape[0]),
        "pattern": {"regex": table.pattern, "format": table.format_name},
    }
    header = encode_header(FORMAT_NAME, table.table_header, counts)
    return container.encode(header, [(name, dtype, arrays[name]) for name, dtype in sections], version)


def parse_pattern(
    buf: Any,
    header: dict[str, Any],
    data_start: int,
    version: int,
    source: str,
    *,
    verify: bool = False,
    checksums: bool = False,
) -> dict[str, Any]:
    """The sections, checked against the header's counts; numpy views."""
    field, count = container.field, container.count
    vocab_size = check_common_header(header, source)
    num_states = count(header, "num_states", source, 2**31)
    num_allowed = count(header, "num_allowed", source)
    num_accepting = count(header, "num_accepting", source, 2**31)
    num_edges = count(header, "num_dfa_edges", source)
    if num_states < 1:
        raise container.fail(source, "header field 'num_states': a pattern table holds at least one state")
    check_pattern_field(field(header, "pattern", dict, source), source)
    expected = {
        "accepting": num_accepting,
        "dfa_offsets": num_states + 1,
        "dfa_bytes": num_edges,
        "dfa_next": num_edges,
    }
    if version == PATTERN_CLASSES_FORMAT_VERSION:
        num_classes = count(header, "num_classes", source, vocab_size + 1)
        num_members = count(header, "num_class_members", source, vocab_size + 1)
        num_pairs = count(header, "num_class_pairs", source)
        expected |= {
            "member_offsets": num_classes + 1,
            "member_tokens": num_members,
            "class_offsets": num_states + 1,
            "class_ids": num_pairs,
            "class_next": num_pairs,
        }
        sections = CLASS_SECTIONS
    else:
        expected |= {"allowed_offsets": num_states + 1, "allowed_tokens": num_allowed, "allowed_next": num_allowed}
        sections = SECTIONS
    return container.read_sections(
        buf, source, header, data_start, list(sections), expected, verify=verify, checksums=checksums
    )


def check_pattern_field(pattern: dict[str, Any], source: str) -> None:
    """The header's ``pattern`` map: a regex string, and a format that is nil or one of the named formats whose
    regex it is, as is or within a JSON string's quotes (a string schema's table; the name is shown as what the table serves, so a name the regex does not stand for would be a lie;
    ``triec verify`` checks the DFA against the regex)."""
    regex, name = pattern.get("regex"), pattern.get("format")
    if not isinstance(regex, str) or not (name is None or isinstance(name, str)):
        raise container.fail(source, "header field 'pattern': expected a regex string and a format string or nil")
    if name is not None and name not in FORMAT_NAMES:
        raise container.fail(
            source,
            f"header field 'pattern': 'format': expected nil or one of {', '.join(FORMAT_NAMES)}, found {name!r:.40}",
        )
    if name is not None and regex not in (FORMATS[name], f'"{FORMATS[name]}"'):  # as is, or a JSON string's
        raise container.fail(source, f"header field 'pattern': 'regex' is not the regex of format {name!r}")


def build_pattern(
    header: dict[str, Any], arrays: dict[str, Any], version: int, source: str, *, verify: bool = False
) -> PatternTable:
    """The table over checked sections (every index checked; with ``verify``, the rows' order and no EOS too)."""
    if version == PATTERN_CLASSES_FORMAT_VERSION:
        rows: dict[str, Any] = {
            "classes": TokenClasses(
                **{n: arrays[n] for n, _ in CLASS_SECTIONS[:5]}, vocab_size=int(header["vocab_size"])
            )
        }
    else:
        rows = {n: arrays[n] for n in ("allowed_offsets", "allowed_tokens", "allowed_next")}
    table = PatternTable.from_artifact(
        **rows,
        value_state=arrays["accepting"],
        dfa_offsets=arrays["dfa_offsets"],
        dfa_bytes=arrays["dfa_bytes"],
        dfa_next=arrays["dfa_next"],
        pattern=header["pattern"]["regex"],
        format_name=header["pattern"]["format"],
        table_header=read_table_header(header, version, source),
        verify=verify,
    )
    if version == PATTERN_CLASSES_FORMAT_VERSION and verify and table.num_allowed != header["num_allowed"]:
        raise ArtifactContentError(
            f"{source}: header field 'num_allowed': {header['num_allowed']} pairs, the classes hold "
            f"{table.num_allowed}; the artifact is corrupt"
        )
    return table


FORMAT = formats.register(
    formats.ArtifactFormat(
        name=FORMAT_NAME,
        kind=TableKind.PATTERN,
        versions=(PLAIN_FORMAT_VERSION, PATTERN_CLASSES_FORMAT_VERSION),
        parse=parse_pattern,
        build=build_pattern,
        encode=encode_pattern,
    )
)
