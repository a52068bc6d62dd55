#!/usr/bin/env python3
"""Extract the function definitions of the Berkeley Function Calling Leaderboard (BFCL v4) into one registry.

Source: github.com/ShishirPatil/gorilla, berkeley-function-call-leaderboard/bfcl_eval/data/
(Apache-2.0: the repository's LICENSE, and the dataset card bfcl_eval/data/README.md says
``license: apache-2.0``).

Usage::

    python3 extract.py --git /path/to/gorilla.git --commit 6ea57973c7a6097fd7c5915698c54c17c5b1b6c8 \
        --out public_registry.json --report extract_report.json

``--git`` is a git directory (bare or not); files are read with ``git show COMMIT:PATH``.
Only the standard library is needed; ``jsonschema`` (if importable) adds a Draft 2020-12
metaschema check to the report.

Steps (all deterministic):

1. Inputs: every ``BFCL_v4_*.json`` directly under ``bfcl_eval/data/`` (JSON Lines; each line a test
   entry whose ``function`` field is a list of function docs) and every
   ``bfcl_eval/data/multi_turn_func_doc/*.json`` (JSON Lines, one function doc per line). Files
   are read in sorted path order, lines in order, functions in list order. Lines that are not
   JSON objects with a ``function`` list (``BFCL_v4_format_sensitivity.json`` is one JSON object
   of ids) contribute nothing. ``possible_answer/``, ``memory_prereq_conversation/`` and
   ``unused_datasets/`` are not read.
2. Dedup by name: the first definition of each name wins (the same name appears in many test
   entries, sometimes with a different description or schema; the report counts those).
3. Types: BFCL writes Python/Java/JS type names. Each ``type`` anywhere in the schema (the
   parameters object, ``properties``, ``items``, ``additionalProperties``, ``anyOf``/``oneOf``/
   ``allOf`` members) is mapped with BFCL's own table ``GORILLA_TO_OPENAPI``
   (``bfcl_eval/constants/type_mappings.py``: dict->object, float->number, tuple->array,
   any->string, HashMap->object, ArrayList->array, long->integer, char->string, ...), as BFCL's
   ``convert_to_tool`` does before sending them to OpenAI-style APIs, with two departures:
   the mapping is applied recursively everywhere (BFCL's stops two levels down), and
   ``Boolean`` maps to ``boolean`` (BFCL maps names missing from its table to ``string``;
   ``Boolean`` is the only such name besides ``""``). A property without ``type`` gets
   ``"string"`` (BFCL does the same). BFCL's ``"format": "float"`` annotation is NOT added.
   The top-level ``type`` is set to ``"object"``. Nothing else is changed: ``description``,
   ``default``, ``enum``, ``required``, BFCL's non-standard ``optional`` keys all stay.
4. Output shape: ``[{"type": "function", "function": {"name", "description", "parameters"}}]``;
   the BFCL ``response`` field (a return-value schema) is dropped. Names are kept as BFCL writes
   them (some have dots; OpenAI's API would need ``.`` -> ``_``, the report counts collisions).
5. Report: raw counts, dedup counts, names with conflicting definitions, names outside
   ``^[a-zA-Z0-9_-]{1,64}$``, and per-tool schema problems: Draft 2020-12 metaschema errors
   (if ``jsonschema`` is available), ``required`` names missing from ``properties``
   (unsatisfiable when extra properties are forbidden, e.g. xgrammar's strict mode),
   ``enum``/``default`` values that do not match the declared type.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections import Counter
from typing import Any

DATA = "berkeley-function-call-leaderboard/bfcl_eval/data/"

GORILLA_TO_OPENAPI = {
    "integer": "integer",
    "number": "number",
    "float": "number",
    "string": "string",
    "boolean": "boolean",
    "bool": "boolean",
    "array": "array",
    "list": "array",
    "dict": "object",
    "object": "object",
    "tuple": "array",
    "any": "string",
    "byte": "integer",
    "short": "integer",
    "long": "integer",
    "double": "number",
    "char": "string",
    "ArrayList": "array",
    "Array": "array",
    "HashMap": "object",
    "Hashtable": "object",
    "Queue": "array",
    "Stack": "array",
    "Any": "string",
    "String": "string",
    "Bigint": "integer",
}  # copied from bfcl_eval/constants/type_mappings.py at the pinned commit
EXTRA = {"Boolean": "boolean"}
OPENAI_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
JSON_TYPES = {"string", "number", "integer", "boolean", "array", "object", "null"}


def git_ls(git: str, commit: str) -> list[str]:
    out = subprocess.run(
        ["git", "--git-dir", git, "ls-tree", "-r", "--name-only", commit, DATA],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return sorted(out.split())


def git_show(git: str, commit: str, path: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", git, "show", f"{commit}:{path}"], check=True, capture_output=True, text=True
    ).stdout


def inputs(paths: list[str]) -> list[str]:
    sel = []
    for p in paths:
        rel = p[len(DATA) :]
        if re.fullmatch(r"BFCL_v4_[^/]*\.json", rel) or re.fullmatch(r"multi_turn_func_doc/[^/]*\.json", rel):
            sel.append(p)
    return sel


def map_type(t: Any, unknown: Counter) -> Any:
    if isinstance(t, list):
        return [map_type(x, unknown) for x in t]
    if t in GORILLA_TO_OPENAPI:
        return GORILLA_TO_OPENAPI[t]
    if t in EXTRA:
        return EXTRA[t]
    unknown[repr(t)] += 1
    return "string"


def convert(s: Any, unknown: Counter, is_property: bool = False) -> Any:
    if not isinstance(s, dict):
        return s
    s = dict(s)
    if "type" in s:
        s["type"] = map_type(s["type"], unknown)
    elif is_property:
        s["type"] = "string"
    if isinstance(s.get("properties"), dict):
        s["properties"] = {k: convert(v, unknown, True) for k, v in s["properties"].items()}
    for k in ("items", "additionalProperties"):
        if isinstance(s.get(k), dict):
            s[k] = convert(s[k], unknown)
    for k in ("anyOf", "oneOf", "allOf"):
        if isinstance(s.get(k), list):
            s[k] = [convert(x, unknown) for x in s[k]]
    return s


def _matches(v: Any, t: Any) -> bool:
    ts = t if isinstance(t, list) else [t]
    for t in ts:
        if t == "string" and isinstance(v, str):
            return True
        if t == "boolean" and isinstance(v, bool):
            return True
        if t == "integer" and isinstance(v, int) and not isinstance(v, bool):
            return True
        if t == "number" and isinstance(v, (int, float)) and not isinstance(v, bool):
            return True
        if t == "array" and isinstance(v, list):
            return True
        if t == "object" and isinstance(v, dict):
            return True
        if t == "null" and v is None:
            return True
    return False


def problems(schema: dict[str, Any]) -> list[str]:
    out: list[str] = []

    def walk(s: Any, path: str) -> None:
        if not isinstance(s, dict):
            return
        t = s.get("type")
        if t is not None:
            for x in t if isinstance(t, list) else [t]:
                if x not in JSON_TYPES:
                    out.append(f"{path}: type {x!r} is not a JSON Schema type")
        req = s.get("required")
        if isinstance(req, list) and isinstance(s.get("properties"), dict):
            missing = [r for r in req if r not in s["properties"]]
            if missing:
                out.append(f"{path}: required {missing} not in properties")
        elif req is not None and not isinstance(req, list):
            out.append(f"{path}: required is {type(req).__name__}, not an array")
        if t is not None and "enum" in s and isinstance(s["enum"], list):
            bad = [v for v in s["enum"] if not _matches(v, t)]
            if bad:
                out.append(f"{path}: enum values {bad[:3]!r} do not match type {t!r}")
        if t is not None and "default" in s and not _matches(s["default"], t):
            out.append(f"{path}: default {s['default']!r:.40} does not match type {t!r}")
        for k, v in (s.get("properties") or {}).items() if isinstance(s.get("properties"), dict) else []:
            walk(v, f"{path}/properties/{k}")
        for k in ("items", "additionalProperties"):
            walk(s.get(k), f"{path}/{k}")
        for k in ("anyOf", "oneOf", "allOf"):
            for i, x in enumerate(s.get(k) or []):
                walk(x, f"{path}/{k}/{i}")

    walk(schema, "#")
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--git", required=True)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--out", default="public_registry.json")
    ap.add_argument("--report", default="extract_report.json")
    a = ap.parse_args()

    files = inputs(git_ls(a.git, a.commit))
    raw: list[tuple[str, dict[str, Any]]] = []
    per_file = {}
    for path in files:
        n = 0
        for line in git_show(a.git, a.commit, path).splitlines():
            line = line.strip()
            if not line:
                continue
            try:
                d = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(d, dict):
                continue
            fns = d.get("function", [d] if "name" in d and "parameters" in d else [])
            if isinstance(fns, dict):
                fns = [fns]
            for fn in fns or []:
                raw.append((path[len(DATA) :], fn))
                n += 1
        per_file[path[len(DATA) :]] = n

    first: dict[str, dict[str, Any]] = {}
    variants: dict[str, set[str]] = {}
    for _src, fn in raw:
        name = fn["name"]
        variants.setdefault(name, set()).add(json.dumps(fn, sort_keys=True))
        first.setdefault(name, fn)

    unknown: Counter = Counter()
    tools = []
    for name, fn in first.items():
        params = convert(fn.get("parameters") or {}, unknown)
        if isinstance(params, dict):
            params["type"] = "object"
        tools.append(
            {
                "type": "function",
                "function": {"name": name, "description": fn.get("description", ""), "parameters": params},
            }
        )

    meta_errors: dict[str, str] = {}
    try:
        import jsonschema  # type: ignore

        validator = jsonschema.Draft202012Validator
        for t in tools:
            try:
                validator.check_schema(t["function"]["parameters"])
            except jsonschema.exceptions.SchemaError as e:
                meta_errors[t["function"]["name"]] = f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}"
        from importlib.metadata import version

        meta = f"jsonschema {version('jsonschema')} Draft202012Validator.check_schema"
    except ImportError:
        meta = "not checked (jsonschema not importable)"

    semantic = {t["function"]["name"]: p for t in tools if (p := problems(t["function"]["parameters"]))}
    underscored = Counter(re.sub(r"\.", "_", t["function"]["name"]) for t in tools)
    report = {
        "source": {"repo": "ShishirPatil/gorilla", "commit": a.commit, "dir": DATA, "license": "Apache-2.0"},
        "files": per_file,
        "raw_function_entries": len(raw),
        "distinct_names": len(first),
        "distinct_definitions": sum(len(v) for v in variants.values()),
        "names_with_conflicting_definitions": sum(1 for v in variants.values() if len(v) > 1),
        "unmapped_type_names": dict(unknown),
        "names_not_openai_pattern": sorted(n for n in first if not OPENAI_NAME.match(n)),
        "collisions_after_dot_to_underscore": sorted(n for n, c in underscored.items() if c > 1),
        "metaschema_check": meta,
        "metaschema_invalid": meta_errors,
        "semantic_problems": semantic,
    }
    with open(a.out, "w") as f:
        json.dump(tools, f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(a.report, "w") as f:
        json.dump(report, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(
        f"{len(raw)} raw function entries, {report['distinct_definitions']} distinct definitions, "
        f"{len(first)} distinct names -> {a.out}"
    )
    print(
        f"metaschema-invalid: {len(meta_errors)}; tools with semantic problems: {len(semantic)}; "
        f"names outside ^[a-zA-Z0-9_-]{{1,64}}$: {len(report['names_not_openai_pattern'])}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
