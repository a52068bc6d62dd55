"""A transformers ``LogitsProcessor`` that constrains ``model.generate`` to the table's values.

Each batch row starts at the table's start state and follows its own state
from the tokens it emits; the state tensor lives on the logits' device and is
advanced with batched kernels (:mod:`triec.runtime.torch`), so a step costs no
host synchronisation. EOS is allowed exactly where a row's text is a complete
value; after EOS the row allows only EOS, so finished rows in a batch never
produce an all ``-inf`` row.

A compiled schema (:class:`~triec.schema.table.SchemaTable`: a tool call, large
enums anywhere in a JSON Schema) is served with one
:class:`~triec.schema.matcher.SchemaMatcher` per row on the CPU (inside an enum
from its slot's precomputed rows, the structure from its grammar engine); its rows
are written by the integrations' one path for host matchers
(:class:`~triec.integrations.matchers.MatcherRows`) and copied to the logits' device.

With ``trigger="Answer:"`` (and the table's ``vocab``) a plain table serves
think-then-answer: each row is free text until it writes the trigger, then one
value, then EOS (:mod:`triec.runtime.trigger`), one matcher per row on the CPU.

Greedy and sampled decoding are supported; beam search (which reorders rows
between steps) and assisted or speculative decoding (several tokens per call)
are not: a call whose input is not exactly one token longer than the previous
one restarts every row from the start state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import numpy as np
import torch
from transformers import LogitsProcessor

from triec.integrations.matchers import MatcherRows, RequestMatcher
from triec.runtime.table import MaskTable
from triec.runtime.torch import TorchMaskTable, apply_bitmask

if TYPE_CHECKING:
    from triec.runtime.restrict import RestrictedTable
    from triec.runtime.trigger import TokenBytes, Triggered
    from triec.schema.table import SchemaTable


class TriecLogitsProcessor(LogitsProcessor):
    """Masks every disallowed token to ``-inf``; one instance per ``generate`` call (or call :meth:`reset`).

    ``table`` is a :class:`~triec.runtime.MaskTable`, a restricted view
    (compacted here), or an already uploaded :class:`TorchMaskTable`. The mask
    width must cover the model's logits; extra logit columns are masked.
    """

    # Keeps per-row decoding state between calls, which continuous batching
    # (rows joining and leaving the batch) would scramble.
    supports_continuous_batching = False

    def __init__(
        self,
        table: MaskTable | RestrictedTable[MaskTable] | TorchMaskTable | SchemaTable,
        *,
        trigger: str | list[str] | None = None,
        vocab: TokenBytes | None = None,
    ) -> None:
        self._source = table
        # a schema table: the one kind here whose host_matched is true (a view and an upload have no such attribute)
        self._schema = cast("SchemaTable", table) if getattr(table, "host_matched", False) else None
        self._triggered: Triggered | None = None
        if trigger is not None:
            if vocab is None or not isinstance(table, MaskTable):
                raise ValueError("trigger= needs a plain table (a compiled set, not a view or a schema) and its vocab=")
            from triec.runtime.trigger import Triggered

            self._triggered = Triggered(table, vocab, trigger)
        self.matchers: list[RequestMatcher] | None = None
        self._rows = MatcherRows()
        self._tables: dict[torch.device, TorchMaskTable] = {}
        if isinstance(table, TorchMaskTable):
            self._tables[table.device] = table
        self.states: torch.Tensor | None = None  # (B,) int64 on the logits' device
        self._length = 0

    def reset(self) -> None:
        """Forget the rows' states: the next call starts every row afresh."""
        self.states = None
        self.matchers = None
        self._length = 0

    def device_table(self, device: torch.device) -> TorchMaskTable:
        """The table on ``device``, uploaded on first use."""
        table = self._tables.get(device)
        if table is None:
            source = self._source
            if isinstance(source, TorchMaskTable):
                raise ValueError(f"the table lives on {source.device}, but the logits are on {device}")
            compact = getattr(source, "compact", None)  # a restricted view: renumber into its own table
            plain = cast(MaskTable, compact() if compact is not None else source)  # a schema table never comes here
            table = plain.to_torch(device)
            self._tables[device] = table
        return table

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self._schema is not None or self._triggered is not None:
            return self._call_matchers(input_ids, scores)
        table = self.device_table(scores.device)
        batch, length = input_ids.shape
        if self.states is None or self.states.shape[0] != batch or length != self._length + 1:
            self.states = table.start_states(batch)  # first step of a generate call: the prompt
        else:
            self.states = table.advance(self.states, input_ids[:, -1].to(scores.device))
        self._length = length
        return table.apply_bitmask(scores, table.fill(self.states), inplace=False)

    def _call_matchers(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """One matcher per row on the host (a schema table's, or think-then-answer's), rows copied to the device."""
        table = self._schema if self._schema is not None else self._triggered
        assert table is not None
        batch, length = input_ids.shape
        if self.matchers is None or len(self.matchers) != batch or length != self._length + 1:
            self.matchers = [table.matcher() for _ in range(batch)]
        else:
            last = input_ids[:, -1].tolist()
            for row, (m, t) in enumerate(zip(self.matchers, last, strict=True)):
                if m.is_terminated():
                    continue  # generate pads finished rows
                if not m.accept_token(t):
                    raise ValueError(f"row {row}: token {t} was not allowed by the mask (was the mask applied last?)")
        self._length = length
        if self._schema is None:  # think-then-answer: a finished row (generate pads it) allows EOS only
            assert self._triggered is not None
            buf = np.zeros((batch, self._triggered.words), dtype=np.int32)
            rows = self._rows.fill(self.matchers, buf, ended=self._triggered.eos)
        else:
            rows = self._rows.fill(self.matchers)  # the schema table's writer's rows (EOS only once ended)
        return apply_bitmask(scores, torch.from_numpy(rows).to(scores.device), inplace=False)
