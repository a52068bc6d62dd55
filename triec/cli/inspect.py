"""``triec inspect``: what an artifact holds, and any one state in detail."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from triec.cli._common import app, out, report_errors
from triec.errors import TriecError


@app.command("inspect")
@report_errors
def inspect_cmd(
    artifact: Annotated[Path, typer.Argument(help="A .triec artifact (plain or .zst).", metavar="ARTIFACT")],
    prefix: Annotated[Optional[str], typer.Option("--prefix", help="Show the state this text leads to.")] = None,
    state: Annotated[Optional[int], typer.Option("--state", help="Show this state.")] = None,
    widest: Annotated[int, typer.Option("--widest", min=0, help="How many of the widest states to list.")] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="Print everything as one JSON object.")] = False,
) -> None:
    """Show an artifact's metadata, mask widths by depth, and one state's allowed tokens."""
    from triec.artifact.masks import load
    from triec.check import inspect as ins
    from triec.runtime.kinds import TableKind

    if prefix is not None and state is not None:
        raise TriecError("pass --prefix or --state, not both")
    table = load(artifact, verify=True)
    schema_info = None
    if table.kind is TableKind.TOOL_SCHEMA:  # a compiled tool schema: show its name trie, then the rest
        schema_info = ins.schema_summary(table)
        table = table.trie  # type: ignore[attr-defined]
    header = dict(table.header or {})
    header["format_version"] = table.format_version  # type: ignore[attr-defined]
    report: dict[str, Any] = {"artifact": str(artifact), "file_bytes": os.path.getsize(artifact)}
    report["file_modified"] = dt.datetime.fromtimestamp(os.path.getmtime(artifact), dt.timezone.utc).isoformat(
        timespec="seconds"
    )
    report.update(ins.summary(table, header, ins.section_sizes(table)))
    if schema_info is not None:
        report["schema"] = schema_info
    report["depths"] = ins.depth_distribution(table)
    report["widest_states"] = ins.widest_states(table, widest) if widest else []
    if prefix is not None:
        raw = prefix.encode("utf-8", "surrogateescape")  # argv bytes that are not UTF-8 come back as they were
        found = table.state_for_prefix(raw)
        if found is None:
            raise TriecError(f"--prefix: no value starts with {ins.escape_bytes(raw)!r}")
        state = found
    if state is not None:
        if not 0 <= state < table.num_states:
            raise TriecError(f"--state {state}: expected 0..{table.num_states - 1}")
        report["state"] = ins.describe_state(table, state, max_tokens=None if as_json else 200)
    if as_json:
        out.print_json(json.dumps(report, ensure_ascii=False))
    else:
        _print(report)


def _print(r: dict[str, Any]) -> None:
    meta = Table(title=escape(f"triec inspect {r['artifact']}"), show_header=False, title_justify="left")
    meta.add_column(style="bold")
    meta.add_column()
    meta.add_row("format / written by", f"v{r['format_version']} / triec {r['triec_version']}")
    meta.add_row("file", f"{r['file_bytes']:,} bytes, modified {r['file_modified']} (not recorded inside: builds are deterministic)")
    meta.add_row("tokenizer", escape(f"{r['tokenizer']['name']}  {r['tokenizer']['fingerprint']}"))
    meta.add_row("mask width / EOS", escape(f"{r['vocab_size']:,} / {r['eos_token_ids']}"))
    enc = r["encoding"]
    meta.add_row(
        "encoding / prefix / suffix",
        escape(f"{enc['name']} / {enc['prefix']!r} / {enc['suffix']!r}")
        + ("" if enc["name"] == "json" or enc["prefix"] or enc["suffix"] else "  (values as they are)"),
    )
    meta.add_row("values (K) / value bytes", f"{r['values']:,} / {r['value_bytes']:,}")
    meta.add_row("states / sharing r", f"{r['states']:,} / {r['sharing_ratio']}")
    meta.add_row("allowed pairs", f"{r['allowed_pairs']:,}  (root {r['root_allowed']}, max {r['max_allowed']}, mean {r['mean_allowed']})")
    out.print(meta)
    sch = r.get("schema")
    if sch:
        st = Table(title="tool schema", show_header=False, title_justify="left")
        st.add_column(style="bold")
        st.add_column()
        st.add_row("output", escape(f"{sch['prefix']}<{sch['name_property']}>{sch['tail']}<continuation>"))
        st.add_row("convention", escape(", ".join(f"{k}={v!r}" for k, v in sch["convention"].items())))
        st.add_row("continuation engine", escape(f"{sch['engine']} {sch['engine_version'] or ''}"))
        st.add_row("continuation", escape(sch["continuation"][:200] + ("..." if len(sch["continuation"]) > 200 else "")))
        st.add_row("continuation sha256", sch["continuation_sha256"])
        st.add_row("straddle entries / heads", f"{sch['straddles']['entries']:,} / {len(sch['straddles']['heads'])}")
        out.print(st)
        tt = Table(title="straddling tokens per tail offset", title_justify="left")
        for col in ("offset", "read", "tokens", "inside tail", "handover", "into continuation"):
            tt.add_column(col, justify="left" if col == "read" else "right")
        for row in sch["straddles"]["tail"]:
            tt.add_row(str(row["offset"]), escape(repr(row["read"])), str(row["tokens"]), str(row["inside_tail"]),
                       str(row["handover"]), str(row["into_continuation"]))
        out.print(tt)

    sec = Table(title="sections", title_justify="left")
    for col in ("section", "bytes", "zstd bytes"):
        sec.add_column(col, justify="right" if col != "section" else "left")
    for name, size in r["sections"].items():
        sec.add_row(name, f"{size['bytes']:,}", f"{size['zstd_bytes']:,}")
    out.print(sec)

    dep = Table(title="allowed tokens by depth (EOS included)", title_justify="left")
    for col in ("depth", "states", "mean", "max"):
        dep.add_column(col, justify="right")
    for d in r["depths"]:
        dep.add_row(str(d["depth"]), f"{d['states']:,}", f"{d['mean_allowed']:.2f}", str(d["max_allowed"]))
    out.print(dep)

    if r["widest_states"]:
        wide = Table(title="widest states", title_justify="left")
        for col in ("state", "allowed", "prefix"):
            wide.add_column(col, justify="right" if col != "prefix" else "left")
        for w in r["widest_states"]:
            wide.add_row(str(w["state"]), str(w["allowed"]), escape(repr(w["prefix"])))
        out.print(wide)

    s = r.get("state")
    if s:
        head = (
            f"state {s['state']}  prefix {s['prefix']!r}  depth {s['depth']}  "
            + (f"accepting (value {s['value']!r}, EOS {s['eos_allowed']})" if s["accepting"] else "not accepting")
            + f"  values below: {s['values_below']:,}"
        )
        tok = Table(title=escape(head), title_justify="left")
        for col in ("token id", "bytes", "next state"):
            tok.add_column(col, justify="right" if col != "bytes" else "left")
        for t in s["tokens"]:
            tok.add_row(str(t["id"]), escape(repr(t["bytes"])), str(t["next_state"]))
        out.print(tok)
        if s["tokens_truncated"]:
            out.print(f"... {s['allowed_content_tokens'] - len(s['tokens'])} more tokens (use --json for all)")
        out.print("first values below: " + escape(", ".join(repr(v) for v in s["first_values"])))
