"""The grammar engines the schema layer hands structure to: their drivers live in :mod:`triec.engines` (one
interface, :class:`~triec.engines.base.EngineDriver`, one module per engine); the names are re-exported here.

A grammar is a JSON Schema, optionally followed by one of a few literal texts
(how a tagged tool-call format closes a call: ``"}\n</tool_call>"``). Each
engine runs it in the compact convention (:data:`triec.schema.shape.CONVENTION`)
that the whole-schema oracle uses, so the composite and the oracle it is
checked against see the same language:

* llguidance: ``%llguidance {"no_forcing": true}`` + ``start: %json {schema}``
  with ``"x-guidance": {"whitespace_flexible": false, "item_separator": ", ",
  "key_separator": ": "}``. Without ``no_forcing`` llguidance allows only the
  canonical token of forced text, a mask narrower than the language.
* xgrammar: ``compile_json_schema(schema, any_whitespace=False, separators=(", ", ": "))``
  (strict mode, its default: no extra properties); a literal text after the
  schema is ``Grammar.concat`` with an EBNF rule.

Drivers are built once per (engine, vocabulary) and keep a bounded cache of the
grammars they compiled (:data:`GRAMMAR_CACHE`), so a registry's argument
grammars are compiled once each, when first needed.
"""

from __future__ import annotations

from triec.engines import (
    DRIVERS,
    GRAMMAR_CACHE,
    EngineDriver,
    GrammarSpec,
    LLGuidanceDriver,
    XGrammarDriver,
    driver,
)

__all__ = ["DRIVERS", "GRAMMAR_CACHE", "EngineDriver", "GrammarSpec", "LLGuidanceDriver", "XGrammarDriver", "driver"]
