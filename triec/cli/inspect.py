"""``triec inspect``: what an artifact holds, and any one state in detail."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer
from rich.markup import escape
from rich.table import Table

from triec.cli._common import app, key_value_table, out, report_errors
from triec.errors import TriecError

if TYPE_CHECKING:
    from triec.runtime.pattern import PatternTable


_TOKENIZATION_NOTES = {
    "any": "  (every token sequence spelling a value)",
    "canonical": "  (each value's encoder tokens only)",
    "ids": "  (values are token-id sequences: one state per token; value bytes are their ids joined by spaces)",
}


@app.command("inspect")
@report_errors
def inspect_cmd(
    artifact: Annotated[Path, typer.Argument(help="A .triec artifact (plain or .zst).", metavar="ARTIFACT")],
    prefix: Annotated[str | None, typer.Option("--prefix", help="Show the state this text leads to.")] = None,
    state: Annotated[int | None, typer.Option("--state", help="Show this state.")] = None,
    widest: Annotated[int, typer.Option("--widest", min=0, help="How many of the widest states to list.")] = 10,
    slot: Annotated[
        int | None,
        typer.Option(
            "--slot", min=0, help="Schema artifacts: the slot (enum trie) whose states to show. Default: the first."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print everything as one JSON object.")] = False,
) -> None:
    """Show an artifact's metadata, mask widths by depth, and one state's allowed tokens.

    A schema artifact also shows its slots (the enums served by tries: where, how many values, the
    crossing tokens at their edges by kind), its grammars, its tail offsets and the enums left to the engine.
    """
    from triec.artifact.formats import load
    from triec.runtime.kinds import TableKind
    from triec.runtime.pattern import PatternTable
    from triec.runtime.table import MaskTable
    from triec.schema.table import SchemaTable
    from triec.verify import inspect as ins

    if prefix is not None and state is not None:
        raise TriecError("pass --prefix or --state, not both")
    table = load(artifact, verify=True)
    if table.kind is TableKind.PATTERN:
        if slot is not None:
            raise TriecError("--slot applies to schema artifacts only")
        assert isinstance(table, PatternTable)  # the class of that kind
        _inspect_pattern(table, str(artifact), prefix, state, as_json)
        return
    schema_info = None
    sizes = None
    if table.kind is TableKind.TOOL_SCHEMA:  # a schema table: show one slot's trie, then the rest
        assert isinstance(table, SchemaTable)  # the class of that kind
        schema_info = ins.schema_summary(table)
        n = len(table.slots)
        if slot is not None and slot >= n:
            raise TriecError(f"--slot {slot}: this artifact has slots 0..{n - 1}")
        enums = [i for i, s in enumerate(table.slots) if s.has_values]
        shown = slot if slot is not None else max(table.start_slot, enums[0] if enums else 0)
        schema_info["shown_slot"] = shown
        sizes = ins.file_section_sizes(artifact)
        if not table.slots[shown].has_values:  # a format or pattern field's slot: its DFA's table
            pattern = cast("PatternTable", table.slots[shown].trie)  # a pattern slot's DFA (schema/pattern_slot.py)
            _inspect_pattern(pattern, str(artifact), prefix, state, as_json, schema_info)
            return
        table = table.slots[shown].trie
    elif slot is not None:
        raise TriecError("--slot applies to schema artifacts only")
    assert isinstance(table, MaskTable)  # a mask table's artifact, or the schema slot's trie shown
    header = dict(table.header or {})
    header["format_version"] = table.format_version
    report: dict[str, Any] = {"artifact": str(artifact), "file_bytes": os.path.getsize(artifact)}
    report["file_modified"] = dt.datetime.fromtimestamp(os.path.getmtime(artifact), dt.UTC).isoformat(
        timespec="seconds"
    )
    report.update(ins.summary(table, header, sizes if sizes is not None else ins.section_sizes(table)))
    if schema_info is not None:
        report["schema"] = schema_info
    report["depths"] = ins.depth_distribution(table, max_rows=DEPTH_ROWS)
    report["widest_states"] = ins.widest_states(table, widest) if widest else []
    if prefix is not None:
        raw = prefix.encode("utf-8", "surrogateescape")  # argv bytes that are not UTF-8 come back as they were
        found = ins.states_for_prefix(table, raw)
        if not found:
            raise TriecError(f"--prefix: no value starts with {ins.escape_bytes(raw)!r}")
        if len(found) > 1:  # a canonical table: one state per token path
            listed = ", ".join(map(str, found[:10])) + (", ..." if len(found) > 10 else "")
            raise TriecError(
                f"--prefix: {ins.escape_bytes(raw)!r} is reached along {len(found)} token paths of this canonical "
                f"table (states {listed}); pick one with --state"
            )
        state = found[0]
    if state is not None:
        if not 0 <= state < table.num_states:
            raise TriecError(f"--state {state}: expected 0..{table.num_states - 1}")
        report["state"] = ins.describe_state(table, state, max_tokens=None if as_json else 200)
    if as_json:
        out.print_json(json.dumps(report, ensure_ascii=False))
    else:
        _print(report)


def _inspect_pattern(
    table: PatternTable,
    artifact: str,
    prefix: str | None,
    state: int | None,
    as_json: bool,
    schema_info: dict[str, Any] | None = None,
) -> None:
    """A pattern artifact (or a schema's pattern slot, ``schema_info`` its schema): its regex, its DFA states and
    their rows, one state's tokens (``--state``, ``--prefix``)."""
    from triec.runtime.kinds import TableKind
    from triec.verify.patterns import describe_pattern_state, pattern_summary

    report: dict[str, Any] = {"artifact": str(artifact), "file_bytes": os.path.getsize(artifact)}
    report.update(pattern_summary(table))
    if schema_info is not None:  # the artifact is a schema table; the rows below are one of its slots
        report["kind"], report["schema"] = TableKind.TOOL_SCHEMA.value, schema_info
    if prefix is not None:
        raw = prefix.encode("utf-8", "surrogateescape")
        found = table.run_bytes(raw)
        if found < 0:
            raise TriecError(f"--prefix: no string of the pattern starts with {raw!r}")
        state = found
    if state is not None:
        if not 0 <= state < table.num_states:
            raise TriecError(f"--state {state}: expected 0..{table.num_states - 1}")
        report["state"] = describe_pattern_state(table, state, max_tokens=None if as_json else 200)
    if as_json:
        out.print_json(json.dumps(report, ensure_ascii=False))
        return
    meta = key_value_table(escape(f"triec inspect {report['artifact']}"))
    kind = "pattern table" if schema_info is None else "schema table"
    meta.add_row("kind / format version", f"{kind} / v{report['format_version']} (triec {report['triec_version']})")
    if schema_info is not None:  # every slot is listed in the schema's table below
        shown, n = schema_info["shown_slot"], len(schema_info["slots"])
        meta.add_row("shown here", f"slot {shown} of {n}: its DFA table (--slot N for another)")
    if report["format"]:
        meta.add_row("named format", escape(report["format"]))
    meta.add_row("pattern", escape(report["pattern"]))
    meta.add_row("tokenizer", escape(f"{report['tokenizer']['name']}  {report['tokenizer']['fingerprint']}"))
    meta.add_row("mask width / EOS", escape(f"{report['vocab_size']:,} / {report['eos_token_ids']}"))
    meta.add_row("DFA states / edges", f"{report['states']:,} / {report['dfa_edges']:,}")
    meta.add_row("accepting states", escape(str(report["accepting_states"][:20])))
    meta.add_row("allowed pairs (max per state)", f"{report['allowed_pairs']:,} ({report['max_allowed']:,})")
    if report.get("token_classes") is not None:
        meta.add_row("stored by token class", f"{report['token_classes']:,} classes, {report['class_pairs']:,} pairs")
    meta.add_row("file", f"{report['file_bytes']:,} bytes")
    out.print(meta)
    if schema_info is not None:
        _print_schema(schema_info)
    rows = Table(show_header=True, header_style="bold", title="states", title_justify="left")
    for col in ("state", "shortest prefix", "accepting", "tokens", "DFA bytes"):
        rows.add_column(col)
    for r in report["rows"]:
        rows.add_row(
            str(r["state"]),
            escape(r["shortest_prefix"]),
            "yes" if r["accepting"] else "",
            f"{r['allowed_content_tokens']:,}",
            str(r["dfa_bytes"]),
        )
    out.print(rows)
    if "state" in report:
        st = report["state"]
        out.print(
            escape(
                f"state {st['state']} (shortest prefix {st['shortest_prefix']!r}, forced next {st['forced_bytes']!r}): "
                f"{st['allowed_content_tokens']:,} content tokens"
                + (f", EOS {st['eos_allowed']}" if st["eos_allowed"] else "")
                + ": "
                + ", ".join(f"{t['id']}->{t['next_state']}" for t in st["tokens"][:50])
            ),
            highlight=False,
            soft_wrap=True,
        )


DEPTH_ROWS = 48
"""Rows of the depth table at most: past it, deep depths are summed into ranges (a 10 MB value has 10M depths)."""


def _short(text: str, limit: int = 160) -> str:
    """A long prefix or value shown by its ends and its length, not whole (one value may be megabytes)."""
    if len(text) <= limit:
        return text
    return f"{text[: limit // 2]}... ({len(text):,} characters) ...{text[-limit // 4 :]}"


def _print(r: dict[str, Any]) -> None:
    meta = key_value_table(escape(f"triec inspect {r['artifact']}"))
    meta.add_row("format / written by", f"v{r['format_version']} / triec {r['triec_version']}")
    meta.add_row(
        "file",
        f"{r['file_bytes']:,} bytes, modified {r['file_modified']} (not recorded inside: builds are deterministic)",
    )
    meta.add_row("tokenizer", escape(f"{r['tokenizer']['name']}  {r['tokenizer']['fingerprint']}"))
    meta.add_row("mask width / EOS", escape(f"{r['vocab_size']:,} / {r['eos_token_ids']}"))
    enc = r["encoding"]
    meta.add_row(
        "encoding / prefix / suffix",
        escape(f"{enc['name']} / {enc['prefix']!r} / {enc['suffix']!r}")
        + ("" if enc["name"] == "json" or enc["prefix"] or enc["suffix"] else "  (values as they are)"),
    )
    meta.add_row(
        "tokenization",
        r.get("tokenization", "any") + _TOKENIZATION_NOTES.get(r.get("tokenization", "any"), ""),
    )
    meta.add_row("values (K) / value bytes", f"{r['values']:,} / {r['value_bytes']:,}")
    grp = r.get("groups")
    if grp:
        meta.add_row(
            "groups",
            escape(
                f"{grp['count']:,}, spelled 'group{grp['separator']}value' ({grp['smallest']:,} to "
                f"{grp['largest']:,} values each); largest: "
                + ", ".join(f"{g['label']} ({g['values']:,})" for g in grp["groups"][:8])
            ),
        )
    meta.add_row("states / sharing r", f"{r['states']:,} / {r['sharing_ratio']}")
    meta.add_row(
        "allowed pairs",
        f"{r['allowed_pairs']:,}  (root {r['root_allowed']}, max {r['max_allowed']}, mean {r['mean_allowed']})"
        + ("  stored: the branching states' rows" if r.get("layout") == "tails" else ""),
    )
    if r.get("layout") == "tails":
        meta.add_row(
            "tail states (rows served from the values)",
            f"{r['tail_states']:,} ({100 * r['tail_share']:.1f}% of the states), {r['tail_pairs']:,} pairs not stored; "
            f"they cost {r['tail_bytes']:,} bytes of state_byte and the {r['token_index_bytes']:,}-byte token index"
            + (
                f", and {r['tail_token_bytes']:,} bytes of tail tokens ({r['tail_tokens']:,})"
                if "tail_tokens" in r
                else ""
            ),
        )
    out.print(meta)
    sch = r.get("schema")
    if sch:
        _print_schema(sch)

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
        span = f"{d['depth']}-{d['depth_to']}" if "depth_to" in d else str(d["depth"])
        dep.add_row(span, f"{d['states']:,}", f"{d['mean_allowed']:.2f}", str(d["max_allowed"]))
    out.print(dep)

    if r["widest_states"]:
        wide = Table(title="widest states", title_justify="left")
        for col in ("state", "allowed", "prefix"):
            wide.add_column(col, justify="right" if col != "prefix" else "left")
        for w in r["widest_states"]:
            wide.add_row(str(w["state"]), str(w["allowed"]), escape(_short(repr(w["prefix"]))))
        out.print(wide)

    s = r.get("state")
    if s:
        head = (
            f"state {s['state']}  prefix {_short(repr(s['prefix']))}  depth {s['depth']}  "
            + (
                f"accepting (value {_short(repr(s['value']))}, EOS {s['eos_allowed']})"
                if s["accepting"]
                else "not accepting"
            )
            + f"  values below: {s['values_below']:,}"
        )
        tok = Table(title=escape(head), title_justify="left")
        for col in ("token id", "bytes", "next state"):
            tok.add_column(col, justify="right" if col != "bytes" else "left")
        for t in s["tokens"]:
            tok.add_row(str(t["id"]), escape(_short(repr(t["bytes"]))), str(t["next_state"]))
        out.print(tok)
        if s["tokens_truncated"]:
            out.print(f"... {s['allowed_content_tokens'] - len(s['tokens'])} more tokens (use --json for all)")
        out.print("first values below: " + escape(", ".join(_short(repr(v)) for v in s["first_values"])))


def _print_schema(sch: dict[str, Any]) -> None:
    st = key_value_table(f"schema ({sch['shape'] or '?'})")
    if sch["prefix"] or sch["tail"]:
        st.add_row("output", escape(f"{sch['prefix']}<{sch['name_property'] or 'value'}>{sch['tail']}<...>"))
    st.add_row("starts in", sch["start"])
    st.add_row("engine", escape(f"{sch['engine']} {sch['engine_version'] or ''}"))
    st.add_row("convention", escape(", ".join(f"{k}={v!r}" for k, v in sch["convention"].items())))
    if sch["threshold"] is not None:
        st.add_row("enum threshold", f"{sch['threshold']:,}")
    if sch["legacy_format"]:
        st.add_row("read from", "the first schema layout (D19), converted on load")
    st.add_row("grammars", f"{sch['num_grammars']:,}")
    out.print(st)
    slots = Table(
        title="slots (enums served by a trie, format and pattern fields by their DFA); crossing tokens by kind: "
        "trie / tail / handover / dynamic",
        title_justify="left",
    )
    for col in ("slot", "pointer", "values", "states", "tail", "entered from", "exits", "tails", "enters"):
        slots.add_column(col, justify="right" if col in ("slot", "values", "states") else "left")
    for s in sch["slots"]:
        kinds = {k: " / ".join(str(v) for v in s["crossing"][k].values()) for k in ("exits", "tails", "enters")}
        entered = "start" if s["start"] else ", ".join(f"grammar {g}" for g in s["entered_from_grammars"])
        slots.add_row(
            str(s["slot"]),
            escape(s["pointer"] or "-"),
            escape(s["format"] or "pattern") if "regex" in s else f"{s['values']:,}",
            f"{s['states']:,}",
            escape(repr(s["tail"])),
            entered,
            kinds["exits"],
            kinds["tails"],
            kinds["enters"],
        )
    out.print(slots)
    if sch["engine_enums"]:
        ee = Table(title="enums left in the engine", title_justify="left")
        for col in ("pointer", "values", "why"):
            ee.add_column(col, justify="right" if col == "values" else "left")
        for e in sch["engine_enums"]:
            ee.add_row(escape(e.get("pointer") or "/"), f"{e.get('values', 0):,}", escape(str(e.get("reason", ""))))
        out.print(ee)
    if sch["grammars"]:
        gt = Table(
            title="grammars"
            + (
                f" (first {len(sch['grammars'])} of {sch['num_grammars']:,})"
                if len(sch["grammars"]) < sch["num_grammars"]
                else ""
            ),
            title_justify="left",
        )
        for col in ("grammar", "schema bytes", "sha256", "after", "template", "slots"):
            gt.add_column(col, justify="right" if col in ("grammar", "schema bytes") else "left")
        for g in sch["grammars"]:
            gt.add_row(
                str(g["grammar"]),
                f"{g['schema_bytes']:,}",
                g["sha256"][:19],
                escape(repr(g["after"])),
                escape(repr(g["template"])),
                escape(str(g["slots"])),
            )
        out.print(gt)
    if sch["tail_offsets"]:
        tt = Table(title="crossing tokens per tail offset (start slot)", title_justify="left")
        for col in ("offset", "read", "tokens", "inside tail", "handover", "into grammar"):
            tt.add_column(col, justify="left" if col == "read" else "right")
        for row in sch["tail_offsets"]:
            tt.add_row(
                str(row["offset"]),
                escape(repr(row["read"])),
                str(row["tokens"]),
                str(row["inside_tail"]),
                str(row["handover"]),
                str(row["into_grammar"]),
            )
        out.print(tt)
    shown = sch["shown_slot"]
    what = "DFA table" if "regex" in sch["slots"][shown] else "trie"
    out.print(f"states below: slot {shown}'s {what} (--slot N for another)")
