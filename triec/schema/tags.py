"""Structural tags (xgrammar's format, what vLLM and SGLang send for tool calls): the begins in a trie.

vLLM turns ``tool_choice="required"`` (or a named tool) for a parser with a tag
model (hermes, ...) into a ``tags_with_separator`` structural tag: one tag per tool
(twice: with and without newlines), each a literal ``begin`` that carries the
tool's name (``<tool_call>\\n{"name": "get_weather", "arguments": ``), a
``content`` (the tool's arguments as a JSON Schema, or any JSON) and a literal
``end``; at least one tag, tags separated by a literal separator, possibly only
one (``stop_after_first``). Served here: the begins as one slot's keys (all share
their first byte), each tag's content and end (and the optional separator and
next begin, through the slot's marker) as that tag's own xgrammar structural tag,
compiled when a sequence first picks it. Exact against xgrammar on the whole tag
because xgrammar itself runs every content and end, in the same structural-tag
semantics (its JSON content style and whitespace included).

Shapes that let free text stand between tags (``triggered_tags``, SGLang's legacy
``structures``/``triggers``) or allow no tag at all are not served: free text takes
any marker, so the slot's start cannot be told from the text around it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from triec.errors import SchemaShapeError


@dataclass(frozen=True)
class TagPlan:
    begins: list[str]
    contents: list[Any]
    ends: list[str]
    separator: str
    multi: bool  # more tags may follow a tag


def parse_structural_tag(doc: Any, source: str = "structural tag") -> TagPlan:
    """The tags of a servable structural tag; :class:`SchemaShapeError` says why another one is not servable."""

    def fail(msg: str) -> SchemaShapeError:
        return SchemaShapeError(f"{source}: {msg}")

    if isinstance(doc, (str, bytes)):
        try:
            doc = json.loads(doc)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise fail(f"not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise fail(f"expected a JSON object, found {type(doc).__name__}")
    if doc.get("type") == "structural_tag":
        doc = doc.get("format")
        if not isinstance(doc, dict):
            raise fail('"format" must be an object')
    kind = doc.get("type")
    if kind == "tag":
        tags, separator, multi = [doc], "", False
    elif kind == "tags_with_separator":
        tags = doc.get("tags")
        separator = doc.get("separator", "")
        if not isinstance(tags, list) or not tags or not isinstance(separator, str):
            raise fail('"tags_with_separator" needs a non-empty "tags" list and a string "separator"')
        if not doc.get("at_least_one", False):
            raise fail('"at_least_one": false lets the output hold no tag; served by the engine')
        multi = not doc.get("stop_after_first", False)
    else:
        raise fail(f"format type {kind!r} is served by the engine (triec serves \"tag\" and \"tags_with_separator\": "
                   "free text between tags takes any marker, so a tag's start could not be told from it)")
    begins, contents, ends = [], [], []
    seen: dict[str, int] = {}
    for i, t in enumerate(tags):
        if not isinstance(t, dict) or t.get("type", "tag") != "tag":
            raise fail(f"tags[{i}]: expected a tag object")
        b, e = t.get("begin"), t.get("end")
        if not isinstance(b, str) or not b or not isinstance(e, str) or "content" not in t:
            raise fail(f"tags[{i}]: a tag needs a non-empty string begin, a content and a string end")
        if b in seen:
            if json.dumps(t, sort_keys=True) != json.dumps(tags[seen[b]], sort_keys=True):
                raise fail(f"tags[{i}]: begin {b!r} is also tags[{seen[b]}]'s, with another content or end")
            continue
        seen[b] = i
        begins.append(b)
        contents.append(t["content"])
        ends.append(e)
    encoded = sorted(b.encode("utf-8") for b in begins)
    if len({b[0] for b in encoded}) != 1:
        raise fail("the begins do not share their first byte; served by the engine")
    for a, b in zip(encoded, encoded[1:], strict=False):
        if b.startswith(a):
            raise fail(f"begin {a.decode()!r} is a prefix of {b.decode()!r}; served by the engine")
    return TagPlan(begins, contents, ends, separator, multi)


def tag_grammar(content: Any, end: str, separator: str, opener: str, multi: bool, marker: str) -> str:
    """One tag's grammar after its begin: its content, its end, and (more tags allowed) optionally the separator
    and the next begin's first byte with the marker, where the begins' slot takes over again."""
    elements: list[Any] = [content, {"type": "const_string", "value": end}]
    if multi:
        elements.append({"type": "optional", "content": {"type": "const_string", "value": separator + opener + marker}})
    return json.dumps({"type": "structural_tag", "format": {"type": "sequence", "elements": elements}},
                      ensure_ascii=False, separators=(",", ":"))
