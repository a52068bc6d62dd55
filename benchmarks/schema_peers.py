"""What the schema suites (schemas, tools, enums, trigger) share: the peers on whole schemas, decode paths, cells.

* :class:`Peer`: llguidance or xgrammar on the whole schema, over the same byte-exact vocabulary as triec
  (the engines' tokenizer objects of :func:`triec.engines.make_engine`), in the compact convention of
  triec's own oracle: llguidance lark ``%llguidance {"no_forcing": true}`` + ``%json`` with
  ``whitespace_flexible: false`` and ``", "`` / ``": "``, parser limits unbounded (``max_items_in_row``
  and ``step_max_items`` too: an alternation of more than 2,000 tools otherwise compiles and then
  fails at its first token); xgrammar ``compile_json_schema(any_whitespace=False, separators=(", ", ": "))``
  with its compiler cache disabled;
* :class:`Encoder`: the model's own tokenization of a text (the tokenizer's ``tokenizer.json``), kept
  only when its bytes spell the text exactly: real decode paths, tokens that straddle boundaries included;
* :func:`load_registry`: a tool registry by name (``rich-K`` / ``flat-K`` synthetic, ``bfcl`` / ``bfcl-N``).

Nothing here asserts anything about speed. Cells run through :func:`triec.bench.runner.run_cell`.
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np

from benchmarks import ROOT
from triec.bench.runner import rss_bytes
from triec.engines import ITEM_SEPARATOR as ITEM_SEP
from triec.engines import KEY_SEPARATOR as KEY_SEP

XG_OPTIONS = {"whitespace_flexible": False, "item_separator": ITEM_SEP, "key_separator": KEY_SEP}
BFCL = ROOT / "fixtures" / "registries" / "bfcl-1998.json.zst"

__all__ = [
    "BFCL",
    "XG_OPTIONS",
    "Encoder",
    "Peer",
    "f_s",
    "f_us",
    "first_line",
    "load_registry",
    "median_s",
    "ratio",
    "row_ids",
    "rss_bytes",
    "summary_us",
]


def first_line(e: BaseException | str, limit: int = 160) -> str:
    """The first line of an error's message (no type name), cut to ``limit`` characters."""
    return str(e).strip().split("\n")[0][:limit]


def summary_us(xs: list[float]) -> dict[str, Any]:
    """Median, p99, mean, min, max and count of durations given in seconds, in microseconds."""
    if not xs:
        return {"n": 0}
    a = np.asarray(xs, dtype=np.float64) * 1e6
    return {
        "median": float(np.median(a)),
        "p99": float(np.percentile(a, 99)),
        "mean": float(a.mean()),
        "min": float(a.min()),
        "max": float(a.max()),
        "n": int(a.size),
    }


def median_s(xs: list[float]) -> float | None:
    import statistics

    return float(statistics.median(xs)) if xs else None


def bfcl_unavailable() -> str | None:
    """Why the BFCL registry cannot be read here (not a checkout with fixtures/), or None."""
    return None if BFCL.is_file() else f"needs the BFCL registry {BFCL} (a checkout of triec's repository)"


def load_registry(spec: str) -> list[dict[str, Any]]:
    """A registry by name: ``bfcl`` (1,998 public functions) or ``bfcl-N`` (its first N), ``rich-K`` / ``flat-K``."""
    if spec.startswith("bfcl"):
        import zstandard

        raw = zstandard.ZstdDecompressor().decompress(BFCL.read_bytes(), max_output_size=1 << 30)
        tools: list[dict[str, Any]] = json.loads(raw)
        return tools[: int(spec.split("-")[1])] if "-" in spec else tools
    profile, _, k = spec.partition("-")
    if profile not in ("rich", "flat") or not k.isdigit():
        raise ValueError(f"unknown registry {spec!r}: rich-K, flat-K, bfcl or bfcl-N")
    from triec.synthetic.registries import make_registry

    return make_registry(int(k), 0, profile=profile)


def drop(raw: list[dict[str, Any]], names: list[str]) -> list[dict[str, Any]]:
    gone = set(names)
    return [t for t in raw if t.get("function", t).get("name") not in gone] if gone else raw


def refused_tools(raw: list[dict[str, Any]], vocab: Any) -> dict[str, str]:
    """Tools either engine refuses alone (each tool's own parameters): left out of every cell of the registry, so
    that every cell serves the same K tools."""
    from triec.schema.tools import parse_tools

    out: dict[str, str] = {}
    peers = [Peer("llguidance", vocab), Peer("xgrammar", vocab)]
    for t in parse_tools(raw):
        for p in peers:
            try:
                p.compile_schema(t.parameters if isinstance(t.parameters, dict) else {})
            except Exception as e:  # noqa: BLE001
                out[t.name] = f"{p.name}: {first_line(e, 120)}"
                break
    return out


# ---------------------------------------------------------------- decode paths


class Encoder:
    """The model's own tokenization of texts (no special tokens), kept when it spells the text byte for byte."""

    def __init__(self, vocab: Any, spec: str = "qwen2") -> None:
        from tokenizers import Tokenizer

        from triec.tokenizer.source import locate

        self.vocab = vocab
        self.tok = Tokenizer.from_str(json.dumps(locate(spec).tokenizer_json))

    def ids(self, text: str) -> list[int] | None:
        ids = self.tok.encode(text, add_special_tokens=False).ids
        tb = self.vocab.token_bytes
        if all(0 <= i < self.vocab.num_tokens for i in ids) and b"".join(tb[i] for i in ids) == text.encode("utf-8"):
            return list(ids)
        return None


def row_ids(row: np.ndarray) -> np.ndarray:
    """The ids set in a mask row of any shape (``triec.runtime.bitmask.ids_of`` on the flattened row)."""
    from triec.runtime.bitmask import ids_of as ids

    return ids(np.ascontiguousarray(row).reshape(-1))


# ---------------------------------------------------------------- table cells


def f_us(x: float | None) -> str:
    """Microseconds as a table cell (ms from 1,000 µs)."""
    if x is None:
        return ""
    if x >= 10_000:
        return f"{x / 1000:,.0f} ms"
    if x >= 1000:
        return f"{x / 1000:,.2f} ms"
    return f"{x:,.1f} us" if x < 100 else f"{x:,.0f} us"


def f_s(x: float | None) -> str:
    """Seconds as a table cell (ms below 1 s)."""
    if x is None:
        return ""
    return f"{x * 1000:,.1f} ms" if x < 1 else f"{x:,.2f} s"


def ratio(a: float | None, b: float | None) -> str:
    """``a / b`` as a table cell, or empty when either is missing."""
    if a is None or not b:
        return ""
    r = a / b
    return f"{r:,.0f}x" if r >= 10 else f"{r:,.1f}x" if r >= 0.1 else f"{r:.2f}x"


# ---------------------------------------------------------------- peers


class Peer:
    """One engine on one whole schema (or grammar), with the calls a benchmark makes: triec's grammar driver
    (:class:`triec.engines.EngineDriver`, the interface the schema layer uses), built fresh so its set-up is timed."""

    def __init__(self, name: str, vocab: Any) -> None:
        from triec.engines import DRIVERS

        self.name = name
        self.vocab = vocab
        from triec.runtime.bitmask import words_for

        self.words = words_for(vocab.vocab_size)
        t0 = time.perf_counter()
        self.driver = DRIVERS[name](vocab)
        self.setup_s = time.perf_counter() - t0

    # compile: llguidance builds much of its state lazily, in the first masks (the "cold" rows)
    def compile_schema(self, schema: dict[str, Any]) -> Any:
        return self.driver.compile(schema)  # compact: ", " and ": ", no free whitespace

    def compile_lark(self, lark: str) -> Any:
        return self.driver.compile_lark(lark)  # type: ignore[attr-defined]  # llguidance's driver

    def start(self, compiled: Any) -> Any:
        return self.driver.start(compiled)

    def fork(self, m: Any) -> Any:
        return self.driver.copy(m)

    def accept(self, m: Any, t: int) -> bool:
        return self.driver.accept(m, int(t))

    def new_row(self) -> np.ndarray:
        return np.zeros((1, self.words), dtype=np.int32)

    def fill(self, m: Any, row: np.ndarray) -> None:
        self.driver.fill(m, row.reshape(-1))

    def memory_bytes(self, compiled: Any) -> int | None:
        """xgrammar's ``CompiledGrammar.memory_size_bytes``; None for llguidance (no such call)."""
        if self.name == "xgrammar":
            return int(compiled.memory_size_bytes)
        return None
