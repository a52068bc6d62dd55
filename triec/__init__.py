"""triec: exact constrained-decoding masks for large finite sets of strings.

``triec.compile(values, vocab)`` builds a :class:`MaskTable`; ``table.save(path)``
writes an mmap-able artifact; ``triec.load(path)`` opens one in a serving
process with numpy alone.
"""

from triec._version import __version__
from triec.artifact import load
from triec.compiler import CompileStats, compile
from triec.errors import (
    ArtifactChecksumError,
    ArtifactContentError,
    ArtifactError,
    ArtifactVersionError,
    OutputError,
    TokenizerError,
    TokenizerMismatch,
    TokenNotAllowed,
    TriecError,
    ValueNotInTable,
    ValuesError,
)
from triec.runtime import FINISHED, MaskTable
from triec.vocabulary import Vocabulary

__all__ = [
    "FINISHED",
    "ArtifactChecksumError",
    "ArtifactContentError",
    "ArtifactError",
    "ArtifactVersionError",
    "CompileStats",
    "MaskTable",
    "OutputError",
    "TokenNotAllowed",
    "TokenizerError",
    "TokenizerMismatch",
    "TriecError",
    "ValueNotInTable",
    "ValuesError",
    "Vocabulary",
    "__version__",
    "compile",
    "load",
]
