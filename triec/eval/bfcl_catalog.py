"""BFCL's whole function catalog, and fixed candidate sets of K names drawn from it.

Choosing among thousands (issue 52) needs one candidate set shared by every
question: every distinct function name across the ``BFCL_v4_*.json`` files
(1,853 in ``bfcl-eval`` 2026.3.23), each with a description, or a fixed
subset of K of them that holds every kept question's gold. Past the catalog's
size, synthetic tool names (:func:`triec.synthetic.sets.tool_names`) with
generated descriptions fill the set (the paper's Table 12 ablation runs at
K = 5,000). Everything is seeded: the same (K, seed) gives the same set.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from triec.errors import ValuesError
from triec.shortlist.cascade import ESCAPE  # the escape a shortlist view adds: written last in the values file

DISTRACTORS = ("bfcl", "synthetic")
MAX_K = 1_000_000
"""The largest K drawn: far past the paper's 5,000, and a data file whose first line stays under about 60 MB."""


@dataclass(frozen=True)
class Catalog:
    """Every distinct function name of the data directory with its description, and the files left out.

    A name described differently in several files keeps its first description (files in name order, lines in
    file order), so the catalog does not depend on dictionary order.
    """

    descriptions: dict[str, str]
    skipped: tuple[str, ...] = ()


def catalog(root: Path) -> Catalog:
    """The catalog of ``root``'s ``BFCL_v4_*.json`` files; a file that is not JSON lines is skipped with a note."""
    descriptions: dict[str, str] = {}
    skipped: list[str] = []
    files = sorted(root.glob("BFCL_v4_*.json"))
    if not files:
        raise ValuesError(f"{root}: no BFCL_v4_*.json files")
    for path in files:
        try:
            rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            skipped.append(f"{path.name} (not JSON lines: {str(exc).splitlines()[0][:80]})")
            continue
        for row in rows:
            functions = row.get("function") if isinstance(row, dict) else None
            for fn in functions if isinstance(functions, list) else []:
                name = fn.get("name") if isinstance(fn, dict) else None
                if isinstance(name, str) and name and name not in descriptions:
                    text = fn.get("description")
                    descriptions[name] = text.strip() if isinstance(text, str) else ""
    return Catalog(descriptions, tuple(skipped))


_VERBS = {
    "get": "Get",
    "create": "Create",
    "update": "Update",
    "delete": "Delete",
    "list": "List",
    "search": "Search for",
    "send": "Send",
    "fetch": "Fetch",
    "upload": "Upload",
    "download": "Download",
}


def describe_synthetic(name: str) -> str:
    """A generated description of a synthetic tool name (``slack.get_user_4821`` -> 'Get a user in Slack (4821).')."""
    space, _, call = name.rpartition(".")
    parts = call.split("_")
    verb = _VERBS.get(parts[0], parts[0].capitalize())
    resource = parts[1] if len(parts) > 1 else "item"
    text = f"{verb} {'an' if resource[:1] in 'aeio' else 'a'} {resource}"
    if space:
        text += f" in {space.capitalize()}"
    if len(parts) > 2:
        text += f" ({' '.join(parts[2:])})"
    return text + "."


@dataclass(frozen=True)
class CandidateSet:
    """K names (sorted) with their descriptions, which golds they hold, and what was left out to fit."""

    names: list[str]
    descriptions: dict[str, str]
    golds: frozenset[str]
    synthetic: int = 0
    notes: list[str] = field(default_factory=list)


def _synthetic(count: int, taken: set[str], seed: int) -> list[str]:
    """``count`` synthetic tool names none of which is in ``taken`` (seeded)."""
    from triec.synthetic.sets import tool_names

    fresh = [n for n in tool_names(count + len(taken), seed) if n not in taken]
    return fresh[:count]


def subset(cat: Catalog, golds: set[str], k: int | None, seed: int = 0, distractors: str = "bfcl") -> CandidateSet:
    """The candidate set: all of ``cat`` (``k=None``), or K names holding as many golds as fit.

    K at least the number of distinct golds: every gold, then a seeded sample of the catalog's other names,
    then (``distractors="synthetic"``) synthetic names past the catalog. K below it: a seeded sample of K golds
    (the caller keeps the questions whose gold is among them), and a note says so.
    """
    if distractors not in DISTRACTORS:
        raise ValuesError(f"--distractors {distractors!r}: choose {' or '.join(DISTRACTORS)}")
    pool = sorted(cat.descriptions)
    if ESCAPE in cat.descriptions:
        raise ValuesError(f"the escape value {ESCAPE!r} is one of BFCL's function names; it cannot be the escape")
    missing = sorted(golds - cat.descriptions.keys())
    if missing:
        raise ValuesError(f"gold {missing[0]!r} is no function of the BFCL files (and {len(missing) - 1} more)")
    if k is None:
        return CandidateSet(pool, dict(cat.descriptions), frozenset(golds))
    if not 1 <= k <= MAX_K:
        raise ValuesError(f"--k must be in 1..{MAX_K:,}, not {k}")
    if k > len(pool) and distractors != "synthetic":
        raise ValuesError(
            f"--k {k:,} is more than the {len(pool):,} BFCL function names; "
            "--distractors synthetic adds generated tool names past them"
        )
    rng = random.Random(seed)
    ordered = sorted(golds)
    notes: list[str] = []
    if k < len(ordered):
        kept = set(rng.sample(ordered, k))
        notes.append(
            f"--k {k:,} holds {k:,} of the {len(ordered):,} distinct golds (seed {seed}): "
            "only the questions whose gold is among them are kept"
        )
        names = sorted(kept)
        return CandidateSet(names, {n: cat.descriptions[n] for n in names}, frozenset(kept), 0, notes)
    others = sorted(set(pool) - golds)
    chosen = set(golds) | set(rng.sample(others, min(k - len(golds), len(others))))
    descriptions = {n: cat.descriptions[n] for n in chosen}
    extra = _synthetic(k - len(chosen), set(pool) | {ESCAPE}, seed) if k > len(chosen) else []
    descriptions.update((n, describe_synthetic(n)) for n in extra)
    if extra:
        notes.append(f"{len(extra):,} synthetic tool names (seed {seed}) past the {len(pool):,} BFCL names")
    return CandidateSet(sorted(descriptions), descriptions, frozenset(golds), len(extra), notes)
