"""vLLM's structured-output grammar contract over a triec matcher, and the request shapes the backend recognises.

No vLLM import (numpy), so the default test suite checks it without vLLM:

* :class:`RequestGrammar` behaves as vLLM 0.32's ``XgrammarGrammar`` does (the
  reference semantics of ``StructuredOutputGrammar``): the request's stop ids
  (``all_stop_token_ids``, EOS included) end the output where a value is
  complete, and only there; ``accept_tokens`` ignores tokens once terminated;
  ``validate_tokens`` does not move; ``rollback`` undoes what speculative
  decoding rejected (a terminating stop token included); an ``accept_tokens``
  that returns False leaves the state as it was (vLLM 0.34's contract).
* vLLM's ``tool_choice="required"`` JSON schema is read back into its registry by
  :func:`triec.schema.tools.tools_from_required_schema`; :func:`tagged_tools` reads the structural tag
  vLLM builds for strict tool calls (``begin`` = the call up to its arguments,
  the tool's name inside). The schema layer compiles registries
  (``compile_tools``); :mod:`triec.integrations.vllm.routing` and
  :mod:`triec.integrations.vllm.backend` decide when that is exact.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from triec._compat import renamed
from triec.integrations.matchers import RequestMatcher
from triec.runtime.bitmask import clear_bits, set_bits, word_of


def _ids(ids: Iterable[int]) -> np.ndarray:
    return np.asarray(sorted({int(i) for i in ids}), dtype=np.int64)


def _inside(ids: np.ndarray, row: np.ndarray) -> np.ndarray:
    """The ids whose word lies inside ``row`` (a row narrower than the ids: they are past its width)."""
    inside: np.ndarray = ids[word_of(ids) < row.shape[0]]
    return inside


class RequestGrammar:
    """One request's triec matcher with xgrammar's ``override_stop_tokens`` semantics.

    The table ends a value with its own EOS ids; vLLM ends a request on any of
    ``stop_token_ids``. So at a complete value the row allows every stop id (and
    accepting one feeds the matcher its EOS), the table's EOS ids that are not
    stop ids are never allowed, and a stop id is never a content token (xgrammar
    treats stop tokens as stop tokens only).
    """

    def __init__(
        self, matcher: RequestMatcher, eos_token_ids: Sequence[int], stop_token_ids: Iterable[int] | None
    ) -> None:
        if not eos_token_ids:
            raise ValueError("a triec table without EOS ids cannot end a request")
        self.matcher = matcher
        self._eos = int(eos_token_ids[0])
        eos = frozenset(int(e) for e in eos_token_ids)
        self.stop = frozenset(int(t) for t in (stop_token_ids or ())) or eos
        self._not_stop = eos - self.stop  # the table's EOS ids this request does not stop on
        self._stop_ids = _ids(self.stop)
        self._clear_ids = _ids(eos | self.stop)
        self._accepting = getattr(matcher, "is_accepting", None)

    # ------------------------------------------------------------- one step, vLLM's view

    def is_accepting(self) -> bool:
        """A value is complete: a stop id may end the request here."""
        if self.matcher.is_terminated():
            return False
        if self._accepting is not None:
            return bool(self._accepting())
        return self.matcher.validate_tokens([self._eos]) == 1

    def _accept(self, token: int) -> bool:
        if token in self.stop:
            return self.is_accepting() and self.matcher.accept_token(self._eos)
        if token in self._not_stop:
            return False
        return self.matcher.accept_token(token)

    def accept_tokens(self, tokens: Sequence[int]) -> bool:
        """Advance over ``tokens``; False when one is refused, and then the state is as before the call.

        vLLM 0.34's contract ("a false result must leave the grammar state unchanged"), kept on every release:
        its manager feeds the first refused draft token on purpose (``trim_spec_tokens``), and 0.34's xgrammar
        grammar rolls back the prefix it accepted.
        """
        if self.matcher.is_terminated():
            return True
        for n, t in enumerate(tokens):  # n: the tokens accepted before this one
            if not self._accept(int(t)):
                if n:
                    self.matcher.rollback(n)
                return False
            if self.matcher.is_terminated():
                break  # tokens after the stop token are ignored, as xgrammar does
        return True

    def validate_tokens(self, tokens: Sequence[int]) -> list[int]:
        """The longest prefix of ``tokens`` the grammar accepts (up to a stop token); nothing moves."""
        if self.matcher.is_terminated():
            return []
        n = 0
        for t in tokens:
            if not self._accept(int(t)):
                break
            n += 1
            if self.matcher.is_terminated():
                break
        if n:
            self.matcher.rollback(n)
        return [int(t) for t in tokens[:n]]

    def rollback(self, num_tokens: int) -> None:
        if num_tokens > 0:
            self.matcher.rollback(int(num_tokens))

    def is_terminated(self) -> bool:
        return self.matcher.is_terminated()

    def reset(self) -> None:
        self.matcher.reset()

    def fill_bitmask(self, row: np.ndarray) -> None:
        """Write the whole int32 row (:mod:`triec.runtime.bitmask`'s layout), stop ids at complete values."""
        if self.matcher.is_terminated():
            row.fill(0)
            set_bits(row, _inside(self._stop_ids, row))
            return
        self.matcher.fill_bitmask(row)
        clear_bits(row, _inside(self._clear_ids, row))
        if self.is_accepting():
            set_bits(row, _inside(self._stop_ids, row))


# ----------------------------------------------------------------------------- tool-call shapes


@dataclass(frozen=True)
class ToolCalls:
    """A tool registry recovered from a request's constraint: OpenAI-style tools, and whether several calls may follow."""

    tools: list[dict[str, Any]]
    parallel: bool
    format: str  # the schema layer's format name: "vllm" (the JSON array) or "hermes" (tagged calls)
    auto: bool = False  # tool_choice="auto": free text around the calls (a triggered tag)


def _tool(name: str, params: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": params}}


HERMES_BEGINS = ('<tool_call>\n{"name": ', '<tool_call>{"name": ')
HERMES_ENDS = ("}\n</tool_call>", "}</tool_call>")


def tagged_tools(doc: Any) -> ToolCalls | None:
    """The tools of a strict hermes tool-call structural tag (``required``, named or ``auto``), else None.

    vLLM builds ``{"type": "structural_tag", "format": {"type":
    "tags_with_separator", "tags": [...], "separator": "", "at_least_one": true,
    "stop_after_first": ...}}`` (a named tool: its tags only), and for ``auto``
    ``{"type": "triggered_tags", "triggers": ["<tool_call>"], "tags": [...]}`` (free
    text around the calls), each tool twice, ``begin`` = ``<tool_call>\\n{"name":
    "N", "arguments": `` with and without the newline, ``content`` its JSON schema.
    Only those shapes are read; other parsers' tags (llama, qwen3, ...) return None.
    """
    if not isinstance(doc, dict) or doc.get("type") != "structural_tag":
        return None
    fmt = doc.get("format")
    if not isinstance(fmt, dict):
        return None
    if fmt.get("type") == "triggered_tags":
        if fmt.get("triggers") != ["<tool_call>"] or fmt.get("excludes"):
            return None
    elif fmt.get("type") != "tags_with_separator" or fmt.get("at_least_one") is not True or fmt.get("separator") != "":
        return None
    if not isinstance(fmt.get("tags"), list) or not fmt["tags"]:
        return None
    found: dict[str, list[Any]] = {}
    for tag in fmt["tags"]:
        if not isinstance(tag, dict) or tag.get("type") != "tag":
            return None
        begin, end, content = tag.get("begin"), tag.get("end"), tag.get("content")
        if not isinstance(begin, str) or end not in HERMES_ENDS or not isinstance(content, dict):
            return None
        head = next((p for p in HERMES_BEGINS if begin.startswith(p)), None)
        if head is None or HERMES_ENDS.index(end) != HERMES_BEGINS.index(head) or not begin.endswith(', "arguments": '):
            return None
        try:
            name = json.loads(begin[len(head) : -len(', "arguments": ')])
        except ValueError:
            return None
        if not isinstance(name, str) or content.get("type") != "json_schema":
            return None
        found.setdefault(name, []).append(content.get("json_schema"))
    tools = []
    for name, schemas in found.items():
        if len(schemas) != 2 or schemas[0] != schemas[1] or not isinstance(schemas[0], dict):
            return None  # not the pair vLLM writes, or "json_schema": true (a non-strict tool: any JSON)
        tools.append(_tool(name, schemas[0]))
    return ToolCalls(
        tools,
        parallel=fmt.get("stop_after_first") is not True,
        format="hermes",
        auto=fmt.get("type") == "triggered_tags",
    )


__all__ = ["HERMES_BEGINS", "HERMES_ENDS", "RequestGrammar", "ToolCalls", "tagged_tools"]

__getattr__ = renamed(
    __name__,
    {
        "SPARSE_WORDS": "triec.runtime.torch:SPARSE_WORDS",
        "apply_bitmask_sparse": "triec.runtime.torch:apply_bitmask_sparse",
    },
)
