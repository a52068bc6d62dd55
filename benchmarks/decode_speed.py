"""Decoding speed constrained against free, engine by engine: one plot drawn from several suites' results.

Each engine's suite measures its constrained decoding and free decoding of the same prompts side by side in
one process; the ratio of the two tokens/s is what a reader compares across engines (1.0: the constraint costs
nothing per token). The series are read from the result files as they are; a suite without a result draws none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Series = dict[str, list[tuple[int, float]]]
"""Label -> (K, constrained tokens/s over free tokens/s), by K."""

SUITES = ("llamacpp", "mlx_outlines", "vllm")
"""The suites whose results hold a constrained and a free decoding speed."""

TARGET = "bench-decode.png"


def _number(text: Any) -> float | None:
    """The first number in a table cell ("154 (161)" -> 154.0, "1,000" -> 1000.0), or None."""
    head = str(text).replace(",", "").split(" ")[0].rstrip("x")
    try:
        return float(head)
    except ValueError:
        return None


def _paren(text: Any) -> float | None:
    """The number in parentheses of a table cell ("154 (161)" -> 161.0), or None."""
    s = str(text)
    if "(" not in s:
        return None
    return _number(s[s.index("(") + 1 : s.rindex(")")])


def _llamacpp(result: dict[str, Any], out: Series) -> None:
    for c in result.get("cells", []):
        row = c.get("row") or {}
        k = _number(row.get("K"))
        for method, column in (("triec", "triec tok/s (free)"), ("GBNF", "GBNF tok/s (free)")):
            got, free = _number(row.get(column)), _paren(row.get(column))
            if c.get("status") == "ok" and k and got and free:
                out.setdefault(f"llama.cpp: {method}", []).append((int(k), got / free))


def _mlx_outlines(result: dict[str, Any], out: Series) -> None:
    for c in result.get("cells", []):
        if c.get("status") != "ok" or c.get("ratio") is None:
            continue
        if c["table"] == "mlx":
            out.setdefault("mlx-lm: triec", []).append((c["k"], c["ratio"]))
        elif c["table"] == "outlines" and c.get("set", "tools") == "tools":
            engine = {"transformers": "Transformers", "mlx": "MLX"}.get(c["engine"], c["engine"])
            out.setdefault(f"Outlines on {engine}: {c['method']}", []).append((c["k"], c["ratio"]))


def _vllm(result: dict[str, Any], out: Series) -> None:
    rows = [c["row"] for c in result.get("cells", []) if c.get("table") == "processors" and c.get("status") == "ok"]
    # free decoding stopped at a constrained answer's length ("unconstrained:9") where the suite ran it
    free = {(r["K"], r["B"]): _number(r["tokens/s"]) for r in rows if r["method"] == "unconstrained"}
    free |= {(r["K"], r["B"]): _number(r["tokens/s"]) for r in rows if r["method"].startswith("unconstrained:")}
    for r in rows:
        base, got, k = free.get((r["K"], r["B"])), _number(r["tokens/s"]), _number(r["K"])
        if r["method"] in ("triec", "xgrammar") and base and got and k:
            out.setdefault(f"vLLM (batch {r['B']}): {r['method']}", []).append((int(k), got / base))


READERS: dict[str, Callable[[dict[str, Any], Series], None]] = {
    "llamacpp": _llamacpp,
    "mlx_outlines": _mlx_outlines,
    "vllm": _vllm,
}


def series(results: dict[str, dict[str, Any]]) -> Series:
    """Every engine's (K, constrained / free) points from the suites' results (suite name -> result)."""
    out: Series = {}
    for name, read in READERS.items():
        if name in results:
            read(results[name], out)
    return {label: sorted(points) for label, points in out.items()}


def figure(data: Series, plt: Any) -> Any:
    """The ratios against K on a log axis, one line per engine and method (``plt``: matplotlib's pyplot)."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, points in data.items():
        style = "--" if "triec" not in label else "-"
        ax.plot(*zip(*points, strict=True), style, marker="o", label=label)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set(
        xscale="log",
        xlabel="K (values)",
        ylabel="constrained tokens/s / free tokens/s",
        title="Decoding speed constrained against free, per engine",
    )
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
