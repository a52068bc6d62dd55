"""Serving: answer masks from a compiled table with numpy alone.

``import triec.runtime`` imports numpy and nothing heavier (tests/test_imports.py);
torch is imported by :mod:`triec.runtime.torch` alone, on ``table.to_torch()``.

Modules, each one concept:

* :mod:`~triec.runtime.kinds`: ``TableKind`` and the ``Table`` protocol every kind of table follows;
* :mod:`~triec.runtime.states`: ``StateQueries``, what any table answers about its states (``FINISHED``);
* :mod:`~triec.runtime.table`: ``MaskTable``, the six arrays of a compiled set;
* :mod:`~triec.runtime.validate`: the index and content checks of those arrays;
* :mod:`~triec.runtime.word_masks`: each state's bitmask row as (word, bits) pairs;
* :mod:`~triec.runtime.mask_writer`: ``table.mask_writer()``, rows in O(allowed);
* :mod:`~triec.runtime.restrict`: ``table.restrict(values)``, per-request subsets;
* :mod:`~triec.runtime.torch`: ``table.to_torch()``, the table on a device.

The names below were ``triec.runtime``'s in 0.1 (a module then).
"""

from triec.runtime.kinds import Table, TableKind
from triec.runtime.states import FINISHED, StateQueries
from triec.runtime.table import MaskTable

__all__ = ["FINISHED", "MaskTable", "StateQueries", "Table", "TableKind"]
