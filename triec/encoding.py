"""How a value is spelled in the output: raw text, or a JSON string literal, wrapped in fixed text.

Most constrained outputs are JSON: a model asked for ``{"tool": "<name>"}`` must
write the quotes, the escapes and the braces too. A table compiles the exact
strings ``prefix + spell(value) + suffix`` (its trie, its masks); the user's own
values come back from those strings by undoing the spelling, which is
one-to-one (:meth:`Encoding.unspell`).

The JSON spelling is one string per value, the one xgrammar's JSON-schema
compiler accepts for the same ``enum`` member (its only one; llguidance's accepts
it too, and also other escapes of control characters): Python's
``json.dumps(value, ensure_ascii=False)`` (non-ASCII characters raw; ``\\"``,
``\\\\``, ``\\b \\f \\n \\r \\t``; other control characters as ``\\u00XX``)
except DEL (U+007F), which both engines write as ``\\u007f`` (docs/decisions.md
D15; tests/test_json_encoding.py checks it against both engines).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from triec.errors import ValuesError

RAW = "raw"
JSON = "json"
ENCODINGS = (RAW, JSON)


def json_string_literal(value: str) -> str:
    """The JSON string literal of value, quotes included, spelled as xgrammar and llguidance spell enum members."""
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


@dataclass(frozen=True)
class Encoding:
    """Every value is compiled as ``prefix + spell(value) + suffix``; ``name`` is ``raw`` or ``json``."""

    name: str = RAW
    prefix: str = ""
    suffix: str = ""

    def __post_init__(self) -> None:
        if self.name not in ENCODINGS:
            raise ValuesError(f"encoding: expected one of {', '.join(ENCODINGS)}, found {self.name!r}")
        for what, text in (("prefix", self.prefix), ("suffix", self.suffix)):
            if not isinstance(text, str):
                raise ValuesError(f"{what}: expected a string, found {type(text).__name__}")
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ValuesError(f"{what}: not encodable as UTF-8 ({exc.reason})") from None

    @property
    def plain(self) -> bool:
        """True when the compiled strings are the values themselves (raw, nothing around them)."""
        return self.name == RAW and not self.prefix and not self.suffix

    def spell(self, value: str) -> str:
        """The exact string compiled for ``value``."""
        body = json_string_literal(value) if self.name == JSON else value
        return f"{self.prefix}{body}{self.suffix}" if self.prefix or self.suffix else body

    def unspell(self, text: str) -> str:
        """The value whose spelling is ``text``; ``ValueError`` when ``text`` is no value's spelling."""
        p, s = self.prefix, self.suffix
        if len(text) < len(p) + len(s) or not text.startswith(p) or not text.endswith(s):
            raise ValueError(f"{text[:60]!r} does not start with the prefix and end with the suffix")
        body = text[len(p) : len(text) - len(s)]
        if self.name == RAW:
            return body
        try:
            value = json.loads(body)
        except ValueError:
            value = None
        if not isinstance(value, str) or json_string_literal(value) != body:
            raise ValueError(f"{body[:60]!r} is not the JSON string literal triec writes for any value")
        return value

    def to_header(self) -> dict[str, str]:
        return {"name": self.name, "prefix": self.prefix, "suffix": self.suffix}

    @classmethod
    def from_header(cls, raw: Any) -> Encoding:
        """Read the artifact header's ``encoding`` map; ``ValueError`` names what is wrong."""
        if not isinstance(raw, dict) or set(raw) != {"name", "prefix", "suffix"}:
            raise ValueError(f"expected a map of name, prefix and suffix, found {raw!r:.80}")
        if not all(isinstance(raw[k], str) for k in ("name", "prefix", "suffix")):
            raise ValueError(f"expected strings, found {raw!r:.80}")
        try:
            return cls(raw["name"], raw["prefix"], raw["suffix"])
        except ValuesError as exc:
            raise ValueError(str(exc)) from None

    def describe(self) -> str:
        """One line for people: ``json, prefix '{"tool": ', suffix '}'``."""
        return f"{self.name}, prefix {self.prefix!r}, suffix {self.suffix!r}"


PLAIN = Encoding()


def as_encoding(encoding: str | Encoding = RAW, prefix: str = "", suffix: str = "") -> Encoding:
    """An :class:`Encoding` from the ``compile`` keywords (an ``Encoding`` passes through)."""
    if isinstance(encoding, Encoding):
        if prefix or suffix:
            raise ValuesError(
                "pass prefix and suffix inside the Encoding, or a name with prefix= and suffix=, not both"
            )
        return encoding
    return Encoding(encoding, prefix, suffix)
