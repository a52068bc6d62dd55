"""Setup that several test files share, as plain constants and functions (the fixtures are in conftest.py).

Import it by name (``from shared import ENGINES``): pytest puts tests/ on ``sys.path``.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

import triec

ROOT = Path(__file__).resolve().parent.parent
BFCL_REGISTRY = ROOT / "fixtures" / "registries" / "bfcl-1998.json.zst"

needs_xgrammar = pytest.mark.skipif(importlib.util.find_spec("xgrammar") is None, reason="xgrammar not installed")

ENGINES = ["llguidance", pytest.param("xgrammar", marks=needs_xgrammar)]
"""The engines a schema table compiles its grammars with, as ``parametrize`` values (xgrammar skipped when missing)."""


def bfcl_registry() -> list[dict]:
    """BFCL's 1,998 tools in OpenAI's format, a fresh copy each call (the ``bfcl_names`` fixture holds the names)."""
    import zstandard

    raw = BFCL_REGISTRY.read_bytes()
    return json.loads(zstandard.ZstdDecompressor().decompress(raw, max_output_size=1 << 28))


def synthetic_vocab(*pieces: list[bytes]) -> triec.Vocabulary:
    """Every single byte, then ``pieces`` in order (a repeat kept once, where it first stands), then EOS (b"")."""
    tokens = list(dict.fromkeys([bytes([b]) for b in range(256)] + [p for group in pieces for p in group]))
    return triec.Vocabulary(tokens + [b""], eos_token_ids=[len(tokens)], name="synthetic")


def spell(table, vocab: triec.Vocabulary, key: bytes) -> list[int]:
    """A token path spelling ``key`` through the table: the longest allowed token at each step."""
    m, ids, rest = table.matcher(), [], key
    while rest:
        t = max(
            (t for t in m.allowed().tolist() if vocab.token_bytes[t] and rest.startswith(vocab.token_bytes[t])),
            key=lambda t: len(vocab.token_bytes[t]),
        )
        assert m.accept_token(t)
        ids.append(t)
        rest = rest[len(vocab.token_bytes[t]) :]
    return ids


def hermes_tags(name: str, content: dict) -> list[dict]:
    """The two tags vLLM writes for one tool under the hermes parser: the call inside ``<tool_call>``, with and
    without newlines. ``name`` is spelled as it stands in the call (a JSON string, quotes included)."""
    return [
        {
            "type": "tag",
            "begin": '<tool_call>\n{"name": ' + name + ', "arguments": ',
            "content": content,
            "end": "}\n</tool_call>",
        },
        {
            "type": "tag",
            "begin": '<tool_call>{"name": ' + name + ', "arguments": ',
            "content": content,
            "end": "}</tool_call>",
        },
    ]


def tags_with_separator(tags: list[dict], *, stop_after_first: bool) -> dict:
    """A structural tag of ``tags`` back to back, at least one (vLLM's ``tool_choice="required"``)."""
    return {
        "type": "structural_tag",
        "format": {
            "type": "tags_with_separator",
            "tags": tags,
            "separator": "",
            "at_least_one": True,
            "stop_after_first": stop_after_first,
        },
    }
