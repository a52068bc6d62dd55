"""Convert the plain parameter types of triec's commands without pydantic.

typer 0.29 converts every command-line value through a pydantic ``TypeAdapter``:
importing pydantic and building one adapter per parameter costs about 75 ms of
CPU on every command (docs/decisions.md D16), a quarter of a warm ``triec
compile``. For the plain types triec's commands use, a value in canonical form
(a string; an integer or decimal written in plain digits, within the
parameter's min and max; a non-empty path; a list of strings; a bool) converts
here to exactly what the adapter returns (tests/test_cli_coercion.py compares
the two). Any other value, an out-of-range number say, goes to typer's own
conversion, which then accepts or reports it as it always did. Parameters of
other types or with path, file or parser options keep typer's conversion
altogether, and if typer's internals are not what this module expects, nothing
is installed.
"""

from __future__ import annotations

import re
import types
import typing
from functools import lru_cache
from pathlib import Path
from typing import Any

_INT = re.compile(r"-?[0-9]+\Z")
_DECIMAL = re.compile(r"-?[0-9]+(\.[0-9]+)?\Z")
_PLAIN = {str: "str", Path: "path", int: "int", float: "float", bool: "bool"}
# Options whose defaults leave a value untouched; any other setting keeps typer's conversion.
_NEUTRAL = {
    "parser": None,
    "click_type": None,
    "clamp": False,
    "exists": False,
    "file_okay": True,
    "dir_okay": True,
    "writable": False,
    "readable": True,
    "resolve_path": False,
    "allow_dash": False,
    "path_type": None,
}


def kind_of(param: Any) -> str | None:
    """Which plain conversion a typer parameter needs, or ``None`` to keep typer's."""
    desc = getattr(param, "type_descriptor", None)
    if desc is None or getattr(desc, "file_annotation", None) is not None:
        return None
    info = desc.parameter_info
    if any(getattr(info, name, neutral) != neutral for name, neutral in _NEUTRAL.items()):
        return None
    ann = desc.annotation
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin in (typing.Union, types.UnionType) and len(args) == 2 and type(None) in args:
        ann = next(a for a in args if a is not type(None))
        origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is list and args == (str,):
        return "list_str"
    return _PLAIN.get(ann)


def _in_range(number: float, info: Any) -> bool:
    return (info.min is None or number >= info.min) and (info.max is None or number <= info.max)


_KEEP = object()


def convert(kind: str, value: Any, info: Any) -> Any:
    """The converted value, or ``_KEEP`` when typer's own conversion must decide."""
    if kind == "str" and isinstance(value, str):
        return value
    if kind == "bool" and isinstance(value, bool):
        return value
    if kind == "path" and isinstance(value, str) and value:
        return Path(value)
    if kind == "list_str" and isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    if kind == "int":
        if isinstance(value, str) and _INT.match(value):
            number = int(value)
        elif isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            return _KEEP
        return number if _in_range(number, info) else _KEEP
    if kind == "float":
        if isinstance(value, str) and _DECIMAL.match(value):
            decimal = float(value)
        elif isinstance(value, float):
            decimal = value
        else:
            return _KEEP
        return decimal if _in_range(decimal, info) else _KEEP
    return _KEEP


@lru_cache(maxsize=1)
def _runtime_class() -> type | None:
    try:
        from dataclasses import dataclass

        from typer._coercion import RuntimeParam, build_runtime_param
    except ImportError:  # another typer: keep its conversion
        return None

    @dataclass(frozen=True)
    class PlainRuntimeParam(RuntimeParam):
        kind: str = "str"

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            out = convert(self.kind, value, self.parameter_info)
            if out is _KEEP:
                return build_runtime_param(param.type_descriptor)._coerce_value(value, param=param, ctx=ctx)
            return out

    return PlainRuntimeParam


def install(params: list[Any]) -> int:
    """Give each plain parameter the conversion above; returns how many got it."""
    cls = _runtime_class()
    if cls is None:
        return 0
    done = 0
    for p in params:
        if getattr(p, "_runtime_param", _KEEP) is not None:  # not typer 0.29's lazy slot, or already built
            continue
        kind = kind_of(p)
        if kind is not None:
            p._runtime_param = cls(
                parameter_info=p.type_descriptor.parameter_info, annotation=p.type_descriptor.annotation, kind=kind
            )
            done += 1
    return done
