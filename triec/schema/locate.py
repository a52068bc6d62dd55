"""Where a JSON Schema's large string enums stand, and which of them a trie can serve exactly.

An enum becomes a *slot* (served by its own trie) when nothing but its values
can start where it stands; the engine then sees one marker value instead of
its members. An enum stays in the engine, unchanged, when

* it has fewer than ``threshold`` members (the engine is as fast there),
* a member is not a string, or its node constrains strings further (``pattern``,
  ``minLength``, ``const``...), or (under llguidance, which accepts several
  spellings of them) a member holds a control character or DEL,
* it is an alternative (``anyOf``/``oneOf``, through ``$ref`` and nested
  combinators) next to another branch that may accept a string, or it stands
  under ``allOf``, ``not``, ``if``/``then``/``else``, ``contains``,
  ``dependentSchemas`` or an array with ``uniqueItems`` (where the marker would
  not stand for every value).

Each enum node is one slot however many times it is referenced (``$ref``).
Pure functions over the parsed schema; no engine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

DEFAULT_THRESHOLD = 10_000
"""Members from which an enum is served by a trie (docs/benchmarks.md, "The threshold"): measured side by side, a
document's mean row costs 3-8x more with the enum in a slot up to 4,096 members (the engines' own rows and compiles
are cheap there), while from 16,384 xgrammar's compile is 12-22x and its mean row 5-6x the slot's, and llguidance's
compile about 2x (it refuses 100,000). A tool call's names are served whatever their number."""

# keywords next to "enum" that do not change which strings it admits
_ENUM_OK = {
    "enum",
    "type",
    "title",
    "description",
    "$comment",
    "examples",
    "default",
    "$id",
    "deprecated",
    "readOnly",
    "writeOnly",
}
# subschema positions where a value stands on its own (a property's value, an array item...)
_MAP_POSITIONS = ("properties", "patternProperties", "$defs", "definitions")
_ONE_POSITIONS = (
    "items",
    "additionalProperties",
    "additionalItems",
    "unevaluatedProperties",
    "unevaluatedItems",
    "propertyNames",
)
_LIST_POSITIONS = ("prefixItems",)
_ALTERNATIVES = ("anyOf", "oneOf")
_PLAIN_COMBINATOR = {"title", "description", "$comment", "type"}  # what may stand next to anyOf/oneOf
_OPAQUE = ("allOf", "not", "if", "then", "else", "contains", "dependentSchemas")
_CONTROL = re.compile("[\x00-\x1f\x7f]")


@dataclass
class EnumSite:
    """One enum node of the schema, or (``is_pattern``) one string node with a ``format`` or ``pattern``."""

    pointer: str  # JSON pointer of the node
    values: list[str]  # distinct, in schema order (none for a pattern site)
    duplicates: int
    served: bool = True
    reason: str = ""  # why it stays in the engine
    is_pattern: bool = False  # a string node with a ``format`` or ``pattern``, not an enum
    regex: str = ""  # a served pattern site: the regex of its whole JSON string, quotes included (xgrammar's)
    format: str | None = None  # a pattern site's named format ("date"...), None for a ``pattern``
    pattern: str = ""  # a pattern site's ``pattern`` as the schema writes it


@dataclass
class Located:
    sites: list[EnumSite] = field(default_factory=list)

    @property
    def slots(self) -> list[EnumSite]:
        return [s for s in self.sites if s.served]


def locate(
    schema: Any,
    threshold: int = DEFAULT_THRESHOLD,
    engine: str = "llguidance",
    always: tuple[str, ...] = (),
    patterns: bool = False,
) -> Located:
    """Every string enum of at least ``threshold`` members (or at a pointer of ``always``, whatever its size),
    with ``patterns`` every string node with a ``format`` of :data:`~triec.compiler.pattern.FORMATS` or a
    ``pattern``, and whether a slot may serve each."""
    out = Located()
    by_pointer: dict[str, EnumSite] = {}
    _collect(schema, "", threshold, engine, out, by_pointer, frozenset(always), patterns)
    if by_pointer:
        _check_positions(schema, schema, "", by_pointer, set())
    return out


def _collect(
    node: Any,
    ptr: str,
    threshold: int,
    engine: str,
    out: Located,
    by: dict[str, EnumSite],
    always: frozenset[str] = frozenset(),
    patterns: bool = False,
) -> None:
    if isinstance(node, dict):
        if patterns and "enum" not in node and "const" not in node:
            site = _pattern_site(node, ptr)
            if site is not None:
                out.sites.append(site)
                by[ptr] = site
        e = node.get("enum")
        if isinstance(e, list) and e and (len(e) >= threshold or ptr in always):
            values = list(dict.fromkeys(v for v in e if isinstance(v, str)))
            site = EnumSite(ptr, values, len(e) - len(values))
            if any(not isinstance(v, str) for v in e):
                site.served, site.reason = False, "a member is not a string"
            elif set(node) - _ENUM_OK:
                site.served, site.reason = False, f"keyword {sorted(set(node) - _ENUM_OK)[0]!r} next to the enum"
            elif node.get("type", "string") not in ("string", ["string"]):
                site.served, site.reason = False, f'"type" is {node.get("type")!r}, not "string"'
            elif engine == "llguidance" and _CONTROL.search("".join(values)):
                site.served, site.reason = (
                    False,
                    "a member holds a control character, which llguidance spells several ways",
                )
            out.sites.append(site)
            by[ptr] = site
        for k, v in node.items():
            if k != "enum":
                _collect(v, f"{ptr}/{_escape(k)}", threshold, engine, out, by, always, patterns)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _collect(v, f"{ptr}/{i}", threshold, engine, out, by, always, patterns)


def _pattern_site(node: dict[str, Any], ptr: str) -> EnumSite | None:
    """A string node with a named ``format`` or a ``pattern``: a site, served unless something else constrains it
    or its pattern is one triec does not read as xgrammar does; None for any other node."""
    from triec.compiler.pattern import FORMATS, STRING_KEYWORDS, string_schema_regex
    from triec.errors import PatternError

    fmt, pat = node.get("format"), node.get("pattern")
    if node.get("type") != "string" or not (fmt in FORMATS or isinstance(pat, str)):
        return None
    site = EnumSite(
        ptr, [], 0, is_pattern=True, format=fmt if fmt in FORMATS else None, pattern=pat if isinstance(pat, str) else ""
    )
    try:
        found = string_schema_regex(node)
    except PatternError as exc:
        site.served, site.reason = False, f"its pattern: {exc}"
        return site
    if found is None:
        extra = sorted(set(node) - STRING_KEYWORDS)
        why = f"keyword {extra[0]!r} next to it" if extra else "both a format and a pattern"
        site.served, site.reason = False, why
        return site
    site.regex = found[0]
    return site


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _resolve(root: Any, ref: str) -> tuple[str, Any] | None:
    if not ref.startswith("#"):
        return None
    node: Any = root
    ptr = ""
    for part in ref[1:].split("/")[1:] if ref != "#" else []:
        key = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return None
        ptr += "/" + part
    return ptr, node


def _alternatives(root: Any, node: Any, ptr: str, seen: frozenset[str]) -> list[tuple[str, Any]] | None:
    """The leaf alternatives at one position (anyOf/oneOf flattened, $ref followed); None if unknowable."""
    if isinstance(node, dict) and "$ref" in node and len(set(node) - {"$ref", "title", "description", "$comment"}) == 0:
        ref = node["$ref"]
        if not isinstance(ref, str) or ref in seen:
            return None
        got = _resolve(root, ref)
        if got is None:
            return None
        return _alternatives(root, got[1], got[0], seen | {ref})
    if isinstance(node, dict):
        combos = [k for k in _ALTERNATIVES if k in node]
        if combos and not (set(node) - {*_ALTERNATIVES, *_PLAIN_COMBINATOR}):
            if len(combos) > 1 or not isinstance(node[combos[0]], list):
                return None
            out: list[tuple[str, Any]] = []
            for i, b in enumerate(node[combos[0]]):
                sub = _alternatives(root, b, f"{ptr}/{combos[0]}/{i}", seen)
                if sub is None:
                    return None
                out.extend(sub)
            return out
    return [(ptr, node)]


def _may_take_string(node: Any) -> bool:
    """Conservatively: could this schema accept some JSON string? (``True`` when unsure)."""
    if node is True or node == {}:
        return True
    if node is False:
        return False
    if not isinstance(node, dict):
        return True
    t = node.get("type")
    if "const" in node:
        return isinstance(node["const"], str)
    if "enum" in node and isinstance(node["enum"], list):
        return any(isinstance(v, str) for v in node["enum"])
    if t is None:
        return not any(k in node for k in ("properties", "items", "prefixItems", "minimum", "maximum", "required"))
    types = t if isinstance(t, list) else [t]
    return "string" in types


def _check_positions(root: Any, node: Any, ptr: str, sites: dict[str, EnumSite], done: set[str]) -> None:
    """Walk every value position; mark enums that stand next to string alternatives, or in opaque places."""
    if not isinstance(node, dict):
        if isinstance(node, list):
            for i, v in enumerate(node):
                _check_positions(root, v, f"{ptr}/{i}", sites, done)
        return
    if ptr in done:
        return
    done.add(ptr)
    alts = _alternatives(root, node, ptr, frozenset())
    if alts is None:
        _mark_below(root, node, ptr, sites, "an unresolvable $ref or mixed combinators at its position")
    else:
        hit = [(p, n) for p, n in alts if p in sites]
        if hit and len(alts) > 1:
            others = [n for p, n in alts if p not in sites]
            if any(_may_take_string(n) for n in others) or len({p for p, _ in hit}) > 1:
                for p, _ in hit:
                    if sites[p].served:
                        sites[p].served, sites[p].reason = (
                            False,
                            "another alternative at its position may take a string",
                        )
    for k, v in node.items():
        child = f"{ptr}/{_escape(k)}"
        if k in _OPAQUE:
            _mark_below(root, v, child, sites, f"it stands under {k!r}")
        elif k in _MAP_POSITIONS and isinstance(v, dict):
            for name, sub in v.items():
                _check_positions(root, sub, f"{child}/{_escape(name)}", sites, done)
        elif k in _ONE_POSITIONS:
            if k == "items" and node.get("uniqueItems"):
                _mark_below(root, v, child, sites, "its array has uniqueItems")
            _check_positions(root, v, child, sites, done)
        elif k in _ALTERNATIVES and set(node) - {*_ALTERNATIVES, *_PLAIN_COMBINATOR}:
            _mark_below(root, v, child, sites, f"its {k!r} stands next to other keywords")
        elif k in _LIST_POSITIONS or k in _ALTERNATIVES:
            if isinstance(v, list):
                for i, sub in enumerate(v):
                    _check_positions(root, sub, f"{child}/{i}", sites, done)
        elif k == "$ref" and isinstance(v, str):
            got = _resolve(root, v)
            if got is not None:
                _check_positions(root, got[1], got[0], sites, done)


def _mark_below(root: Any, node: Any, ptr: str, sites: dict[str, EnumSite], reason: str) -> None:
    """Keep in the engine every enum at or below ``ptr``, and every enum a ``$ref`` there leads to (transitively)."""
    prefixes = [ptr]

    def refs(n: Any) -> None:
        if isinstance(n, dict):
            ref = n.get("$ref")
            if isinstance(ref, str) and ref.startswith("#") and ref[1:] not in prefixes:
                prefixes.append(ref[1:])
                got = _resolve(root, ref)
                if got is not None:
                    refs(got[1])
            for v in n.values():
                refs(v)
        elif isinstance(n, list):
            for v in n:
                refs(v)

    refs(node)
    for p, site in sites.items():
        if site.served and any(p == q or p.startswith(q + "/") for q in prefixes):
            site.served, site.reason = False, reason


def with_markers(schema: Any, markers: dict[str, str]) -> Any:
    """The schema with each enum (or format or pattern field) at a pointer of ``markers`` reduced to that one
    marker value."""

    def visit(node: Any, ptr: str) -> Any:
        if isinstance(node, dict):
            if ptr in markers:
                return {
                    **{k: v for k, v in node.items() if k not in ("enum", "default", "examples", "format", "pattern")},
                    "enum": [markers[ptr]],
                }
            return {k: visit(v, f"{ptr}/{_escape(k)}") for k, v in node.items()}
        if isinstance(node, list):
            return [visit(v, f"{ptr}/{i}") for i, v in enumerate(node)]
        return node

    return visit(schema, "")
