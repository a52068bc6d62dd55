"""Cells that are the rows of a Markdown table: the form of the suites whose drivers print tables of their own.

The vLLM, llama.cpp and trained-model drivers run engines in processes of their own and print Markdown
tables; their suites keep each row as a cell (``{"table": NAME, "row": {column: text}}``) and render the table
back from the cells, so a table measured here and one carried over from an earlier run (``provenance``) are
results of the same form.
"""

from __future__ import annotations

from typing import Any


def parse_markdown(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Every Markdown table of ``text`` as (header, rows); ``\\|`` inside a cell stays a ``|``."""
    found: list[tuple[list[str], list[list[str]]]] = []
    lines = [line.strip() for line in text.splitlines()]  # a table indented in a list item is one too
    i = 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and lines[i + 1].replace(":", "").startswith("|---"):
            header = _cells(lines[i])
            rows = []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            found.append((header, rows))
        else:
            i += 1
    return found


def _cells(line: str) -> list[str]:
    inner = line.strip()[1:-1].replace("\\|", "\x00")
    return [c.strip().replace("\x00", "|") for c in inner.split("|")]


def cells(name: str, header: list[str], rows: list[list[str]], **fields: Any) -> list[dict[str, Any]]:
    """One cell per row of table ``name``; ``fields`` (e.g. the driver's settings) go into each."""
    return [{"table": name, "status": "ok", **fields, "row": dict(zip(header, row, strict=True))} for row in rows]


def render(result: dict[str, Any]) -> dict[str, str]:
    """The result's tables, each from its cells in order (the columns of its first row)."""
    from benchmarks import docs

    grouped: dict[str, list[dict[str, Any]]] = {}
    for c in result["cells"]:
        if "row" in c:
            grouped.setdefault(c["table"], []).append(c)
    return {
        name: docs.markdown(list(group[0]["row"]), [list(c["row"].values()) for c in group])
        for name, group in grouped.items()
    }
