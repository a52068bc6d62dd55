"""triec.schema.locate: which enums of a JSON Schema a trie serves, which stay in the engine, and why."""

from __future__ import annotations

import pytest

from triec.schema.locate import DEFAULT_THRESHOLD, locate, with_markers

BIG = [f"v{i}" for i in range(10)]
T = 5  # threshold in these tests


def decisions(schema: object, engine: str = "llguidance", threshold: int = T, **kw: object) -> dict[str, str]:
    """pointer -> "" when served, else the reason it stays in the engine."""
    return {s.pointer: ("" if s.served else s.reason) for s in locate(schema, threshold, engine, **kw).sites}


def obj(**props: object) -> dict:
    return {"type": "object", "properties": props, "required": list(props)}


def test_threshold_and_default() -> None:
    assert DEFAULT_THRESHOLD == 10_000
    schema = obj(a={"enum": BIG}, b={"enum": BIG[:4]})
    assert decisions(schema) == {"/properties/a": ""}  # b is below the threshold: not even a site
    assert decisions(schema, threshold=3) == {"/properties/a": "", "/properties/b": ""}
    assert decisions(schema, threshold=100) == {}
    assert decisions(schema, threshold=100, always=("/properties/b",)) == {"/properties/b": ""}  # a tool call's names
    assert decisions({"enum": []}, threshold=0) == {}  # an empty enum admits nothing: nothing to serve


def test_positions_that_are_served() -> None:
    schema = {
        "type": "object",
        "properties": {
            "deep": obj(x=obj(y={"type": "string", "enum": BIG, "title": "t", "description": "d"})),
            "items": {"type": "array", "items": {"enum": BIG}, "minItems": 1},
            "tuple": {"type": "array", "prefixItems": [{"type": "integer"}, {"enum": BIG}]},
            "map": {"type": "object", "additionalProperties": {"enum": BIG}},
            "alt": {"anyOf": [{"enum": BIG}, {"type": "integer"}, {"type": "object"}, {"type": "null"}]},
            "one": {"oneOf": [{"type": "boolean"}, {"enum": BIG}]},
        },
    }
    got = decisions(schema)
    assert set(got) == {
        "/properties/deep/properties/x/properties/y/enum"[:-5],
        "/properties/items/items",
        "/properties/tuple/prefixItems/1",
        "/properties/map/additionalProperties",
        "/properties/alt/anyOf/0",
        "/properties/one/oneOf/1",
    }
    assert all(reason == "" for reason in got.values()), got


@pytest.mark.parametrize(
    ("node", "reason"),
    [
        ({"enum": [*BIG, 1]}, "a member is not a string"),
        ({"enum": BIG, "pattern": "v.*"}, "keyword 'pattern' next to the enum"),
        ({"enum": BIG, "minLength": 1}, "keyword 'minLength' next to the enum"),
        ({"enum": BIG, "const": "v1"}, "keyword 'const' next to the enum"),
        ({"enum": BIG, "type": "integer"}, '"type" is \'integer\', not "string"'),
        ({"enum": BIG, "type": ["string", "null"]}, "\"type\" is ['string', 'null'], not \"string\""),
    ],
)
def test_an_enum_node_that_constrains_more_stays_in_the_engine(node: dict, reason: str) -> None:
    assert decisions(obj(a=node)) == {"/properties/a": reason}


def test_control_characters_only_under_llguidance() -> None:
    schema = obj(a={"enum": [*BIG, "line\nbreak"]}, b={"enum": [*BIG, "del\x7f"]})
    why = "a member holds a control character, which llguidance spells several ways"
    assert decisions(schema) == {"/properties/a": why, "/properties/b": why}
    assert decisions(schema, engine="xgrammar") == {"/properties/a": "", "/properties/b": ""}


def test_duplicates_are_counted_once() -> None:
    (site,) = locate(obj(a={"enum": BIG + BIG[:3]}), T).sites
    assert site.values == BIG and site.duplicates == 3


@pytest.mark.parametrize(
    "other",
    [{"type": "string"}, {}, True, {"const": "x"}, {"enum": ["x", 1]}, {"pattern": "a+"}, {"$ref": "#/$defs/s"}],
    ids=["string", "empty", "true", "const", "mixed_enum", "untyped", "ref_to_string"],
)
def test_an_alternative_that_may_take_a_string_keeps_the_enum_in_the_engine(other: object) -> None:
    schema = {"$defs": {"s": {"type": "string"}}, **obj(a={"anyOf": [{"enum": BIG}, other]})}
    assert decisions(schema) == {"/properties/a/anyOf/0": "another alternative at its position may take a string"}


def test_two_enums_as_alternatives_of_one_position_stay_in_the_engine() -> None:
    schema = obj(a={"oneOf": [{"enum": BIG}, {"enum": [f"w{i}" for i in range(8)]}]})
    assert set(decisions(schema).values()) == {"another alternative at its position may take a string"}


def test_alternatives_through_refs_and_nested_combinators() -> None:
    schema = {
        "$defs": {"code": {"enum": BIG}, "num": {"type": "number"}, "s": {"type": "string"}},
        **obj(a={"anyOf": [{"$ref": "#/$defs/code"}, {"anyOf": [{"$ref": "#/$defs/num"}, {"type": "null"}]}]}),
    }
    assert decisions(schema) == {"/$defs/code": ""}
    schema["properties"]["b"] = {"anyOf": [{"$ref": "#/$defs/code"}, {"$ref": "#/$defs/s"}]}
    assert decisions(schema) == {"/$defs/code": "another alternative at its position may take a string"}


@pytest.mark.parametrize("keyword", ["allOf", "not", "if", "then", "else", "contains", "dependentSchemas"])
def test_opaque_positions_keep_the_enum_in_the_engine(keyword: str) -> None:
    inner: object = {"enum": BIG}
    if keyword in ("allOf",):
        inner = [inner]
    elif keyword == "dependentSchemas":
        inner = {"x": obj(a={"enum": BIG})}
    schema = {"type": "object", keyword: inner}
    (reason,) = decisions(schema).values()
    assert reason == f"it stands under {keyword!r}"


def test_a_ref_from_an_opaque_position_keeps_its_target_in_the_engine() -> None:
    schema = {
        "$defs": {"code": {"enum": BIG}},
        **obj(a={"$ref": "#/$defs/code"}),
        "allOf": [{"properties": {"b": {"$ref": "#/$defs/code"}}}],
    }
    assert decisions(schema) == {"/$defs/code": "it stands under 'allOf'"}


def test_unique_items_and_combinators_beside_other_keywords() -> None:
    assert decisions(obj(a={"type": "array", "items": {"enum": BIG}, "uniqueItems": True})) == {
        "/properties/a/items": "its array has uniqueItems"
    }
    assert decisions(obj(a={"anyOf": [{"enum": BIG}, {"type": "integer"}], "minimum": 3})) == {
        "/properties/a/anyOf/0": "its 'anyOf' stands next to other keywords"
    }
    assert decisions(obj(a={"anyOf": [{"enum": BIG}], "oneOf": [{"type": "integer"}]})) == {
        "/properties/a/anyOf/0": "an unresolvable $ref or mixed combinators at its position"
    }


def test_one_site_however_many_references() -> None:
    schema = {
        "$defs": {"code": {"enum": BIG}},
        **obj(a={"$ref": "#/$defs/code"}, b={"type": "array", "items": {"$ref": "#/$defs/code"}}),
    }
    (site,) = locate(schema, T).sites
    assert site.pointer == "/$defs/code" and site.served


def test_unresolvable_ref_at_the_position() -> None:
    schema = obj(a={"anyOf": [{"enum": BIG}, {"$ref": "#/$defs/missing"}]})
    assert decisions(schema) == {"/properties/a/anyOf/0": "an unresolvable $ref or mixed combinators at its position"}
    schema = obj(a={"anyOf": [{"enum": BIG}, {"$ref": "https://example.com/s.json"}]})
    assert decisions(schema) == {"/properties/a/anyOf/0": "an unresolvable $ref or mixed combinators at its position"}


def test_pointer_escapes() -> None:
    schema = obj(**{"a/b": {"enum": BIG}, "c~d": {"enum": BIG}})
    assert set(decisions(schema)) == {"/properties/a~1b", "/properties/c~0d"}
    marked = with_markers(schema, {"/properties/a~1b": "\U000f0000"})
    assert marked["properties"]["a/b"] == {"enum": ["\U000f0000"]} and marked["properties"]["c~d"] == {"enum": BIG}


def test_with_markers_keeps_everything_else() -> None:
    schema = {
        "$defs": {"code": {"type": "string", "enum": BIG, "default": "v1", "examples": ["v2"], "title": "t"}},
        **obj(a={"$ref": "#/$defs/code"}),
    }
    marked = with_markers(schema, {"/$defs/code": "M"})
    assert marked["$defs"]["code"] == {"type": "string", "title": "t", "enum": ["M"]}  # default/examples could not hold
    assert marked["properties"] == schema["properties"] and schema["$defs"]["code"]["enum"] == BIG  # not mutated
