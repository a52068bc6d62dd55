"""The types of the JSON Schema keywords triec reads, checked before anything reads them (issue 49).

Each reader (:mod:`triec.schema.locate`, :func:`~triec.compiler.pattern.string_schema_regex`,
:func:`~triec.compiler.json_schema.parse_schema`) asks its own questions of a node, and a keyword of the wrong
type answered them in ways that had nothing to do with it: ``"pattern": 123`` beside a date field compiled with the
field left to the engine unannounced, ``"format": 5`` was refused for ``required`` and ``"pattern": null`` for a
missing ``enum``. One walk over every subschema refuses a wrong type first, naming the keyword and its JSON
pointer: a :class:`~triec.errors.SchemaShapeError`, exit 2 with one line on the command line.

Pure functions; an explicit stack, so a deeply nested schema costs no recursion.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from triec.errors import SchemaShapeError

_SCHEMA = "a schema (an object or a boolean)"


def _is_schema(v: Any) -> bool:
    return isinstance(v, dict | bool)


def _is_count(v: Any) -> bool:
    """A non-negative integer; JSON Schema allows one written with a zero fraction (``3.0``)."""
    if isinstance(v, bool):
        return False
    return (isinstance(v, int) and v >= 0) or (isinstance(v, float) and v.is_integer() and v >= 0)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _is_schema_list(v: Any) -> bool:
    """An array (each item is checked as a schema where the walk reaches it); an empty one is a wrong value, not a
    wrong type, and left to the readers that say why."""
    return isinstance(v, list)


def _is_type(v: Any) -> bool:
    return isinstance(v, str) or (isinstance(v, list) and all(isinstance(t, str) for t in v))


# keyword -> (does the value have the right type, what it should be)
_TYPES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "type": (_is_type, "a string or an array of strings"),
    "enum": (lambda v: isinstance(v, list), "an array"),
    "format": (lambda v: isinstance(v, str), "a string"),
    "pattern": (lambda v: isinstance(v, str), "a string"),
    "$ref": (lambda v: isinstance(v, str), "a string"),
    "required": (lambda v: isinstance(v, list) and all(isinstance(r, str) for r in v), "an array of strings"),
    "uniqueItems": (lambda v: isinstance(v, bool), "a boolean"),
    **{k: (_is_count, "a non-negative integer") for k in ("minLength", "maxLength", "minItems", "maxItems")},
    **{k: (_is_count, "a non-negative integer") for k in ("minProperties", "maxProperties")},
    **{k: (_is_number, "a number") for k in ("minimum", "maximum", "multipleOf")},
    **{
        k: (lambda v: _is_number(v) or isinstance(v, bool), "a number")
        for k in ("exclusiveMinimum", "exclusiveMaximum")
    },
    **{k: (lambda v: isinstance(v, dict), "an object of schemas") for k in ("properties", "patternProperties")},
    **{
        k: (lambda v: isinstance(v, dict), "an object of schemas") for k in ("$defs", "definitions", "dependentSchemas")
    },
    **{k: (_is_schema_list, "an array of schemas") for k in ("allOf", "anyOf", "oneOf", "prefixItems")},
    "items": (lambda v: _is_schema(v) or isinstance(v, list), f"{_SCHEMA} or an array of schemas"),
    **{
        k: (_is_schema, _SCHEMA)
        for k in (
            "additionalProperties",
            "additionalItems",
            "unevaluatedProperties",
            "unevaluatedItems",
            "propertyNames",
            "contains",
            "not",
            "if",
            "then",
            "else",
        )
    },
}
_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_ONES = (*tuple(k for k, (test, _) in _TYPES.items() if test is _is_schema), "items")


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int | float):
        return "a number"
    if isinstance(v, str):
        return "a string"
    return "an array" if isinstance(v, list) else "an object"


def _refuse(source: str, keyword: str, pointer: str, expected: str, found: Any) -> SchemaShapeError:
    shown = json.dumps(found, ensure_ascii=False)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    what = "null" if found is None else f"{_json_type(found)} ({shown})"
    return SchemaShapeError(f"{source}: keyword {keyword!r} at {pointer} must be {expected}, found {what}")


def _children(node: dict[str, Any], ptr: str) -> list[tuple[str, str, Any]]:
    """(keyword, pointer, value) of each subschema of ``node`` whose keyword holds schemas."""
    out: list[tuple[str, str, Any]] = []
    for k, v in node.items():
        at = f"{ptr}/{_escape(k)}"
        if k in _MAPS and isinstance(v, dict):
            out.extend((k, f"{at}/{_escape(name)}", sub) for name, sub in v.items())
        elif k in _LISTS and isinstance(v, list):
            out.extend((k, f"{at}/{i}", sub) for i, sub in enumerate(v))
        elif k in _ONES and not isinstance(v, list):
            out.append((k, at, v))
    return out


def check_keywords(schema: Any, source: str = "schema") -> None:
    """Refuse (:class:`SchemaShapeError`) the first keyword of the wrong type in ``schema`` or any subschema, and any
    subschema that is not an object or a boolean, naming the keyword and its JSON pointer. Keywords triec does not
    read, and the values of ``enum``, ``const``, ``default`` and ``examples``, are not looked into."""
    stack: list[tuple[str, Any]] = [("", schema)]
    while stack:
        ptr, node = stack.pop()
        if not isinstance(node, dict):
            continue
        for k, v in node.items():
            rule = _TYPES.get(k)
            if rule is not None and not rule[0](v):
                raise _refuse(source, k, f"{ptr}/{_escape(k)}", rule[1], v)
        children = _children(node, ptr)
        for k, at, sub in children:
            if not _is_schema(sub):
                raise _refuse(source, k, at, _SCHEMA, sub)
        stack.extend((at, sub) for _, at, sub in reversed(children))
