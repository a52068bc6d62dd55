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

Triggered tags (``triggered_tags``, what vLLM sends for ``tool_choice="auto"`` with
strict tools, and SGLang's legacy ``structures``/``triggers``) let free text stand
before, between and after the tags: free text until a trigger, then one of the tags
whose begin starts with it. Served with one trigger (every begin starts with it): the
free text runs in xgrammar too, as the tag grammar ``triggered_tags`` with a single
tag whose begin is the trigger and whose content is the marker, so the engine stands
at the marker exactly when it has read the trigger, never in free text. The slot's
keys are the begins from the trigger's last byte on (its opening byte), and each tag's
grammar after its begin is its content, its end, then that free text again (or
nothing, with ``stop_after_first``). ``at_least_one`` makes the output start with a
tag (xgrammar's semantics: no free text before the first one). Tokens then cross
free text, trigger and begin, and end and free text, inside xgrammar's own rows.
``token_triggered_tags`` (a trigger that is one token id, never its spelling) and
several triggers are left to the engine.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any

from triec.errors import SchemaShapeError
from triec.schema.shape import json_object


@dataclass(frozen=True)
class TagPlan:
    begins: list[str]
    contents: list[Any]
    ends: list[str]
    separator: str
    multi: bool  # more tags may follow a tag
    trigger: str = ""  # triggered tags: the trigger every begin starts with (free text around the tags)
    at_least_one: bool = True
    excludes: tuple[str, ...] = ()  # triggered tags: strings the free text may not hold


def is_legacy(doc: Any) -> bool:
    """Whether ``doc`` is SGLang's (and xgrammar's older) ``{"structures": [...], "triggers": [...]}``."""
    return isinstance(doc, dict) and "structures" in doc and "triggers" in doc


def from_legacy(doc: dict[str, Any]) -> dict[str, Any]:
    """The legacy ``{"structures": [{"begin", "schema", "end"}], "triggers": [...]}`` as the ``triggered_tags``
    format it stands for (xgrammar's ``compile_structural_tag(tags, triggers)``)."""
    structures = doc.get("structures")
    tags = (
        [
            {
                "type": "tag",
                "begin": s.get("begin"),
                "end": s.get("end"),
                "content": {"type": "json_schema", "json_schema": {} if s.get("schema") is None else s.get("schema")},
            }
            if isinstance(s, dict)
            else s
            for s in structures
        ]
        if isinstance(structures, list)
        else structures
    )
    # SGLang reads a top-level "at_least_one" too (xgrammar's legacy call has none: false)
    return {
        "type": "triggered_tags",
        "triggers": doc.get("triggers"),
        "tags": tags,
        "at_least_one": doc.get("at_least_one", False) is True,
    }


def parse_structural_tag(doc: Any, source: str = "structural tag") -> TagPlan:
    """The tags of a servable structural tag; :class:`SchemaShapeError` says why another one is not servable."""

    def fail(msg: str) -> SchemaShapeError:
        return SchemaShapeError(f"{source}: {msg}")

    doc = json_object(doc, source)
    if is_legacy(doc):
        doc = from_legacy(doc)
    if doc.get("type") == "structural_tag":
        doc = doc.get("format")
        if not isinstance(doc, dict):
            raise fail('"format" must be an object')
    kind = doc.get("type")
    trigger, at_least_one, excludes = "", True, ()
    if kind == "tag":
        tags, separator, multi = [doc], "", False
    elif kind == "triggered_tags":
        tags, separator = doc.get("tags"), ""
        triggers, excludes = doc.get("triggers"), doc.get("excludes", [])
        if not isinstance(tags, list) or not tags or not isinstance(triggers, list) or not triggers:
            raise fail('"triggered_tags" needs non-empty "tags" and "triggers" lists')
        if (
            not all(isinstance(t, str) and t for t in triggers)
            or not isinstance(excludes, list)
            or not all(isinstance(e, str) for e in excludes)
        ):
            raise fail('"triggers" and "excludes" must be lists of strings')
        if len(set(triggers)) != 1:
            raise fail("several triggers are served by the engine (triec serves one trigger)")
        trigger, excludes = triggers[0], tuple(excludes)
        at_least_one = doc.get("at_least_one", False) is True
        multi = doc.get("stop_after_first", False) is not True
    elif kind == "tags_with_separator":
        tags = doc.get("tags")
        separator = doc.get("separator", "")
        if not isinstance(tags, list) or not tags or not isinstance(separator, str):
            raise fail('"tags_with_separator" needs a non-empty "tags" list and a string "separator"')
        if not doc.get("at_least_one", False):
            raise fail('"at_least_one": false lets the output hold no tag; served by the engine')
        multi = not doc.get("stop_after_first", False)
    else:
        raise fail(
            f'format type {kind!r} is served by the engine (triec serves "tag", "tags_with_separator" and '
            '"triggered_tags" with one trigger)'
        )
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
        if trigger and not b.startswith(trigger):
            raise fail(f"tags[{i}]: begin {b!r} does not start with the trigger {trigger!r}")
        seen[b] = i
        begins.append(b)
        contents.append(t["content"])
        ends.append(e)
    if trigger and trigger in begins:
        raise fail(f"a begin is the trigger {trigger!r} itself; served by the engine")
    encoded = sorted(b.encode("utf-8") for b in begins)
    if len({b[0] for b in encoded}) != 1:
        raise fail("the begins do not share their first byte; served by the engine")
    for a, b in itertools.pairwise(encoded):
        if b.startswith(a):
            raise fail(f"begin {a.decode()!r} is a prefix of {b.decode()!r}; served by the engine")
    return TagPlan(begins, contents, ends, separator, multi, trigger, at_least_one, excludes)


def hermes_tag(tools: list[tuple[str, Any]], tool_choice: str = "auto", parallel: bool = True) -> dict[str, Any]:
    """The structural tag vLLM builds for the hermes tool parser and strict tools (``(name, parameters)`` pairs):
    each tool with and without newlines; ``auto`` lets free text stand around the calls (``triggered_tags``),
    ``required`` asks for one call or more (``tags_with_separator``); ``parallel=False`` stops after the first."""
    if tool_choice not in ("auto", "required"):
        raise SchemaShapeError(f"tool choice {tool_choice!r}: expected auto or required")
    tags = []
    for name, params in tools:
        content = {"type": "json_schema", "json_schema": params}
        for begin, end in (('<tool_call>\n{"name": "', "}\n</tool_call>"), ('<tool_call>{"name": "', "}</tool_call>")):
            tags.append({"type": "tag", "begin": begin + name + '", "arguments": ', "content": content, "end": end})
    fmt: dict[str, Any] = (
        {"type": "triggered_tags", "triggers": ["<tool_call>"], "tags": tags, "at_least_one": False}
        if tool_choice == "auto"
        else {"type": "tags_with_separator", "tags": tags, "separator": "", "at_least_one": True}
    )
    fmt["stop_after_first"] = not parallel
    return {"type": "structural_tag", "format": fmt}


def free_text(trigger: str, marker: str, excludes: tuple[str, ...]) -> dict[str, Any]:
    """Free text as a triggered tag's grammar writes it: any text until the trigger, which only the marker follows
    (where the begins' slot takes over); EOS where no trigger is pending."""
    fmt: dict[str, Any] = {
        "type": "triggered_tags",
        "triggers": [trigger],
        "tags": [{"type": "tag", "begin": trigger, "content": {"type": "const_string", "value": marker}, "end": ""}],
        "at_least_one": False,
        "stop_after_first": True,
    }
    if excludes:
        fmt["excludes"] = list(excludes)
    return fmt


def start_grammar(plan: TagPlan, marker: str) -> str:
    """A triggered tag's grammar before its first tag: the free text (or, with ``at_least_one``, the trigger)."""
    fmt = (
        free_text(plan.trigger, marker, plan.excludes)
        if not plan.at_least_one
        else {"type": "const_string", "value": plan.trigger + marker}
    )
    return json.dumps({"type": "structural_tag", "format": fmt}, ensure_ascii=False, separators=(",", ":"))


def tag_grammar(
    content: Any,
    end: str,
    separator: str,
    opener: str,
    multi: bool,
    marker: str,
    plan_trigger: str | None = None,
    excludes: tuple[str, ...] = (),
) -> str:
    """One tag's grammar after its begin: its content, its end, and (more tags allowed) optionally the separator
    and the next begin's first byte with the marker, where the begins' slot takes over again; for triggered
    tags (``plan_trigger``), the free text after the tag, until the trigger and the marker."""
    elements: list[Any] = [content, {"type": "const_string", "value": end}]
    if multi and plan_trigger is not None:
        elements.append(free_text(plan_trigger, marker, excludes))
    elif multi:
        elements.append({"type": "optional", "content": {"type": "const_string", "value": separator + opener + marker}})
    return json.dumps(
        {"type": "structural_tag", "format": {"type": "sequence", "elements": elements}},
        ensure_ascii=False,
        separators=(",", ":"),
    )
