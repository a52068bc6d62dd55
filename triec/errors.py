"""One exception hierarchy, rooted at :class:`TriecError`.

Callers catch ``TriecError`` to handle every failure triec reports on purpose;
anything else escaping is a bug. The CLI maps ``TriecError`` to exit code 2.
"""

from __future__ import annotations


class TriecError(Exception):
    """Base class of every error triec raises deliberately."""


class ValuesError(TriecError):
    """The values input cannot be used (unreadable, bad encoding, wrong JSON shape, empty)."""


class ValueNotInTable(ValuesError, ValueError):
    """A value asked for (e.g. by ``MaskTable.restrict``) is not one of the table's values.

    Also a ``ValueError``: like :class:`TokenNotAllowed`, it reports an argument the caller passed.
    """


class TokenizerError(TriecError):
    """The tokenizer cannot be found, read or decoded to bytes."""


class OutputError(TriecError):
    """An output file cannot be written (missing directory, not a regular file, no permission, disk full)."""


class ArtifactError(TriecError):
    """An artifact file is not a valid triec artifact."""


class ArtifactVersionError(ArtifactError):
    """The artifact was written by a newer, unknown format version."""


class ArtifactContentError(ArtifactError):
    """A section's contents are inconsistent: an id or offset out of range, values out of order or not UTF-8."""


class ArtifactChecksumError(ArtifactError):
    """A section's bytes do not match the checksum recorded in the header."""


class TokenizerMismatch(ArtifactError):
    """The artifact was compiled for a different tokenizer than the one offered."""


class TokenNotAllowed(TriecError, ValueError):
    """A token was offered in a state whose mask does not allow it."""


class SchemaShapeError(ValuesError):
    """A schema (or structural tag) triec cannot compose exactly with an engine; the message says where and why."""


class ToolsError(SchemaShapeError):
    """A tool registry that cannot be compiled (a bad entry, a duplicate name); the message names the entry."""


class EngineUnavailable(TriecError):
    """A peer engine is not installed (the message says how to install it)."""


class EngineUnsupported(TriecError):
    """The engine cannot express this value set exactly (the message says why)."""


class RequestError(TriecError, ValueError):
    """A serving request's triec arguments cannot be served (vLLM turns it into HTTP 400)."""


class EvalError(TriecError):
    """``triec eval`` cannot run: no model, no values for an item, an unknown mode, a missing package."""


class ModelBuildError(EvalError):
    """A GGUF cannot be turned into a model directory (missing packages, unreadable or unsupported file)."""


class BenchResultError(TriecError, ValueError):
    """A benchmark result file that is not a suite's result (missing keys, another schema, cells not maps)."""


class ServerDidNotStart(TriecError, RuntimeError):
    """A serving framework's server (the benchmarks' and soak's vLLM) exited or did not answer in time; the
    message ends with its log's tail."""


class EosTextWarning(UserWarning):
    """An EOS id is an ordinary text token that values hold: the token ends the output and is never content, so
    a value spelled only through it cannot be written (``--eos 0`` on GPT-2 makes ``!`` end the output)."""


class PatternError(ValuesError, ValueError):
    """A regular expression (``triec.compile_pattern``, a schema's ``pattern``) outside the subset triec compiles, or
    one that matches nothing; ``position`` is the offset in the pattern where the problem is."""

    def __init__(self, message: str, *, position: int = 0) -> None:
        super().__init__(message)
        self.position = position


class PatternTooLarge(PatternError):
    """A pattern whose automaton exceeds the bound (``max_states``): a general grammar engine is the tool for it."""
