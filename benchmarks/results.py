"""A suite's result file: one JSON per suite (``docs/results/<suite>.json``), what its tables are written from.

Every result says what ran, where and how: the suite, the command line, the machine, the versions, the
settings, and its cells (one dict each, with a ``status`` from :data:`triec.bench.runner.STATUSES`). A
result measured elsewhere and carried over says so in ``provenance``. Files are written to a temporary name
and renamed, so a reader never sees half a file.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from triec.errors import BenchResultError

SCHEMA = 1
"""Version of the result layout; a reader refuses a file of another."""

REQUIRED = ("schema", "suite", "created", "command", "machine", "versions", "settings", "cells")


ResultError = BenchResultError  # the name this module's callers use


def new(suite: str, settings: dict[str, Any], *, extra_versions: tuple[str, ...] = ()) -> dict[str, Any]:
    """An empty result of ``suite`` run now, on this machine, by this command line."""
    from benchmarks.measure import machine, versions

    return {
        "schema": SCHEMA,
        "suite": suite,
        "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": list(sys.argv),
        "machine": machine(),
        "versions": versions(extra_versions),
        "settings": settings,
        "cells": [],
    }


def validate(result: Any, suite: str | None = None) -> dict[str, Any]:
    """``result`` itself when it is a well-formed suite result (of ``suite``, when given); else :class:`ResultError`."""
    if not isinstance(result, dict):
        raise ResultError("a suite result is a JSON object")
    missing = [k for k in REQUIRED if k not in result]
    if missing:
        raise ResultError(f"missing keys: {', '.join(missing)}")
    if result["schema"] != SCHEMA:
        raise ResultError(f"schema {result['schema']!r}, this triec reads {SCHEMA}")
    if suite is not None and result["suite"] != suite:
        raise ResultError(f"the result of suite {result['suite']!r}, expected {suite!r}")
    if not isinstance(result["cells"], list) or not all(isinstance(c, dict) for c in result["cells"]):
        raise ResultError("cells: expected a list of objects")
    from triec.bench.runner import STATUSES

    bad = sorted({str(c.get("status")) for c in result["cells"] if c.get("status", "ok") not in STATUSES})
    if bad:
        raise ResultError(f"cells with an unknown status: {', '.join(bad)}")
    return result


def path(directory: str | os.PathLike[str], suite: str) -> Path:
    """Where ``suite``'s result lives in ``directory``: ``<suite>.json``."""
    return Path(directory) / f"{suite}.json"


def write(result: dict[str, Any], directory: str | os.PathLike[str]) -> Path:
    """Validate ``result`` and write it as ``directory/<suite>.json`` (temp file, then rename)."""
    validate(result)
    target = path(directory, result["suite"])
    target.parent.mkdir(parents=True, exist_ok=True)
    write_text(target, json.dumps(result, indent=1, sort_keys=False) + "\n")
    return target


def write_text(target: Path, text: str) -> None:
    """Write ``text`` to ``target`` through a temporary file in the same directory and a rename."""
    write_bytes(target, text.encode("utf-8"))


def write_bytes(target: Path, data: bytes) -> None:
    """Write ``data`` through a temporary file and a rename, with the mode a plain ``open()`` would give."""
    from triec.artifact.container import new_file_mode

    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, new_file_mode(target))
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read(directory: str | os.PathLike[str], suite: str) -> dict[str, Any]:
    """The result of ``suite`` in ``directory``, validated."""
    target = path(directory, suite)
    try:
        data = json.loads(target.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ResultError(f"{target}: {exc}") from exc
    try:
        return validate(data, suite)
    except ResultError as exc:
        raise ResultError(f"{target}: {exc}") from exc


def merge_sections(old: dict[str, Any], new: dict[str, Any], sections: list[str]) -> dict[str, Any]:
    """``new`` (a run of only ``sections``) merged into ``old`` (an earlier result of the same suite): ``old``'s
    cells of every other section, then ``new``'s. What each section's cells came from (created, command, machine)
    is kept under ``sections``; the top-level fields are the newest run's. Both must be full runs or both quick."""
    validate(old, new["suite"])
    if old["settings"].get("quick") != new["settings"].get("quick"):
        raise ResultError("merging sections: one result is a quick run and the other is not")
    kept = [c for c in old["cells"] if c.get("section") not in sections]
    provenance = dict(old.get("sections") or {})
    for c in kept:
        provenance.setdefault(str(c.get("section")), _provenance(old))
    for name in sections:
        provenance[name] = _provenance(new)
    order = list(dict.fromkeys([*(str(c.get("section")) for c in old["cells"]), *sections]))
    merged = {**new, "cells": sorted([*kept, *new["cells"]], key=lambda c: _rank(order, c))}
    merged["sections"] = {name: provenance[name] for name in order if name in provenance}
    return validate(merged)


def _provenance(result: dict[str, Any]) -> dict[str, Any]:
    return {k: result[k] for k in ("created", "command", "machine")}


def _rank(order: list[str], cell: dict[str, Any]) -> int:
    section = str(cell.get("section"))
    return order.index(section) if section in order else len(order)
