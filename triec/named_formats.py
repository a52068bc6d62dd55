"""The named formats (JSON Schema's ``format`` values triec serves as patterns) and the regex each stands for.

A leaf (no imports) so that the compiler (:mod:`triec.compiler.pattern`, which compiles them), the artifact
layer (which checks a pattern table's ``pattern.format`` at load with numpy alone) and ``triec verify`` (which
checks a named format's stored regex against its name) read one table.
"""

from __future__ import annotations

_DATE = "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[1-2][0-9]|3[01])"
_TIME = "([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\\.[0-9]+)?(Z|[+\\-]([01][0-9]|2[0-3]):[0-5][0-9])"
_OCTET = "(25[0-5]|2[0-4][0-9]|[0-1]?[0-9]?[0-9])"

FORMATS: dict[str, str] = {
    "date": _DATE,
    "time": _TIME,
    "date-time": f"{_DATE}T{_TIME}",
    "uuid": "[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}",
    "ipv4": f"({_OCTET}\\.){{3}}{_OCTET}",
}
"""JSON Schema ``format`` name -> the regex of xgrammar 0.2.9's grammar for it (the string's content)."""

FORMAT_NAMES: tuple[str, ...] = tuple(FORMATS)
"""The names, in :data:`FORMATS`' order (what the artifact loader accepts in ``pattern.format`` besides nil)."""
