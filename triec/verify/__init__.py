"""Reading a table back for people: whether it is right (``triec verify``) and what it holds (``triec inspect``).

* :mod:`~triec.verify.tables`: ``triec verify``, an artifact state by state against the reference or a peer engine;
* :mod:`~triec.verify.schemas`: a schema table against an engine compiled on the whole schema;
* :mod:`~triec.verify.states`: which states a check looks at (depths, the seeded sample);
* :mod:`~triec.verify.paths`: a token path to every state, and bytes printed for people;
* :mod:`~triec.verify.inspect`: ``triec inspect``, what a table holds.

Nothing a compile or a serving process imports. ``triec.verify`` was a module in 0.1: its names resolve here.
"""

from triec import _compat

_OLD_NAMES = {
    "AGAINST": "triec.verify.tables",
    "BRUTE_FORCE_BUDGET": "triec.verify.tables",
    "CheckProgress": "triec.verify.tables",
    "CheckResult": "triec.verify.tables",
    "DEFAULT_STATES": "triec.verify.tables",
    "DEFAULT_WALKS": "triec.verify.tables",
    "MAX_EXAMPLES": "triec.verify.tables",
    "Mismatch": "triec.verify.tables",
    "PROGRESS_EVERY": "triec.verify.tables",
    "ProgressFn": "triec.verify.tables",
    "VerifyReport": "triec.verify.tables",
    "WRONG_TOKENIZER": "triec.verify.tables",
    "compare_engine": "triec.verify.tables",
    "compare_reference": "triec.verify.tables",
    "escape_bytes": "triec.verify.paths",
    "load_checked": "triec.verify.tables",
    "parse_against": "triec.verify.tables",
    "resolve_vocabulary": "triec.tokenizer.resolve",
    "select_states": "triec.verify.states",
    "state_depths": "triec.verify.states",
    "token_paths": "triec.verify.paths",
    "verify": "triec.verify.tables",
}

__getattr__, __dir__ = _compat.reexport(__name__, _OLD_NAMES)
__all__ = sorted(_OLD_NAMES)
