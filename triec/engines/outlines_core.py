"""outlines-core over triec's decoded vocabulary: an ``Index`` of an anchored regex alternation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from triec.engines.base import Engine, Matcher, import_engine, regex_literal
from triec.errors import EngineUnsupported
from triec.runtime.bitmask import is_set, set_few


class _OCMatcher(Matcher):
    def __init__(self, guide: Any, eos: tuple[int, ...]) -> None:
        self.g = guide
        self.eos = eos

    def consume(self, token: int) -> bool:
        try:
            self.g.advance(int(token), return_tokens=False)
        except ValueError:
            return False
        return True

    def rollback(self, n: int = 1) -> None:
        self.g.rollback_state(n)

    def fill(self, row: np.ndarray) -> None:
        row.fill(0)
        self.g.write_mask_into(row.ctypes.data, row.size, 4)
        first = self.eos[0]
        if len(self.eos) > 1 and is_set(row, first):
            set_few(row, self.eos[1:])  # outlines-core knows one EOS id; the others mirror it


class OutlinesCoreEngine(Engine):
    """outlines-core: ``Vocabulary(eos, {bytes: ids})``, ``Index`` of an anchored regex alternation.

    * One EOS id only: the first is given to outlines-core and the mask row
      copies its bit to the other EOS ids.
    * ``b""`` ids and padding are left out of the vocabulary (never allowed).
    * The pattern is ``(?:v1|v2|...)$`` with the values in reverse byte order.
      regex-automata reports matches one byte late and uses leftmost-first
      priority; without the ``$`` anchor outlines-core drops every token that
      ends one byte past a value (``"_"`` after ``"get"`` in {get, get_user}),
      and without the order a value cuts off its own extensions.
    * The empty value cannot be expressed: a nullable anchored pattern has no
      universal start state, and an unanchored empty branch drops one-byte
      tokens at the start. Such sets raise :class:`EngineUnsupported`.
    """

    name = "outlines-core"

    def _setup(self) -> None:
        oc = import_engine("outlines_core")
        self._oc = oc
        by_bytes: dict[bytes, list[int]] = {}
        for tid, b in enumerate(self.vocab.token_bytes):
            if b:
                by_bytes.setdefault(b, []).append(tid)
        self.vocabulary = oc.Vocabulary(self.vocab.eos_token_ids[0], by_bytes)

    @staticmethod
    def grammar(values: Sequence[str]) -> str:
        if any(v == "" for v in values):
            raise EngineUnsupported(
                "outlines-core cannot express a set holding the empty value exactly "
                "(regex-automata's delayed matches drop one-byte tokens at a nullable start)"
            )
        ordered = sorted(values, key=lambda v: v.encode("utf-8"), reverse=True)
        return "(?:" + "|".join(regex_literal(v) for v in ordered) + ")$"

    def compile(self, values: Sequence[str]) -> Any:
        index = self._oc.Index(self.grammar(values), self.vocabulary)
        return (index, max(len(v.encode("utf-8")) for v in values) + 2)

    def matcher(self, compiled: Any) -> Matcher:
        index, depth = compiled
        return _OCMatcher(self._oc.Guide(index, max_rollback=depth), self.vocab.eos_token_ids)
