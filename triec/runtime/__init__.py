"""Serving: answer masks from a compiled table with numpy alone.

``import triec.runtime`` imports numpy and nothing heavier (tests/test_imports.py);
torch is imported by :mod:`triec.runtime.torch` alone, on ``table.to_torch()``.

Modules, each one concept:

* :mod:`~triec.runtime.bitmask`: the bit layout of a mask row, written there alone;
* :mod:`~triec.runtime.arrays`: ``TableArrays``, the six arrays of a compiled set and their invariants (the leaf);
* :mod:`~triec.runtime.kinds`: ``TableKind``, the ``Table`` protocol every kind of table follows, ``SetTable``;
* :mod:`~triec.runtime.states`: ``StateQueries``, what any table answers about its states (``FINISHED``);
* :mod:`~triec.runtime.validate`: the index and content checks of those arrays;
* :mod:`~triec.runtime.word_masks`: each state's bitmask row as (word, bits) pairs;
* :mod:`~triec.runtime.mask_writer`: ``table.mask_writer()``, rows in O(allowed);
* :mod:`~triec.runtime.matcher`: ``table.matcher()``, one sequence in the serving backends' shape;
* :mod:`~triec.runtime.restrict`: ``table.restrict(values)``, per-request subsets;
* :mod:`~triec.runtime.table`: ``MaskTable``, which composes the modules above (none of them imports it);
* :mod:`~triec.runtime.torch`: ``table.to_torch()``, the table on a device.

The names below were ``triec.runtime``'s in 0.1 (a module then).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from triec.runtime.kinds import Table, TableKind
    from triec.runtime.states import FINISHED, StateQueries
    from triec.runtime.table import MaskTable

_HOME = {
    "FINISHED": "triec.runtime.states",
    "MaskTable": "triec.runtime.table",
    "StateQueries": "triec.runtime.states",
    "Table": "triec.runtime.kinds",
    "TableKind": "triec.runtime.kinds",
}


def __getattr__(name: str) -> Any:
    """The names below resolve on first use: importing one leaf (``triec.runtime.pattern`` for a fresh process's
    pattern compile) does not import every other (the mask table and its tails: tens of milliseconds)."""
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'triec.runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


__all__ = ["FINISHED", "MaskTable", "StateQueries", "Table", "TableKind"]
