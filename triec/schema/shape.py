"""The one schema shape triec composes with a grammar engine: an enum field, then anything.

``{"type": "object", "properties": {"name": {"enum": [...]}, "arguments": ARGS, ...},
"required": [every property]}``: the first property is a string enum (the finite set
the trie serves), every later property is any JSON Schema (the *continuation*, run
by llguidance or xgrammar). In the compact convention (separators ``", "`` and
``": "``, properties in schema order, no whitespace elsewhere) every output is::

    PREFIX + json(name) + TAIL + <continuation>
    {"name": "get_user", "arguments": {...}}
    ^^^^^^^^^          ^^^^^^^^^^^^^^^

where PREFIX = ``{"name": `` and TAIL = ``, "arguments": `` are literal and the
same for every name. Anything that would make the text between the name and the
next property depend on the name, or not be literal, is refused here with a
message naming what is wrong. Pure functions: no engine, no file.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from triec.encoding import json_string_literal
from triec.engines.base import ITEM_SEPARATOR, KEY_SEPARATOR  # triec's compact JSON: one definition, the engines'
from triec.errors import SchemaShapeError

CONVENTION = {
    "item_separator": ITEM_SEPARATOR,
    "key_separator": KEY_SEPARATOR,
    "whitespace": "none",
    "property_order": "schema",
    "encoding": "json",
}
"""What the artifact header records; docs/format.md and docs/verify.md say how each engine is set to it."""

ENGINES = ("llguidance", "xgrammar")

# Keywords that never change the language (annotations) or that we interpret ourselves.
_TOP_LEVEL = {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "$defs",
    "definitions",
    "title",
    "description",
    "$schema",
    "$id",
    "$comment",
    "examples",
}
_NAME_KEYWORDS = {"enum", "type", "title", "description", "$comment", "examples"}


@dataclass(frozen=True)
class ToolSchema:
    """A validated schema: the enum's names and everything else, split at the literal text."""

    schema: dict[str, Any]
    name_property: str
    next_property: str
    names: list[str]  # distinct, in schema order
    duplicates: int
    prefix: bytes  # {"name":<space>
    tail: bytes  # ,<space>"arguments":<space>
    continuation: dict[str, Any]  # the schema without the enum's members
    names_plain: bool = False  # no name needs an escape: its JSON literal is '"' + name + '"'

    @property
    def continuation_text(self) -> str:
        """Canonical JSON of :attr:`continuation` (what the artifact records and hashes)."""
        return canonical_json(self.continuation)

    @property
    def continuation_sha256(self) -> str:
        return "sha256:" + hashlib.sha256(self.continuation_text.encode("utf-8")).hexdigest()

    def with_names(self, names: list[str]) -> dict[str, Any]:
        """The schema with the enum set to ``names`` (an engine's whole-schema input)."""
        return with_enum(self.continuation, self.name_property, names)

    def key(self, name: str) -> bytes:
        """The trie key of a name: PREFIX + its JSON string literal (ending at the closing quote)."""
        return self.prefix + json_string_literal(name).encode("utf-8")


def json_object(doc: Any, source: str, what: str = "a JSON object") -> dict[str, Any]:
    """``doc`` as a dict: JSON text parsed, anything but an object refused (:class:`SchemaShapeError` naming
    ``source``, and ``what`` was expected)."""
    if isinstance(doc, (str, bytes)):
        try:
            doc = json.loads(doc)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise SchemaShapeError(f"{source}: not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise SchemaShapeError(f"{source}: expected {what}, found {type(doc).__name__}")
    return doc


def canonical_json(doc: Any) -> str:
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def with_enum(continuation: dict[str, Any], name_property: str, names: list[str]) -> dict[str, Any]:
    props = dict(continuation["properties"])
    props[name_property] = {**props[name_property], "enum": list(names)}
    return {**continuation, "properties": props}


_CONTROL = re.compile("[\x00-\x1f\x7f]")
NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f\x7f]')
"""A character that JSON escapes; names without one spell as ``'"' + name + '"'``."""


def _control(text: str) -> str | None:
    found = _CONTROL.search(text)
    return None if found is None else f"U+{ord(found.group()):04X}"


def parse_tool_schema(schema: Any, engine: str = "llguidance", source: str = "schema") -> ToolSchema:
    """Check the shape and split the schema; :class:`SchemaShapeError` names what is wrong."""

    def fail(msg: str) -> SchemaShapeError:
        return SchemaShapeError(f"{source}: {msg}")

    if engine not in ENGINES:
        raise fail(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    if not isinstance(schema, dict):
        raise fail(f"expected a JSON object (a JSON Schema), found {type(schema).__name__}")
    extra = sorted(set(schema) - _TOP_LEVEL)
    if extra:
        raise fail(
            f"keyword {extra[0]!r} is not supported at the top level (allowed: {', '.join(sorted(_TOP_LEVEL))}); "
            "it could make the text after the name depend on the name or not be literal"
        )
    if schema.get("type") != "object":
        raise fail(f'"type" must be "object", found {schema.get("type")!r}')
    props = schema.get("properties")
    if not isinstance(props, dict) or len(props) < 2:
        raise fail('"properties" must hold the enum property followed by at least one more property')
    keys = list(props)
    name_prop, next_prop = keys[0], keys[1]
    required = schema.get("required")
    if not isinstance(required, list) or set(required) != set(keys) or len(required) != len(set(required)):
        raise fail(
            f'"required" must list every property ({", ".join(keys)}): an optional property makes the text '
            "after the name not literal"
        )
    if schema.get("additionalProperties", False) is not False:
        raise fail(
            '"additionalProperties" must be false or absent: extra properties could come between the name and '
            f"{next_prop!r}"
        )
    for prop in keys:
        bad = _control(prop)
        if bad:
            raise fail(f"property name {prop!r} holds control character {bad}; engines spell such keys in several ways")
        if not isinstance(props[prop], (dict, bool)):
            raise fail(f"property {prop!r}: expected a schema object, found {type(props[prop]).__name__}")
    spec = props[name_prop]
    if not isinstance(spec, dict) or "enum" not in spec:
        raise fail(f'the first property {name_prop!r} must be a string "enum" (the names); found {spec!r:.60}')
    bad_kw = sorted(set(spec) - _NAME_KEYWORDS)
    if bad_kw:
        raise fail(
            f'property {name_prop!r}: keyword {bad_kw[0]!r} is not supported next to "enum" (allowed: '
            f"{', '.join(sorted(_NAME_KEYWORDS))})"
        )
    if spec.get("type", "string") != "string":
        raise fail(f'property {name_prop!r}: "type" must be "string", found {spec.get("type")!r}')
    members = spec["enum"]
    if not isinstance(members, list) or not members:
        raise fail(f'property {name_prop!r}: "enum" must be a non-empty array of strings')
    if set(map(type, members)) != {str}:
        i = next(i for i, m in enumerate(members) if not isinstance(m, str))
        raise fail(f'property {name_prop!r}: "enum"[{i}] is {type(members[i]).__name__}, expected a string')
    joined = "".join(members)  # one scan for the common case; pinpoint the member only on failure
    try:
        joined.encode("utf-8")
    except UnicodeEncodeError:
        i, exc = next((i, e) for i, m in enumerate(members) if (e := _encode_error(m)) is not None)
        raise fail(f'property {name_prop!r}: "enum"[{i}] is not encodable as UTF-8 ({exc})') from None
    plain = NEEDS_ESCAPE.search(joined) is None  # no quote, backslash or control character: names spell as themselves
    if engine == "llguidance" and not plain and _control(joined):
        i, m = next((i, m) for i, m in enumerate(members) if _control(m))
        raise fail(
            f'property {name_prop!r}: "enum"[{i}] = {m!r} holds control character {_control(m)}, which llguidance '
            "accepts in several spellings (e.g. \\n, \\u000a, \\u000A); compile with engine xgrammar "
            "(one spelling) or drop the name"
        )
    names = list(dict.fromkeys(members))
    continuation = {**schema, "properties": {**props, name_prop: {k: v for k, v in spec.items() if k != "enum"}}}
    return ToolSchema(
        schema=schema,
        name_property=name_prop,
        next_property=next_prop,
        names=names,
        duplicates=len(members) - len(names),
        prefix=("{" + json_string_literal(name_prop) + KEY_SEPARATOR).encode("utf-8"),
        tail=(ITEM_SEPARATOR + json_string_literal(next_prop) + KEY_SEPARATOR).encode("utf-8"),
        continuation=continuation,
        names_plain=plain,
    )


def _encode_error(text: str) -> str | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.reason
    return None


def looks_like_tool_schema(doc: Any) -> bool:
    """True for a JSON object whose first property carries an "enum" (what `triec compile` routes here)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("properties"), dict) or not doc["properties"]:
        return False
    first = next(iter(doc["properties"].values()))
    return isinstance(first, dict) and "enum" in first
