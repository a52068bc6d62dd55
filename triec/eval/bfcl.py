"""BFCL's ``simple_python`` and ``multiple`` categories as ``triec eval`` data: which function answers the question?

The Berkeley Function Calling Leaderboard's data ships in the ``bfcl-eval``
package on PyPI (Apache-2.0). Install it with ``pip install --no-deps
bfcl-eval``: its files are read where pip put them, nothing of it is imported
(its dependencies are a leaderboard's, not a data file's).

The task kept is the one triec constrains: name the function to call. Each
item lists the functions in a system message (name and description), asks for
the name alone, and keeps the functions' documents under ``functions`` for
tool-call tasks. Candidates are the item's own functions (``multiple``: 2-4), or
every function name of the category (``candidates="category"``: the default
for ``simple_python``, whose items hold one function each).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from triec.errors import ValuesError

CATEGORIES = ("multiple", "simple_python")
SYSTEM = (
    "You can call exactly one of these functions:\n{functions}\n\n"
    "Reply with the name of the function that answers the user's request, and nothing else."
)


def data_dir() -> Path:
    """Where the installed ``bfcl-eval`` keeps its data (found through its file list, not imported)."""
    from importlib import metadata

    try:
        dist = metadata.distribution("bfcl-eval")
    except metadata.PackageNotFoundError:
        raise ValuesError("BFCL data needs the bfcl-eval package: pip install --no-deps bfcl-eval") from None
    for file in dist.files or []:
        if str(file).endswith("data/BFCL_v4_multiple.json"):
            return Path(str(dist.locate_file(file))).parent
    raise ValuesError("bfcl-eval is installed but its data/BFCL_v4_*.json files are not where expected")


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ValuesError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    for number, line in enumerate(lines, start=1):
        if line.strip():
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValuesError(f"{path}:{number}: not valid JSON ({exc.msg})") from None


def convert(
    category: str, source: str | os.PathLike[str] | None = None, candidates: str | None = None, shots: int = 0
) -> list[dict[str, Any]]:
    """The category's questions as ``triec eval`` items (pure, but for reading the two files).

    ``shots`` > 0 puts that many worked examples (a question and its function's name as the assistant's
    reply) before each question: the category's first one-call questions, which are then left out of the
    items (no item is its own example).
    """
    if shots < 0:
        raise ValuesError(f"shots must be 0 or more, not {shots}")
    if category not in CATEGORIES:
        raise ValuesError(f"BFCL category {category!r} is not supported; choose from {', '.join(CATEGORIES)}")
    kind = candidates or ("category" if category == "simple_python" else "item")
    if kind not in ("item", "category"):
        raise ValuesError(f"candidates {kind!r}: choose 'item' (the question's functions) or 'category' (all names)")
    root = Path(source) if source is not None else data_dir()
    questions = list(_jsonl(root / f"BFCL_v4_{category}.json"))
    answers = {a["id"]: a for a in _jsonl(root / "possible_answer" / f"BFCL_v4_{category}.json")}
    every = sorted({f["name"] for q in questions for f in q["function"]})
    items: list[dict[str, Any]] = []
    examples: list[dict[str, str]] = []
    for q in questions:
        truth = answers.get(q["id"], {}).get("ground_truth") or []
        if len(truth) != 1 or len(truth[0]) != 1:
            continue  # not a one-call question: nothing single to name
        (gold,) = truth[0]
        if len(examples) < 2 * shots:
            examples += [
                {"role": "user", "content": q["question"][0][-1]["content"]},
                {"role": "assistant", "content": gold},
            ]
            continue
        functions = q["function"]
        listing = "\n".join(f"- {f['name']}: {f.get('description', '').strip()}" for f in functions)
        messages = [{"role": "system", "content": SYSTEM.format(functions=listing)}, *examples]
        messages += [{"role": m["role"], "content": m["content"]} for m in q["question"][0]]
        names = [f["name"] for f in functions] if kind == "item" else every
        if gold not in names:
            continue
        items.append({"id": q["id"], "messages": messages, "gold": gold, "candidates": names, "functions": functions})
    if not items:
        held = len(examples) // 2
        raise ValuesError(
            f"BFCL {category}: no question is left to ask: {held} one-call question(s) in "
            f"{root / f'BFCL_v4_{category}.json'}, and --shots {shots} takes up to {shots} of them as "
            "worked examples"
        )
    return items


def write(items: list[dict[str, Any]], out: Path) -> None:
    """JSONL, written to a temporary file and renamed."""
    from triec.artifact.container import atomic_write

    atomic_write(out, "".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items).encode())
