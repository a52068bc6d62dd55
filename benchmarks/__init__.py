"""The benchmark suites of docs/benchmarks.md, their drivers and the docs writer: a checkout's, never shipped.

``python -m benchmarks SUITE [--quick] [--out DIR] [--write-docs]`` (:mod:`benchmarks.__main__`) runs a suite
from the repository root. The suites read the checkout (fixtures/, tests/ data files, docs/), so they live here,
beside the package rather than in it: the wheel carries ``triec`` only, and ``triec bench`` on a user's own set
(:mod:`triec.bench.peers`) is all of the benchmarking it ships.

Cells and drivers run in processes of their own (``python -m benchmarks.…``, or
:func:`triec.bench.runner.run_cell` with a ``benchmarks.…`` target): importing this package puts the checkout on
``PYTHONPATH`` so that they find it whatever their working directory.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
"""The checkout's root (docs/, fixtures/, tests/)."""

_paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
if str(ROOT) not in _paths:
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), *_paths) if p)
