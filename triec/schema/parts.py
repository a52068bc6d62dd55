"""What a schema table is made of, as its matchers read it: :class:`Grammar` and the :class:`SchemaParts` protocol.

The matchers (:mod:`triec.schema.matcher`) read a table through :class:`SchemaParts`, never through the table
class, so they read alone and :class:`~triec.schema.table.SchemaTable` composes them from above.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from triec.errors import TriecError

if TYPE_CHECKING:
    import numpy as np

    from triec.schema.grammar import EngineDriver, GrammarSpec
    from triec.schema.slot import Slot
    from triec.tokenizer.vocabulary import Vocabulary


class Grammar:
    """One grammar of a schema table: what the engine compiles, what it is fed first, which slots it holds.

    ``spec`` may be made on first use (``make``): a registry's K argument grammars are neither serialized nor
    compiled before a sequence picks their tool.
    """

    __slots__ = ("_make", "_spec", "slots", "template")

    def __init__(
        self,
        spec: GrammarSpec | None = None,
        template: bytes = b"",
        slots: tuple[int, ...] = (),
        make: Callable[[], GrammarSpec] | None = None,
    ) -> None:
        if (spec is None) == (make is None):
            raise TriecError("a grammar has a spec or a way to make one")
        self._spec, self._make = spec, make
        self.template = template  # fed once after the start: the text before a handover into this grammar
        self.slots = tuple(slots)  # slots whose marker this grammar holds (entered from it)

    @property
    def spec(self) -> GrammarSpec:
        if self._spec is None:
            assert self._make is not None
            self._spec = self._make()
        return self._spec

    def __repr__(self) -> str:
        return f"Grammar(template={self.template!r}, slots={self.slots}, made={self._spec is not None})"


class SchemaParts(Protocol):
    """A schema table's slots, grammars and start, and the serving caches its matchers share (templates, judged
    rows, crossing tokens). :class:`~triec.schema.table.SchemaTable` is the one implementation."""

    slots: list[Slot]
    grammars: list[Grammar]
    start_slot: int
    """The slot the output starts in, or -1 (then ``start_grammar`` is one)."""
    start_grammar: int
    info: dict[str, Any]
    row_cache: OrderedDict[Any, np.ndarray]
    """Rows every matcher may reuse (a grammar template's after some bytes, judged tokens), bounded by
    ``row_cache_size``."""
    row_cache_size: int

    @property
    def words_per_row(self) -> int: ...

    @property
    def eos_token_ids(self) -> tuple[int, ...]: ...

    def vocabulary(self) -> Vocabulary: ...

    def driver(self) -> EngineDriver: ...

    def template(self, g: int) -> Any:
        """A fresh engine handle of grammar g after its template text."""
        ...

    def crossing(self, g: int) -> dict[int, tuple[int, ...]]:
        """Per token, the slots of grammar g it may cross into from the engine's text."""
        ...

    def opening_bytes(self, g: int) -> frozenset[int]: ...

    def values_of(self, slot: int) -> list[str]: ...
