"""How a value is spelled in the output: raw text, or a JSON string literal, wrapped in fixed text.

Most constrained outputs are JSON: a model asked for ``{"tool": "<name>"}`` must
write the quotes, the escapes and the braces too. A table compiles the exact
strings ``prefix + spell(value) + suffix``; the user's own values are recovered
from those strings by undoing the spelling (the spelling is one-to-one).
"""

from __future__ import annotations

import json


def json_string_literal(value: str) -> str:
    """The JSON string literal of value, quotes included, spelled as xgrammar and llguidance spell enum members."""
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
