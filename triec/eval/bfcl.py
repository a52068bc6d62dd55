"""BFCL's one-call questions as ``triec eval`` data: which function answers the question?

The Berkeley Function Calling Leaderboard's data ships in the ``bfcl-eval``
package on PyPI (Apache-2.0). Install it with ``pip install --no-deps
bfcl-eval``: its files are read where pip put them, nothing of it is imported
(its dependencies are a leaderboard's, not a data file's).

The task kept is the one triec constrains: name the function to call. The
categories whose questions have one call each are converted (``all``: every
one of them). Candidates are the item's own functions (``item``: 2-37 in
``multiple`` and ``live_multiple``), every name of the category
(``category``), or one set shared by every question (``all``: every function
name of every BFCL file, 1,853, or a seeded subset of K of them, see
:mod:`triec.eval.bfcl_catalog`). ``item`` and ``category`` items list the
question's own functions in a system message and keep their documents under
``functions``. ``all`` items list nothing (a shortlist strategy lists its own
candidates; listing the question's own functions would give the answer
away), and the shared candidates and their documents (name and description)
are written once, in the file's first line (:func:`triec.eval.data.load_items`
gives them to every item).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triec.errors import ValuesError
from triec.eval.bfcl_catalog import CandidateSet, catalog, subset
from triec.shortlist.cascade import ESCAPE

CATEGORIES = ("simple_python", "simple_java", "simple_javascript", "multiple", "live_simple", "live_multiple")
"""The categories whose ground truth is one call per question (``parallel*`` hold several; ``irrelevance``,
``multi_turn*``, ``memory`` and ``web_search`` no single function's name)."""
ALL = "all"
KINDS = ("item", "category", "all")
SYSTEM = (
    "You can call exactly one of these functions:\n{functions}\n\n"
    "Reply with the name of the function that answers the user's request, and nothing else."
)
SYSTEM_OPEN = "Reply with the name of the function that answers the user's request, and nothing else."
"""The system message of ``candidates="all"`` items: thousands of functions are not listed in a prompt."""


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


def _jsonl(path: Path, shape: Callable[[Any], str | None]) -> Iterator[dict[str, Any]]:
    """The file's objects, each checked by ``shape`` (what is wrong with it, or ``None``): errors name the line."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ValuesError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    except UnicodeDecodeError as exc:
        raise ValuesError(f"{path}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    for number, line in enumerate(lines, start=1):
        if line.strip():
            try:
                doc = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValuesError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
            wrong = shape(doc) if isinstance(doc, dict) else "expected a JSON object"
            if wrong is not None:
                raise ValuesError(f"{path}:{number}: {wrong}")
            yield doc


def _is_turn(m: Any) -> bool:
    return isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)


def _question_shape(doc: dict[str, Any]) -> str | None:
    """What keeps ``doc`` from being a BFCL question (an id, turns of role and content, named functions)."""
    turns, functions = doc.get("question"), doc.get("function")
    if not isinstance(doc.get("id"), str):
        return "field 'id' must be a string"
    if not (isinstance(turns, list) and turns and isinstance(turns[0], list) and turns[0]):
        return "field 'question' must be a list of turns, each a non-empty list of messages"
    if not all(_is_turn(m) for m in turns[0]):
        return "field 'question': each message needs string 'role' and 'content'"
    if not (
        isinstance(functions, list) and all(isinstance(f, dict) and isinstance(f.get("name"), str) for f in functions)
    ):
        return "field 'function' must be a list of objects with a string 'name'"
    return None


def _answer_shape(doc: dict[str, Any]) -> str | None:
    """What keeps ``doc`` from being a BFCL possible answer (an id, calls as objects keyed by function name)."""
    truth = doc.get("ground_truth")
    if not isinstance(doc.get("id"), str):
        return "field 'id' must be a string"
    if not (isinstance(truth, list) and all(isinstance(call, dict) for call in truth)):
        return "field 'ground_truth' must be a list of calls, each an object keyed by the function's name"
    return None


@dataclass
class Counts:
    """One category's questions: how many were read, kept, held as worked examples, or skipped and why."""

    questions: int = 0
    kept: int = 0
    examples: int = 0
    not_one_call: int = 0
    outside_k: int = 0


@dataclass
class Dataset:
    """The converted items, the candidates they share (``candidates="all"``), and what was counted on the way."""

    items: list[dict[str, Any]]
    shared: CandidateSet | None = None
    counts: dict[str, Counts] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def values(self) -> list[str]:
        """The values file's lines: the shared candidates and then the escape, or every item's candidates."""
        if self.shared is not None:
            return [*self.shared.names, ESCAPE]
        return [*sorted({c for item in self.items for c in item["candidates"]}), ESCAPE]

    def header(self) -> dict[str, Any]:
        """The first line of the file when candidates are shared (``None`` fields are left out)."""
        assert self.shared is not None
        functions = [{"name": n, "description": self.shared.descriptions[n]} for n in self.shared.names]
        about = {
            "source": "bfcl",
            "k": len(self.shared.names),
            "golds": len(self.shared.golds),
            "synthetic": self.shared.synthetic,
            "escape": ESCAPE,
            "notes": self.notes,
        }
        return {"shared": {"candidates": self.shared.names, "functions": functions}, "about": about}


def _system(text: str, question: list[dict[str, Any]]) -> str:
    """Our system message, with any system turns of the question after it (one system message, first)."""
    theirs = [str(m["content"]) for m in question if m["role"] == "system"]
    return "\n\n".join([text, *theirs])


def _category(
    root: Path, category: str, kind: str, examples: list[dict[str, str]], shots: int
) -> tuple[list[dict[str, Any]], Counts]:
    """One category's one-call questions as items (``examples`` fills with the first ``shots`` of them)."""
    questions = list(_jsonl(root / f"BFCL_v4_{category}.json", _question_shape))
    answers = {a["id"]: a for a in _jsonl(root / "possible_answer" / f"BFCL_v4_{category}.json", _answer_shape)}
    every = sorted({f["name"] for q in questions for f in q["function"]})
    counts = Counts(questions=len(questions))
    items: list[dict[str, Any]] = []
    for q in questions:
        truth = answers.get(q["id"], {}).get("ground_truth") or []
        if len(truth) != 1 or len(truth[0]) != 1:
            counts.not_one_call += 1  # not a one-call question: nothing single to name
            continue
        (gold,) = truth[0]
        turns = q["question"][0]
        if len(examples) < 2 * shots:
            examples += [
                {"role": "user", "content": turns[-1]["content"]},
                {"role": "assistant", "content": gold},
            ]
            counts.examples += 1
            continue
        functions = q["function"]
        if kind == ALL:
            system = _system(SYSTEM_OPEN, turns)
        else:
            listing = "\n".join(f"- {f['name']}: {str(f.get('description') or '').strip()}" for f in functions)
            system = _system(SYSTEM.format(functions=listing), turns)
        messages = [{"role": "system", "content": system}, *examples]
        messages += [{"role": m["role"], "content": m["content"]} for m in turns if m["role"] != "system"]
        item: dict[str, Any] = {"id": q["id"], "category": category, "messages": messages, "gold": gold}
        item["query"] = next((m["content"] for m in reversed(turns) if m["role"] == "user"), "")
        if kind == ALL:
            item["offered"] = [f["name"] for f in functions]  # BFCL's own functions for the question
        else:
            names = [f["name"] for f in functions] if kind == "item" else every
            if gold not in names:
                counts.not_one_call += 1
                continue
            item |= {"candidates": names, "functions": functions}
        items.append(item)
    counts.kept = len(items)
    return items, counts


def build(
    category: str,
    source: str | os.PathLike[str] | None = None,
    candidates: str | None = None,
    shots: int = 0,
    *,
    k: int | None = None,
    seed: int = 0,
    distractors: str = "bfcl",
) -> Dataset:
    """The category's (or every one-call category's) questions as ``triec eval`` items, with their counts.

    ``shots`` > 0 puts that many worked examples (a question and its function's name as the assistant's
    reply) before each question: the first one-call questions, which are then left out of the items (no item
    is its own example). ``k`` (``candidates="all"`` only) draws a fixed set of K names holding every kept
    item's gold; ``distractors="synthetic"`` lets K pass the catalog's size.
    """
    if shots < 0:
        raise ValuesError(f"shots must be 0 or more, not {shots}")
    if category != ALL and category not in CATEGORIES:
        raise ValuesError(f"BFCL category {category!r} is not supported; choose from {', '.join(CATEGORIES)} or {ALL}")
    kind = candidates or (ALL if category == ALL else "item" if category.endswith("multiple") else "category")
    if kind not in KINDS:
        raise ValuesError(
            f"candidates {kind!r}: choose 'item' (the question's functions), 'category' (the category's names) "
            "or 'all' (every BFCL function name, one set shared by every question)"
        )
    if kind != ALL and (k is not None or distractors != "bfcl"):
        raise ValuesError(f"--k and --distractors draw from every BFCL name: they need --candidates all, not {kind}")
    root = Path(source) if source is not None else data_dir()
    examples: list[dict[str, str]] = []
    items: list[dict[str, Any]] = []
    counts: dict[str, Counts] = {}
    for name in CATEGORIES if category == ALL else (category,):
        got, counts[name] = _category(root, name, kind, examples, shots)
        items += got
    if not items:
        held = len(examples) // 2
        raise ValuesError(
            f"BFCL {category}: no question is left to ask: {held} one-call question(s) in "
            f"{root / f'BFCL_v4_{category}.json'}, and --shots {shots} takes up to {shots} of them as "
            "worked examples"
        )
    if kind != ALL:
        return Dataset(items, None, counts)
    cat = catalog(root)
    shared = subset(cat, {i["gold"] for i in items}, k, seed, distractors)
    kept = [i for i in items if i["gold"] in shared.golds]
    for item in items:
        if item["gold"] not in shared.golds:
            counts[item["category"]].outside_k += 1
            counts[item["category"]].kept -= 1
    notes = [f"skipped {s}" for s in cat.skipped] + shared.notes
    if len(kept) < len(items):
        notes.append(f"kept {len(kept):,} of {len(items):,} questions")
    return Dataset(kept, shared, counts, notes)


def convert(
    category: str, source: str | os.PathLike[str] | None = None, candidates: str | None = None, shots: int = 0
) -> list[dict[str, Any]]:
    """The items alone, each with its own ``candidates`` and ``functions`` (see :func:`build`)."""
    data = build(category, source, candidates, shots)
    if data.shared is None:
        return data.items
    shared = data.header()["shared"]
    return [{**item, **shared} for item in data.items]


def write(items: list[dict[str, Any]], out: Path) -> None:
    """JSONL, written to a temporary file and renamed."""
    from triec.artifact.container import atomic_write

    atomic_write(out, "".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items).encode())


def write_dataset(data: Dataset, out: Path, values_out: Path | None = None) -> None:
    """The data file (the shared candidates' header line first, when shared) and the values file, each renamed
    into place once whole; the values file (for ``triec compile``) is written first."""
    from triec.artifact.container import atomic_write

    if values_out is not None:
        atomic_write(values_out, "".join(v + "\n" for v in data.values()).encode())
    write(([data.header()] if data.shared is not None else []) + data.items, out)
