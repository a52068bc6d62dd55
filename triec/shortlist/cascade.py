"""A cascade of shortlists: top k, then 2k, then the full set, each a restricted view of one compiled table.

The table is compiled once with every value and one extra plain value, the
escape (``none_of_these``). Level i lists the retriever's first ``k * 2**i``
values and allows them plus the escape (``table.restrict``: nothing is
recompiled); choosing the escape moves to the next level. The last level
allows every value but the escape (a view memoized per table), so the last
answer is always a value: validity stays 100% through the widenings.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from triec._memo import per_table
from triec.errors import ValueNotInTable, ValuesError

ESCAPE = "none_of_these"
"""The escape value's default text; the prompt describes it (e.g. "none of the functions above fits")."""


@per_table
def _value_set(table: Any) -> frozenset[str]:
    return frozenset(table.values)


@per_table
def _full_views(table: Any) -> dict[str, Any]:
    return {}  # escape -> the view of every value but it


def full_view(table: Any, escape: str = ESCAPE) -> Any:
    """Every value of ``table`` but ``escape`` (a restricted view, built once per table and escape)."""
    views = _full_views(table)
    if escape not in views:
        views[escape] = table.restrict([v for v in table.values if v != escape])
    return views[escape]


@per_table
def compacted(view: Any) -> Any:
    """``view.compact()`` memoized per view: a standalone table with a ``matcher()`` (what a decode loop serves;
    the full level's view is built once per table, so its compact table is too)."""
    return view.compact()


class Cascade:
    """The levels of one request: ``ranked`` (the retriever's order of the table's values) cut at k, 2k, ...

    ``doublings`` is how many times the shortlist doubles before the full set
    (1: k, 2k, full, the paper's cascade; None: doubling while the width stays
    under the number of values). A width that reaches the number of values is
    the full level. ``k`` may equal that number (one level: the full set).
    """

    def __init__(
        self, table: Any, ranked: Sequence[str], k: int, *, escape: str = ESCAPE, doublings: int | None = 1
    ) -> None:
        if not getattr(table, "restrictable", False):
            raise ValuesError("a cascade needs a table of values (table.restrict); this table cannot be restricted")
        values = _value_set(table)
        if escape not in values:
            raise ValueNotInTable(
                f"the escape value {escape!r} is not one of the table's values: compile the set with it "
                f"(triec.compile(values + [{escape!r}], vocab)) so that a shortlist can say none of its values fits"
            )
        total = len(values) - 1
        if not ranked:
            raise ValuesError("the ranked list is empty: a shortlist needs at least one value")
        if not 1 <= k <= total:
            raise ValuesError(f"k must be between 1 and the number of values other than the escape ({total}), not {k}")
        if doublings is not None and doublings < 0:
            raise ValuesError(f"doublings must be 0 or more (or None: up to the full set), not {doublings}")
        seen: set[str] = set()
        for value in ranked:
            if value == escape:
                raise ValuesError(f"the ranked list holds the escape value {escape!r}: rank the table's other values")
            if value not in values:
                raise ValueNotInTable(f"ranked value {value!r} is not one of the table's values")
            if value in seen:
                raise ValuesError(f"ranked value {value!r} is listed twice")
            seen.add(value)
        self.table, self.ranked, self.k, self.escape, self.total = table, list(ranked), k, escape, total
        widths: list[int] = []
        width = k
        while width < total and (doublings is None or len(widths) <= doublings):
            widths.append(min(width, len(self.ranked)))  # a ranked list shorter than the level: all of it
            if widths[-1] == len(self.ranked):
                break
            width *= 2
        self.levels: tuple[int, ...] = (*widths, total)
        """The number of values each level allows (the escape aside); the last is every value."""
        self._views: dict[int, Any] = {}

    def is_last(self, level: int) -> bool:
        return level == len(self.levels) - 1

    def _check(self, level: int) -> None:
        if not 0 <= level < len(self.levels):
            raise IndexError(f"level {level}: this cascade has levels 0 to {len(self.levels) - 1}")

    def listed(self, level: int) -> list[str]:
        """The values shown at ``level`` (the escape excluded): the ranked values' first ``levels[level]``, and at
        the last level every value, ranked ones first."""
        self._check(level)
        if not self.is_last(level):
            return self.ranked[: self.levels[level]]
        rest = set(self.ranked)
        return self.ranked + [v for v in self.table.values if v not in rest and v != self.escape]

    def view(self, level: int) -> Any:
        """The table's view at ``level``: the listed values and the escape; at the last level, all but the escape."""
        self._check(level)
        if self.is_last(level):
            return full_view(self.table, self.escape)
        if level not in self._views:
            self._views[level] = self.table.restrict([*self.listed(level), self.escape])
        return self._views[level]

    def is_escape(self, answer: str | None) -> bool:
        return answer == self.escape


@dataclass(frozen=True)
class CascadeResult:
    answer: str | None
    level: int  # the level answered at (0: the first shortlist)
    decodes: int  # how many decodes it took (level + 1)
    answers: tuple[str | None, ...]  # each level's answer, escapes included


def run(cascade: Cascade, decode: Callable[[Any, list[str]], str | None]) -> CascadeResult:
    """``decode(view, listed)`` at each level until the answer is not the escape (or the last level answers)."""
    answers: list[str | None] = []
    for level in range(len(cascade.levels)):
        answer = decode(cascade.view(level), cascade.listed(level))
        answers.append(answer)
        if not cascade.is_escape(answer) or cascade.is_last(level):
            return CascadeResult(answer, level, level + 1, tuple(answers))
    raise AssertionError("unreachable: the last level always returns")  # pragma: no cover
