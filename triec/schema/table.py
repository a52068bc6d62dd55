"""A compiled enum-then-continuation schema: the trie of the names, the straddle tables, the engine.

The output ``PREFIX + json(name) + TAIL + C`` is served in three phases:

1. **name field**: a trie state n of the keys ``PREFIX + json(name)``; allowed =
   the trie's tokens at n, plus the straddling tokens of every (n, head) entry
   the compile's walk found (tokens closing the name and reading on);
2. **tail**: i bytes of the literal TAIL read after the closing quote
   (i = 0 is the key's leaf); allowed = tail row i of the straddle table;
3. **continuation**: a copy of the engine's handover template, fed the bytes x
   a straddling token carried past the tail; the engine's own mask and
   advance, EOS exactly where the engine allows it.

Phases 1 and 2 are rows of precomputed (word, bits) pairs (:mod:`triec.schema.rows`),
written in O(words set); only phase 3 touches the engine. The matchers that walk
the phases are :mod:`triec.schema.matcher`'s. This module imports numpy alone;
the engine is imported when the first matcher needs it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from triec.artifact.masks import write_artifact
from triec.errors import TokenizerMismatch, TriecError
from triec.runtime.kinds import TableKind
from triec.schema.matcher import SchemaMaskWriter, SchemaMatcher
from triec.tokenizer.resolve import resolve_vocabulary

if TYPE_CHECKING:
    from collections.abc import Sequence

    from triec.runtime.table import MaskTable
    from triec.schema.continuation import Continuation
    from triec.schema.straddle import StraddleTable
    from triec.tokenizer.vocabulary import Vocabulary


class SchemaTable:
    """Trie of the name keys + straddle tables + the recorded convention and continuation."""

    kind: ClassVar[TableKind] = TableKind.TOOL_SCHEMA

    def __init__(
        self,
        *,
        trie: MaskTable,
        straddles: StraddleTable,
        entry_state: np.ndarray,
        entry_row: np.ndarray,
        entry_leaf: np.ndarray,
        names: list[str] | dict[bytes, str] | None,
        prefix: bytes,
        tail: bytes,
        name_property: str,
        next_property: str,
        continuation_text: str,
        continuation_sha256: str,
        engine: str,
        engine_version: str | None,
        convention: dict[str, Any],
        vocab: Vocabulary | None = None,
        source: str | None = None,
        header: dict[str, Any] | None = None,
        continuation: Continuation | None = None,
    ) -> None:
        self.trie = trie
        self.straddles = straddles
        self.entry_state = entry_state
        self.entry_row = entry_row
        self.entry_leaf = entry_leaf
        self._names = names
        self.prefix = prefix
        self.tail = tail
        self.name_property = name_property
        self.next_property = next_property
        self.continuation_text = continuation_text
        self.continuation_sha256 = continuation_sha256
        self.engine = engine
        self.engine_version = engine_version
        self.convention = dict(convention)
        self.vocab = vocab
        self._continuations: dict[str, Continuation] = {} if continuation is None else {engine: continuation}
        self._twins: dict[str, SchemaTable] = {}
        self.source = source
        """The artifact this table was loaded from; ``None`` when compiled in this process."""
        self.header = header
        """The header of that artifact; ``None`` when compiled in this process."""

    # ------------------------------------------------------------- shape

    @property
    def vocab_size(self) -> int:
        return self.trie.vocab_size

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return self.trie.eos_token_ids

    @property
    def tokenizer_fingerprint(self) -> str:
        return self.trie.tokenizer_fingerprint

    @property
    def tokenizer_name(self) -> str:
        return self.trie.tokenizer_name

    @property
    def words_per_row(self) -> int:
        return self.trie.words_per_row

    @property
    def num_states(self) -> int:
        """Trie states (the name field); the tail adds ``len(tail) - 1`` more."""
        return self.trie.num_states

    @property
    def tail_len(self) -> int:
        return len(self.tail)

    @property
    def num_values(self) -> int:
        return self.trie.num_values

    @property
    def names(self) -> list[str]:  # noqa: D401
        """Name of each value index (the trie's key order: sorted by the keys' bytes)."""
        if isinstance(self._names, dict):  # from a compile: key -> name, resolved on first use
            self._names = [self._names[k] for k in self.trie.value_bytes]
        if self._names is None:
            import json

            n = len(self.prefix)
            self._names = [json.loads(k[n:].decode("utf-8")) for k in self.trie.value_bytes]
        return self._names

    def __repr__(self) -> str:
        return (
            f"SchemaTable(names={self.num_values}, states={self.num_states}, tail={self.tail!r}, "
            f"straddle_rows={self.straddles.num_rows}, entries={self.entry_state.shape[0]}, engine={self.engine})"
        )

    def entries_at(self, state: int) -> range:
        lo = int(np.searchsorted(self.entry_state, state, side="left"))
        hi = int(np.searchsorted(self.entry_state, state, side="right"))
        return range(lo, hi)

    # ------------------------------------------------------------- engine

    def check_tokenizer(self, fingerprint_or_vocab: Any) -> None:
        """As :meth:`MaskTable.check_tokenizer`."""
        self.trie.check_tokenizer(fingerprint_or_vocab)

    def bind(self, vocab: Vocabulary) -> None:
        """Attach the decoded vocabulary the continuation engine needs (checked against the fingerprint)."""
        self.trie.check_tokenizer(vocab)
        self.vocab = vocab

    def vocabulary(self) -> Vocabulary:
        """The decoded vocabulary the engine runs on: the bound one, else the recorded tokenizer's (decoded and
        checked against the fingerprint on first use, then bound)."""
        if self.vocab is None:
            if not self.tokenizer_name:
                raise TriecError("this table records no tokenizer name; call table.bind(vocab) first")
            vocab, problems = resolve_vocabulary(self.tokenizer_name, self.trie)
            if problems:
                raise TokenizerMismatch(f"{problems[0]}; call table.bind(vocab) with the tokenizer it was compiled for")
            self.bind(vocab)
        assert self.vocab is not None
        return self.vocab

    def with_engine(self, engine: str) -> SchemaTable:
        """This table with its continuation run by ``engine``: the same trie and entries, that engine's straddle tables.

        Straddle tables depend on the engine (its continuation language decides which bytes are viable past the
        tail), so they are built (or read from the cache) for it; the head rows are the same for every engine.
        """
        if engine == self.engine:
            return self
        if engine not in ("llguidance", "xgrammar"):
            raise TriecError(f"unknown continuation engine {engine!r}; expected llguidance or xgrammar")
        found = self._twins.get(engine)
        if found is not None:
            return found
        from triec.engines import engine_version
        from triec.schema import straddle

        vocab = self.vocabulary()
        twin = SchemaTable(
            trie=self.trie, straddles=self.straddles, entry_state=self.entry_state, entry_row=self.entry_row,
            entry_leaf=self.entry_leaf, names=self._names, prefix=self.prefix, tail=self.tail,
            name_property=self.name_property, next_property=self.next_property, continuation_text=self.continuation_text,
            continuation_sha256=self.continuation_sha256, engine=engine, engine_version=engine_version(engine),
            convention=self.convention, vocab=vocab,
        )
        st, _ = straddle.load_or_build(vocab, self.tail, engine, self.continuation_text, lambda: twin.continuation())
        if st.num_rows != self.straddles.num_rows or not np.array_equal(st.head_bytes, self.straddles.head_bytes):
            raise TriecError(f"the straddle heads for {engine} differ from the table's; recompile with engine={engine!r}")
        twin.straddles = st
        self._twins[engine] = twin
        return twin

    def continuation(self, engine: str | None = None) -> Continuation:
        """The engine's handover template (built on first use: the engine's tokenizer setup and a small compile)."""
        name = engine or self.engine
        if name != self.engine:
            return self.with_engine(name).continuation()
        found = self._continuations.get(name)
        if found is None:
            import json

            from triec.encoding import json_string_literal
            from triec.schema.continuation import PLACEHOLDER, Continuation, driver

            drv = driver(name, self.vocabulary())
            found = Continuation(
                drv, json.loads(self.continuation_text), self.name_property,
                self.prefix + json_string_literal(PLACEHOLDER).encode("utf-8") + self.tail,
            )
            self._continuations[name] = found
        return found

    def matcher(self, engine: str | None = None) -> SchemaMatcher:
        """A fresh per-sequence matcher (xgrammar / llguidance style); ``engine`` overrides the compile's."""
        if engine is not None and engine != self.engine:
            return self.with_engine(engine).matcher()
        return SchemaMatcher(self, self.continuation())

    def matcher_at(self, state: int, tail_offset: int | None = None, value: int = -1) -> SchemaMatcher:
        """A matcher positioned at trie state ``state``, or at ``tail_offset`` after value ``value`` (for checks)."""
        m = self.matcher()
        m.move_to(state, tail_offset, value)
        return m

    def mask_writer(self, max_batch: int = 1) -> SchemaMaskWriter:
        """Rows for batches of matchers, clearing only what it set (O(allowed) in the name field)."""
        return SchemaMaskWriter(self, max_batch)

    def fill_bitmask(self, matchers: Sequence[SchemaMatcher], out: np.ndarray) -> np.ndarray:
        """One full row per matcher into ``out[:len(matchers)]`` (every word written)."""
        for i, m in enumerate(matchers):
            m.fill_bitmask(out[i])
        return out[: len(matchers)]

    # ------------------------------------------------------------- I/O

    def save(self, path: str | os.PathLike[str], *, compress: bool | None = None) -> int:
        """Write the ``triec-schema`` artifact atomically (as :meth:`MaskTable.save`); returns the bytes written."""
        return write_artifact(self, path, compress=compress)
