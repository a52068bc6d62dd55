"""The request-level matcher every integration drives, and the one path that writes rows of such matchers.

A request served on the host holds one matcher (:class:`RequestMatcher`): a plain
table's (:class:`~triec.runtime.matcher.TableMatcher`), a schema table's
(:class:`~triec.schema.matcher.SchemaMatcher`) or think-then-answer's
(:class:`~triec.runtime.trigger.TriggeredMatcher`). The vLLM backend (through
:class:`~triec.integrations.vllm.structured.RequestGrammar`), SGLang's grammar
objects, llama.cpp's processor, the transformers processor's host rows and
``triec eval``'s decode loop drive it through these methods alone.

:class:`MatcherRows` writes the rows of a batch of matchers, the one path for
it (the vLLM processors' schema rows, the transformers processor's host rows,
SGLang's batched rows): the matchers of one plain table in one gather and
scatter (:func:`fill_rows`), those of one schema table through that table's
mask writer, any other through its own ``fill_bitmask``. numpy only.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol, cast

import numpy as np

from triec.runtime.bitmask import set_bits, word_of
from triec.runtime.matcher import TableMatcher
from triec.runtime.table import MaskTable
from triec.runtime.word_masks import state_words
from triec.schema.matcher import SchemaMaskWriter, SchemaMatcher

if TYPE_CHECKING:
    from triec.schema.table import SchemaTable


class RequestMatcher(Protocol):
    """One request's position in its constraint, in the grammar engines' style (xgrammar's ``GrammarMatcher``).

    :class:`~triec.runtime.matcher.TableMatcher`, :class:`~triec.schema.matcher.SchemaMatcher` and
    :class:`~triec.runtime.trigger.TriggeredMatcher` are ones; the first two also have ``jump_forward()`` (the
    bytes every continuation starts with), which SGLang's jump-forward asks for where it is there.
    """

    def fill_bitmask(self, row: np.ndarray) -> None:
        """Write the whole int32 row in the layout of :mod:`triec.runtime.bitmask` (a set bit: an allowed token)."""

    def allowed(self) -> np.ndarray:
        """The allowed token ids, ascending."""

    def accept_token(self, token: int) -> bool:
        """Advance; False (and no change) for a token not allowed here."""

    def validate_tokens(self, tokens: Sequence[int]) -> int:
        """How many of ``tokens`` would be accepted in order (nothing moves)."""

    def rollback(self, n: int) -> None:
        """Undo the last ``n`` accepted tokens, a terminating EOS included."""

    def is_terminated(self) -> bool:
        """True once an EOS id ended the output."""

    def fork(self) -> RequestMatcher:
        """An independent copy in the same position (the same kind of matcher)."""

    def reset(self) -> None:
        """Back to the start, nothing accepted."""


BATCH_ROWS = 24
"""From this many rows of one plain table on, :func:`fill_rows` writes them in one gather and scatter (below, one
slice assignment per row is cheaper: about 2.5 us a row against 25 us of numpy set-up, measured at width 151,936)."""


def fill_rows(matchers: Sequence[RequestMatcher], rows: Sequence[int], out: np.ndarray) -> None:
    """``out[rows[i]]`` = the mask row of ``matchers[i]``; the table matchers of one table batched.

    Each table-matcher row is cleared (the engines hand over rows of -1) and gets
    the (word, bits) pairs of its state: O(allowed words) past the clear, and from
    :data:`BATCH_ROWS` rows of a table on, no Python loop over those rows. Any other
    matcher fills its own row.
    """
    groups: dict[
        int, tuple[MaskTable, list[int], list[TableMatcher[MaskTable]]]
    ] = {}  # by table: (table, rows, matchers)
    for m, r in zip(matchers, rows, strict=True):
        if type(m) is TableMatcher:
            group = groups.get(id(m.table))
            if group is None:
                group = groups[id(m.table)] = (m.table, [], [])
            group[1].append(int(r))
            group[2].append(m)
        else:
            m.fill_bitmask(out[int(r)])
    for table, row_list, group_matchers in groups.values():
        if len(row_list) < BATCH_ROWS or table.tails is not None:  # a tail table's matchers compute their rows
            for m, r in zip(group_matchers, row_list, strict=True):
                m.fill_bitmask(out[r])
            continue
        for r in row_list:
            out[r].fill(0)
        live = [(r, m.state) for r, m in zip(row_list, group_matchers, strict=True) if not m.is_terminated()]
        if not live:
            continue
        rw = np.fromiter((r for r, _ in live), dtype=np.int64, count=len(live))
        st = np.fromiter((s for _, s in live), dtype=np.int64, count=len(live))
        w = state_words(table)
        st = w.rows(st)
        lo = w.offsets[st]
        counts = w.offsets[st + 1] - lo
        total = int(counts.sum())
        if total == 0:
            continue
        ends = np.cumsum(counts)
        pos = np.repeat(lo - ends + counts, counts) + np.arange(total, dtype=np.int64)
        if out.flags.c_contiguous:
            out.reshape(-1)[np.repeat(rw * out.shape[1], counts) + w.words[pos]] = w.bits[pos]
        else:
            out[np.repeat(rw, counts), w.words[pos]] = w.bits[pos]


class MatcherRows:
    """Rows of requests each served by a host matcher: the one path every integration writes them through.

    Holds each schema table's mask writer (the last :data:`MAX_WRITERS`), which writes a slot's precomputed row in
    O(allowed) and batches the grammar engine's rows. Not thread-safe: one per batch (a processor, a backend).
    """

    MAX_WRITERS = 64

    def __init__(self) -> None:
        self._writers: OrderedDict[int, tuple[SchemaTable, SchemaMaskWriter[SchemaTable]]] = OrderedDict()
        # id(schema table) -> (table, its writer)

    def fill(
        self,
        matchers: Sequence[RequestMatcher],
        out: np.ndarray | None = None,
        rows: Sequence[int] | None = None,
        *,
        ended: Iterable[int] | None = None,
    ) -> np.ndarray:
        """``out[rows[i]]`` = the row of ``matchers[i]`` (``rows`` default: 0, 1, ...); returns ``out``.

        ``out`` may be None only where every matcher is of one schema table: the rows are then that table's writer's
        buffer (a view valid until the next call). ``ended``: the EOS ids a terminated matcher's row allows alone
        (a finished row is then never all-forbidden); None: each matcher's own row after the end.
        """
        if not matchers:
            return np.zeros((0, 0), dtype=np.int32) if out is None else out
        eos = None if ended is None else np.asarray(sorted({int(e) for e in ended}), dtype=np.int64)
        if out is None:
            only = self._one_schema_table(matchers, eos)
            if only is not None:
                # every one a SchemaMatcher of that table (_one_schema_table checked)
                return self._writer(only, len(matchers)).fill(cast("Sequence[SchemaMatcher[SchemaTable]]", matchers))
            raise ValueError("MatcherRows.fill needs out= unless every matcher is of one schema table")
        at = range(len(matchers)) if rows is None else [int(r) for r in rows]
        own: tuple[list[RequestMatcher], list[int]] = ([], [])
        schema: dict[int, tuple[SchemaTable, list[int], list[SchemaMatcher[SchemaTable]]]] = {}
        for m, r in zip(matchers, at, strict=True):
            if eos is not None and m.is_terminated():
                out[r].fill(0)
                set_bits(out[r], eos[word_of(eos) < out.shape[1]])
            elif type(m) is SchemaMatcher:
                group = schema.setdefault(id(m.table), (m.table, [], []))
                group[1].append(r)
                group[2].append(m)
            else:
                own[0].append(m)
                own[1].append(r)
        fill_rows(own[0], own[1], out)
        for table, rs, ms in schema.values():
            out[np.asarray(rs, dtype=np.int64)] = self._writer(table, len(ms)).fill(ms)
        return out

    def forget(self, live: Iterable[object]) -> None:
        """Drop the writers of schema tables not in ``live`` (tables no request holds any more)."""
        keep = {id(t) for t in live}
        for tid in [t for t in self._writers if t not in keep]:
            del self._writers[tid]

    def _one_schema_table(self, matchers: Sequence[RequestMatcher], eos: np.ndarray | None) -> SchemaTable | None:
        first = matchers[0]
        if type(first) is not SchemaMatcher:
            return None
        table: SchemaTable = first.table
        for m in matchers:
            if type(m) is not SchemaMatcher or m.table is not table or (eos is not None and m.is_terminated()):
                return None
        return table

    def _writer(self, table: SchemaTable, n: int) -> SchemaMaskWriter[SchemaTable]:
        found = self._writers.get(id(table))
        if found is None or found[0] is not table or found[1].max_batch < n:
            grown = 2 * found[1].max_batch if found is not None and found[0] is table else 1
            found = self._writers[id(table)] = (table, table.mask_writer(max(n, grown)))
            while len(self._writers) > self.MAX_WRITERS:
                self._writers.popitem(last=False)
        self._writers.move_to_end(id(table))
        return found[1]


__all__ = ["BATCH_ROWS", "MatcherRows", "RequestMatcher", "fill_rows"]
