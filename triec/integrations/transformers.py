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

Greedy, sampled and beam-search decoding are supported (``num_beams``, with
``num_return_sequences``, ``length_penalty`` and ``early_stopping``): beam search
reorders, duplicates and drops rows between steps, so each row's state is found
from its own generated tokens, never from its index (:mod:`triec.integrations.prefixes`:
one lookup and one advance per distinct row a step). transformers' beam scores are
the model's log-softmax over its whole vocabulary summed along the path, EOS included;
the processor only sets refused tokens to ``-inf``, so a beam's score is its path's
log-probability, and the beams are those of the same search driven by a
``prefix_allowed_tokens_fn`` that allows the same tokens (:func:`prefix_allowed_tokens_fn`
is one, for code written for GENRE). Assisted or speculative decoding (several tokens
per call) is not supported: a call whose input is not exactly one token longer than
the previous one restarts every row from the prompt.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from transformers import LogitsProcessor

from triec.errors import TokenNotAllowed
from triec.integrations.matchers import MatcherRows, RequestMatcher
from triec.integrations.prefixes import P, Prefixes, matcher_step, state_step
from triec.runtime.bitmask import set_bits, words_for
from triec.runtime.table import MaskTable
from triec.runtime.torch import TorchMaskTable, apply_bitmask

if TYPE_CHECKING:
    from triec.runtime.restrict import RestrictedTable
    from triec.runtime.trigger import TokenBytes, Triggered
    from triec.schema.table import SchemaTable


class TriecLogitsProcessor(LogitsProcessor):
    """Masks every disallowed token to ``-inf``; an instance serves one ``generate`` call after another (each
    call starts its rows afresh), keeping its device upload: reuse it rather than upload a large table per call.

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
        self.matchers: list[RequestMatcher | None] | None = None
        self._rows = MatcherRows()
        self._tables: dict[torch.device, TorchMaskTable] = {}
        if isinstance(table, TorchMaskTable):
            self._tables[table.device] = table
        self.states: torch.Tensor | None = None  # (B,) int64 on the logits' device
        self._length = 0
        self._prompt = 0  # the input length of a generate call's first step: what follows is generated
        self._host = _host_table(table) if self._schema is None and self._triggered is None else None
        self._state_rows: Prefixes[int] | None = None
        self._matcher_rows: Prefixes[RequestMatcher | None] | None = None
        if self._host is not None:
            host = self._host
            self._state_rows = Prefixes(lambda: int(host.start), state_step(host.advance, host.eos_token_ids))
        else:
            source = self._schema if self._schema is not None else self._triggered
            assert source is not None
            make = cast("Callable[[], RequestMatcher]", source.matcher)
            step = matcher_step(_fork, _accept, _ended)
            self._matcher_rows = Prefixes(make, step)

    def reset(self) -> None:
        """Forget the rows' states: the next call starts every row afresh."""
        self.states = None
        self.matchers = None
        self._length = 0
        for rows in (self._state_rows, self._matcher_rows):
            if rows is not None:
                rows.reset()

    def _generated(self, input_ids: torch.LongTensor) -> list[list[int]]:
        """Each row's generated tokens (the input past the first call's prompt): a new generate call (an input
        that is not one token longer) starts here."""
        length = int(input_ids.shape[1])
        if length != self._length + 1 or self._length == 0:
            self.reset()
            self._prompt = length
        self._length = length
        rows: list[list[int]] = input_ids[:, self._prompt :].tolist()
        return rows

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
        if self._matcher_rows is not None:
            return self._call_matchers(input_ids, scores)
        assert self._state_rows is not None
        table = self.device_table(scores.device)
        states = self._state_rows.positions(self._generated(input_ids))
        self.states = torch.tensor(states, dtype=torch.int64, device=scores.device)
        # a copy (generate keeps the raw scores it passed when asked to return them), masked row by row: a narrow
        # row by gathering its few logits, a wide one through its bitmask (TorchMaskTable.mask_rows)
        return table.mask_rows(scores.clone(), None, self.states)

    def _call_matchers(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """One matcher per row on the host (a schema table's, or think-then-answer's), rows copied to the device;
        a dead row (its tokens refused) and a finished one allow EOS only."""
        assert self._matcher_rows is not None
        self.matchers = self._matcher_rows.positions(self._generated(input_ids))
        batch = len(self.matchers)
        eos = self._eos_ids()
        first: dict[int, int] = {}  # rows of one position share its matcher: each distinct one is filled once
        for r, m in enumerate(self.matchers):
            if m is not None:
                first.setdefault(id(m), r)
        words = self._triggered.words if self._triggered is not None else self._schema_words()
        buf = np.zeros((batch, words), dtype=np.int32)
        if first:
            rows = list(first.values())
            self._rows.fill([m for r in rows if (m := self.matchers[r]) is not None], buf, rows, ended=eos)
        for r, m in enumerate(self.matchers):
            if m is None:
                set_bits(buf[r], np.asarray(eos, dtype=np.int64))
            elif first[id(m)] != r:
                buf[r] = buf[first[id(m)]]
        return apply_bitmask(scores, torch.from_numpy(buf).to(scores.device), inplace=False)

    def _eos_ids(self) -> tuple[int, ...]:
        if self._triggered is not None:
            return tuple(self._triggered.eos)
        assert self._schema is not None
        return tuple(self._schema.eos_token_ids)

    def _schema_words(self) -> int:
        assert self._schema is not None
        return words_for(self._schema.vocab_size)


def _host_table(table: Any) -> Any:
    """The numpy table whose states the device table uses: a restricted view compacted, an upload's source."""
    if isinstance(table, TorchMaskTable):
        return table.table
    compact = getattr(table, "compact", None)
    return compact() if compact is not None else table


def _fork(m: RequestMatcher) -> RequestMatcher:
    return m.fork()


def _accept(m: RequestMatcher, token: int) -> bool:
    return m.accept_token(int(token))


def _ended(m: RequestMatcher) -> bool:
    return m.is_terminated()


def prefix_allowed_tokens_fn(
    table: MaskTable | RestrictedTable[MaskTable] | TorchMaskTable | SchemaTable, prompt_length: int
) -> Callable[[int, torch.Tensor], list[int]]:
    """``model.generate(prefix_allowed_tokens_fn=...)``'s callback over a triec table, for code written for GENRE.

    ``prompt_length`` is the input's length (a decoder-only model's prompt, padded; an encoder-decoder's decoder
    start, usually 1): the tokens after it are the row's. Each call finds the row's position from those tokens,
    advancing from the longest prefix seen before (every prefix of the call is remembered), and returns the allowed
    ids; a dead or finished row gets the EOS ids. transformers calls it once per row per step, in Python:
    :class:`TriecLogitsProcessor` masks every row of a step at once and gives the same beams.
    """
    schema = cast("SchemaTable", table) if getattr(table, "host_matched", False) else None
    if schema is not None:
        eos = [int(e) for e in schema.eos_token_ids]
        m_step = matcher_step(_fork, _accept, _ended)
        m_memo: dict[tuple[int, ...], RequestMatcher | None] = {(): schema.matcher()}

        def matcher_allowed(batch_id: int, input_ids: torch.Tensor) -> list[int]:
            m = _walk(m_memo, tuple(input_ids[prompt_length:].tolist()), m_step)
            if m is None or m.is_terminated():
                return eos
            return [int(t) for t in m.allowed().tolist()] or eos

        return matcher_allowed
    host = _host_table(table)
    ends = [int(e) for e in host.eos_token_ids]
    s_step = state_step(host.advance, ends)
    s_memo: dict[tuple[int, ...], int] = {(): int(host.start)}

    def state_allowed(batch_id: int, input_ids: torch.Tensor) -> list[int]:
        state = _walk(s_memo, tuple(input_ids[prompt_length:].tolist()), s_step)
        return ends if state < 0 else [int(t) for t in host.allowed(state).tolist()]

    return state_allowed


def _walk(memo: dict[tuple[int, ...], P], key: tuple[int, ...], step: Callable[[P, int], P]) -> P:
    """The position of ``key``: remembered, or advanced from its longest remembered prefix (each one remembered)."""
    found = memo.get(key)
    if found is not None:
        return found
    i = len(key) - 1
    while key[:i] not in memo:
        i -= 1
    pos = memo[key[:i]]
    for j in range(i, len(key)):
        pos = step(pos, key[j])
        memo[key[: j + 1]] = pos
    return pos


def ranked_values(
    table: MaskTable | RestrictedTable[MaskTable] | TorchMaskTable,
    sequences: torch.Tensor,
    scores: torch.Tensor,
    prompt_length: int,
) -> list[tuple[str, float]]:
    """The distinct values among beam search's returned sequences, best score first (one ``generate`` input's
    ``num_return_sequences`` rows with their ``sequences_scores``).

    A byte trie allows every tokenization of a value, so beams often spell one value several ways: this keeps each
    value's best. A sequence that is not a whole value then EOS (it ran out of ``max_new_tokens``) is left out. A
    canonical table (``tokenization="canonical"``) allows one path per value, so its beams are distinct already.
    """
    host = _host_table(table)
    ends = frozenset(int(e) for e in host.eos_token_ids)
    found: dict[str, float] = {}
    order = torch.argsort(scores.detach().float().cpu(), descending=True).tolist()
    rows = sequences[:, prompt_length:].tolist()
    for i in order:
        state = int(host.start)
        value = None
        for t in rows[i]:
            if t in ends:
                value = host.value(state) if state >= 0 else None
                break
            try:
                state = int(host.advance(state, t))
            except (TokenNotAllowed, IndexError):
                break
        if value is not None and value not in found:
            found[value] = float(scores[i])
    return list(found.items())


class TransformersScorer:
    """:func:`triec.rank`'s scorer for a transformers causal LM after one prompt: the prompt runs once and its KV
    cache is shared by every batch of paths (copied, repeated per row); paths are right-padded, so each row's
    tokens keep their positions, and each row's log-softmax (float32, the model's whole vocabulary) is read at its
    own last token, as beam search reads it."""

    def __init__(self, model: Any, prompt: list[int]) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        import inspect

        self._keep = "logits_to_keep" in inspect.signature(model.forward).parameters
        with torch.inference_mode():
            out = model(torch.tensor([prompt], device=self.device), use_cache=True)
        self.cache = out.past_key_values
        self.length = len(prompt)
        self.first = torch.log_softmax(out.logits[0, -1].float(), dim=-1).cpu().numpy()

    def logprobs(self, paths: Any) -> np.ndarray:
        rows = np.empty((len(paths), self.first.shape[0]), dtype=np.float32)
        todo = [i for i, p in enumerate(paths) if p]
        for i, p in enumerate(paths):
            if not p:
                rows[i] = self.first
        if todo:
            rows[todo] = self._run([paths[i] for i in todo])
        return rows

    def _run(self, paths: list[Any]) -> np.ndarray:
        import copy

        width = max(len(p) for p in paths)
        ids = torch.zeros((len(paths), width), dtype=torch.long)
        mask = torch.zeros((len(paths), self.length + width), dtype=torch.long)
        mask[:, : self.length] = 1
        for r, p in enumerate(paths):
            ids[r, : len(p)] = torch.tensor(p)
            mask[r, self.length : self.length + len(p)] = 1
        cache = copy.deepcopy(self.cache)
        cache.batch_repeat_interleave(len(paths))
        positions = torch.arange(self.length, self.length + width).unsqueeze(0).expand(len(paths), -1)
        ends = sorted({len(p) - 1 for p in paths})
        extra: dict[str, Any] = {}
        if self._keep:  # the head's rows at each path's last position only (the head is most of a small model's work)
            extra["logits_to_keep"] = torch.tensor(ends, device=self.device)
        with torch.inference_mode():
            out = self.model(
                ids.to(self.device),
                attention_mask=mask.to(self.device),
                position_ids=positions.to(self.device),
                past_key_values=cache,
                use_cache=True,
                **extra,
            )
        column = {e: (ends.index(e) if self._keep else e) for e in ends}
        last = torch.tensor([column[len(p) - 1] for p in paths], device=out.logits.device)
        logits = out.logits[torch.arange(len(paths), device=last.device), last].float()
        result: np.ndarray = torch.log_softmax(logits, dim=-1).cpu().numpy()
        return result
