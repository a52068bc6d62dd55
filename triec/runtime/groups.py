"""A grouped table at decode time: which group an answer is in, the group labels, the state after a label.

A grouped table (:mod:`triec.compiler.groups`) compiles ``label + SEP + value`` for each value, and its header's
``build_options.groups`` (docs/format.md, "Grouped tables") records ``SEP``. These read that back: the answer the
model wrote splits at its first ``SEP`` into the group and the value; the labels are the distinct text before it;
the state after ``label + SEP`` is where a second round starts, decoding one value of that group. Numpy only, and
no import of the table class: the table is anything with ``build_options``, ``values`` and ``state_for_prefix``.
"""

from __future__ import annotations

from typing import Any, Protocol

from triec.encoding import JSON, json_string_literal
from triec.errors import ArtifactContentError, ValuesError


class GroupedTable(Protocol):
    """What these functions read of a table (a ``MaskTable`` or a restricted view of one)."""

    @property
    def build_options(self) -> dict[str, Any]: ...

    @property
    def values(self) -> list[str]: ...

    encoding: Any

    def state_for_prefix(self, prefix: bytes | str) -> int | None: ...


def separator(table: GroupedTable) -> str | None:
    """The table's ``SEP``: ``build_options.groups.separator``, or None for a table that is not grouped.

    Raises :class:`ArtifactContentError` when the field is there but not a map with a non-empty string separator
    and a count of at least 1."""
    found = table.build_options.get("groups")
    if found is None:
        return None
    sep = found.get("separator") if isinstance(found, dict) else None
    count = found.get("count") if isinstance(found, dict) else None
    if not isinstance(sep, str) or not sep or not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ArtifactContentError(
            f"header field 'build_options.groups': expected a map of 'separator' (non-empty text) and 'count' "
            f"(at least 1), found {found!r:.80}"
        )
    return sep


def _sep(table: GroupedTable) -> str:
    sep = separator(table)
    if sep is None:
        raise ValuesError("this table is not grouped (no build_options.groups): compile it with groups")
    return sep


def split_answer(table: GroupedTable, text: str) -> tuple[str, str]:
    """``(group, value)`` of a compiled string of a grouped table: split at its first ``SEP``.

    Raises :class:`ValuesError` when ``text`` holds no ``SEP`` after a label (it is no answer of this table)."""
    sep = _sep(table)
    at = text.find(sep)
    if at <= 0:
        raise ValuesError(f"{text[:60]!r} is not 'label{sep}value': not an answer of this grouped table")
    return text[:at], text[at + len(sep) :]


def group_members(table: GroupedTable) -> dict[str, list[str]]:
    """label -> its values, labels in table order (the values' byte order), values in table order.

    Raises :class:`ArtifactContentError` when a compiled string holds no separator (a corrupt grouped table)."""
    sep = _sep(table)
    out: dict[str, list[str]] = {}
    for text in table.values:
        at = text.find(sep)
        if at <= 0:
            raise ArtifactContentError(
                f"a value of this grouped table, {text[:60]!r}, holds no label before the separator {sep!r}"
            )
        out.setdefault(text[:at], []).append(text[at + len(sep) :])
    return out


def group_labels(table: GroupedTable) -> list[str]:
    """The group labels, in table order."""
    return list(group_members(table))


def spelled_prefix(table: GroupedTable, label: str) -> str:
    """The output text of ``label + SEP`` as the table spells it (its encoding's prefix, JSON quoting)."""
    text = label + _sep(table)
    enc = table.encoding
    if getattr(enc, "name", None) == JSON:
        return str(enc.prefix) + json_string_literal(text)[:-1]  # the literal less its closing quote
    return str(getattr(enc, "prefix", "")) + text


def group_state(table: GroupedTable, label: str) -> int:
    """The state after ``label + SEP``: where decoding one value of the group starts (byte tables; a canonical
    table's states are token paths, follow the model's tokens there with ``table.walk``).

    Raises :class:`ValuesError` for a label that is no group of the table."""
    state = table.state_for_prefix(spelled_prefix(table, label))
    if state is None:
        raise ValuesError(f"{label[:60]!r} is no group of this table")
    return state
