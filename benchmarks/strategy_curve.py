"""Accuracy against K for each ``triec eval --strategy`` (issue 52): one table and one plot from several runs.

    python -m benchmarks.strategy_curve 100=r100.json 1000=r1000.json 1853=r1853.json [-o docs/strategies.png]

Each argument is ``K=FILE``: a ``triec eval --json`` report (``.json`` or ``.json.gz``) of the same strategies over a
candidate set of K values. docs/eval_reports/ holds the reports docs/eval.md's table comes from.
It prints a markdown table per K and strategy (validity, accuracy, Recall@5/20/50 of the retriever the run used,
the cascade's widenings, median tokens and seconds per answer, the median over questions of each answer's time
over the full strategy's answer to the same question (run beside it: the pairing cancels the machine's drift), the
full strategy's listing) and, with ``-o``, plots
accuracy against K, one line per strategy (matplotlib). Medians are taken over the items, from the report's own
per-item outcomes.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from pathlib import Path
from typing import Any


def _runs(pairs: list[str]) -> list[tuple[int, dict[str, Any]]]:
    runs = []
    for pair in pairs:
        k, _, path = pair.partition("=")
        if not k.isdigit() or not path:
            raise SystemExit(f"strategy_curve: {pair!r}: expected K=FILE")
        raw = Path(path).read_bytes()
        runs.append((int(k), json.loads(gzip.decompress(raw) if path.endswith(".gz") else raw)))
    return sorted(runs, key=lambda r: r[0])


def rows(runs: list[tuple[int, dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per (K, strategy): the report's summary, plus medians over its items."""
    out = []
    for k, doc in runs:
        retriever = doc.get("config", {}).get("retriever", "bm25")
        full = {o["id"]: o["seconds"] for o in doc["items"] if o["mode"] == "full"}
        for mode, summary in doc["modes"].items():
            items = [o for o in doc["items"] if o["mode"] == mode]
            listed = {o.get("listed") for o in items} - {None}
            recall = summary.get("recall", {}).get(retriever)
            out.append(
                {
                    "k": k,
                    "mode": mode,
                    "items": summary["items"],
                    "valid": summary["valid"] / summary["items"],
                    "accuracy": summary["correct"] / summary["items"],
                    "recall": recall,
                    "widened": summary.get("widening_rate"),
                    "reached": summary.get("reached"),
                    "tokens": statistics.median(o["tokens"] for o in items),
                    "seconds": statistics.median(o["seconds"] for o in items),
                    # each answer's time over the full strategy's for the same question, run beside it
                    "vs_full": statistics.median(o["seconds"] / full[o["id"]] for o in items)
                    if full and all(o["id"] in full for o in items)
                    else None,
                    "listed": ",".join(sorted(listed)) or None,
                }
            )
    return out


def markdown(table: list[dict[str, Any]]) -> str:
    head = (
        "| K | strategy | valid | accuracy | R@5 / R@20 / R@50 | widened | tokens | s/answer | time / full's "
        "| full's listing |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        rec = r["recall"]
        recall = "–" if rec is None else " / ".join(f"{rec[f'recall_at_{n}']:.0%}" for n in (5, 20, 50))
        widened = (
            "–"
            if r["widened"] is None
            else f"{r['widened']:.0%} ({', '.join(f'{a} {b}' for a, b in r['reached'].items())})"
        )
        ratio = "–" if r["vs_full"] is None else f"{r['vs_full']:.2f}x"
        lines.append(
            f"| {r['k']:,} | {r['mode']} | {r['valid']:.0%} | {r['accuracy']:.1%} | {recall} | {widened} | "
            f"{r['tokens']:.1f} | {r['seconds']:.2f} | {ratio} | {r['listed'] or '–'} |"
        )
    return "\n".join(lines)


def plot(table: list[dict[str, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for mode in dict.fromkeys(r["mode"] for r in table):
        pts = [(r["k"], 100 * r["accuracy"]) for r in table if r["mode"] == mode]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=mode)
    ax.set_xscale("log")
    ax.set_xlabel("K (candidate names)")
    ax.set_ylabel("accuracy (%)")
    ax.set_title("BFCL function names, SmolLM2-135M: accuracy against K (validity 100% in every cell)", fontsize=8)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    tmp = out.with_name(out.name + ".tmp.png")
    fig.savefig(tmp, dpi=110)
    tmp.replace(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="K=FILE: a triec eval --json report over K candidates")
    parser.add_argument("-o", "--output", type=Path, help="write the accuracy-against-K plot here (PNG)")
    args = parser.parse_args(argv)
    table = rows(_runs(args.runs))
    print(markdown(table))
    if args.output:
        plot(table, args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
