"""llama.cpp's grammar language (GBNF) for a finite set: the grammar ``--compare gbnf`` and the benchmarks feed it.

A GBNF literal is a sequence of Unicode code points (llama.cpp decodes the grammar's UTF-8), so each value is
written code point by code point: printable ASCII as itself, ``"`` and ``\\`` escaped, other ASCII as ``\\xHH``,
everything else as ``\\uHHHH`` / ``\\UHHHHHHHH``; any value, newlines and quotes included, matches exactly its
UTF-8 bytes. Pure text: no engine is imported here.
"""

from __future__ import annotations

from collections.abc import Iterable


def literal(text: str) -> str:
    """``text`` as a GBNF string literal, quotes included."""
    out = ['"']
    for ch in text:
        c = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= c < 0x7F:
            out.append(ch)
        elif c < 0x80:
            out.append(f"\\x{c:02X}")
        elif c <= 0xFFFF:
            out.append(f"\\u{c:04X}")
        else:
            out.append(f"\\U{c:08X}")
    out.append('"')
    return "".join(out)


def _choice(values: Iterable[str], prefix: str) -> str:
    alts = [literal(v) for v in dict.fromkeys(values)]
    if not alts:
        raise ValueError("a GBNF alternation needs at least one value")
    body = "\n    | ".join(alts)
    head = f"{literal(prefix)} " if prefix else ""
    return f"{head}(\n      {body}\n)"


def alternation(values: Iterable[str], *, prefix: str = "") -> str:
    """``root ::= prefix ( v1 | v2 | ... )``: one alternative per distinct value, one per line.

    The empty string is an alternative like any other (``""``). Raises ValueError on an empty set.
    """
    return f"root ::= {_choice(values, prefix)}\n"


def _class_char(ch: str) -> str:
    c = ord(ch)
    return f"\\x{c:02X}" if c < 0x80 else (f"\\u{c:04X}" if c <= 0xFFFF else f"\\U{c:08X}")


def after_trigger(trigger: str, values: Iterable[str], *, prefix: str = "") -> str:
    """Free text up to the first occurrence of ``trigger``, then ``prefix`` and one value (think-then-answer).

    The free text is the right-linear grammar of the trigger's Knuth-Morris-Pratt automaton: nonterminal ``sI``
    has read the trigger's first I characters, so no text before the end holds the trigger. Raises ValueError
    on an empty trigger or set.
    """
    if not trigger:
        raise ValueError("an empty trigger")
    m = len(trigger)
    fail = [0] * (m + 1)  # KMP failure function
    k = 0
    for i in range(1, m):
        while k and trigger[i] != trigger[k]:
            k = fail[k]
        if trigger[i] == trigger[k]:
            k += 1
        fail[i + 1] = k
    chars = sorted(set(trigger))

    def step(i: int, ch: str) -> int:
        while i and trigger[i] != ch:
            i = fail[i]
        return i + 1 if trigger[i] == ch else 0

    others = "[^" + "".join(_class_char(c) for c in chars) + "]"
    rules = ["root ::= s0"]
    for i in range(m):
        alts = []
        for ch in chars:
            j = step(i, ch)
            alts.append(f"{literal(ch)} " + ("answer" if j == m else f"s{j}"))
        alts.append(f"{others} s0")
        rules.append(f"s{i} ::= " + " | ".join(alts))
    rules.append(f"answer ::= {_choice(values, prefix)}")
    return "\n".join(rules) + "\n"
