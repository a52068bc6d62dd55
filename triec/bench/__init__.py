"""Measuring triec beside its peers: ``triec bench`` on a user's own set, one process per cell.

* :mod:`~triec.bench.peers`: triec against xgrammar, llguidance and outlines-core on the same values;
* :mod:`~triec.bench.runner`: one cell in its own process, cut off at a time and a memory limit.

The benchmark suites of docs/benchmarks.md are not here: they read a checkout, and live in the repository's
``benchmarks/`` folder (``python -m benchmarks SUITE``), which the wheel leaves out.

``triec.bench`` was a module in 0.1: its names resolve here on first use.
"""

from triec import _compat

_OLD_NAMES = {
    "ALL_ENGINES": "triec.bench.peers",
    "BenchInterrupted": "triec.bench.peers",
    "BenchProgress": "triec.bench.peers",
    "DEFAULT_BATCH": "triec.bench.peers",
    "DEFAULT_K": "triec.bench.peers",
    "DEFAULT_PATHS": "triec.bench.peers",
    "DEFAULT_TIMEOUT": "triec.bench.peers",
    "LONG_COMPILE": "triec.bench.peers",
    "MAX_BATCH": "triec.bench.peers",
    "MAX_K": "triec.bench.peers",
    "TIMED": "triec.bench.peers",
    "batch_prefixes": "triec.bench.peers",
    "decode_paths": "triec.bench.peers",
    "machine_info": "triec.bench.peers",
    "markdown_table": "triec.bench.peers",
    "parse_engines": "triec.bench.peers",
    "parse_int_list": "triec.bench.peers",
    "plot": "triec.bench.peers",
    "run_bench": "triec.bench.peers",
    "run_cell": "triec.bench.peers",
    "summary": "triec.bench.peers",
    "table_rows": "triec.bench.peers",
    "value_set": "triec.bench.peers",
    "versions": "triec.bench.peers",
}

__getattr__, __dir__ = _compat.reexport(__name__, _OLD_NAMES)
__all__ = sorted(_OLD_NAMES)
