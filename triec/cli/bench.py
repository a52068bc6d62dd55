"""``triec bench``: triec and its peers side by side on the user's own set (the suites: ``python -m benchmarks``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from triec.cli._common import EXIT_INTERRUPTED, app, err, out, report_errors
from triec.errors import TriecError


@app.command("bench", context_settings={"allow_extra_args": True})  # a suite: see below
@report_errors
def bench_cmd(
    ctx: typer.Context,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            "-t",
            "--tokenizer",
            help="Bundled name, tokenizer.json path or directory, GGUF file, or Hugging Face repo id. Default: qwen2.",
        ),
    ] = None,
    vocab_size: Annotated[
        int | None,
        typer.Option("--vocab-size", min=1, help="Mask width (the model's logits size), e.g. 151936 for Qwen2.5."),
    ] = None,
    k: Annotated[str, typer.Option("--k", help="Set sizes K, comma-separated.")] = "10,100,1000,10000,100000",
    value_set: Annotated[
        str, typer.Option("--set", help="tools (synthetic tool names), products (product paths) or a values file.")
    ] = "tools",
    engines: Annotated[
        str, typer.Option("--engines", help="Comma-separated: triec, llguidance, xgrammar, outlines-core.")
    ] = "triec,llguidance,xgrammar,outlines-core",
    batch: Annotated[str, typer.Option("--batch", help="Batch sizes B, comma-separated.")] = "1,8,32,128,256",
    repeat: Annotated[
        int, typer.Option("--repeat", min=1, help="Timed repetitions (after a warm-up); medians are reported.")
    ] = 5,
    timeout: Annotated[
        float, typer.Option("--timeout", min=1, help="Seconds per engine and K before the cell is cut off.")
    ] = 300.0,
    paths: Annotated[
        int, typer.Option("--paths", min=1, help="Values whose own tokenization is replayed for per-step times.")
    ] = 50,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seed of the value sets, paths and batches.")] = 0,
    json_out: Annotated[
        Path | None,
        typer.Option("--json", help="Write every summary (min/median/max), versions and machine info here."),
    ] = None,
    plot_out: Annotated[
        Path | None,
        typer.Option("--plot", help="Write a PNG: compile and per-step time vs K, log-log (needs matplotlib)."),
    ] = None,
    quiet: Annotated[
        bool, typer.Option("-q", "--quiet", help="No progress on stderr (the table is still printed).")
    ] = False,
    quick: Annotated[bool, typer.Option("--quick", hidden=True, help="A suite's option (see below).")] = False,
    suite_out: Annotated[str | None, typer.Option("--out", hidden=True, help="A suite's option.")] = None,
    write_docs: Annotated[bool, typer.Option("--write-docs", hidden=True, help="A suite's option.")] = False,
) -> None:
    """Benchmark triec against the installed peer engines on identical vocabulary, EOS ids and values.

    On a terminal a progress bar names the cell being measured; elsewhere one line per
    finished cell goes to stderr. Ctrl-C prints the cells measured so far and exits 130.
    The suites of docs/benchmarks.md run from a checkout: python -m benchmarks SUITE.
    """
    if ctx.args or quick or suite_out is not None or write_docs:  # `triec bench SUITE [--quick] [--out DIR]
        # [--write-docs]` ran the suites until issue 50; they are the checkout's now: say where, run nothing
        suite = ctx.args[0] if ctx.args else "SUITE"
        raise TriecError(
            f"triec bench runs your own set against the peers; the benchmark suites run from a checkout of the "
            f"repository: python -m benchmarks {suite} [--quick] [--out DIR] [--write-docs] (docs/benchmarks.md)"
        )
    from triec.bench.peers import MAX_BATCH, MAX_K, BenchInterrupted, parse_engines, parse_int_list, plot, run_bench
    from triec.cli._progress import BenchBar

    ks = parse_int_list(k, "--k", MAX_K)
    batches = parse_int_list(batch, "--batch", MAX_BATCH)
    names = parse_engines(engines)
    for option, target in (("--json", json_out), ("--plot", plot_out)):  # fail now, not after an hour of benchmarks
        if target is not None and (target.is_dir() or not (target.parent or Path(".")).is_dir()):
            raise TriecError(f"{option}: {target} is a directory or its directory does not exist")
        if target is not None and target.exists() and not target.is_file():
            raise TriecError(f"{option}: {target} exists and is not a regular file")
    if value_set not in ("tools", "products") and not Path(value_set).is_file():
        raise TriecError(f"--set: expected tools, products or a values file, found {value_set!r} (no such file)")
    if plot_out is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise TriecError(
                "--plot needs matplotlib: pip install matplotlib (or pip install 'triec[bench]')"
            ) from None

    interrupted = False
    with BenchBar(show=not quiet) as bar:
        try:
            result = run_bench(
                tokenizer=tokenizer,
                vocab_size=vocab_size,
                ks=ks,
                value_source=value_set,
                engines=names,
                batches=batches,
                repeat=repeat,
                timeout=timeout,
                paths=paths,
                seed=seed,
                progress=None if quiet else bar,
            )
        except BenchInterrupted as exc:
            result, interrupted = exc.result, True
    if json_out is not None:
        from triec.artifact.container import atomic_write

        atomic_write(json_out, json.dumps(result, indent=1).encode())
    if plot_out is not None and result["results"]:
        plot(result, str(plot_out))
    _print_table(result)
    if interrupted:
        done = sum(len(r["engines"]) for r in result["results"])
        err.print(f"interrupted: the table holds the {done} cell(s) measured before Ctrl-C", highlight=False)
        raise typer.Exit(EXIT_INTERRUPTED)


def _print_table(result: dict[str, Any]) -> None:
    from rich.table import Table

    from triec.bench.peers import table_rows

    s = result["settings"]
    header, rows = table_rows(result)
    t = Table(
        title=escape(
            f"triec bench: {s['set']}, {s['tokenizer']} ({s['vocab_size']:,} wide), repeat {s['repeat']}; × = time / triec's"
            + ("; INTERRUPTED: the cells measured before Ctrl-C" if result.get("interrupted") else "")
        ),
        title_justify="left",
    )
    for h in header[:-1]:  # notes go below the table: they are long
        t.add_column(escape(h), justify="left" if h == "engine" else "right", overflow="fold")
    notes = []
    for row in rows:
        t.add_row(*(escape(c) for c in row[:-1]))
        if row[-1]:
            notes.append(f"K={row[0]} {row[1]}: {row[-1]}")
    out.print(t, width=max(out.width, 132))  # ten columns: wrapped cells would be unreadable
    for n in notes:
        out.print(escape(n), highlight=False, soft_wrap=True)
