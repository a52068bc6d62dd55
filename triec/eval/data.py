"""The evaluation data file: JSONL, one question a line.

Each line is an object with ``messages`` (chat turns, rendered with the
model's chat template) or ``prompt`` (plain text), ``gold`` (the right value)
and optionally ``candidates`` (this question's own set; otherwise the set
given to ``triec eval --values``) and ``id``.

The first line may instead be a header, ``{"shared": {...}, "about": {...}}``:
fields every item takes unless it sets its own. ``triec bfcl --candidates all``
writes its thousands of candidates and their documents (``functions``) there
once, not on every line; each item then holds the same tuple and list objects.
``about`` is for people (how the file was made) and is not read.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triec.errors import ValuesError


@dataclass(frozen=True)
class Item:
    id: str
    gold: str
    messages: list[dict[str, str]] | None = None
    prompt: str | None = None
    candidates: tuple[str, ...] | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


def _strings(value: Any, where: str, name: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise ValuesError(f"{where}: field {name!r} must be a non-empty list of non-empty strings")
    return tuple(dict.fromkeys(value))


_ITEM_ONLY = ("id", "gold", "messages", "prompt")
"""Fields a header cannot share: they are what makes one question differ from the next."""


@dataclass(frozen=True)
class Shared:
    """A header's fields: ``candidates`` parsed once (a tuple and a set to test golds in), the rest as given."""

    candidates: tuple[str, ...] | None = None
    members: frozenset[str] = frozenset()
    extra: dict[str, Any] = field(default_factory=dict)


def parse_shared(doc: Any, where: str) -> Shared:
    """A header line's ``shared`` object; errors name the line and the field."""
    if not isinstance(doc, dict):
        raise ValuesError(f"{where}: field 'shared' must be an object of fields every item takes")
    bad = next((k for k in _ITEM_ONLY if k in doc), None)
    if bad is not None:
        raise ValuesError(f"{where}: field 'shared' cannot hold {bad!r}: each item has its own")
    candidates = None if doc.get("candidates") is None else _strings(doc["candidates"], where, "shared.candidates")
    extra = {k: v for k, v in doc.items() if k != "candidates"}
    return Shared(candidates, frozenset(candidates or ()), extra)


def parse_item(doc: Any, where: str, index: int, shared: Shared | None = None) -> Item:
    """One line's object as an :class:`Item` (taking ``shared``'s fields it lacks); errors name the line and the
    field."""
    if not isinstance(doc, dict):
        raise ValuesError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    if "shared" in doc:
        raise ValuesError(f"{where}: a header ('shared') can only be the file's first line")
    gold = doc.get("gold")
    if not isinstance(gold, str) or not gold:
        raise ValuesError(f"{where}: field 'gold' must be a non-empty string")
    messages, prompt = doc.get("messages"), doc.get("prompt")
    if (messages is None) == (prompt is None):
        raise ValuesError(f"{where}: give exactly one of 'messages' (chat) and 'prompt' (plain text)")
    if messages is not None:
        ok = (
            isinstance(messages, list)
            and messages
            and all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in messages
            )
        )
        if not ok:
            raise ValuesError(f"{where}: field 'messages' must be a non-empty list of {{'role', 'content'}} strings")
        messages = [{"role": m["role"], "content": m["content"]} for m in messages]
    elif not isinstance(prompt, str):
        raise ValuesError(f"{where}: field 'prompt' must be a string")
    candidates = None
    if doc.get("candidates") is not None:
        candidates = _strings(doc["candidates"], where, "candidates")
        if gold not in candidates:
            raise ValuesError(f"{where}: 'gold' {gold!r} is not one of the item's candidates")
    elif shared is not None and shared.candidates is not None and "candidates" not in doc:
        candidates = shared.candidates
        if gold not in shared.members:
            raise ValuesError(f"{where}: 'gold' {gold!r} is not one of the shared candidates (the first line's)")
    ident = doc.get("id", index)
    extra = {k: v for k, v in doc.items() if k not in {"id", "gold", "messages", "prompt", "candidates"}}
    if shared is not None:
        extra = {**shared.extra, **extra}
    return Item(str(ident), gold, messages, prompt, candidates, extra)


def load_items(path: str | os.PathLike[str], limit: int | None = None) -> list[Item]:
    """The items of a JSONL file (blank lines skipped), the first ``limit`` when given."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValuesError(f"{file}: cannot read ({exc.strerror or exc})") from exc
    except UnicodeDecodeError as exc:
        raise ValuesError(f"{file}: not UTF-8 ({exc.reason} at byte {exc.start})") from exc
    items: list[Item] = []
    shared: Shared | None = None
    first = True
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if limit is not None and len(items) >= limit:
            break
        where = f"{file}:{number}"
        try:
            doc = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValuesError(f"{where}: not valid JSON ({exc.msg}, column {exc.colno})") from None
        if first and isinstance(doc, dict) and "shared" in doc:
            first = False
            shared = parse_shared(doc["shared"], where)
            continue
        first = False
        items.append(parse_item(doc, where, len(items), shared))
    if not items:
        raise ValuesError(f"{file}: no items")
    return items
