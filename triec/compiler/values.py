"""Read a values file: one value per line, a JSON array, a JSON Schema ``enum``, or an object schema.

An object schema (:mod:`triec.compiler.json_schema`) brings its own spelling of the
values (JSON instances); :func:`read_input` returns it with the values.

Errors name the file and the line (text) or index (JSON) so a user can fix
their input without guessing.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import BinaryIO

from triec.encoding import Encoding
from triec.errors import ValuesError

_BOM = b"\xef\xbb\xbf"

MAX_VALUES_BYTES = 1 << 30
"""Largest values file read (1 GiB): far past any real set, and it keeps every state id in int32."""

_NESTING = 'JSON nested too deeply: a values file is an array of strings, or an object with an "enum" array of strings'


FORMATS = ("auto", "lines", "json")


def parse_values(raw: bytes, source: str, fmt: str = "auto") -> list[str]:
    """Values from the bytes of a file (an object schema's enum members; see :func:`parse_input`)."""
    return parse_input(raw, source, fmt)[0]


def parse_input(raw: bytes, source: str, fmt: str = "auto") -> tuple[list[str], Encoding | None]:
    """Values from the bytes of a file, and the encoding an object schema implies (else ``None``).

    ``fmt="auto"``: a ``.json`` name is JSON, a ``.txt`` name is lines, and
    anything else (standard input included) is JSON when it parses as a JSON
    array or object, else lines.
    """
    if raw.startswith(_BOM):
        raw = raw[len(_BOM) :]
    if fmt == "auto":
        lower = source.lower()
        if lower.endswith(".json"):
            fmt = "json"
        elif lower.endswith(".txt") or raw.lstrip(b" \t\r\n")[:1] not in (b"[", b"{"):
            fmt = "lines"
        else:
            try:
                json.loads(raw)
                fmt = "json"
            except ValueError:
                fmt = "lines"
            except RecursionError:
                raise ValuesError(f"{source}: {_NESTING}") from None
    if fmt == "json":
        return _parse_json(raw, source)
    if fmt == "lines":
        return _parse_lines(raw, source), None
    raise ValueError(f"fmt must be one of {FORMATS}")


def _parse_lines(raw: bytes, source: str) -> list[str]:
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the newline that ends the last line
    out = []
    for number, line in enumerate(lines, start=1):
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line:
            continue  # a blank line holds no value; only JSON can express the empty string
        try:
            out.append(line.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ValuesError(f"{source}:{number}: invalid UTF-8 at byte {exc.start + 1} of the line") from exc
    return out


def _parse_json(raw: bytes, source: str) -> tuple[list[str], Encoding | None]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ValuesError(f"{source}:{line}: invalid UTF-8") from exc
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValuesError(f"{source}:{exc.lineno}: invalid JSON ({exc.msg})") from exc
    except RecursionError:
        raise ValuesError(f"{source}: {_NESTING}") from None
    where = "top-level array"
    from triec.compiler.json_schema import is_object_schema, parse_schema

    if is_object_schema(doc):
        return parse_schema(doc, source)
    if isinstance(doc, dict):
        from triec.compiler.schema_keywords import check_keywords

        check_keywords(doc, source)  # "pattern": null is refused for what it is, not for a missing "enum"
        if "enum" not in doc:
            raise ValuesError(
                f'{source}: JSON object has no "enum" array (expected a JSON Schema enum fragment, '
                'or an object schema with "properties")'
            )
        doc, where = doc["enum"], '"enum"'
    if not isinstance(doc, list):
        raise ValuesError(f"{source}: {where} must be an array of strings, found {type(doc).__name__}")
    for i, v in enumerate(doc):
        if not isinstance(v, str):
            raise ValuesError(f"{source}: {where} index {i}: expected a string, found {json.dumps(v)[:40]}")
        try:
            v.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValuesError(f"{source}: {where} index {i}: lone surrogate, not valid UTF-8") from exc
    return doc, None


def _read_bounded(fh: BinaryIO, source: str) -> bytes:
    """Everything up to the limit, in chunks (``read(limit)`` would allocate the limit up front)."""
    chunks: list[bytes] = []
    total = 0
    while chunk := fh.read(1 << 20):
        total += len(chunk)
        if total > MAX_VALUES_BYTES:
            raise ValuesError(f"{source}: more than the {MAX_VALUES_BYTES:,}-byte limit for a values file")
        chunks.append(chunk)
    return b"".join(chunks)


def read_values(path: str | Path, fmt: str = "auto") -> list[str]:
    """Read values from ``path``; ``-`` reads standard input. Raises :class:`ValuesError`."""
    return read_input(path, fmt)[0]


def read_input(path: str | Path, fmt: str = "auto") -> tuple[list[str], Encoding | None]:
    """Values from ``path`` (``-``: standard input) and an object schema's encoding, if the file is one."""
    raw, source = read_bounded(path)
    values, encoding = parse_input(raw, source, fmt)
    if not values:
        raise ValuesError(f"{source}: no values (empty set)")
    return values, encoding


def read_bounded(path: str | Path, what: str = "values file") -> tuple[bytes, str]:
    """The bytes of ``path`` (``-``: standard input) and the name errors give it, at most :data:`MAX_VALUES_BYTES`."""
    if str(path) == "-":
        source = "<stdin>"
        raw = _read_bounded(sys.stdin.buffer, source)
    else:
        source = str(path)
        try:
            with open(path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size > MAX_VALUES_BYTES:
                    raise ValuesError(
                        f"{source}: {size:,} bytes, over the {MAX_VALUES_BYTES:,}-byte limit for a {what}"
                    )
                raw = _read_bounded(fh, source)  # a pipe or a device reports no size
        except IsADirectoryError as exc:
            raise ValuesError(f"{source}: is a directory, expected a {what}") from exc
        except OSError as exc:
            raise ValuesError(f"{source}: cannot read ({exc.strerror or exc})") from exc
    return raw, source
