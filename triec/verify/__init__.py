"""Reading a table back for people: whether it is right (``triec verify``) and what it holds (``triec inspect``).

* :mod:`~triec.verify.tables`: ``triec verify``: the artifact loaded and checked, then handed to its kind's checks;
* :mod:`~triec.verify.masks`: a mask table (a value set) state by state against the reference or a peer engine;
* :mod:`~triec.verify.patterns`: a pattern table against its own DFA, its regex compiled again, and the engines;
* :mod:`~triec.verify.schemas`: a schema table against an engine compiled on the whole schema;
* :mod:`~triec.verify.report`: what the checks report (a mismatch, a check's result, the report, progress);
* :mod:`~triec.verify.states`: which states a check looks at (depths, the seeded sample);
* :mod:`~triec.verify.paths`: a token path to every state, and bytes printed for people;
* :mod:`~triec.verify.inspect`: ``triec inspect``, what a table holds.

Nothing a compile or a serving process imports. ``triec.verify`` was a module in 0.1: its names resolve here.
"""

from triec import _compat

_OLD_NAMES = {
    "AGAINST": "triec.verify.tables",
    "BRUTE_FORCE_BUDGET": "triec.verify.masks",
    "CheckProgress": "triec.verify.report",
    "CheckResult": "triec.verify.report",
    "DEFAULT_STATES": "triec.verify.report",
    "DEFAULT_WALKS": "triec.verify.report",
    "MAX_EXAMPLES": "triec.verify.report",
    "Mismatch": "triec.verify.report",
    "PROGRESS_EVERY": "triec.verify.report",
    "ProgressFn": "triec.verify.report",
    "VerifyReport": "triec.verify.report",
    "WRONG_TOKENIZER": "triec.verify.tables",
    "compare_engine": "triec.verify.masks",
    "compare_reference": "triec.verify.masks",
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
