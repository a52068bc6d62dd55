"""A compiled schema: finite sets served by their tries (slots), the structure around them by a grammar engine.

The output is read in phases (docs/decisions.md D23):

* **engine**: a grammar (:class:`~triec.schema.grammar.GrammarSpec`): the user's
  schema with every large enum replaced by one *marker* value, or a tool's own
  call grammar; the engine's own mask and advance;
* **slot**: a trie state of one enum's values (:class:`~triec.schema.slot.Slot`);
  precomputed rows, the engine untouched;
* **tail**: literal text after a value (``, "arguments": ``), precomputed rows;
* then the grammar after the value: the entering engine resumes after the
  marker, or the value picks its own grammar (a tool's arguments), compiled
  when first needed and cached.

A slot that starts the output holds its literal prefix in its keys
(``{"name": "get_user"``), so the first rows never touch an engine. This module
imports numpy alone; the engine is imported by the first matcher.

The table composes its matchers from above: they read it as
:class:`~triec.schema.parts.SchemaParts` and never import this module.
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from triec.artifact.formats import write_artifact
from triec.errors import ArtifactContentError, TokenizerMismatch, TriecError
from triec.runtime.header import VocabularyFields
from triec.runtime.kinds import TableKind
from triec.schema.matcher import SchemaMaskWriter, SchemaMatcher
from triec.schema.parts import Grammar
from triec.tokenizer.resolve import resolve_vocabulary

if TYPE_CHECKING:
    from triec.runtime.table import MaskTable
    from triec.schema.grammar import EngineDriver
    from triec.schema.slot import Slot
    from triec.tokenizer.vocabulary import Vocabulary

__all__ = ["ENGINES", "Grammar", "SchemaTable"]

ENGINES = ("llguidance", "xgrammar")
_CONTROL_ESCAPE = re.compile(rb"(?<!\\)(?:\\\\)*\\(?:[bfnrt]|u00[01][0-9a-fA-F]|u007[fF])")
"""A JSON escape of a control character or DEL (after an even run of backslashes) in a slot's keys."""


class SchemaTable(VocabularyFields):
    """Slots + grammars + where the output starts; ``matcher()`` per sequence, ``mask_writer()`` per batch."""

    kind: ClassVar[TableKind] = TableKind.TOOL_SCHEMA
    restrictable: ClassVar[Literal[False]] = False  # narrow a schema: compile one whose enum holds the wanted values
    host_matched: ClassVar[Literal[True]] = True

    @property
    def required_engine(self) -> str:
        """The grammar engine its rows need installed."""
        return self.engine

    @property
    def served_nbytes(self) -> int:
        """What the serving caches count it as: a nominal MiB (its engine's grammars are not counted)."""
        return 1 << 20

    def __init__(
        self,
        *,
        slots: list[Slot],
        grammars: list[Grammar],
        start_slot: int = -1,
        start_grammar: int = -1,
        engine: str,
        engine_version: str | None,
        convention: dict[str, Any],
        info: dict[str, Any] | None = None,
        vocab: Vocabulary | None = None,
        source: str | None = None,
        header: dict[str, Any] | None = None,
    ) -> None:
        if (start_slot < 0) == (start_grammar < 0):
            raise TriecError("a schema table starts in exactly one slot or one grammar")
        if engine not in ENGINES:
            raise TriecError(f"unknown engine {engine!r}; expected one of {', '.join(ENGINES)}")
        self.slots = slots
        self.table_header = slots[0].trie.table_header
        """Its slots' vocabulary and build (each slot's trie holds the same; written as the artifact's header)."""
        self.grammars = grammars
        self.start_slot = start_slot
        self.start_grammar = start_grammar
        self.engine = engine
        self.engine_version = engine_version
        self.convention = dict(convention)
        self.info: dict[str, Any] = dict(info or {})
        """What was compiled: ``shape`` (``"tool-call"``, ``"tools"``, ``"schema"``), the tool format, property names..."""
        self.vocab = vocab
        if vocab is not None:
            for slot in slots:
                slot.bind(vocab)
        self.source = source
        """The artifact this table was loaded from; ``None`` when compiled in this process."""
        self.header = header
        """The header of that artifact; ``None`` when compiled in this process."""
        self._twins: dict[str, SchemaTable] = {}
        self._templates: OrderedDict[int, Any] = OrderedDict()  # bounded like the driver's grammar cache
        self._shared_templates: OrderedDict[tuple[str, bytes], Any] = OrderedDict()
        self._driver: EngineDriver | None = None
        # serving caches shared by every matcher: rows of grammar templates, judged crossing tokens
        self.row_cache: OrderedDict[Any, np.ndarray] = OrderedDict()
        self.row_cache_size = 4096
        self._crossing: list[dict[int, tuple[int, ...]]] | None = None
        self._opening: dict[int, frozenset[int]] = {}
        self._values: dict[int, list[str]] = {}  # per slot, decoded on first use

    @property
    def cached_templates(self) -> int:
        """Grammar templates held (each a started matcher state the rows are forked from)."""
        return len(self._templates)

    def clear_caches(self) -> None:
        """Forget the started grammar templates, this table's and those shared by prefix (cold measurements)."""
        self._templates.clear()
        self._shared_templates.clear()

    # ------------------------------------------------------------- shape

    @property
    def _first(self) -> MaskTable:
        return self.slots[0].trie

    @property
    def trie(self) -> MaskTable:
        """The first slot's trie (a tool-call table's names, or the first enum of a schema)."""
        return self._first

    @property
    def words_per_row(self) -> int:
        return self._first.words_per_row

    @property
    def num_states(self) -> int:
        """Trie states of every slot."""
        return sum(s.num_states for s in self.slots)

    @property
    def num_values(self) -> int:
        return sum(s.num_values for s in self.slots)

    @property
    def prefix(self) -> bytes:
        """The literal text before the first value when a slot starts the output (else b"")."""
        prefix: str = self.info.get("prefix", "")
        return prefix.encode("utf-8")

    @property
    def tail(self) -> bytes:
        return self.slots[self.start_slot].tail if self.start_slot >= 0 else b""

    @property
    def tail_len(self) -> int:
        return len(self.tail)

    def values_of(self, slot: int) -> list[str]:
        """The values of one slot, in its trie's key order (sorted by the keys' bytes)."""
        import json

        cached = self._values.get(slot)
        if cached is None:
            s = self.slots[slot]
            try:
                if self.info.get("shape") == "structural-tag":  # the keys are the tags' literal begins
                    cached = [k.decode("utf-8") for k in s.keys]
                else:
                    n = len(self.prefix) if slot == self.start_slot else 0
                    cached = [json.loads(k[n:].decode("utf-8")) for k in s.keys]
            except (UnicodeDecodeError, json.JSONDecodeError):  # a loaded table's keys are checked at load; by hand
                raise ArtifactContentError(f"{self.source}: slot {slot}: a value does not decode") from None
            self._values[slot] = cached
        return cached

    @property
    def names(self) -> list[str]:
        """The first slot's values (a tool-call table's tool names)."""
        return self.values_of(0)

    def __repr__(self) -> str:
        return (
            f"SchemaTable(shape={self.info.get('shape', '?')}, slots={len(self.slots)}, "
            f"values={self.num_values}, states={self.num_states}, grammars={len(self.grammars)}, engine={self.engine})"
        )

    # ------------------------------------------------------------- engine

    def check_tokenizer(self, fingerprint_or_vocab: Any) -> None:
        """As :meth:`MaskTable.check_tokenizer`."""
        self._first.check_tokenizer(fingerprint_or_vocab)

    def bind(self, vocab: Vocabulary) -> None:
        """Attach the decoded vocabulary the engine needs (checked against the fingerprint); slots loaded from an
        artifact derive their tail rows from it."""
        self._first.check_tokenizer(vocab)
        self.vocab = vocab
        for slot in self.slots:
            slot.bind(vocab)

    def vocabulary(self) -> Vocabulary:
        """The decoded vocabulary the engine runs on: the bound one, else the recorded tokenizer's (decoded and
        checked against the fingerprint on first use, then bound)."""
        if self.vocab is None:
            if not self.tokenizer_name:
                raise TriecError("this table records no tokenizer name; call table.bind(vocab) first")
            vocab, problems = resolve_vocabulary(self.tokenizer_name, self._first)
            if problems:
                raise TokenizerMismatch(f"{problems[0]}; call table.bind(vocab) with the tokenizer it was compiled for")
            self.bind(vocab)
        assert self.vocab is not None
        return self.vocab

    def driver(self) -> EngineDriver:
        if self._driver is None:
            from triec.schema.grammar import driver

            self._driver = driver(self.engine, self.vocabulary())
        return self._driver

    def template(self, g: int) -> Any:
        """A fresh engine matcher of grammar g after its template text (compiled and fed on first use)."""
        found = self._templates.get(g)
        if found is None:
            drv = self.driver()
            info = self.grammars[g]
            key = (info.spec.key, info.template)  # tools with the same arguments share one template
            found = self._shared_templates.get(key)
            if found is None:
                found = drv.start(drv.compile_spec(info.spec))
                if info.template and not drv.feed(found, info.template):
                    raise TriecError(f"{drv.name} refuses the literal text {info.template!r} of its own grammar")
                self._shared_templates[key] = found
                while len(self._shared_templates) > drv.cache_size:
                    self._shared_templates.popitem(last=False)
            self._templates[g] = found
            while len(self._templates) > drv.cache_size:
                self._templates.popitem(last=False)
        return self.driver().copy(found)

    def is_compiled(self, g: int) -> bool:
        """Whether grammar g has been compiled in this process (a first handover into it pays the compile)."""
        return g in self._templates

    def opening_bytes(self, g: int) -> frozenset[int]:
        """The bytes that can open one of grammar g's slots (``"`` for enums)."""
        found = self._opening.get(g)
        if found is None:
            found = self._opening[g] = frozenset(self.slots[s].open for s in self.grammars[g].slots)
        return found

    def crossing(self, g: int) -> dict[int, tuple[int, ...]]:
        """Per token, the slots of grammar g it may cross into from the engine's text."""
        if self._crossing is None:
            self._crossing = [{} for _ in self.grammars]
        if not self._crossing[g] and self.grammars[g].slots:
            out: dict[int, set[int]] = {}
            for s in self.grammars[g].slots:
                slot = self.slots[s]
                e = slot.enter_state
                toks, _ = slot.trie.transitions(e)
                for t in toks.tolist():
                    out.setdefault(t, set()).add(s)
                for k in slot.entries_at(e):
                    lo, hi = slot.exits.span(int(slot.entry_group[k]))
                    for t in slot.exits.tokens[lo:hi].tolist():
                        out.setdefault(t, set()).add(s)
                for t in slot.enters.tokens.tolist():
                    out.setdefault(t, set()).add(s)
            self._crossing[g] = {t: tuple(sorted(v)) for t, v in out.items()}
        return self._crossing[g]

    def with_engine(self, engine: str) -> SchemaTable:
        """This table served by ``engine`` (the slots' tables do not depend on it; judged tokens are per engine)."""
        if engine == self.engine:
            return self
        self._check_servable(engine)
        found = self._twins.get(engine)
        if found is None:
            from triec.engines import engine_version

            slots, vocab = self.twin_slots()
            found = SchemaTable(
                slots=slots,
                grammars=self.grammars,
                start_slot=self.start_slot,
                start_grammar=self.start_grammar,
                engine=engine,
                engine_version=engine_version(engine),
                convention=self.convention,
                info=self.info,
                vocab=vocab,
                source=self.source,
                header=self.header,
            )
            self._twins[engine] = found
        return found

    def twin_slots(self) -> tuple[list[Slot], Vocabulary | None]:
        """The slots (and vocabulary) of this table served by another engine: these (the slots' tables do not
        depend on the engine)."""
        return self.slots, self.vocab

    def _check_servable(self, engine: str) -> None:
        """Raise :class:`TriecError` unless ``engine`` can serve these slots exactly."""
        if engine not in ENGINES:
            raise TriecError(f"unknown continuation engine {engine!r}; expected one of {', '.join(ENGINES)}")
        if engine == "llguidance":  # compile_schema keeps such enums from llguidance; a twin must too
            for i, slot in enumerate(self.slots):
                if slot.open == 0x22 and _CONTROL_ESCAPE.search(b"\x00".join(slot.keys)):
                    raise TriecError(
                        f"slot {i}: a value holds a control character, which llguidance accepts in several "
                        "spellings (\\n, \\u000a, \\u000A); serve this table with xgrammar"
                    )

    def matcher(self, engine: str | None = None) -> SchemaMatcher[SchemaTable]:
        """A fresh per-sequence matcher (xgrammar / llguidance style); ``engine`` overrides the compile's."""
        if engine is not None and engine != self.engine:
            return self.with_engine(engine).matcher()
        return SchemaMatcher(self)

    def mask_writer(self, max_batch: int = 1) -> SchemaMaskWriter[SchemaTable]:
        """Rows for batches of matchers, clearing only what it set (O(allowed) in a slot)."""
        return SchemaMaskWriter(self, max_batch)

    def fill_bitmask(self, matchers: Sequence[SchemaMatcher[SchemaTable]], out: np.ndarray) -> np.ndarray:
        """One full row per matcher into ``out[:len(matchers)]`` (every word written)."""
        for i, m in enumerate(matchers):
            m.fill_bitmask(out[i])
        return out[: len(matchers)]

    # ------------------------------------------------------------- I/O

    def save(self, path: str | os.PathLike[str], *, compress: bool | None = None) -> int:
        """Write the ``triec-schema`` artifact atomically (as :meth:`MaskTable.save`); returns the bytes written."""
        return write_artifact(self, path, compress=compress)
