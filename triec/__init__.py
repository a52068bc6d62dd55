"""triec: exact constrained-decoding masks for large finite sets of strings.

``triec.compile(values, vocab)`` builds a :class:`MaskTable`; ``table.save(path)``
writes an mmap-able artifact; ``triec.load(path)`` opens one in a serving
process with numpy alone.

The names below are imported on first use (PEP 562), so ``import triec`` (and
``triec --help``, which imports the package) costs no numpy import. The
package's layers, bottom up, and what each module holds: docs/architecture.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from triec import _compat
from triec._version import __version__

if TYPE_CHECKING:  # for type checkers; tests/test_public_api.py checks it names exactly what _WHERE does
    from triec.artifact.formats import load
    from triec.compiler.entry import CompileStats, compile, compile_ids, compile_json_schema
    from triec.compiler.groups import compile_grouped
    from triec.compiler.pattern import FORMATS, compile_pattern, compile_string_schema
    from triec.encoding import Encoding
    from triec.errors import (
        ArtifactChecksumError,
        ArtifactContentError,
        ArtifactError,
        ArtifactVersionError,
        BenchResultError,
        EngineUnavailable,
        EngineUnsupported,
        EosTextWarning,
        EvalError,
        ModelBuildError,
        OutputError,
        PatternError,
        PatternTooLarge,
        RequestError,
        SchemaShapeError,
        ServerDidNotStart,
        TokenizerError,
        TokenizerMismatch,
        TokenNotAllowed,
        ToolsError,
        TriecError,
        ValueNotInTable,
        ValuesError,
    )
    from triec.integrations.rank import Ranked, rank
    from triec.runtime.kinds import Table, TableKind
    from triec.runtime.pattern import PatternTable
    from triec.runtime.states import FINISHED
    from triec.runtime.table import MaskTable
    from triec.runtime.trigger import Triggered
    from triec.schema.compile import compile_schema, compile_structural_tag, compile_tools
    from triec.schema.matcher import SchemaMatcher
    from triec.schema.table import SchemaTable
    from triec.tokenizer.vocabulary import Vocabulary

_ERRORS = (
    "ArtifactChecksumError",
    "ArtifactContentError",
    "ArtifactError",
    "ArtifactVersionError",
    "BenchResultError",
    "EngineUnavailable",
    "EngineUnsupported",
    "EosTextWarning",
    "EvalError",
    "ModelBuildError",
    "OutputError",
    "PatternError",
    "PatternTooLarge",
    "RequestError",
    "SchemaShapeError",
    "ServerDidNotStart",
    "TokenizerError",
    "TokenizerMismatch",
    "TokenNotAllowed",
    "ToolsError",
    "TriecError",
    "ValueNotInTable",
    "ValuesError",
)

_WHERE: dict[str, str] = {
    "load": "triec.artifact.formats",
    "CompileStats": "triec.compiler.entry",
    "compile": "triec.compiler.entry",
    "compile_ids": "triec.compiler.entry",
    "compile_json_schema": "triec.compiler.entry",
    "compile_grouped": "triec.compiler.groups",
    "compile_pattern": "triec.compiler.pattern",
    "compile_string_schema": "triec.compiler.pattern",
    "FORMATS": "triec.compiler.pattern",
    "Encoding": "triec.encoding",
    **dict.fromkeys(_ERRORS, "triec.errors"),
    "FINISHED": "triec.runtime.states",
    "Ranked": "triec.integrations.rank",
    "rank": "triec.integrations.rank",
    "MaskTable": "triec.runtime.table",
    "PatternTable": "triec.runtime.pattern",
    "Table": "triec.runtime.kinds",
    "TableKind": "triec.runtime.kinds",
    "Triggered": "triec.runtime.trigger",
    "compile_schema": "triec.schema.compile",
    "compile_structural_tag": "triec.schema.compile",
    "compile_tools": "triec.schema.compile",
    "SchemaMatcher": "triec.schema.matcher",
    "SchemaTable": "triec.schema.table",
    "Vocabulary": "triec.tokenizer.vocabulary",
}
"""The public surface, one name per line: where each name of ``triec`` is defined."""

__all__ = [
    "FINISHED",
    "FORMATS",
    "ArtifactChecksumError",
    "ArtifactContentError",
    "ArtifactError",
    "ArtifactVersionError",
    "BenchResultError",
    "CompileStats",
    "Encoding",
    "EngineUnavailable",
    "EngineUnsupported",
    "EosTextWarning",
    "EvalError",
    "MaskTable",
    "ModelBuildError",
    "OutputError",
    "PatternError",
    "PatternTable",
    "PatternTooLarge",
    "Ranked",
    "RequestError",
    "SchemaMatcher",
    "SchemaShapeError",
    "SchemaTable",
    "ServerDidNotStart",
    "Table",
    "TableKind",
    "TokenNotAllowed",
    "TokenizerError",
    "TokenizerMismatch",
    "ToolsError",
    "TriecError",
    "Triggered",
    "ValueNotInTable",
    "ValuesError",
    "Vocabulary",
    "__version__",
    "compile",
    "compile_grouped",
    "compile_ids",
    "compile_json_schema",
    "compile_pattern",
    "compile_schema",
    "compile_string_schema",
    "compile_structural_tag",
    "compile_tools",
    "load",
    "rank",
]
"""Written out so that type checkers and ruff read it (a computed list exports nothing to them);
tests/test_public_api.py checks that it is ``_WHERE``'s names and ``__version__``, sorted."""

_compat.install()  # the module paths of 0.1 keep importing for one release (triec/_compat.py)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'triec' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
