"""``triec verify``: prove an artifact equal to the reference and to peer engines, state by state."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from triec.cli._common import EXIT_CHECK_FAILED, app, err, out, report_errors

if TYPE_CHECKING:
    from triec.verify.tables import VerifyReport  # imported lazily where it runs: the CLI starts without numpy


@app.command("verify")
@report_errors
def verify_cmd(
    artifact: Annotated[str, typer.Argument(help="The .triec artifact to check.")],
    tokenizer: Annotated[
        str | None,
        typer.Option(
            "-t", "--tokenizer", help="Tokenizer to check against. Default: the one recorded in the artifact."
        ),
    ] = None,
    against: Annotated[
        list[str] | None,
        typer.Option(
            "--against",
            help="reference, llguidance, xgrammar, outlines-core or all (repeat or comma-separate). Default: reference.",
        ),
    ] = None,
    states: Annotated[
        int,
        typer.Option(
            "--states",
            min=1,
            help="Check every state up to N, else a seeded sample of N (always the start and depth <= 2).",
        ),
    ] = 50_000,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seed of the state sample and of the decode walks.")] = 0,
    walks: Annotated[
        int, typer.Option("--walks", min=0, help="Random decode walks replayed against each engine.")
    ] = 100,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as one JSON object.")] = False,
    quiet: Annotated[
        bool,
        typer.Option(
            "-q", "--quiet", help="Print nothing when everything matches, with --json too (the exit code says it)."
        ),
    ] = False,
) -> None:
    """Check ARTIFACT's integrity and every state's mask against independent derivations.

    Exit 0: everything matches; 1: a mismatch or an integrity failure; 2: bad usage.
    On a terminal, a progress bar per engine runs on stderr.
    """
    from triec.cli._progress import VerifyBars
    from triec.verify.tables import parse_against, verify

    names = parse_against(against or [])
    explicit = [n for n in names if "all" not in ",".join(against or []).split(",")]
    with VerifyBars(show=not (as_json or quiet)) as bars:
        report = verify(
            artifact,
            tokenizer=tokenizer,
            against=names,
            states=states,
            seed=seed,
            walks=walks,
            explicit=explicit,
            progress=bars if bars.show else None,
        )
    if quiet and report.ok:  # nothing when everything matches, --json or not (issue 37)
        pass
    elif as_json:
        out.print_json(json.dumps(report.to_json()))
    else:
        _print_report(report)
    if not report.ok:
        raise typer.Exit(EXIT_CHECK_FAILED)


def _headline(report: VerifyReport, sample: str) -> str:
    """What was checked: a pattern table's DFA (states, accepting states, edges), else the values and states."""
    held = f"{report.num_values:,} values, {report.num_states:,} states"
    if report.pattern:
        p = report.pattern
        held = (
            f"pattern table ({'format ' + p['format'] if p['format'] else 'regex ' + p['regex']}): "
            f"{p['states']:,} DFA states ({p['accepting_states']:,} accepting), {p['dfa_edges']:,} DFA edges"
        )
        sample = sample.replace("states checked", "rows checked")
    return (
        f"{report.artifact}: {held}, tokenizer {report.tokenizer} "
        f"({report.vocab_size:,} wide, EOS {report.eos_token_ids}); integrity ok; {sample}"
        + (
            f"; {report.tail_states:,} tail states (rows served from the values, checked like any other)"
            if report.tail_states
            else ""
        )
        + (
            f"; the reference ran on a seeded sample of {report.values_sampled:,} of the "
            f"{report.num_values:,} values (every state of their trie, rows as served)"
            if report.values_sampled
            else ""
        )
    )


def _print_report(report: VerifyReport) -> None:
    from rich.table import Table

    if report.integrity_problems:
        for p in report.integrity_problems:
            err.print(f"[bold red]integrity:[/] {escape(p)}", highlight=False, soft_wrap=True)
        err.print("[bold red]FAILED[/]: the artifact cannot be trusted; nothing else was checked", highlight=False)
        return
    sample = "states checked: " + (
        f"sample of {report.states_selected:,} (seed {report.seed})"
        if report.sampled
        else f"all {report.states_selected:,}"
    )
    out.print(escape(_headline(report, sample)), highlight=False)
    for w in report.warnings:
        out.print(f"[yellow]warning:[/] {escape(w)}", highlight=False, soft_wrap=True)
    t = Table(show_header=True, header_style="bold")
    for col in ("against", "version", "status", "states", "walk steps", "mismatches", "seconds"):
        t.add_column(col, justify="right" if col in ("states", "walk steps", "mismatches", "seconds") else "left")
    for c in report.checks:
        style = {"ok": "green", "mismatch": "bold red", "skipped": "yellow", "error": "bold red"}[c.status]
        t.add_row(
            c.against,
            c.version or "",
            f"[{style}]{c.status}[/]",
            f"{c.states_checked:,}",
            f"{c.walk_steps:,}" if c.walks else "-",  # the reference compares rows: it walks nothing
            f"{c.mismatches:,}",
            f"{sum(c.seconds.values()):.2f}",
        )
    out.print(t)
    if report.schema:
        sch = report.schema
        slots = ", ".join(
            f"{s['pointer'] or '/'} " + ("(its DFA)" if "regex" in s else f"(K = {s['values']:,})")
            for s in sch["slots"]
        )
        out.print(
            escape(
                f"schema ({sch['shape']}): served by slots: {slots}; the rest in {sch['engine']}; "
                "each engine compared with itself compiled on the whole schema"
            ),
            highlight=False,
            soft_wrap=True,
        )
    for c in report.checks:
        if report.schema and c.status in ("ok", "mismatch") and c.reason:
            out.print(escape(f"  {c.against}: {c.reason}"), highlight=False, soft_wrap=True)
        if c.status in ("skipped", "error"):
            out.print(f"[yellow]{escape(c.against)} {c.status}:[/] {escape(c.reason)}", highlight=False, soft_wrap=True)
        for m in c.examples:
            line = f"  [red]{escape(c.against)}[/] state {m.state} prefix {escape(repr(m.prefix))}: {escape(m.problem)}"
            if m.only_triec:
                line += "; only triec allows " + escape(", ".join(f"{x['id']} {x['bytes']!r}" for x in m.only_triec))
            if m.only_other:
                line += f"; only {escape(c.against)} allows " + escape(
                    ", ".join(f"{x['id']} {x['bytes']!r}" for x in m.only_other)
                )
            out.print(line, highlight=False, soft_wrap=True)
    verdict = "[bold green]OK[/]: every checked state matches" if report.ok else "[bold red]FAILED[/]"
    if not report.ok and not [c for c in report.checks if c.status != "skipped"]:
        verdict += ": no comparison ran"
    out.print(f"{verdict} ({report.seconds:.2f} s)", highlight=False)
