"""Adapters that make the peer engines answer the same question triec does.

``triec verify`` and ``triec bench`` compare triec with llguidance, xgrammar and
outlines-core. A comparison means something only if every engine sees the same
problem, so each adapter builds its matcher from:

* the same decoded vocabulary: triec's :attr:`Vocabulary.token_bytes`, passed to
  the engine as raw bytes per id (no engine re-decodes the tokenizer). Ids with
  ``b""`` bytes (special tokens, EOS, control pieces) are special / never
  content, and ids from ``num_tokens`` to ``vocab_size`` are padding;
* the same EOS ids, allowed exactly where the prefix is a value;
* the same language: an alternation of the exact values, escaped so that every
  value matches byte for byte (values may hold any Unicode, newlines included,
  and may be prefixes of each other or empty);
* the same mask layout: int32 rows of :mod:`triec.runtime.bitmask`.

docs/verify.md lists the conventions each engine needed. Engines are imported
lazily; a missing one raises :class:`EngineUnavailable` with the pip command.

One interface (:mod:`~triec.engines.base`: :class:`Engine` for value sets and
JSON schemas, :class:`EngineDriver` for the schema layer's grammars), one module
per engine; a new engine is a module here and a line in :data:`_CLASSES` (and
:data:`DRIVERS`). Nothing outside an engine's module touches its private objects. The names below were
``triec.engines``'s in 0.1 (a module then).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, overload

from triec.engines.base import (
    ENGINES,
    GRAMMAR_CACHE,
    ITEM_SEPARATOR,
    KEY_SEPARATOR,
    Engine,
    EngineDriver,
    GrammarSpec,
    Matcher,
    check_name,
    engine_version,
    install_hint,
    is_installed,
    regex_literal,
)
from triec.engines.llguidance import PARSER_LIMITS, LLGuidanceDriver, LLGuidanceEngine, parser_limits
from triec.engines.outlines_core import OutlinesCoreEngine
from triec.engines.xgrammar import XGrammarDriver, XGrammarEngine, ebnf_literal, xgrammar_regex_literal
from triec.errors import EngineUnavailable, EngineUnsupported, TriecError
from triec.runtime.bitmask import ids_of as row_ids  # the name of 0.1

if TYPE_CHECKING:
    from triec.tokenizer.vocabulary import Vocabulary

_CLASSES: dict[str, type[Engine]] = {
    "llguidance": LLGuidanceEngine,
    "xgrammar": XGrammarEngine,
    "outlines-core": OutlinesCoreEngine,
}


def make_engine(name: str, vocab: Vocabulary) -> Engine:
    """Build engine ``name`` over ``vocab``; raises :class:`EngineUnavailable` when it is missing."""
    check_name(name)
    if not is_installed(name):
        raise EngineUnavailable(f"{name} is not installed; install it with: {install_hint(name)}")
    return _CLASSES[name](vocab)


DRIVERS: dict[str, type[EngineDriver]] = {"llguidance": LLGuidanceDriver, "xgrammar": XGrammarDriver}
"""The engines the schema layer hands structure to (grammar drivers: bytes in, probes, forced bytes)."""

_DRIVER_MEMO: dict[tuple[str, str, int, tuple[int, ...]], EngineDriver] = {}


@overload
def driver(name: Literal["xgrammar"], vocab: Vocabulary) -> XGrammarDriver: ...


@overload
def driver(name: Literal["llguidance"], vocab: Vocabulary) -> LLGuidanceDriver: ...


@overload
def driver(name: str, vocab: Vocabulary) -> EngineDriver: ...


def driver(name: str, vocab: Vocabulary) -> EngineDriver:
    """The grammar driver of engine ``name`` bound to ``vocab``, built once per process (its tokenizer setup costs
    up to a second)."""
    if name not in DRIVERS:
        raise TriecError(f"unknown continuation engine {name!r}; expected one of {', '.join(DRIVERS)}")
    key = (name, vocab.fingerprint, vocab.vocab_size, vocab.eos_token_ids)
    found = _DRIVER_MEMO.get(key)
    if found is None:
        found = _DRIVER_MEMO[key] = DRIVERS[name](vocab)
    return found


__all__ = [
    "DRIVERS",
    "ENGINES",
    "GRAMMAR_CACHE",
    "ITEM_SEPARATOR",
    "KEY_SEPARATOR",
    "PARSER_LIMITS",
    "Engine",
    "EngineDriver",
    "EngineUnavailable",
    "EngineUnsupported",
    "GrammarSpec",
    "LLGuidanceDriver",
    "LLGuidanceEngine",
    "Matcher",
    "OutlinesCoreEngine",
    "XGrammarDriver",
    "XGrammarEngine",
    "driver",
    "ebnf_literal",
    "engine_version",
    "install_hint",
    "is_installed",
    "make_engine",
    "parser_limits",
    "regex_literal",
    "row_ids",
    "xgrammar_regex_literal",
]
