"""What both vLLM processors share: the batched step (:class:`BatchState`) and the vLLM-side glue around the
serving core (:mod:`triec.integrations.serving`: artifacts, the served model, request arguments, admission).

Nothing here imports vLLM: the two interface classes (:mod:`.v1`, :mod:`.v2`)
translate vLLM's calls into :class:`BatchState` operations, and the admission
checks read plain attributes of ``SamplingParams``. Inside the engine step
nothing raises on user input: a request that cannot be served there (its
artifact vanished after admission) is masked to EOS only and ends at once.

Schema artifacts (:class:`~triec.schema.table.SchemaTable`: tool calls, large
enums anywhere in a JSON Schema) are served beside plain tables: each such row
keeps one :class:`~triec.schema.matcher.SchemaMatcher` on the host, fed the same
tokens as the plain rows' device states; a row that is exactly a slot's
precomputed (word, bits) row is gathered from it, every other row is written by
the integrations' one path for host matchers
(:class:`~triec.integrations.matchers.MatcherRows`: each artifact's mask writer, D20).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch

from triec.integrations.limits import Limits
from triec.integrations.matchers import MatcherRows
from triec.integrations.serving import (
    SUFFIX,
    ArtifactStore,
    ServedModel,
    TriecRequest,
    check_request,
    is_schema,
    parse_extra_args,
    served_model_from_config,
    store,
    warm_schema,
)
from triec.integrations.vllm import internals
from triec.runtime.bitmask import WORD_BITS, unpack
from triec.runtime.table import MaskTable
from triec.runtime.torch import (
    DEFAULT_MAX_GATHER,
    TorchMaskTable,
    TorchTableSet,
    apply_bitmask_rows,
    keep_tokens,
    use_kernels,
)
from triec.schema.matcher import SchemaMatcher
from triec.schema.table import SchemaTable

log = logging.getLogger("triec.vllm")

EOS_ONLY = -2
"""Group id of rows that must end now (their table could not be set up in the engine)."""

UNCONSTRAINED = -1

SCHEMA = -3
"""Group id of rows served by a per-row :class:`~triec.schema.matcher.SchemaMatcher` (a tool-call schema artifact)."""


# ----------------------------------------------------------------------------- the batched step


def to_device(a: np.ndarray, device: torch.device) -> torch.Tensor:
    """A small host index array on ``device``; on CUDA through pinned memory, so the copy does not wait for the GPU."""
    t = torch.from_numpy(np.ascontiguousarray(a))
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


class BatchState:
    """Per-slot table and state of a batch, on the logits' device; the step is a loop over tables, not rows.

    A slot is a persistent-batch index (V1 interface) or a request slot
    (Model Runner V2). ``group[slot]`` is -1 for an unconstrained slot,
    :data:`EOS_ONLY` for one that must end, :data:`SCHEMA` for one served by
    ``matchers[slot]`` (a tool-call schema, on the host), else the id of a
    device table; ``states[slot]`` is its state (a device tensor of int64).
    ``served`` names the tokenizer whose decoded vocabulary schema artifacts'
    grammar engines need (``None``: the tokenizer the artifact records).
    """

    def __init__(
        self,
        store: ArtifactStore,
        device: torch.device,
        capacity: int,
        eos_ids: Iterable[int],
        served: ServedModel | None = None,
    ) -> None:
        self.store = store
        self.served = served
        self.matchers: dict[int, SchemaMatcher[SchemaTable]] = {}
        self._rows = MatcherRows()  # the schema rows' writers, one per artifact
        self.device = torch.device(device)
        self.group = np.full(max(1, capacity), UNCONSTRAINED, dtype=np.int64)
        self.states = torch.zeros(max(1, capacity), dtype=torch.int64, device=self.device)
        self._keys: dict[Any, int] = {}
        self.tables: dict[int, TorchMaskTable] = {}
        self._hosts: dict[int, MaskTable] = {}  # gid -> the host table its device table was uploaded from
        self._next_gid = 0
        self.max_tables = 256  # past this many, or past max_table_bytes on the device, tables no slot uses are dropped
        self.max_table_bytes = Limits.from_env().cache_bytes
        self.eos = torch.tensor(sorted(set(eos_ids)) or [0], dtype=torch.int64, device=self.device)
        """The ids a row that must end may emit (the model's EOS ids)."""
        self._fused = use_kernels(self.device)  # the fused kernels: every table's rows in one launch (D30)
        self._set: TorchTableSet | None = None  # built on use from the tables now held; dropped when they change
        self._set_index = np.zeros(0, dtype=np.int64)  # gid -> its table's index in the set

    def table_set(self) -> tuple[TorchTableSet, np.ndarray] | None:
        """Every held table packed for the fused kernels (rows of all of them in one launch), and the index of
        each gid in it; None where the kernels do not run (each table then serves its own rows)."""
        if not self._fused or not self.tables:
            return None
        if self._set is None:
            gids = sorted(self.tables)
            self._set = TorchTableSet([self._hosts[g] for g in gids], self.device, kernels=True)
            self._set_index = np.full(self._next_gid, -1, dtype=np.int64)
            self._set_index[gids] = np.arange(len(gids))
        return self._set, self._set_index

    def _grow(self, slot: int) -> None:
        if slot < self.group.shape[0]:
            return
        n = max(slot + 1, 2 * self.group.shape[0])
        self.group = np.concatenate([self.group, np.full(n - self.group.shape[0], UNCONSTRAINED, dtype=np.int64)])
        pad = torch.zeros(n - self.states.shape[0], dtype=torch.int64, device=self.device)
        self.states = torch.cat([self.states, pad])

    def device_table(self, request: TriecRequest) -> tuple[int, TorchMaskTable]:
        """The request's table on the device (uploaded once per artifact version or subset)."""
        key, table = self.store.resolve(request)
        assert not table.host_matched  # a mask table: assign() hands a schema table to a host matcher instead
        gid = self._keys.get(key)
        if gid is None:
            if len(self.tables) >= self.max_tables:
                self._evict()
            gid = self._next_gid
            self._next_gid += 1
            self._keys[key] = gid
            self.tables[gid] = table.to_torch(self.device)
            self._hosts[gid] = table
            self._set = None
            if self.table_bytes() > self.max_table_bytes:
                self._evict(keep=gid)
        return gid, self.tables[gid]

    def table_bytes(self) -> int:
        """Device bytes held by the uploaded tables (and their packed set, when the fused kernels serve)."""
        packed = self._set.packed.nbytes if self._set is not None else 0
        return sum(t.nbytes for t in self.tables.values()) + packed

    def _evict(self, keep: int | None = None) -> None:
        """Drop the device tables no slot uses (old artifact versions, subsets of finished requests) but ``keep``."""
        used = set(np.unique(self.group).tolist()) | {keep}
        for key, gid in list(self._keys.items()):
            if gid not in used:
                del self._keys[key]
                del self.tables[gid]
                del self._hosts[gid]
                self._set = None
        self._rows.forget(m.table for m in self.matchers.values())

    def schema_table(self, request: TriecRequest) -> SchemaTable | None:
        """The request's artifact when it is a schema table, bound and its engine set up; else None."""
        _, table = self.store.resolve(request)
        if not is_schema(table):
            return None
        assert isinstance(table, SchemaTable)
        if self.served is not None and table.vocab is None:
            table.bind(self.served.vocabulary(table.eos_token_ids))
        warm_schema(table)  # the engine's tokenizer setup and first grammar: once per artifact version
        return table

    def assign(self, slot: int, request: TriecRequest | Exception | None) -> None:
        """Start ``slot`` for a new request; never raises (a failure ends the row with EOS)."""
        self._grow(slot)
        if isinstance(request, Exception):
            log.error("triec: a request with bad arguments reached the engine and ends at once: %s", request)
            self.group[slot] = EOS_ONLY
            return
        if request is None:
            self.group[slot] = UNCONSTRAINED
            return
        try:
            schema = self.schema_table(request)
            if schema is not None:
                self.matchers[slot] = schema.matcher()
                self.group[slot] = SCHEMA
                return
            gid, table = self.device_table(request)
        except Exception as exc:  # noqa: BLE001 - the engine must keep serving: end this request now
            log.error("triec: request for artifact %r ends at once: %s", request.name, exc)
            self.group[slot] = EOS_ONLY
            return
        self.group[slot] = gid
        self.states[slot] = table.start

    def clear(self, slot: int) -> None:
        if slot < self.group.shape[0]:
            self.group[slot] = UNCONSTRAINED
        self.matchers.pop(slot, None)

    def move(self, a: int, b: int, swap: bool) -> None:
        """Slot ``a``'s request moves to ``b`` (and ``b``'s to ``a`` when ``swap``)."""
        self._grow(max(a, b))
        ga, gb = int(self.group[a]), int(self.group[b])
        idx = torch.tensor([a, b], device=self.device)
        sa_sb = self.states[idx]
        ma, mb = self.matchers.pop(a, None), self.matchers.pop(b, None)
        self.group[b] = ga
        self.states[b] = sa_sb[0]
        if ma is not None:
            self.matchers[b] = ma
        if swap:
            self.group[a] = gb
            self.states[a] = sa_sb[1]
            if mb is not None:
                self.matchers[a] = mb
        else:
            self.group[a] = UNCONSTRAINED

    def constrained(self, slots: np.ndarray) -> np.ndarray:
        """Positions in ``slots`` whose slot is constrained (including EOS-only)."""
        return np.flatnonzero(self.group[slots] != UNCONSTRAINED)

    def advance(self, slots: np.ndarray, tokens: torch.Tensor, where: torch.Tensor | None = None) -> None:
        """Fold one token per slot into its state (tokens on the device, aligned with ``slots``).

        ``where`` (bool, aligned) leaves the slots where it is False as they are.
        """
        groups = self.group[slots]
        if (groups == SCHEMA).any():
            self._accept(slots, groups, tokens, where)
        fused = self.table_set() if (groups >= 0).any() else None
        if fused is not None:  # every table's rows in one launch
            tset, index = fused
            at = np.flatnonzero(groups >= 0)
            at_t = to_device(at, self.device)
            sl = to_device(slots[at], self.device)
            old = self.states[sl]
            new = tset.advance(to_device(index[groups[at]], self.device), old, tokens.to(self.device)[at_t])
            if where is not None:
                new = torch.where(where.to(self.device)[at_t], new, old)
            self.states[sl] = new
            return
        for gid in np.unique(groups[groups >= 0]).tolist():
            at = np.flatnonzero(groups == gid)
            at_t = to_device(at, self.device)
            sl = to_device(slots[at], self.device)
            tok = tokens.to(self.device)[at_t]
            old = self.states[sl]
            new = self.tables[gid].advance(old, tok)
            if where is not None:
                new = torch.where(where.to(self.device)[at_t], new, old)
            self.states[sl] = new

    def _accept(self, slots: np.ndarray, groups: np.ndarray, tokens: torch.Tensor, where: torch.Tensor | None) -> None:
        """Feed the schema rows' tokens to their matchers (one host copy of the tokens, only when such rows exist).

        A token the matcher refuses was not sampled under its mask (another
        processor, speculative decoding): the row ends with EOS rather than
        decode outside the schema.
        """
        at = np.flatnonzero(groups == SCHEMA)
        toks = tokens[to_device(at, tokens.device)].cpu().tolist()
        keep = [True] * at.size if where is None else where[to_device(at, where.device)].cpu().tolist()
        for i, t, k in zip(at.tolist(), toks, keep, strict=True):
            slot = int(slots[i])
            m = self.matchers.get(slot)
            if not k or m is None or m.is_terminated():
                continue
            if not m.accept_token(int(t)):
                log.error("triec: slot %d emitted token %d outside its tool-call schema; it ends now", slot, t)
                self.group[slot] = EOS_ONLY
                self.matchers.pop(slot, None)

    def _mask_schema(
        self, logits: torch.Tensor, rows: np.ndarray, matchers: Sequence[SchemaMatcher[SchemaTable] | None]
    ) -> None:
        """The schema rows' masks, row by row on the logits.

        Where a row is exactly a slot's precomputed (word, bits) row (inside an
        enum's trie or a literal tail, no token judged by an engine), it allows
        few tokens: the runtime's :func:`~triec.runtime.torch.keep_tokens` keeps them. Every other row
        (the engine's, with the slot entries it admits, or a slot row with judged tokens) is written whole
        by the artifact's writer (the engine rows batched) and applied by
        :func:`~triec.runtime.torch.apply_bitmask_rows`.
        """
        engine: dict[int, tuple[list[int], list[SchemaMatcher[SchemaTable]]]] = {}
        dead: list[int] = []
        for r, m in zip(rows.tolist(), matchers, strict=True):
            if m is None:  # a draft row past a draft its schema refuses: rejected whatever it allows
                dead.append(r)
                continue
            if m.is_terminated():
                ids = np.asarray(m.table.eos_token_ids, dtype=np.int64)
            else:
                src = m.static_source()
                if src is None:
                    found = engine.setdefault(id(m.table), ([], []))
                    found[0].append(r)
                    found[1].append(m)
                    continue
                w = src[0].words
                lo, hi = int(w.offsets[src[1]]), int(w.offsets[src[1] + 1])
                pair, bit = np.nonzero(unpack(w.bits[lo:hi].reshape(-1, 1)))  # each (word, bits) pair's set bits
                ids = w.words[lo:hi].astype(np.int64)[pair] * WORD_BITS + bit
            ids = ids[ids < logits.shape[1]]  # on the host: keep_tokens takes ids inside the width
            keep_tokens(logits, to_device(np.array([r], dtype=np.int64), logits.device), to_device(ids, logits.device))
        if dead:
            self._mask_eos_only(logits, np.asarray(dead, dtype=np.int64))
        for rs, ms in engine.values():
            words = self._rows.fill(ms)  # one artifact's rows: a view of its writer's buffer, read before the next fill
            bitmask = to_device(np.ascontiguousarray(words).view(np.int32), logits.device)
            apply_bitmask_rows(logits, to_device(np.asarray(rs, dtype=np.int64), logits.device), bitmask)

    def _mask_eos_only(self, logits: torch.Tensor, rows: np.ndarray) -> None:
        keep_tokens(logits, to_device(rows, logits.device), self.eos.to(logits.device))

    def mask(
        self,
        logits: torch.Tensor,
        rows: np.ndarray,
        slots: np.ndarray,
        states: torch.Tensor | None = None,
        matchers: Sequence[SchemaMatcher[SchemaTable] | None] | None = None,
    ) -> torch.Tensor:
        """Mask ``logits[rows[i]]`` for the request in ``slots[i]``, in place, grouped by table.

        By default each row is masked at its slot's state (or matcher);
        ``states`` (device, aligned with ``rows``) and ``matchers`` (aligned,
        for schema rows) give other positions: the draft rows of speculative
        decoding (:meth:`draft_positions`).
        """
        groups = self.group[slots]
        fused = self.table_set() if (groups >= 0).any() else None
        if fused is not None:  # every table's rows in one launch
            tset, index = fused
            at = np.flatnonzero(groups >= 0)
            st = (
                self.states[to_device(slots[at], self.device)]
                if states is None
                else states[to_device(at, states.device)]
            )
            tset.mask_logits(
                logits, to_device(index[groups[at]], self.device), st, rows=to_device(rows[at], logits.device)
            )
        for gid in np.unique(groups[groups != UNCONSTRAINED]).tolist():
            at = np.flatnonzero(groups == gid)
            if fused is not None and gid >= 0:
                continue
            if gid == SCHEMA:
                ms = (
                    [matchers[i] for i in at.tolist()]
                    if matchers is not None
                    else [self.matchers[s] for s in slots[at].tolist()]
                )
                self._mask_schema(logits, rows[at], ms)
                continue
            if gid == EOS_ONLY:
                self._mask_eos_only(logits, rows[at])
                continue
            r = to_device(rows[at], logits.device)
            if states is None:
                st = self.states[to_device(slots[at], self.device)]
            else:
                st = states[to_device(at, states.device)]
            first = int(rows[at[0]])
            if bool((rows[at] == np.arange(first, first + at.size)).all()):  # a contiguous block of rows (host test)
                self.tables[gid].mask_rows(logits[first : first + at.size], None, st)
            else:
                self.tables[gid].mask_rows(logits, r, st)
        return logits

    def draft_positions(
        self,
        slots: np.ndarray,
        local_pos: np.ndarray,
        tokens: np.ndarray,
    ) -> tuple[torch.Tensor, list[SchemaMatcher[SchemaTable] | None]]:
        """Each row's position after the drafts before it: (device states, schema matchers), aligned with ``slots``.

        Under speculative decoding a request owns consecutive rows; the row at
        ``local_pos`` p predicts the token after the committed ones and the
        first p drafts, which are the input tokens of the p rows before it
        (``tokens``, aligned with ``slots``). Plain rows advance on the device
        (a draft the table refuses gives INVALID, whose row is EOS only: such a
        row is rejected whatever it allows); schema rows get a copy of their
        matcher fed the drafts (None past a refused one).
        """
        slots = np.asarray(slots, dtype=np.int64)
        local_pos = np.asarray(local_pos, dtype=np.int64)
        tokens = np.asarray(tokens, dtype=np.int64)
        groups = self.group[slots]
        states = self.states[to_device(slots, self.device)].clone()
        index = np.arange(slots.size)
        for j in range(1, int(local_pos.max(initial=0)) + 1):
            sel = np.flatnonzero((local_pos >= j) & (groups >= 0))
            if sel.size == 0:
                continue
            draft = tokens[index[sel] - local_pos[sel] + j]
            for gid in np.unique(groups[sel]).tolist():
                at = sel[groups[sel] == gid]
                at_t = to_device(at, self.device)
                states[at_t] = self.tables[gid].advance(states[at_t], to_device(draft[groups[sel] == gid], self.device))
        matchers: list[SchemaMatcher[SchemaTable] | None] = [None] * slots.size
        for i in np.flatnonzero(groups == SCHEMA).tolist():
            base = self.matchers.get(int(slots[i]))
            if base is None:
                continue
            m: SchemaMatcher[SchemaTable] | None = base.copy() if local_pos[i] else base
            for j in range(1, int(local_pos[i]) + 1):
                assert m is not None
                if not m.is_terminated() and not m.accept_token(int(tokens[i - local_pos[i] + j])):
                    m = None
                    break
            matchers[i] = m
        return states, matchers


def end_everything(logits: torch.Tensor, rows: np.ndarray, eos: torch.Tensor) -> None:
    """Last resort after an internal error: the constrained rows may emit only EOS."""
    if rows.size == 0:
        return
    keep_tokens(logits, to_device(rows, logits.device), eos.to(logits.device))


# ----------------------------------------------------------------------------- admission and start-up


def frontend_served_model() -> ServedModel | None:
    """The served model as the calling vLLM frontend sees it (:func:`.internals.frontend`), or ``None``."""
    found = internals.frontend()
    return None if found is None else found.served_model()


def validate(params: Any) -> None:
    """The body of both classes' ``validate_params``: raises RequestError (HTTP 400) on a bad request."""
    if parse_extra_args(getattr(params, "extra_args", None)) is None:
        return
    check_request(params, frontend_served_model(), store())


def safe_parse(params: Any) -> TriecRequest | Exception | None:
    """Engine side: the request's arguments, or the error (already refused at admission, so not expected)."""
    try:
        return parse_extra_args(getattr(params, "extra_args", None))
    except Exception as exc:  # noqa: BLE001 - vLLM must keep serving: a malformed request is refused, not raised
        return exc


def warm_up(vllm_config: Any, batch: BatchState) -> None:
    """Start-up work in vLLM's engine process that would otherwise fall on the first requests (never raises).

    Decodes the served tokenizer once (triec's vocabulary cache then serves the
    frontend's admission check from disk), and, unless ``TRIEC_PRELOAD=0``,
    uploads the tables of the artifacts already in the directory (at most 64).
    """
    try:
        served = served_model_from_config(vllm_config.model_config)
        served.fingerprint(model_eos_ids(vllm_config))
    except Exception as exc:  # noqa: BLE001 - start-up must not fail on a tokenizer triec cannot read: logged
        log.warning("triec: could not fingerprint the served tokenizer at start-up: %s", exc)
    directory = batch.store.directory
    if os.environ.get("TRIEC_PRELOAD", "1") == "0" or directory is None:
        return
    try:
        names = sorted(p.name[: -len(SUFFIX)] for p in directory.glob("*" + SUFFIX))[:64]
    except OSError:
        return
    for name in names:
        try:
            if batch.schema_table(TriecRequest(name)) is not None:
                continue  # bound and its engine set up: nothing goes to the device
            _, table = batch.device_table(TriecRequest(name))
            if torch.device(batch.device).type in DEFAULT_MAX_GATHER and getattr(table, "token_class", None) is None:
                table.token_rows()  # the gather path's lists, built now rather than in the first step
        except Exception as exc:  # noqa: BLE001 - a preload is an optimisation: logged, never fatal
            log.warning("triec: artifact %r not preloaded: %s", name, exc)


def config_served_model(vllm_config: Any) -> ServedModel | None:
    """The served model as vLLM's config describes it (``None`` when it cannot tell; never raises)."""
    try:
        return served_model_from_config(vllm_config.model_config)
    except Exception:  # noqa: BLE001 - None means cannot tell; never raises into vLLM
        return None


def model_eos_ids(vllm_config: Any) -> list[int]:
    """EOS ids the served model stops on, for rows that must end (from the configs; never raises)."""
    try:
        served = served_model_from_config(vllm_config.model_config)
        ids = list(served.generation_eos_ids)
        hf_eos = getattr(vllm_config.model_config.hf_config, "eos_token_id", None)
        ids += [hf_eos] if isinstance(hf_eos, int) else list(hf_eos or ())
        return sorted({int(i) for i in ids}) or [0]
    except Exception:  # noqa: BLE001 - a model config without EOS ids: the fallback, never raises
        return [0]
