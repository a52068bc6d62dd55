"""Seeded synthetic inputs that tests, benchmarks and docs share.

* :mod:`~triec.synthetic.sets`: value sets (the paper's tool names, product paths, wide codes);
* :mod:`~triec.synthetic.registries`: tool registries, each tool with its own argument schema.

``triec.synthetic`` was a module in 0.1: its names resolve here on first use.
"""

from triec import _compat

_OLD_NAMES = {
    "ACTIONS": "triec.synthetic.sets",
    "ADJECTIVES": "triec.synthetic.sets",
    "BRANDS": "triec.synthetic.sets",
    "CATEGORIES": "triec.synthetic.sets",
    "COLORS": "triec.synthetic.sets",
    "NAMESPACES": "triec.synthetic.sets",
    "PRODUCT_NAMES_MAX": "triec.synthetic.sets",
    "RESOURCES": "triec.synthetic.sets",
    "TOOL_NAMES_MAX": "triec.synthetic.sets",
    "WIDE_CODES_MAX": "triec.synthetic.sets",
    "product_names": "triec.synthetic.sets",
    "tool_names": "triec.synthetic.sets",
    "wide_codes": "triec.synthetic.sets",
}

__getattr__, __dir__ = _compat.reexport(__name__, _OLD_NAMES)
__all__ = sorted(_OLD_NAMES)
