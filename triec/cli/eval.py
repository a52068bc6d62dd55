"""``triec eval`` (does constraining help this model?) and ``triec bfcl`` (BFCL questions as eval data)."""

from __future__ import annotations

import dataclasses
import io
import json
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from triec.cli import _common
from triec.cli._common import app, err, out, report_errors
from triec.errors import TriecError


def _values(spec: Path | None) -> list[str] | None:
    if spec is None:
        return None
    from triec.compiler.values import read_values

    if spec.suffix in (".triec", ".zst"):
        from triec.artifact.formats import load
        from triec.errors import ValuesError
        from triec.runtime.table import MaskTable

        table = load(spec)
        if not isinstance(table, MaskTable):
            raise ValuesError(
                f"{spec}: a {table.kind} artifact holds no value list; name a values file or a set's artifact"
            )
        return list(table.values)
    return read_values(spec)


def _summary_table(doc: dict[str, Any]) -> Table:
    modes = doc["modes"]
    peer = next((p for p in ("xgrammar", "gbnf") if any(f"identical_to_{p}" in m for m in modes.values())), None)
    compare = peer is not None
    versus_trie = any("identical_to_trie" in m for m in modes.values())
    ranked = next((m["top_k"] for m in modes.values() if "mrr" in m), None)
    widening = any("widened" in m for m in modes.values())
    retriever = doc.get("config", {}).get("retriever") if any("recall" in m for m in modes.values()) else None
    table = Table(title=f"triec eval: {Path(doc['data']).name}, {Path(doc['model']).name}", title_justify="left")
    for col in (
        "mode",
        "items",
        "valid",
        "correct",
        *([f"= {peer}"] if compare else []),
        *(["= trie"] if versus_trie else []),
        *(["recall@1", f"recall@{ranked}", "MRR"] if ranked is not None else []),
        *(["widened"] if widening else []),
        *([f"{retriever} R@5/20/50"] if retriever else []),
        "tokens/answer",
        "s/answer",
    ):
        table.add_column(col, justify="left" if col == "mode" else "right")
    for mode, m in modes.items():
        n = m["items"] or 1
        row = [
            mode,
            str(m["items"]),
            f"{m['valid']} ({100 * m['valid'] / n:.0f}%)",
            f"{m['correct']} ({100 * m['correct'] / n:.0f}%)",
        ]
        if compare:
            same = m.get(f"identical_to_{peer}")
            row.append("-" if same is None else f"{same}/{m['items']}")
        if versus_trie:
            same = m.get("identical_to_trie")
            row.append("-" if same is None else f"{same}/{m['items']}")
        if ranked is not None:
            row += (
                [f"{100 * m['recall_at_1']:.0f}%", f"{100 * m['recall_at_k']:.0f}%", f"{m['mrr']:.3f}"]
                if "mrr" in m
                else ["-", "-", "-"]
            )
        if widening:
            row.append(_widened(m))
        if retriever:
            got = m.get("recall", {}).get(retriever)
            row.append("/".join(f"{100 * v:.0f}%" for v in got.values()) if got else "-")
        row += [
            f"{m['tokens_mean']:.1f}" if m["tokens_mean"] is not None else "-",
            f"{m['seconds_mean']:.2f}" if m["seconds_mean"] is not None else "-",
        ]
        table.add_row(*row)
    return table


def _widened(m: dict[str, Any]) -> str:
    """A cascade's widenings: how many items widened, and where the answers came from (``3 (30%): k=40 2, full 1``)."""
    if "widened" not in m:
        return "-"
    where = ", ".join(f"{name} {n}" for name, n in m["reached"].items())
    return f"{m['widened']} ({100 * m['widening_rate']:.0f}%): {where}"


def _plot(doc: dict[str, Any], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise TriecError("--plot needs matplotlib: pip install matplotlib") from exc
    modes = list(doc["modes"])
    n = [max(1, doc["modes"][m]["items"]) for m in modes]
    valid = [100 * doc["modes"][m]["valid"] / k for m, k in zip(modes, n, strict=True)]
    correct = [100 * doc["modes"][m]["correct"] / k for m, k in zip(modes, n, strict=True)]
    fig, ax = plt.subplots(figsize=(1.6 + 1.4 * len(modes), 3.2))
    xs = range(len(modes))
    ax.bar([x - 0.2 for x in xs], valid, 0.4, label="valid")
    ax.bar([x + 0.2 for x in xs], correct, 0.4, label="correct")
    ax.set_xticks(list(xs), modes)
    ax.set_ylabel("% of items")
    ax.set_ylim(0, 100)
    ax.legend()
    ax.set_title(Path(doc["data"]).name)
    fig.tight_layout()
    from triec.artifact.container import atomic_write  # numpy: not at import (`triec --help` costs typer and rich)

    png = io.BytesIO()
    fig.savefig(png, format="png")
    plt.close(fig)
    atomic_write(path, png.getvalue())


@app.command("eval")
@report_errors
def eval_cmd(
    data: Annotated[
        Path, typer.Argument(help="JSONL: messages or prompt, gold, optional candidates.", metavar="DATA.jsonl")
    ],
    model: Annotated[
        str,
        typer.Option(
            "--model", "-m", help="A model directory, or a .gguf file (for transformers: turned into one once, cached)."
        ),
    ],
    engine: Annotated[
        str,
        typer.Option(
            "--engine",
            help="What decodes: transformers (float32 on the CPU), llama.cpp (the .gguf as shipped; pip install 'triec[llamacpp]') or mlx (mlx-lm; pip install 'triec[mlx]').",
        ),
    ] = "transformers",
    values: Annotated[
        Path | None,
        typer.Option("--values", help="The set for items without candidates: a values file or an artifact."),
    ] = None,
    ignore_candidates: Annotated[
        bool, typer.Option("--ignore-candidates", help="Constrain every item to --values, not to its own candidates.")
    ] = False,
    modes: Annotated[
        str | None,
        typer.Option(
            "--modes",
            help="Comma-separated: free, trie, think, canonical, rank. Default: free,trie (none with --strategy).",
        ),
    ] = None,
    strategy: Annotated[
        str | None,
        typer.Option(
            "--strategy",
            help="Comma-separated ways to choose among many candidates: full (all; listed as --list-budget allows), shortlist:K (the retriever's top K listed with descriptions and allowed), cascade:K (K, then 2K, then all, with a none_of_these escape), groups[:FILE]. shortlist:K:names and cascade:K:names list the names alone (a shorter prompt); shortlist:K:none lists nothing (the constraint alone narrows).",
        ),
    ] = None,
    retriever: Annotated[
        str,
        typer.Option(
            "--retriever",
            help="What ranks the candidates for shortlist and cascade: bm25 (names and descriptions) or embed (the model's input embeddings; --engine transformers). Recall@5/20/50 is reported for each available retriever.",
        ),
    ] = "bm25",
    strategy_tables: Annotated[
        str,
        typer.Option(
            "--strategy-tables",
            help="The tables full, shortlist and cascade decode under: trie (every tokenization of a value) or canonical (only the tokenizer's own; groups stays a byte trie).",
        ),
    ] = "trie",
    list_budget: Annotated[
        int,
        typer.Option(
            "--list-budget",
            min=0,
            help="Strategy full (and a cascade's last level): list every candidate with its description if that takes at most this many prompt tokens, else their names if those fit, else none.",
        ),
    ] = 2_000,
    top_k: Annotated[
        int | None,
        typer.Option(
            "--top-k",
            min=1,
            help="Rank mode (added to --modes): the K most probable values of each item; reports Recall@1, Recall@K and MRR. Default 5.",
        ),
    ] = None,
    beams: Annotated[
        int | None,
        typer.Option(
            "--beams",
            min=1,
            help="Rank mode (added to --modes) by beam search of W beams; without it, exact best-first search.",
        ),
    ] = None,
    max_expansions: Annotated[
        int,
        typer.Option("--max-expansions", min=1, help="Rank mode, exact search: at most this many model rows an item."),
    ] = 10_000,
    compare: Annotated[
        str | None,
        typer.Option(
            "--compare",
            help="Decode the constrained modes again with this engine and count equal outputs: xgrammar (--engine transformers or mlx) or gbnf (llama.cpp's own grammar; --engine llama.cpp).",
        ),
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="The first N items.")] = None,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", min=1, help="Tokens for an answer.")] = 48,
    think_budget: Annotated[
        int,
        typer.Option(
            "--think-budget", min=0, help="Free tokens in think mode before the trigger is written for the model."
        ),
    ] = 64,
    trigger: Annotated[
        str, typer.Option("--trigger", help="Think mode: the text after which the answer comes.")
    ] = "Answer:",
    threads: Annotated[
        int, typer.Option("--threads", min=1, help="torch's or llama.cpp's threads (mlx chooses its own).")
    ] = 1,
    free_full: Annotated[
        bool,
        typer.Option(
            "--free-full",
            help="Free mode: decode to EOS or --max-new-tokens even once the reply can no longer be valid.",
        ),
    ] = False,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write the summary and every item's outputs here.")
    ] = None,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Write a bar chart of validity and accuracy (needs matplotlib).")
    ] = None,
) -> None:
    """Validity, accuracy, tokens and seconds per answer, mode by mode, with a trained model (greedy, float32, CPU).

    Modes: free (no constraint), trie (the same prompt, constrained to the set), think (free until the trigger,
    then the set), canonical (trie's prompt and set, each value only as its encoder's tokens; its outputs are
    compared with trie's when both run), rank (trie's prompt and set: the --top-k most probable values, by exact
    search or by --beams W beam search; Recall@1, Recall@K and MRR beside validity and accuracy). With --compare xgrammar, each constrained decode is repeated with xgrammar's masks in the same
    loop and the outputs compared token by token. --engine llama.cpp decodes with llama.cpp (the GGUF as shipped), and
    --compare gbnf repeats each constrained decode with llama.cpp's own grammar. --engine mlx decodes with mlx-lm (the
    model directory; --compare xgrammar as on transformers). Ctrl-C stops and keeps what was measured.
    """
    from triec.errors import EvalError
    from triec.eval.data import load_items
    from triec.eval.run import EvalConfig, Evaluator, evaluate, labels, meta_for, report_json, resolve_model

    if compare not in (None, "xgrammar", "gbnf"):
        raise TriecError(f"--compare {compare!r}: the engines compared with are xgrammar and gbnf")
    from triec.eval.strategies import parse_strategies

    strategies = tuple(s.label for s in parse_strategies(strategy)) if strategy is not None else ()
    spec = modes if modes is not None else ("" if strategies else "free,trie")
    chosen = tuple(m.strip() for m in spec.split(",") if m.strip())
    if (top_k is not None or beams is not None) and "rank" not in chosen:
        chosen += ("rank",)
    config = EvalConfig(
        modes=chosen,
        top_k=top_k if top_k is not None else 5,
        beams=beams,
        max_expansions=max_expansions,
        compare_xgrammar=compare == "xgrammar",
        compare_gbnf=compare == "gbnf",
        engine=engine,
        max_new_tokens=max_new_tokens,
        think_budget=think_budget,
        trigger=trigger,
        threads=threads,
        free_early_stop=not free_full,
        strategies=strategies,
        retriever=retriever,
        list_budget=list_budget,
        strategy_tables=strategy_tables,
    )
    items = load_items(data, limit)
    if ignore_candidates:
        if values is None:
            raise TriecError("--ignore-candidates needs --values: the set every item is constrained to")
        items = [dataclasses.replace(item, candidates=None) for item in items]
    if values is None and (
        set(config.modes) - {"free"} or strategies
    ):  # before the model is converted (24 s cold), not after
        bare = next((item for item in items if not item.candidates), None)
        if bare is not None:
            raise EvalError(
                f"{data}: item {bare.id}: no 'candidates' and no --values: nothing to constrain the "
                f"{'/'.join([*(m for m in config.modes if m != 'free'), *strategies])} mode(s) to"
            )
    started = time.perf_counter()
    if engine == "llama.cpp":
        from triec.eval.llama_cpp import LlamaCppEvaluator

        model_dir = Path(model)
        with err.status("loading the model") if err.is_terminal else nullcontext():
            evaluator: Any = LlamaCppEvaluator(model_dir, config, _values(values))
    elif engine == "mlx":
        from triec.eval.mlx import MLXEvaluator

        model_dir = resolve_model(model, log=lambda m: err.print(f"[dim]{escape(m)}[/]"))
        with err.status("loading the model") if err.is_terminal else nullcontext():
            evaluator = MLXEvaluator(model_dir, config, _values(values))
    else:
        model_dir = resolve_model(model, log=lambda m: err.print(f"[dim]{escape(m)}[/]"))
        with err.status("loading the model") if err.is_terminal else nullcontext():
            evaluator = Evaluator(model_dir, config, _values(values))
    total = len(items)

    def on_item(i: int, got: list[Any]) -> None:
        marks = " ".join(f"{o.mode}:{'ok' if o.correct else ('valid' if o.valid else 'invalid')}" for o in got)
        err.print(f"[dim]{i + 1}/{total} {escape(got[0].id)}  {marks}[/]", highlight=False)

    outcomes = evaluate(evaluator, items, on_item)
    doc = report_json(outcomes, config, meta_for(model, model_dir, str(data), config, started))
    per_item = len(labels(config))
    if len(outcomes) < total * per_item:
        err.print(f"interrupted: {len(outcomes) // per_item} of {total} items measured")
    out.print(_summary_table(doc))
    if json_out is not None:
        from triec.artifact.container import atomic_write

        atomic_write(json_out, (json.dumps(doc, indent=1, ensure_ascii=False) + "\n").encode())
    if plot is not None:
        _plot(doc, plot)
    if len(outcomes) < total * per_item:
        raise typer.Exit(_common.EXIT_INTERRUPTED)


@app.command("bfcl")
@report_errors
def bfcl_cmd(
    category: Annotated[
        str,
        typer.Argument(
            help="simple_python, simple_java, simple_javascript, multiple, live_simple, live_multiple, or all (every one of them).",
            metavar="CATEGORY",
        ),
    ],
    output: Annotated[Path, typer.Option("-o", "--output", help="The JSONL file to write.")],
    source: Annotated[
        Path | None,
        typer.Option("--source", help="BFCL's data directory. Default: the installed bfcl-eval package's."),
    ] = None,
    candidates: Annotated[
        str | None,
        typer.Option(
            "--candidates",
            help="item (the question's functions), category (every name of the category) or all (every BFCL function name, one set shared by every question). Default: item for the multiple categories, all for all, else category.",
        ),
    ] = None,
    shots: Annotated[
        int,
        typer.Option(
            "--shots",
            min=0,
            help="Worked examples before each question (the category's first questions, then left out).",
        ),
    ] = 0,
    k: Annotated[
        int | None,
        typer.Option(
            "--k",
            help="--candidates all: a fixed set of K names holding every kept question's gold (below the number of distinct golds: K sampled golds, and only their questions).",
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="--k: the seed of the names (and golds) drawn.")] = 0,
    distractors: Annotated[
        str,
        typer.Option(
            "--distractors",
            help="--k past the 1,853 BFCL names: synthetic adds generated tool names with generated descriptions.",
        ),
    ] = "bfcl",
    values_out: Annotated[
        Path | None,
        typer.Option(
            "--values-out",
            help="The values file for `triec compile` (the candidates, then none_of_these). Default with --candidates all: OUTPUT with the suffix .values.txt.",
        ),
    ] = None,
) -> None:
    """Write BFCL's one-call questions as `triec eval` data: which function answers each question (pip install --no-deps bfcl-eval).

    With --candidates all, every question shares one candidate set (all 1,853 BFCL names, or --k of them), written
    once in the file's first line with each name's description, and a values file for `triec compile` holds the
    set and the escape value none_of_these.
    """
    from triec.eval import bfcl
    from triec.shortlist.cascade import ESCAPE

    data = bfcl.build(category, source, candidates, shots, k=k, seed=seed, distractors=distractors)
    if values_out is None and data.shared is not None:
        values_out = output.with_suffix(".values.txt")
    if values_out is not None and values_out.resolve() == output.resolve():
        raise TriecError(f"--values-out {values_out} is the data file itself")
    bfcl.write_dataset(data, output, values_out)
    for note in data.notes:
        err.print(f"[dim]{escape(note)}[/]", highlight=False)
    for name, c in data.counts.items():
        skipped = f", {c.not_one_call} not one call" if c.not_one_call else ""
        skipped += f", {c.outside_k} outside --k" if c.outside_k else ""
        shot = f", {c.examples} as examples" if c.examples else ""
        err.print(f"[dim]{name}: {c.kept} of {c.questions} questions{shot}{skipped}[/]", highlight=False)
    if data.shared is not None:
        where = f"; values ({len(data.values()):,}: the set and {ESCAPE}) to {escape(str(values_out))}"
        out.print(
            f"wrote {len(data.items):,} items to {escape(str(output))} "
            f"({len(data.shared.names):,} shared candidates in its first line){where}",
            highlight=False,
        )
        return
    sizes = sorted(len(i["candidates"]) for i in data.items)
    also = f"; values to {escape(str(values_out))}" if values_out is not None else ""
    out.print(
        f"wrote {len(data.items)} items to {escape(str(output))} (candidates per item: {sizes[0]}-{sizes[-1]}){also}",
        highlight=False,
    )
