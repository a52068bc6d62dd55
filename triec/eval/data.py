"""The evaluation data file: JSONL, one question a line.

Each line is an object with ``messages`` (chat turns, rendered with the
model's chat template) or ``prompt`` (plain text), ``gold`` (the right value)
and optionally ``candidates`` (this question's own set; otherwise the set
given to ``triec eval --values``) and ``id``.
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


def parse_item(doc: Any, where: str, index: int) -> Item:
    """One line's object as an :class:`Item`; errors name the line and the field."""
    if not isinstance(doc, dict):
        raise ValuesError(f"{where}: expected a JSON object, got {type(doc).__name__}")
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
    ident = doc.get("id", index)
    extra = {k: v for k, v in doc.items() if k not in {"id", "gold", "messages", "prompt", "candidates"}}
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
        items.append(parse_item(doc, where, len(items)))
    if not items:
        raise ValuesError(f"{file}: no items")
    return items
