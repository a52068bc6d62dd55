"""The JSON Schemas whose instances are a finite set of strings triec compiles exactly.

Supported: a flat object whose properties are one string ``enum`` plus any
number of ``const`` properties, all required, no additional properties, e.g.
``{"type": "object", "properties": {"label": {"enum": ["a", "b"]},
"version": {"const": 1}}, "required": ["label", "version"]}``. Its instances,
written the way xgrammar's JSON-schema compiler writes them with
``any_whitespace=False`` (separators ``", "`` and ``": "``, properties in schema
order, strings as :func:`~triec.encoding.json_string_literal`), are
``prefix + "<member>" + suffix``: a JSON encoding with fixed text around it.

Anything else (nested objects, several enums, free strings, numbers, ...) is a
:class:`~triec.errors.ValuesError` naming the unsupported keyword: such schemas
need a grammar engine for the structure, which is beyond this module.
"""

from __future__ import annotations

import json
from typing import Any

from triec.compiler.schema_keywords import check_keywords
from triec.encoding import JSON, Encoding, json_string_literal
from triec.errors import ValuesError

# Keywords that never change the set of instances.
_ANNOTATIONS = frozenset(
    {"$schema", "$id", "$comment", "title", "description", "examples", "default", "deprecated", "readOnly", "writeOnly"}
)
_TOP = frozenset({"type", "properties", "required", "additionalProperties"}) | _ANNOTATIONS
_PROPERTY = frozenset({"type", "enum", "const"}) | _ANNOTATIONS
_SHAPE = "triec compiles a flat object with one string 'enum' property and 'const' properties, all required"


def is_object_schema(doc: Any) -> bool:
    """True for a JSON document that is meant as an object schema (as opposed to an ``enum`` fragment)."""
    return isinstance(doc, dict) and ("properties" in doc or doc.get("type") == "object")


def _const_literal(value: Any, where: str, source: str) -> str:
    if isinstance(value, str):
        return json_string_literal(value)
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int):
        return str(value)
    raise ValuesError(
        f"{source}: {where}: unsupported 'const' value {json.dumps(value)[:40]} "
        "(strings, integers, booleans and null are supported)"
    )


_CONST_TYPES = {str: {"string"}, bool: {"boolean"}, int: {"integer", "number"}, type(None): {"null"}}


def parse_schema(schema: dict[str, Any] | str, source: str = "schema") -> tuple[list[str], Encoding]:
    """The enum members and the encoding that spells each as its instance.

    Raises :class:`ValuesError` (message: ``source: where: what``) for any
    schema outside the supported shape.
    """
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError as exc:
            raise ValuesError(f"{source}: invalid JSON ({exc})") from None
    if not isinstance(schema, dict):
        raise ValuesError(f"{source}: a JSON Schema must be an object, found {type(schema).__name__}")
    check_keywords(schema, source)
    for key in schema:
        if key not in _TOP:
            raise ValuesError(f"{source}: unsupported keyword {key!r} ({_SHAPE})")
    if schema.get("type", "object") != "object":
        raise ValuesError(f"{source}: unsupported 'type' {json.dumps(schema['type'])} at the top level ({_SHAPE})")
    if schema.get("additionalProperties", False) is not False:
        raise ValuesError(
            f"{source}: unsupported 'additionalProperties' other than false: the instances would not be a finite set"
        )
    props = schema.get("properties")
    if not isinstance(props, dict) or not props:
        raise ValuesError(f"{source}: 'properties' must be a non-empty object ({_SHAPE})")
    required = schema.get("required")
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise ValuesError(f"{source}: 'required' must list every property ({_SHAPE})")
    for name in props:
        if name not in required:
            raise ValuesError(
                f"{source}: property {name!r} is not in 'required': optional properties are not supported ({_SHAPE})"
            )
    for name in required:
        if name not in props:
            raise ValuesError(f"{source}: 'required' names {name!r}, which is not in 'properties'")

    parts: list[str] = []  # literal text; the enum's place is marked by None
    enum_at: int | None = None
    members: list[str] = []
    for i, (name, sub) in enumerate(props.items()):
        where = f"properties.{name}"
        if not isinstance(sub, dict):
            raise ValuesError(f"{source}: {where}: expected a schema object, found {json.dumps(sub)[:40]}")
        for key in sub:
            if key not in _PROPERTY:
                raise ValuesError(f"{source}: {where}: unsupported keyword {key!r} ({_SHAPE})")
        head = ("{" if i == 0 else ", ") + json_string_literal(name) + ": "
        if "enum" in sub:
            if "const" in sub:
                raise ValuesError(f"{source}: {where}: both 'enum' and 'const'; use one")
            if enum_at is not None:
                raise ValuesError(f"{source}: {where}: a second 'enum' property; one is supported ({_SHAPE})")
            if sub.get("type", "string") != "string":
                raise ValuesError(
                    f"{source}: {where}: unsupported 'type' {json.dumps(sub['type'])} for an 'enum' (string members only)"
                )
            members = sub["enum"]
            if not isinstance(members, list) or not members:
                raise ValuesError(f"{source}: {where}.enum: expected a non-empty array of strings")
            for j, m in enumerate(members):
                if not isinstance(m, str):
                    raise ValuesError(
                        f"{source}: {where}.enum index {j}: expected a string, found {json.dumps(m)[:40]}"
                    )
            parts.append(head)
            enum_at = len(parts)
            parts.append("")
        elif "const" in sub:
            value = sub["const"]
            literal = _const_literal(value, where, source)
            if "type" in sub and sub["type"] not in _CONST_TYPES[type(value)]:
                raise ValuesError(f"{source}: {where}: 'type' {json.dumps(sub['type'])} contradicts 'const' {literal}")
            parts.append(head + literal)
        else:
            what = f"'type' {json.dumps(sub['type'])}" if "type" in sub else "a schema"
            raise ValuesError(
                f"{source}: {where}: {what} without 'enum' or 'const' is not a finite set of values ({_SHAPE})"
            )
    if enum_at is None:
        raise ValuesError(f"{source}: no property has an 'enum' ({_SHAPE})")
    prefix = "".join(parts[:enum_at])
    suffix = "".join(parts[enum_at + 1 :]) + "}"
    for m in members:
        try:
            m.encode("utf-8")
        except UnicodeEncodeError:
            raise ValuesError(f"{source}: properties enum: lone surrogate, not valid UTF-8") from None
    return list(members), Encoding(JSON, prefix, suffix)
