"""``triec compile VALUES --groups FILE | --group-separator SEP | --group-kmeans G``: which group each value is in.

The options are read and checked here, before the tokenizer loads; the values are then spelled ``label + SEP +
value`` (:mod:`triec.compiler.groups`; ``SEP`` is ``--group-join``, default ``" > "``) and compiled as one table
whose header records the grouping. Every refusal is one line naming the option, or ``FILE:LINE``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from triec.errors import TriecError, ValuesError


@dataclass(frozen=True)
class GroupOptions:
    """The grouping options as given (at most one of ``file``, ``separator``, ``kmeans``)."""

    file: str | None = None
    separator: str | None = None
    kmeans: int | None = None
    vectors: str | None = None
    join: str | None = None
    seed: int = 0

    @property
    def any(self) -> bool:
        return self.file is not None or self.separator is not None or self.kmeans is not None

    def check(self) -> None:
        """Refuse contradictory options before any work."""
        given = [
            flag
            for flag, v in (
                ("--groups", self.file),
                ("--group-separator", self.separator),
                ("--group-kmeans", self.kmeans),
            )
            if v is not None
        ]
        if len(given) > 1:
            raise TriecError(f"{', '.join(given)}: pass one way of grouping")
        if not given and (self.vectors is not None or self.join is not None):
            flag = "--vectors" if self.vectors is not None else "--group-join"
            raise TriecError(f"{flag}: for grouped tables only (--groups, --group-separator or --group-kmeans)")
        if self.vectors is not None and self.kmeans is None:
            raise TriecError("--vectors: the rows k-means clusters; pass it with --group-kmeans")
        if self.kmeans is not None and self.kmeans < 1:
            raise TriecError(f"--group-kmeans: expected at least 1 group, found {self.kmeans}")
        if self.file is not None and not Path(self.file).is_file():
            raise TriecError(f"--groups {self.file}: no such file")
        if self.separator is not None and not self.separator:
            raise TriecError("--group-separator: expected non-empty text")


def group_values(opts: GroupOptions, values: list[str]) -> tuple[dict[str, str], str]:
    """value -> label for every value, and the spelling separator; errors name the option, file and line."""
    from triec.compiler.groups import (
        DEFAULT_SEPARATOR,
        check_kmeans_work,
        check_separator,
        groups_by_kmeans,
        groups_by_separator,
        groups_from_file,
        term_dimensions,
        term_vectors,
    )

    sep = opts.join if opts.join is not None else DEFAULT_SEPARATOR
    try:
        check_separator(sep)
    except ValuesError as exc:
        raise TriecError(f"--group-join: {exc}") from None
    distinct = list(dict.fromkeys(values))
    if opts.file is not None:
        group_of = groups_from_file(opts.file, sep)
        missing = [v for v in distinct if v not in group_of]
        if missing:
            raise ValuesError(
                f"--groups {opts.file}: {len(missing):,} value(s) have no group, e.g. {missing[0][:60]!r}"
            )
        extra = set(group_of) - set(distinct)
        if extra:
            raise ValuesError(
                f"--groups {opts.file}: {len(extra):,} line(s) name a value that is not in VALUES, e.g. "
                f"{min(extra)[:60]!r}"
            )
    elif opts.separator is not None:
        group_of = groups_by_separator(distinct, opts.separator)
    else:
        assert opts.kmeans is not None
        g = min(opts.kmeans, len(distinct))
        width = term_dimensions(len(distinct)) if opts.vectors is None else _vector_width(opts.vectors)
        check_kmeans_work(len(distinct), g, width)  # refused before any vector is made or read
        vectors = _vectors(opts.vectors, values) if opts.vectors is not None else term_vectors(distinct)
        group_of = groups_by_kmeans(distinct, vectors, g, opts.seed, sep)
    return group_of, sep


def _vector_width(path: str) -> int:
    """Columns of ``--vectors`` (1 when it is unreadable: :func:`_vectors` says why)."""
    import numpy as np

    try:
        rows = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError):
        return 1
    return int(rows.shape[1]) if rows.ndim == 2 else 1


def _vectors(path: str, values: list[str]) -> Any:
    """``--vectors FILE.npy``: one float row per line of VALUES (duplicates included); a value's first row counts."""
    import numpy as np

    try:
        rows = np.load(path, mmap_mode="r", allow_pickle=False)  # shape checked before the rows are read
    except (OSError, ValueError) as exc:
        raise ValuesError(f"--vectors {path}: not a readable .npy array ({exc})") from None
    if rows.ndim != 2 or rows.shape[0] != len(values) or rows.dtype.kind not in "fiu":
        raise ValuesError(
            f"--vectors {path}: expected a numeric array of {len(values):,} rows (one per value, in VALUES' order), "
            f"found shape {rows.shape} of {rows.dtype}"
        )
    seen: dict[str, int] = {}
    for i, v in enumerate(values):
        seen.setdefault(v, i)
    return np.asarray(rows[list(seen.values())], dtype=np.float64)
