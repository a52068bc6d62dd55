"""``triec compile``: values file + tokenizer -> artifact."""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.markup import escape

from triec.cli._common import app, err, out, report_errors
from triec.errors import TriecError
from triec.schema.locate import DEFAULT_THRESHOLD

if TYPE_CHECKING:
    from triec.cli._progress import Phases


def _parse_eos(raw: list[str] | None) -> list[int] | None:
    if not raw:
        return None
    ids = []
    for chunk in raw:
        for part in chunk.split(","):
            part = part.strip()
            if not part:
                continue
            try:
                ids.append(int(part))
            except ValueError:
                raise TriecError(f"--eos: expected integer token ids, found {part!r}") from None
    return ids


def _output_target(output: Path | None, default: Path, zstd: bool) -> Path:
    """Where the artifact goes (``-o``, else ``default`` with ``.zst`` under ``--zstd``), refused before any work
    when it cannot be written there."""
    target = output or default
    if zstd and output is None and not str(target).endswith(".zst"):
        target = Path(f"{target}.zst")
    if target.is_dir():
        raise TriecError(f"{target}: is a directory; pass a file path with -o")
    if not target.parent.exists():
        raise TriecError(f"{target}: output directory {target.parent} does not exist")
    if target.exists() and not target.is_file():
        raise TriecError(f"{target}: exists and is not a regular file; pass another path with -o")
    return target


def _default_output(values: str) -> Path:
    stem = "values" if values == "-" else Path(values).stem
    return Path(f"{stem}.triec")


@app.command("compile")
@report_errors
def compile_cmd(
    ctx: typer.Context,
    values: Annotated[
        Optional[str],
        typer.Argument(
            help="Values file: one per line, a JSON array, a JSON Schema enum, or a flat object schema; - for stdin. "
            "None with --pattern or a named --format."
        ),
    ] = None,
    tokenizer: Annotated[
        Optional[str],
        typer.Option(
            "-t",
            "--tokenizer",
            help="Bundled name (gpt2, qwen2), tokenizer.json path or directory, GGUF file, or Hugging Face repo id. Default: qwen2.",
        ),
    ] = None,
    output: Annotated[
        Optional[Path], typer.Option("-o", "--output", help="Artifact path. Default: VALUES' stem + .triec.")
    ] = None,
    vocab_size: Annotated[
        Optional[int],
        typer.Option(
            "--vocab-size", min=1, help="Mask width: the model's logits size (padding ids are never allowed)."
        ),
    ] = None,
    eos: Annotated[
        Optional[list[str]],
        typer.Option("--eos", help="EOS token id(s); repeat or comma-separate. Default: from the tokenizer."),
    ] = None,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="Values format: auto, lines or json. Or, without VALUES, a string format compiled as a pattern table: "
            "date, time, date-time, uuid or ipv4 (xgrammar's spelling of JSON Schema's formats).",
        ),
    ] = "auto",
    pattern: Annotated[
        Optional[str],
        typer.Option(
            "--pattern",
            help="Without VALUES: compile this regular expression (JSON Schema's pattern subset; the whole output "
            "matches) into a pattern table.",
        ),
    ] = None,
    max_states: Annotated[
        int,
        typer.Option("--max-states", min=1, help="--pattern, --format NAME: refuse a minimal DFA larger than this."),
    ] = 10_000,
    encoding: Annotated[
        Optional[str],
        typer.Option(
            "--encoding",
            help="How each value is written: raw (as is) or json (its JSON string literal, quotes included). Default: raw.",
        ),
    ] = None,
    prefix: Annotated[
        Optional[str], typer.Option("--prefix", help="Literal text written before every value, e.g. '{\"tool\": '.")
    ] = None,
    suffix: Annotated[
        Optional[str], typer.Option("--suffix", help="Literal text written after every value, e.g. '}'.")
    ] = None,
    zstd: Annotated[
        bool, typer.Option("--zstd", help="Wrap the artifact in zstd for shipping (loads into memory, not mmap).")
    ] = False,
    implementation: Annotated[
        str, typer.Option("--implementation", help="numpy (fast) or reference (pyahocorasick).", hidden=True)
    ] = "numpy",
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as one JSON object.")] = False,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="Print nothing on success (with --json too).")] = False,
    engine: Annotated[
        Optional[str],
        typer.Option(
            "--engine",
            help="Schemas, tool registries: the engine that runs everything but the tries (llguidance or xgrammar; structural tags: xgrammar). Default: llguidance.",
        ),
    ] = None,
    enum_threshold: Annotated[
        int,
        typer.Option(
            "--enum-threshold",
            min=1,
            help=f"JSON Schemas only: enums of at least this many strings are served by a trie (default {DEFAULT_THRESHOLD}).",
        ),
    ] = DEFAULT_THRESHOLD,
    tool_format: Annotated[
        str, typer.Option("--tool-format", help="Tool registries: the calls' format, vllm, hermes, llama3 or object.")
    ] = "vllm",
    single_call: Annotated[
        bool, typer.Option("--single-call", help="Tool registries (vllm, hermes): exactly one call, not one or more.")
    ] = False,
    tool_choice: Annotated[
        str,
        typer.Option(
            "--tool-choice",
            help="Tool registries: required (calls only) or auto (hermes: free text, then calls after the <tool_call> trigger, as vLLM constrains tool_choice=auto with strict tools; engine xgrammar).",
        ),
    ] = "required",
    tokenization: Annotated[
        str,
        typer.Option(
            "--tokenization",
            help="Plain value sets: any (every token sequence that spells a value, as grammar engines allow) or canonical (only each value's own encoder tokenization, prefix and suffix included; needs a tokenizer.json).",
        ),
    ] = "any",
    whitespace: Annotated[
        str,
        typer.Option(
            "--whitespace",
            help="Schemas, JSON tool formats: compact (', ' and ': ' only) or any (the engines' flexible JSON; xgrammar).",
        ),
    ] = "compact",
    layout: Annotated[
        str,
        typer.Option(
            "--layout",
            help="Plain value sets: auto (only the branching states' rows stored where one value alone lies below most states: titles, names; format version 4), full (every state's row, versions 1 and 2) or tails (version 4 always).",
        ),
    ] = "auto",
) -> None:
    """Compile VALUES into an artifact of exact per-state token masks.

    A JSON Schema with string enums of --enum-threshold members or more, anywhere
    in it (object properties at any depth, array items, anyOf branches, $defs),
    compiles into a schema artifact: each such enum served by its own trie, the
    rest of the schema run by --engine. So does a tool call ({"name": <one of K
    tools>, "arguments": {...}}: an object whose first property is an enum), whatever
    its number of names. A flat object of one enum and constants is a plain finite set.

    A tool registry (a JSON array of tools in the OpenAI, MCP or Anthropic spelling,
    or {"tools": [...]}) compiles into calls of --tool-format: the names in a trie,
    each tool's arguments run by --engine on its own schema when first chosen. An
    xgrammar structural tag ({"type": "structural_tag", ...}: tagged tool calls whose
    begins carry the names, with or without free text around them after a trigger)
    compiles with its begins in a trie; --tool-choice auto turns a registry into
    vLLM's hermes tag for tool_choice="auto".
    """
    from triec.cli._progress import Phases
    from triec.compiler.entry import TOKENIZATIONS, CompileStats
    from triec.compiler.entry import compile as compile_values
    from triec.compiler.values import FORMATS, read_input
    from triec.encoding import ENCODINGS, Encoding
    from triec.errors import EosTextWarning, ValuesError
    from triec.tokenizer.vocabulary import Vocabulary

    if values is None or pattern is not None:
        if values is not None:
            raise TriecError("--pattern compiles a regular expression: pass it without VALUES")
        if pattern is None and fmt in FORMATS:
            try:  # typer >= 0.20 vendors click (as triec.cli.main reads it)
                from typer._click import exceptions as click
            except ImportError:  # pragma: no cover - depends on the installed typer
                from click import exceptions as click  # type: ignore[no-redef]

            raise click.UsageError(
                "Missing argument 'VALUES' (or --pattern REGEX, or --format date|time|...).", ctx=ctx
            )
        flags = [f for f, v in (("--encoding", encoding), ("--prefix", prefix), ("--suffix", suffix)) if v is not None]
        if flags or engine is not None or tokenization != "any":
            raise TriecError(
                f"--pattern / --format NAME: {', '.join(flags) or '--engine, --tokenization'} do not apply"
            )
        _compile_pattern(
            pattern,
            None if pattern is not None else fmt,
            output,
            tokenizer,
            vocab_size,
            _parse_eos(eos),
            max_states,
            zstd,
            as_json,
            quiet,
        )
        return
    if fmt not in FORMATS:
        raise TriecError(f"--format: expected one of {', '.join(FORMATS)}, found {fmt!r}")
    if encoding is not None and encoding not in ENCODINGS:
        raise TriecError(f"--encoding: expected one of {', '.join(ENCODINGS)}, found {encoding!r}")
    if implementation not in ("numpy", "reference"):
        raise TriecError(f"--implementation: expected numpy or reference, found {implementation!r}")
    target = _output_target(output, _default_output(values), zstd)
    if values != "-" and target.exists() and Path(values).exists() and target.resolve() == Path(values).resolve():
        raise TriecError(f"{target}: is the values file itself; pass another path with -o")
    phases = Phases(show=not (quiet or as_json))
    total0 = time.perf_counter()
    if whitespace not in ("compact", "any"):
        raise TriecError(f"--whitespace: expected compact or any, found {whitespace!r}")
    if tokenization not in TOKENIZATIONS:
        raise TriecError(f"--tokenization: expected one of {', '.join(TOKENIZATIONS)}, found {tokenization!r}")
    string_schema = _string_schema(values, fmt)
    if string_schema is not None:  # {"type": "string", "format": ...} or "pattern": a pattern table of its JSON string
        if engine is not None or tokenization != "any" or any(x is not None for x in (encoding, prefix, suffix)):
            raise TriecError(
                f"{values}: a string schema with a format or pattern takes no --engine, --tokenization, "
                "--encoding, --prefix or --suffix"
            )
        _compile_pattern(
            None,
            None,
            output,
            tokenizer,
            vocab_size,
            _parse_eos(eos),
            max_states,
            zstd,
            as_json,
            quiet,
            schema=string_schema,
            default=_default_output(values),
        )
        return
    found = _schema_document(values, fmt, enum_threshold)
    if found is not None:
        kind, doc = found
        if tokenization == "canonical":
            raise TriecError(
                f"{values}: --tokenization canonical applies to plain value sets; here the values sit between text the "
                "engine generates, where the encoder's split of the whole output is not known in advance"
            )
        flags = [f for f, v in (("--encoding", encoding), ("--prefix", prefix), ("--suffix", suffix)) if v is not None]
        if flags:
            raise TriecError(f"{values}: a JSON Schema fixes its own spelling (compact JSON); drop {', '.join(flags)}")
        if tool_choice not in ("required", "auto"):
            raise TriecError(f"--tool-choice: expected required or auto, found {tool_choice!r}")
        if tool_choice == "auto":
            if kind != "tools" or tool_format != "hermes":
                raise TriecError(
                    "--tool-choice auto: for a tool registry with --tool-format hermes (free text, then "
                    "calls after the <tool_call> trigger)"
                )
            if engine not in (None, "xgrammar"):
                raise TriecError("--tool-choice auto: the calls are an xgrammar structural tag; use --engine xgrammar")
            doc, kind, engine = _auto_tag(doc, values, not single_call), "tag", "xgrammar"
        if kind == "tag":
            engine = engine or "xgrammar"
        shape = {
            "kind": kind,
            "threshold": enum_threshold,
            "tool_format": tool_format,
            "parallel": not single_call,
            "whitespace": whitespace,
        }
        _compile_schema(
            doc,
            values,
            target,
            tokenizer,
            vocab_size,
            _parse_eos(eos),
            engine or _default_engine(doc, enum_threshold),
            shape,
            zstd,
            as_json,
            quiet,
            phases,
            total0,
        )
        return
    if engine not in (None, "llguidance"):
        raise TriecError("--engine applies to JSON Schemas only (with a large enum, or an enum first: a tool call)")
    with phases.phase("read", f"reading {values}"):
        try:
            raw_values, schema_encoding = read_input(values, fmt)
        except ValuesError as exc:
            if "'const' properties" in str(exc):  # an object schema that is neither flat nor has a large enum
                raise ValuesError(
                    f"{exc}; nor does it hold a string enum of {enum_threshold} or more members "
                    "to serve with a trie (--enum-threshold)"
                ) from None
            raise
    flags = [f for f, v in (("--encoding", encoding), ("--prefix", prefix), ("--suffix", suffix)) if v is not None]
    if schema_encoding is not None and flags:
        raise TriecError(
            f"{values}: a JSON Schema object sets its own encoding, prefix and suffix; drop {', '.join(flags)}"
        )
    spelling = schema_encoding or Encoding(encoding or "raw", prefix or "", suffix or "")
    with phases.phase("tokenizer", "loading tokenizer"):
        vocab = Vocabulary.load(tokenizer, vocab_size=vocab_size, eos_token_ids=_parse_eos(eos))
    with phases.phase("automaton", "building the vocabulary automaton (cached after the first run)"):
        if implementation == "numpy" and tokenization == "any":
            vocab.automaton  # noqa: B018 - load or build now so its time is reported on its own
    stats = CompileStats()
    with phases.phase("compile", f"compiling {len(raw_values):,} values ({tokenization} tokenization)") as step:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", EosTextWarning)
            table = compile_values(
                raw_values,
                vocab,
                encoding=spelling,
                implementation=implementation,
                stats=stats,
                tokenization=tokenization,
                progress=step if phases.show else None,
                layout=layout,
            )
        for w in caught:  # shown even with --quiet: the artifact may not serve every value
            err.print(f"[yellow]warning:[/] {escape(str(w.message))}", highlight=False, soft_wrap=True)
    with phases.phase("write", f"writing {target}"):
        size = table.save(target, compress=zstd or str(target).endswith(".zst"))
    total = time.perf_counter() - total0

    tails = table.tails
    stored = table.allowed_offsets if tails is None else tails.offsets  # a tail table's rows are never expanded
    counts = stored[1:].astype("int64") - stored[:-1]
    summary: dict[str, Any] = {
        "output": str(target),
        "artifact_bytes": size,
        "compressed": bool(zstd or str(target).endswith(".zst")),
        "tokenizer": vocab.name,
        "tokenizer_fingerprint": vocab.fingerprint,
        "vocab_size": vocab.vocab_size,
        "eos_token_ids": list(vocab.eos_token_ids),
        "encoding": spelling.to_header(),
        "tokenization": table.tokenization,
        "values": stats.num_values,
        "duplicates_removed": stats.duplicates,
        "value_bytes": stats.value_bytes,
        "states": stats.num_states,
        "sharing_ratio": round(stats.sharing_ratio, 4),
        "allowed_pairs": stats.num_allowed,
        "layout": "full" if tails is None else "tails",
        "tail_states": 0 if tails is None else tails.num_tails,
        "max_allowed": int(counts.max()) if counts.size else 0,
        "root_allowed": int(counts[0]) if counts.size else 0,
        "seconds": {
            "read_values": round(phases.seconds["read"], 6),
            "tokenizer": round(phases.seconds["tokenizer"], 6),
            "automaton": round(phases.seconds["automaton"], 6),
            "values": round(
                stats.phases.get("values", 0.0) + phases.seconds["compile"] - sum(stats.phases.values()), 6
            ),
            "trie": round(stats.phases.get("trie", 0.0), 6),
            "masks": round(stats.phases.get("masks", 0.0), 6),
            "write": round(phases.seconds["write"], 6),
            "total": round(total, 6),
        },
    }
    if "encode" in stats.phases:  # canonical: the encoder's batch
        summary["seconds"]["encode"] = round(stats.phases["encode"], 6)
    if quiet:  # nothing on success, --json or not (issue 37)
        return
    if as_json:
        out.print_json(json.dumps(summary))
    else:
        _print_summary(summary)


def _compile_pattern(
    pattern: str | None,
    name: str | None,
    output: Path | None,
    tokenizer: str | None,
    vocab_size: int | None,
    eos: list[int] | None,
    max_states: int,
    zstd: bool,
    as_json: bool,
    quiet: bool,
    schema: dict[str, Any] | None = None,
    default: Path | None = None,
) -> None:
    """``--pattern REGEX`` or ``--format NAME`` (no VALUES), or a string schema's file: a pattern table."""
    from triec.cli._progress import Phases
    from triec.compiler.pattern import compile_pattern, compile_string_schema
    from triec.tokenizer.vocabulary import Vocabulary

    target = _output_target(output, default or Path(f"{name or 'pattern'}.triec"), zstd)
    phases = Phases(show=not (quiet or as_json))
    total0 = time.perf_counter()
    with phases.phase("tokenizer", "loading tokenizer"):
        vocab = Vocabulary.load(tokenizer, vocab_size=vocab_size, eos_token_ids=eos)
    with phases.phase("automaton", "building the vocabulary automaton (cached after the first run)"):
        vocab.automaton  # noqa: B018 - load or build now so its time is reported on its own
    stats: dict[str, Any] = {}
    with phases.phase("compile", f"compiling {'format ' + name if name else 'the pattern'}"):
        if schema is not None:
            table = compile_string_schema(schema, vocab, max_states=max_states, stats=stats)
            name = table.format_name
        else:
            table = compile_pattern(pattern, vocab, format=name, max_states=max_states, stats=stats)
    with phases.phase("write", f"writing {target}"):
        size = table.save(target, compress=zstd or str(target).endswith(".zst"))
    counts = table.allowed_offsets[1:].astype("int64") - table.allowed_offsets[:-1]
    summary: dict[str, Any] = {
        "output": str(target),
        "kind": table.kind.value,
        "format": name,
        "pattern": table.pattern,
        "artifact_bytes": size,
        "tokenizer": vocab.name,
        "tokenizer_fingerprint": vocab.fingerprint,
        "vocab_size": vocab.vocab_size,
        "eos_token_ids": list(vocab.eos_token_ids),
        "states": table.num_states,
        "accepting_states": table.num_values,
        "allowed_pairs": table.num_allowed,
        "max_allowed": int(counts.max()) if counts.size else 0,
        "root_allowed": int(counts[0]) if counts.size else 0,
        "seconds": {
            "tokenizer": round(phases.seconds["tokenizer"], 6),
            "automaton": round(phases.seconds["automaton"], 6),
            "dfa": round(stats["dfa_seconds"], 6),
            "rows": round(stats["rows_seconds"], 6),
            "write": round(phases.seconds["write"], 6),
            "total": round(time.perf_counter() - total0, 6),
        },
    }
    if quiet:
        return
    if as_json:
        out.print_json(json.dumps(summary, ensure_ascii=False))
        return
    from rich.table import Table

    t = Table(title=escape(f"triec compile (pattern) → {target}"), show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column()
    if name:
        t.add_row("format", escape(name))
    t.add_row("pattern", escape(table.pattern))
    t.add_row("DFA states", f"{table.num_states:,} ({table.num_values:,} accepting)")
    t.add_row(
        "allowed (state, token) pairs",
        f"{table.num_allowed:,}  (start {summary['root_allowed']:,}, max {summary['max_allowed']:,})",
    )
    t.add_row("tokenizer", escape(f"{vocab.name}  ({vocab.vocab_size:,} wide, EOS {list(vocab.eos_token_ids)})"))
    t.add_row("artifact", f"{size:,} bytes")
    t.add_row("time (ms)", "  ".join(f"{k} {1000 * v:.1f}" for k, v in summary["seconds"].items()))
    out.print(t)


def _string_schema(values: str, fmt: str) -> dict[str, Any] | None:
    """The parsed schema when VALUES is a file holding a string schema with a ``format`` or ``pattern`` alone."""
    from triec.compiler.pattern import string_schema_regex
    from triec.compiler.values import MAX_VALUES_BYTES

    if values == "-" or fmt == "lines":
        return None
    try:
        path = Path(values)
        if not path.is_file() or path.stat().st_size > min(MAX_VALUES_BYTES, 1 << 20):
            return None
        doc = json.loads(path.read_bytes().decode("utf-8-sig"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    if isinstance(doc, dict) and doc.get("type") == "string":
        from triec.schema.keywords import check_keywords

        check_keywords(doc, values)  # a keyword of the wrong type is refused naming it, not read as absent
    try:
        return doc if string_schema_regex(doc) is not None else None
    except TriecError:
        return doc  # a pattern triec refuses: compile_string_schema says why


def _schema_document(values: str, fmt: str, threshold: int) -> tuple[str, Any] | None:
    """(kind, parsed JSON) when VALUES is for the schema layer, else None: ``"tools"`` for a tool registry,
    ``"tag"`` for an xgrammar structural tag, ``"schema"`` for a JSON Schema for
    :func:`~triec.schema.compile.compile_schema`.

    That is a JSON object holding a string enum of ``threshold`` members or more anywhere, or one whose first
    property is an enum followed by more properties (a tool call); a flat object (one enum and constants) is
    a finite set compiled whole, no engine needed, and a bare enum fragment a list of values.
    """
    from triec.compiler.values import MAX_VALUES_BYTES
    from triec.schema.locate import locate
    from triec.schema.shape import looks_like_tool_schema

    if values == "-" or fmt == "lines":
        return None
    try:
        path = Path(values)
        if not path.is_file() or path.stat().st_size > MAX_VALUES_BYTES:
            return None  # read_values reports FIFOs, directories and oversized files
        raw = path.read_bytes()
    except OSError:
        return None  # read_values reports it
    if raw.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] not in (b"{", b"["):
        return None
    try:
        doc = json.loads(raw.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    from triec.schema.tools import looks_like_tools

    if looks_like_tools(doc):
        return "tools", doc
    if not isinstance(doc, dict):
        return None
    if doc.get("type") in ("structural_tag", "tags_with_separator", "tag", "triggered_tags") or (
        "structures" in doc and "triggers" in doc
    ):
        return "tag", doc
    tool = looks_like_tool_schema(doc) and len(doc["properties"]) >= 2
    try:
        large = bool(locate(doc, threshold, patterns=True).sites)  # a large enum, or a format or pattern field
    except RecursionError:
        return None
    if not (tool or large) or set(doc) <= {"enum", "type", "title", "description", "$comment", "examples"}:
        return None  # no enum to serve, or an enum fragment alone: read_input compiles or refuses it
    from triec.compiler.json_schema import parse_schema
    from triec.errors import ValuesError

    try:  # a flat schema (the enum plus const properties) is a finite set: compiled whole, no engine needed
        parse_schema(doc)
    except ValuesError:
        return "schema", doc
    return None


def _default_engine(doc: Any, threshold: int) -> str:
    """llguidance, but xgrammar for a schema whose only slots are format or pattern fields: their tables follow
    xgrammar's spelling of them, so its masks are the ones they equal (docs/patterns.md)."""
    from triec.schema.locate import locate

    sites = locate(doc, threshold, patterns=True).sites if isinstance(doc, dict) else []
    return "xgrammar" if sites and all(s.is_pattern for s in sites) else "llguidance"


def _auto_tag(doc: Any, source: str, parallel: bool) -> dict[str, Any]:
    """A registry as the triggered hermes tag vLLM sends for ``tool_choice="auto"`` and strict tools."""
    from triec.schema.tags import hermes_tag
    from triec.schema.tools import parse_tools

    return hermes_tag([(t.name, t.parameters) for t in parse_tools(doc, source, "xgrammar")], "auto", parallel)


def _compile_schema(
    doc: Any,
    values: str,
    target: Path,
    tokenizer: str | None,
    vocab_size: int | None,
    eos: list[int] | None,
    engine: str,
    shape: dict[str, Any],
    zstd: bool,
    as_json: bool,
    quiet: bool,
    phases: Phases,
    total0: float,
) -> None:
    from triec.compiler.entry import CompileStats
    from triec.schema.compile import compile_schema, compile_structural_tag, compile_tools
    from triec.tokenizer.vocabulary import Vocabulary
    from triec.verify.inspect import slot_summary, tail_rows

    threshold = shape["threshold"]

    with phases.phase("tokenizer", "loading tokenizer"):
        vocab = Vocabulary.load(tokenizer, vocab_size=vocab_size, eos_token_ids=eos)
    with phases.phase("automaton", "building the vocabulary automaton (cached after the first run)"):
        vocab.automaton  # noqa: B018
    stats = CompileStats()
    with phases.phase("compile", f"compiling the {'tool registry' if shape['kind'] == 'tools' else shape['kind']}"):
        if shape["kind"] == "tools":
            table = compile_tools(
                doc,
                vocab,
                format=shape["tool_format"],
                engine=engine,
                parallel=shape["parallel"],
                whitespace=shape["whitespace"],
                stats=stats,
                source=values,
            )
        elif shape["kind"] == "tag":
            table = compile_structural_tag(doc, vocab, engine=engine, stats=stats, source=values)
        else:
            table = compile_schema(
                doc,
                vocab,
                engine=engine,
                threshold=threshold,
                whitespace=shape["whitespace"],
                stats=stats,
                source=values,
            )
    with phases.phase("write", f"writing {target}"):
        size = table.save(target, compress=zstd or str(target).endswith(".zst"))
    slots = [slot_summary(table, i) for i in range(len(table.slots))]
    start = table.slots[table.start_slot] if table.start_slot >= 0 else None
    summary = {
        "output": str(target),
        "kind": table.kind.value,
        "shape": table.info.get("shape", ""),
        "artifact_bytes": size,
        "tokenizer": vocab.name,
        "tokenizer_fingerprint": vocab.fingerprint,
        "vocab_size": vocab.vocab_size,
        "eos_token_ids": list(vocab.eos_token_ids),
        "engine": table.engine,
        "engine_version": table.engine_version,
        "enum_threshold": threshold,
        "slots": [
            {
                k: s[k]
                for k in (
                    "pointer",
                    "pattern",
                    "format",
                    "values",
                    "states",
                    "allowed_pairs",
                    "tail",
                    "entries",
                    "crossing",
                )
                if k in s
            }
            for s in slots
        ],
        "engine_enums": list(table.info.get("engine_enums") or []),
        "engine_patterns": list(table.info.get("engine_patterns") or []),
        "tool_format": table.info.get("format"),
        "parallel": table.info.get("parallel"),
        "whitespace": table.info.get("whitespace", "compact"),
        "grammars": len(table.grammars),
        "name_property": table.info.get("name_property"),
        "names": table.slots[0].num_values
        if table.info.get("shape") in ("tools", "structural-tag")
        else (start.num_values if start is not None else None),
        "trigger": table.info.get("trigger"),
        "values": stats.num_values,
        "duplicates_removed": stats.duplicates,
        "states": stats.num_states,
        "allowed_pairs": stats.num_allowed,
        "straddles_per_tail_offset": tail_rows(start) if start is not None else [],
        "seconds": {
            **{k: round(v, 6) for k, v in stats.phases.items()},
            "tokenizer": round(phases.seconds["tokenizer"], 6),
            "automaton": round(phases.seconds["automaton"], 6),
            "write": round(phases.seconds["write"], 6),
            "total": round(time.perf_counter() - total0, 6),
        },
    }
    if quiet:  # nothing on success, --json or not
        return
    if as_json:
        out.print_json(json.dumps(summary, ensure_ascii=False))
    else:
        _print_schema_summary(table, summary)


def _print_schema_summary(table: Any, summary: dict[str, Any]) -> None:
    from rich.table import Table

    t = Table(
        title=escape(f"triec compile (schema, {summary['shape']}) → {summary['output']}"),
        show_header=False,
        title_justify="left",
    )
    t.add_column(style="bold")
    t.add_column()
    if table.start_slot >= 0:
        nxt = table.info.get("next_property") or "..."
        t.add_row(
            "output",
            escape(
                f"{table.prefix.decode()}<{table.info.get('name_property', 'name')}>{table.tail.decode()}<{nxt}...>"
            ),
        )
    if summary["shape"] == "tools":
        calls = (
            "one or more calls" if summary["parallel"] and summary["tool_format"] in ("vllm", "hermes") else "one call"
        )
        t.add_row(
            "tools", f"{summary['names']:,} in {summary['tool_format']} format ({calls}, {summary['whitespace']} JSON)"
        )
        t.add_row("argument grammars", f"{summary['grammars']:,}, each compiled when a sequence first picks its tool")
    elif summary["shape"] == "structural-tag":
        t.add_row("tag begins", f"{summary['names']:,}, each tag's content compiled when first opened")
        if summary["trigger"]:
            t.add_row("free text", escape(f"around the tags; a tag starts at the trigger {summary['trigger']!r}"))
    else:
        enums = sum("regex" not in s for s in summary["slots"])
        t.add_row(
            "enums served by a trie",
            f"{enums} (at least {summary['enum_threshold']:,} members, or a tool call's names)",
        )
        if enums < len(summary["slots"]):
            t.add_row("format and pattern fields", f"{len(summary['slots']) - enums}, each served by its DFA's table")
    for s in summary["slots"]:
        what = f"format {s['format']}" if s.get("format") else (f"pattern {s['pattern']}" if "regex" in s else "")
        size = escape(what) if what else f"K = {s['values']:,}"
        t.add_row(escape(f"  {s['pointer'] or '/'}"), f"{size}, {s['states']:,} states")
    if summary["engine_enums"]:
        t.add_row("enums left in the engine", f"{len(summary['engine_enums'])}")
        for e in summary["engine_enums"]:
            t.add_row(escape(f"  {e['pointer'] or '/'}"), escape(f"K = {e['values']:,}: {e['reason']}"))
    if summary["engine_patterns"]:
        t.add_row("format and pattern fields left in the engine", f"{len(summary['engine_patterns'])}")
        for e in summary["engine_patterns"]:
            t.add_row(escape(f"  {e['pointer'] or '/'}"), escape(e["reason"]))
    if summary["duplicates_removed"]:
        t.add_row("duplicates removed", f"{summary['duplicates_removed']:,}")
    t.add_row("trie states / allowed pairs", f"{summary['states']:,} / {summary['allowed_pairs']:,}")
    t.add_row("grammars", f"{summary['grammars']:,}")
    t.add_row("engine", f"{table.engine} {table.engine_version or ''}")
    t.add_row(
        "tokenizer", escape(f"{summary['tokenizer']}  ({summary['vocab_size']:,} wide, EOS {summary['eos_token_ids']})")
    )
    t.add_row("artifact", f"{summary['artifact_bytes']:,} bytes")
    t.add_row("time (ms)", "  ".join(f"{k} {1000 * v:.1f}" for k, v in summary["seconds"].items()))
    out.print(t)


def _print_summary(s: dict[str, Any]) -> None:
    from rich.table import Table

    t = Table(title=escape(f"triec compile → {s['output']}"), show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column(justify="right")
    t.add_row(
        "values (K)",
        f"{s['values']:,}" + (f"  ({s['duplicates_removed']:,} duplicates removed)" if s["duplicates_removed"] else ""),
    )
    t.add_row("value bytes", f"{s['value_bytes']:,}")
    enc = s["encoding"]
    if enc != {"name": "raw", "prefix": "", "suffix": ""}:
        t.add_row("encoding", escape(f"{enc['name']}, prefix {enc['prefix']!r}, suffix {enc['suffix']!r}"))
    if s.get("tokenization") == "canonical":
        t.add_row("tokenization", "canonical (each value's encoder tokens only; states are token-trie nodes)")
    t.add_row("states", f"{s['states']:,}")
    if s.get("layout") == "tails":
        t.add_row("tail states (rows served from the values)", f"{s['tail_states']:,}")
    t.add_row("prefix sharing r = states/bytes", f"{s['sharing_ratio']:.3f}")
    t.add_row(
        "allowed (state, token) pairs",
        f"{s['allowed_pairs']:,}  (root {s['root_allowed']:,}, max {s['max_allowed']:,})",
    )
    t.add_row("tokenizer", escape(f"{s['tokenizer']}  ({s['vocab_size']:,} wide, EOS {s['eos_token_ids']})"))
    t.add_row("artifact", f"{s['artifact_bytes']:,} bytes" + (" (zstd)" if s["compressed"] else ""))
    sec = s["seconds"]
    t.add_row(
        "time (ms)",
        "  ".join(
            f"{k} {1000 * sec[k]:.1f}"
            for k in ("tokenizer", "automaton", "encode", "trie", "masks", "write", "total")
            if k in sec
        ),
    )
    out.print(t)
