"""A parsed regex (:func:`triec.compiler.regex.parse`) spelled for the engines, the same language in their syntax.

The parser reads the pattern with xgrammar 0.2.9's semantics (ECMAScript's escapes). llguidance reads ``\\d``,
``\\w`` and ``\\s`` as Unicode classes and ``.`` without newline, and xgrammar's ``\\x`` reads every hex digit that
follows: :func:`to_rust_regex` (llguidance) and :func:`to_xgrammar_regex` spell every class as explicit ranges, so
that no escape's meaning differs between triec and the engine it hands the pattern to.
"""

from __future__ import annotations

from collections.abc import Callable

from triec.compiler.regex import MAX_CODEPOINT, Alt, Chars, Concat, Node, Ranges


def _rust_char(cp: int) -> str:
    ch = chr(cp)
    if ch.isascii() and ch.isalnum():
        return ch
    return f"\\x{cp:02x}" if cp < 0x80 else f"\\u{{{cp:x}}}"


def _rust_class(node: Chars) -> str:
    r = node.ranges
    if len(r) == 1 and r[0][0] == r[0][1]:
        return _rust_char(r[0][0])
    return "[" + "".join(_rust_char(a) if a == b else f"{_rust_char(a)}-{_rust_char(b)}" for a, b in r) + "]"


def to_rust_regex(node: Node) -> str:
    """``node`` spelled explicitly in Rust ``regex`` syntax (llguidance): every class as code point ranges, so
    no escape's meaning differs between engines."""
    return _spell(node, _rust_class, "(?:")


def _xgrammar_char(cp: int) -> str:
    ch = chr(cp)
    if ch.isascii():
        return ch if ch.isalnum() else f"\\u{cp:04x}"
    return ch  # a literal: xgrammar and triec read the UTF-8 of the pattern itself


def _no_surrogates(ranges: Ranges) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in ranges:
        if lo <= 0xDFFF and hi >= 0xD800:
            if lo < 0xD800:
                out.append((lo, 0xD7FF))
            if hi > 0xDFFF:
                out.append((0xE000, hi))
        else:
            out.append((lo, hi))
    return out


def _xgrammar_class(node: Chars) -> str:
    r = _no_surrogates(node.ranges)
    if not r:  # no character: a class that matches nothing
        return "[^\\u0000-" + chr(MAX_CODEPOINT) + "]"
    if len(r) == 1 and r[0][0] == r[0][1]:
        return _xgrammar_char(r[0][0])
    return (
        "[" + "".join(_xgrammar_char(a) if a == b else f"{_xgrammar_char(a)}-{_xgrammar_char(b)}" for a, b in r) + "]"
    )


def to_xgrammar_regex(node: Node) -> str:
    """``node`` spelled so that xgrammar 0.2.9's ``compile_regex`` and :func:`parse` read the same language:
    ASCII punctuation and controls as ``\\\\u00HH`` (xgrammar's ``\\\\x`` reads every hex digit that follows), other
    characters literally, classes as explicit ranges (surrogates, which are no characters, left out)."""
    return _spell(node, _xgrammar_class, "(")


def _spell(node: Node, chars: Callable[[Chars], str], group: str) -> str:
    """``node`` in a syntax whose classes ``chars`` spells and whose groups open with ``group`` (and close with
    ``)``): Rust's non-capturing group, xgrammar's plain one."""
    if isinstance(node, Chars):
        return chars(node)
    if isinstance(node, Concat | Alt):
        parts = []  # a loop, not a generator: one frame per level of the tree (MAX_NESTING)
        for item in node.items:
            parts.append(_spell(item, chars, group))
        return "".join(parts) if isinstance(node, Concat) else group + "|".join(parts) + ")"
    inner = _spell(node.item, chars, group)
    if not isinstance(node.item, Alt):  # an alternation is already a group: the spelling nests no deeper than the
        inner = group + inner + ")"  # pattern, so that it parses again under MAX_NESTING
    if node.hi is None:
        return f"{inner}{{{node.lo},}}"
    return f"{inner}{{{node.lo},{node.hi}}}"
