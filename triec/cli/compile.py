"""``triec compile``: values file + tokenizer -> artifact."""

from __future__ import annotations

import json
import time
import warnings
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from triec.cli._common import app, err, key_value_table, out, report_errors
from triec.errors import TriecError
from triec.schema.locate import DEFAULT_THRESHOLD

if TYPE_CHECKING:
    from triec.cli._progress import Phases
    from triec.cli.compile_groups import GroupOptions
    from triec.compiler.entry import CompileStats
    from triec.runtime.table import MaskTable
    from triec.schema.table import SchemaTable
    from triec.tokenizer.vocabulary import Vocabulary


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
        str | None,
        typer.Argument(
            help="Values file: one per line, a JSON array, a JSON Schema enum, or a flat object schema; - for stdin. "
            "None with --pattern or --string-format."
        ),
    ] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            "-t",
            "--tokenizer",
            help="Bundled name (gpt2, qwen2), tokenizer.json path or directory, GGUF file, or Hugging Face repo id. Default: qwen2.",
        ),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Artifact path. Default: VALUES' stem + .triec.")
    ] = None,
    vocab_size: Annotated[
        int | None,
        typer.Option(
            "--vocab-size", min=1, help="Mask width: the model's logits size (padding ids are never allowed)."
        ),
    ] = None,
    eos: Annotated[
        list[str] | None,
        typer.Option("--eos", help="EOS token id(s); repeat or comma-separate. Default: from the tokenizer."),
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help="How VALUES is written: auto, lines or json.")] = "auto",
    string_format: Annotated[
        str | None,
        typer.Option(
            "--string-format",
            help="Without VALUES: compile one of JSON Schema's string formats into a pattern table: date, time, "
            "date-time, uuid or ipv4 (xgrammar's spelling of them).",
        ),
    ] = None,
    pattern: Annotated[
        str | None,
        typer.Option(
            "--pattern",
            help="Without VALUES: compile this regular expression (JSON Schema's pattern subset; the whole output "
            "matches) into a pattern table.",
        ),
    ] = None,
    max_states: Annotated[
        int,
        typer.Option(
            "--max-states",
            min=1,
            help="--pattern, --string-format, and a schema's format and pattern fields: refuse a minimal DFA larger than this.",
        ),
    ] = 10_000,
    max_work: Annotated[
        int,
        typer.Option(
            "--max-work",
            min=1,
            help="--pattern, --string-format: refuse a pattern whose rows over the vocabulary would take more than "
            "this many DFA steps to find (refused as soon as the walk passes it; docs/patterns.md).",
        ),
    ] = 100_000_000,
    encoding: Annotated[
        str | None,
        typer.Option(
            "--encoding",
            help="How each value is written: raw (as is) or json (its JSON string literal, quotes included). Default: raw.",
        ),
    ] = None,
    prefix: Annotated[
        str | None, typer.Option("--prefix", help="Literal text written before every value, e.g. '{\"tool\": '.")
    ] = None,
    suffix: Annotated[
        str | None, typer.Option("--suffix", help="Literal text written after every value, e.g. '}'.")
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
        str | None,
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
    ids: Annotated[
        str | None,
        typer.Option(
            "--ids",
            metavar="FILE",
            help="Without VALUES: a semantic-ID catalog, one item per line, its token ids separated by spaces (- for "
            "stdin); the table is their token trie. Needs --vocab-size and --eos, or -t.",
        ),
    ] = None,
    layout: Annotated[
        str,
        typer.Option(
            "--layout",
            help="Plain value sets: auto (only the branching states' rows stored where one value alone lies below most states: titles, names; format version 4), full (every state's row, versions 1 and 2) or tails (version 4 always).",
        ),
    ] = "auto",
    groups: Annotated[
        str | None,
        typer.Option(
            "--groups",
            metavar="FILE",
            help="Plain value sets: group-then-value. FILE has lines 'value<TAB>group' (every value once); the table "
            "spells each value as 'group > value' and the answer is the value.",
        ),
    ] = None,
    group_separator: Annotated[
        str | None,
        typer.Option(
            "--group-separator",
            metavar="SEP",
            help="Plain value sets: group each value by its namespace, the text before the first SEP "
            "(slack.send -> slack with '.'); values without one go to the group 'other'.",
        ),
    ] = None,
    group_kmeans: Annotated[
        int | None,
        typer.Option(
            "--group-kmeans",
            metavar="G",
            help="Plain value sets: G groups by k-means over --vectors, or over word TF-IDF vectors of the values "
            "(a good G: the square root of the number of values); each labelled by its members' commonest word.",
        ),
    ] = None,
    vectors: Annotated[
        str | None,
        typer.Option(
            "--vectors",
            metavar="FILE.npy",
            help="--group-kmeans: a numpy array, one row per line of VALUES (embeddings of each value).",
        ),
    ] = None,
    group_join: Annotated[
        str | None,
        typer.Option(
            "--group-join",
            metavar="TEXT",
            help="Grouped tables: the text between a group's label and a value (default ' > '; no label may hold it).",
        ),
    ] = None,
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
    opts = _Options.of(ctx, locals())
    _refuse_old_format(opts)
    if ids is not None:
        _ids_mode(opts, ids)
        return
    if values is None or pattern is not None or string_format is not None:
        _pattern_mode(ctx, opts)
        return
    _check_values_file_options(opts, values)
    string_schema = _string_schema(values, fmt)
    if string_schema is not None:  # {"type": "string", "format": ...} or "pattern": a pattern table of its JSON string
        _refuse_inapplicable(opts, STRING_SCHEMA_OPTIONS, f"{values} is a string schema (a pattern table)")
        _compile_pattern(opts, None, None, schema=string_schema, default=_default_output(values))
        return
    found = _schema_document(values, fmt, enum_threshold)
    if found is not None:
        _schema_mode(opts, values, *found)
        return
    _values_mode(opts, values)


# ---------------------------------------------------------------- options: which were given, which apply where

COMMON_OPTIONS = frozenset({"values", "tokenizer", "output", "vocab_size", "eos", "zstd", "as_json", "quiet"})
"""What every mode takes: the tokenizer, the mask width and EOS, where the artifact goes, how the summary prints."""
PATTERN_OPTIONS = COMMON_OPTIONS | {"pattern", "string_format", "max_states", "max_work"}
IDS_OPTIONS = (COMMON_OPTIONS - {"values"}) | {"ids"}
STRING_SCHEMA_OPTIONS = COMMON_OPTIONS | {"fmt", "max_states", "max_work"}
SCHEMA_OPTIONS: dict[str, frozenset[str]] = {
    "schema": COMMON_OPTIONS | {"fmt", "engine", "enum_threshold", "whitespace", "max_states"},
    "tools": COMMON_OPTIONS
    | {"fmt", "engine", "enum_threshold", "whitespace", "tool_format", "single_call", "tool_choice"},
    "tag": COMMON_OPTIONS | {"fmt", "engine", "enum_threshold"},
}
VALUES_OPTIONS = COMMON_OPTIONS | {
    "fmt",
    "encoding",
    "prefix",
    "suffix",
    "implementation",
    "tokenization",
    "layout",
    "groups",
    "group_separator",
    "group_kmeans",
    "vectors",
    "group_join",
    "enum_threshold",  # decides whether an object schema holds an enum large enough to be a schema artifact
}
_WHAT_FOR: dict[str, str] = {
    "fmt": "value files",
    "encoding": "plain value sets",
    "prefix": "plain value sets",
    "suffix": "plain value sets",
    "implementation": "plain value sets",
    "tokenization": "plain value sets",
    "layout": "plain value sets",
    "groups": "plain value sets",
    "group_separator": "plain value sets",
    "group_kmeans": "plain value sets",
    "vectors": "plain value sets",
    "group_join": "plain value sets",
    "ids": "semantic-ID catalogs",
    "engine": "JSON Schemas, tool registries and structural tags",
    "enum_threshold": "value files and JSON Schemas",
    "whitespace": "JSON Schemas and tool registries",
    "tool_format": "tool registries",
    "single_call": "tool registries",
    "tool_choice": "tool registries",
    "max_states": "patterns, named string formats and JSON Schemas",
    "max_work": "patterns and named string formats",
}
"""What each mode-specific option is for, said in the refusal so that it names no option the user did not pass."""
_SCHEMA_KINDS = {"schema": "a JSON Schema", "tools": "a tool registry", "tag": "an xgrammar structural tag"}


@dataclass(frozen=True)
class _Options:
    """``triec compile``'s parameters as parsed, and which of them the user gave (``flags``: name -> ``--option``,
    in declaration order), so that a refusal names only those."""

    values: str | None
    tokenizer: str | None
    output: Path | None
    vocab_size: int | None
    eos: list[str] | None
    fmt: str
    string_format: str | None
    pattern: str | None
    max_states: int
    max_work: int
    encoding: str | None
    prefix: str | None
    suffix: str | None
    zstd: bool
    implementation: str
    as_json: bool
    quiet: bool
    engine: str | None
    enum_threshold: int
    tool_format: str
    single_call: bool
    tool_choice: str
    tokenization: str
    whitespace: str
    layout: str
    ids: str | None
    groups: str | None
    group_separator: str | None
    group_kmeans: int | None
    vectors: str | None
    group_join: str | None
    given: dict[str, str]

    @classmethod
    def of(cls, ctx: typer.Context, params: dict[str, Any]) -> _Options:
        names = {f.name for f in fields(cls)} - {"given"}
        return cls(**{k: params[k] for k in names}, given=given_options(ctx))


def given_options(ctx: typer.Context) -> dict[str, str]:
    """The parameters set on the command line or from the environment (not left at their defaults), each with
    the spelling a user types (its longest ``--`` name; an argument's metavar)."""
    given: dict[str, str] = {}
    for p in ctx.command.params:
        source = ctx.get_parameter_source(p.name) if p.name else None
        if source is None or source.name not in ("COMMANDLINE", "ENVIRONMENT", "PROMPT"):
            continue
        longs = [o for o in p.opts if o.startswith("--")]
        given[str(p.name)] = max(longs, key=len) if longs else str(p.name).upper()
    return given


def inapplicable_message(given: dict[str, str], applicable: frozenset[str], subject: str) -> str | None:
    """The one-line refusal of every given option outside ``applicable`` (None when there is none), naming those
    options only and what each is for."""
    extra = [name for name in given if name not in applicable]
    if not extra:
        return None
    by_use: dict[str, list[str]] = {}
    for name in extra:
        by_use.setdefault(_WHAT_FOR.get(name, "another mode"), []).append(given[name])
    flags = ", ".join(given[name] for name in extra)
    verb = "does" if len(extra) == 1 else "do"
    if len(by_use) == 1:
        use = f"for {next(iter(by_use))} only"
    else:
        use = "; ".join(f"{', '.join(names)}: {what}" for what, names in by_use.items())
    return f"{subject}: {flags} {verb} not apply ({use})"


def _refuse_inapplicable(opts: _Options, applicable: frozenset[str], subject: str) -> None:
    message = inapplicable_message(opts.given, applicable, subject)
    if message is not None:
        raise TriecError(message)


def _refuse_old_format(opts: _Options) -> None:
    """``--format`` is the values file's format only; a named string format (its old second meaning) is told
    where it went, with or without VALUES."""
    from triec.compiler.pattern import FORMATS as NAMED
    from triec.compiler.values import FORMATS

    if opts.fmt in NAMED:
        raise TriecError(
            f"--format {opts.fmt}: named string formats have their own option now; use --string-format {opts.fmt} "
            f"(--format is the values file's format: {', '.join(FORMATS)})"
        )
    if opts.fmt not in FORMATS:
        raise TriecError(f"--format: expected one of {', '.join(FORMATS)}, found {opts.fmt!r}")


def _missing_values(ctx: typer.Context) -> Exception:
    try:  # typer >= 0.20 vendors click (as triec.cli.main reads it)
        from typer._click import exceptions as click
    except ImportError:  # pragma: no cover - depends on the installed typer
        from click import exceptions as click  # type: ignore[no-redef]  # the same module, from where older typer has it

    return click.UsageError("Missing argument 'VALUES' (or --pattern REGEX, or --string-format NAME).", ctx=ctx)


# ---------------------------------------------------------------- the modes


def _pattern_mode(ctx: typer.Context, opts: _Options) -> None:
    """``--pattern REGEX`` or ``--string-format NAME``, without VALUES: a pattern table."""
    if opts.values is not None:
        given = opts.given.get("pattern") or opts.given["string_format"]
        what = "a regular expression" if given == "--pattern" else "a named string format"
        raise TriecError(f"{given} compiles {what}: pass it without VALUES")
    if opts.pattern is None and opts.string_format is None:
        raise _missing_values(ctx)
    if opts.pattern is not None and opts.string_format is not None:
        raise TriecError("--pattern, --string-format: pass one (a named format is a pattern of its own)")
    subject = "--pattern" if opts.pattern is not None else f"--string-format {opts.string_format}"
    _refuse_inapplicable(opts, PATTERN_OPTIONS, subject)
    _compile_pattern(opts, opts.pattern, opts.string_format)


def _ids_mode(opts: _Options, ids: str) -> None:
    """``--ids FILE``: a semantic-ID catalog's token trie (:mod:`triec.cli.compile_ids`)."""
    from triec.cli.compile_ids import compile_ids_file

    if opts.values is not None:
        raise TriecError(f"--ids compiles the items of FILE: pass it without VALUES (found {opts.values!r})")
    _refuse_inapplicable(opts, IDS_OPTIONS, "--ids")
    target = _output_target(opts.output, _default_output(ids), opts.zstd)
    if ids != "-" and target.exists() and Path(ids).exists() and target.resolve() == Path(ids).resolve():
        raise TriecError(f"{target}: is the --ids file itself; pass another path with -o")
    compile_ids_file(
        ids,
        target,
        opts.tokenizer,
        opts.vocab_size,
        _parse_eos(opts.eos),
        zstd=opts.zstd,
        as_json=opts.as_json,
        quiet=opts.quiet,
    )


def _check_values_file_options(opts: _Options, values: str) -> None:
    """The values of the options a VALUES file may take, and the output path, checked before any work."""
    from triec.encoding import ENCODINGS
    from triec.runtime.kinds import TOKENIZATIONS

    if opts.encoding is not None and opts.encoding not in ENCODINGS:
        raise TriecError(f"--encoding: expected one of {', '.join(ENCODINGS)}, found {opts.encoding!r}")
    if opts.implementation not in ("numpy", "reference"):
        raise TriecError(f"--implementation: expected numpy or reference, found {opts.implementation!r}")
    target = _output_target(opts.output, _default_output(values), opts.zstd)
    if values != "-" and target.exists() and Path(values).exists() and target.resolve() == Path(values).resolve():
        raise TriecError(f"{target}: is the values file itself; pass another path with -o")
    if opts.whitespace not in ("compact", "any"):
        raise TriecError(f"--whitespace: expected compact or any, found {opts.whitespace!r}")
    if opts.tokenization not in TOKENIZATIONS:
        raise TriecError(f"--tokenization: expected one of {', '.join(TOKENIZATIONS)}, found {opts.tokenization!r}")
    _group_options(opts).check()


def _group_options(opts: _Options) -> GroupOptions:
    from triec.cli.compile_groups import GroupOptions

    return GroupOptions(opts.groups, opts.group_separator, opts.group_kmeans, opts.vectors, opts.group_join)


def _schema_mode(opts: _Options, values: str, kind: str, doc: Any) -> None:
    """A JSON Schema, a tool registry or a structural tag: a schema artifact, the rest run by the engine."""
    from triec.cli._progress import Phases

    _refuse_inapplicable(opts, SCHEMA_OPTIONS[kind], f"{values} is {_SCHEMA_KINDS[kind]}")
    engine = opts.engine
    if opts.tool_choice not in ("required", "auto"):
        raise TriecError(f"--tool-choice: expected required or auto, found {opts.tool_choice!r}")
    if opts.tool_choice == "auto":
        if opts.tool_format != "hermes":
            raise TriecError(
                "--tool-choice auto: for a tool registry with --tool-format hermes (free text, then "
                "calls after the <tool_call> trigger)"
            )
        if engine not in (None, "xgrammar"):
            raise TriecError("--tool-choice auto: the calls are an xgrammar structural tag; use --engine xgrammar")
        doc, kind, engine = _auto_tag(doc, values, not opts.single_call), "tag", "xgrammar"
    if kind == "tag":
        engine = engine or "xgrammar"
    shape = {
        "kind": kind,
        "threshold": opts.enum_threshold,
        "tool_format": opts.tool_format,
        "parallel": not opts.single_call,
        "whitespace": opts.whitespace,
        "max_states": opts.max_states,
    }
    _compile_schema(
        doc,
        values,
        _output_target(opts.output, _default_output(values), opts.zstd),
        opts.tokenizer,
        opts.vocab_size,
        _parse_eos(opts.eos),
        engine or _default_engine(doc, opts.enum_threshold),
        shape,
        opts.zstd,
        opts.as_json,
        opts.quiet,
        Phases(show=not (opts.quiet or opts.as_json)),
        time.perf_counter(),
    )


def _values_mode(opts: _Options, values: str) -> None:
    """A plain value set (lines, a JSON array, an enum, a flat object schema): a mask table of its trie."""
    from triec.cli._progress import Phases
    from triec.compiler.entry import CompileStats
    from triec.compiler.entry import compile as compile_values
    from triec.compiler.groups import spell_grouped, with_groups
    from triec.compiler.values import read_input
    from triec.encoding import Encoding
    from triec.errors import EosTextWarning, ValuesError
    from triec.tokenizer.vocabulary import Vocabulary

    _refuse_inapplicable(opts, VALUES_OPTIONS, f"{values} is a plain value set")
    target = _output_target(opts.output, _default_output(values), opts.zstd)
    phases = Phases(show=not (opts.quiet or opts.as_json))
    total0 = time.perf_counter()
    with phases.phase("read", f"reading {values}"):
        try:
            raw_values, schema_encoding = read_input(values, opts.fmt)
        except ValuesError as exc:
            if "'const' properties" in str(exc):  # an object schema that is neither flat nor has a large enum
                raise ValuesError(
                    f"{exc}; nor does it hold a string enum of {opts.enum_threshold} or more members "
                    "to serve with a trie (--enum-threshold)"
                ) from None
            raise
    flags = [opts.given[k] for k in ("encoding", "prefix", "suffix") if k in opts.given]
    if schema_encoding is not None and flags:
        raise TriecError(
            f"{values}: a JSON Schema object sets its own encoding, prefix and suffix; drop {', '.join(flags)}"
        )
    spelling = schema_encoding or Encoding(opts.encoding or "raw", opts.prefix or "", opts.suffix or "")
    grouping = _group_options(opts)
    grouped: tuple[dict[str, str], str] | None = None
    if grouping.any:
        from triec.cli.compile_groups import group_values

        with phases.phase("groups", "grouping the values"):
            grouped = group_values(grouping, raw_values)
    with phases.phase("tokenizer", "loading tokenizer"):
        vocab = Vocabulary.load(opts.tokenizer, vocab_size=opts.vocab_size, eos_token_ids=_parse_eos(opts.eos))
    with phases.phase("automaton", "building the vocabulary automaton (cached after the first run)"):
        if opts.implementation == "numpy" and opts.tokenization == "any":
            vocab.automaton  # noqa: B018 - load or build now so its time is reported on its own
    stats = CompileStats()
    with phases.phase("compile", f"compiling {len(raw_values):,} values ({opts.tokenization} tokenization)") as step:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", EosTextWarning)
            table = compile_values(
                raw_values if grouped is None else spell_grouped(raw_values, *grouped),
                vocab,
                encoding=spelling,
                implementation=opts.implementation,
                stats=stats,
                tokenization=opts.tokenization,
                progress=step if phases.show else None,
                layout=opts.layout,
            )
        for w in caught:  # shown even with --quiet: the artifact may not serve every value
            err.print(f"[yellow]warning:[/] {escape(str(w.message))}", highlight=False, soft_wrap=True)
    if grouped is not None:
        table.hold_header(with_groups(table.table_header, grouped[1], len(set(grouped[0].values()))))
    with phases.phase("write", f"writing {target}"):
        size = table.save(target, compress=opts.zstd or str(target).endswith(".zst"))
    summary = _values_summary(table, vocab, stats, phases.seconds, time.perf_counter() - total0)
    summary.update(output=str(target), artifact_bytes=size, compressed=bool(opts.zstd or str(target).endswith(".zst")))
    summary["encoding"] = spelling.to_header()
    if grouped is not None:
        summary["groups"] = table.build_options["groups"]
    if opts.quiet:  # nothing on success, --json or not (issue 37)
        return
    if opts.as_json:
        out.print_json(json.dumps(summary))
    else:
        _print_summary(summary)


def _values_summary(
    table: MaskTable, vocab: Vocabulary, stats: CompileStats, seconds: dict[str, float], total: float
) -> dict[str, Any]:
    """What a plain value set's compile reports (``--json``'s keys, in their order), less where it was written."""
    tails = table.tails
    stored = table.allowed_offsets if tails is None else tails.offsets  # a tail table's rows are never expanded
    counts = stored[1:].astype("int64") - stored[:-1]
    summary: dict[str, Any] = {
        "output": "",
        "artifact_bytes": 0,
        "compressed": False,
        "tokenizer": vocab.name,
        "tokenizer_fingerprint": vocab.fingerprint,
        "vocab_size": vocab.vocab_size,
        "eos_token_ids": list(vocab.eos_token_ids),
        "encoding": {},
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
            "read_values": round(seconds["read"], 6),
            "tokenizer": round(seconds["tokenizer"], 6),
            "automaton": round(seconds["automaton"], 6),
            "values": round(stats.phases.get("values", 0.0) + seconds["compile"] - sum(stats.phases.values()), 6),
            "trie": round(stats.phases.get("trie", 0.0), 6),
            "masks": round(stats.phases.get("masks", 0.0), 6),
            "write": round(seconds["write"], 6),
            "total": round(total, 6),
        },
    }
    if "encode" in stats.phases:  # canonical: the encoder's batch
        summary["seconds"]["encode"] = round(stats.phases["encode"], 6)
    return summary


def _compile_pattern(
    opts: _Options,
    pattern: str | None,
    name: str | None,
    schema: dict[str, Any] | None = None,
    default: Path | None = None,
) -> None:
    """``--pattern REGEX`` or ``--string-format NAME`` (no VALUES), or a string schema's file: a pattern table."""
    from triec.cli._progress import Phases
    from triec.compiler.pattern import FORMATS, compile_pattern, compile_string_schema
    from triec.tokenizer.vocabulary import Vocabulary

    tokenizer, vocab_size, eos, max_states = opts.tokenizer, opts.vocab_size, _parse_eos(opts.eos), opts.max_states
    zstd, as_json, quiet = opts.zstd, opts.as_json, opts.quiet
    target = _output_target(opts.output, default or Path(f"{name or 'pattern'}.triec"), zstd)
    phases = Phases(show=not (quiet or as_json))
    total0 = time.perf_counter()
    with phases.phase("tokenizer", "loading tokenizer"):
        vocab = Vocabulary.load(tokenizer, vocab_size=vocab_size, eos_token_ids=eos)
    with phases.phase("automaton", "building the vocabulary automaton (cached after the first run)"):
        vocab.automaton  # noqa: B018 - load or build now so its time is reported on its own
    stats: dict[str, Any] = {}
    with phases.phase("compile", f"compiling {'format ' + name if name else 'the pattern'}"):
        if schema is not None:
            table = compile_string_schema(schema, vocab, max_states=max_states, max_work=opts.max_work, stats=stats)
            name = table.format_name
            pattern = schema.get("pattern") if isinstance(schema.get("pattern"), str) else None
        else:
            table = compile_pattern(
                pattern, vocab, format=name, max_states=max_states, max_work=opts.max_work, stats=stats
            )
    with phases.phase("write", f"writing {target}"):
        size = table.save(target, compress=zstd or str(target).endswith(".zst"))
    counts = table.allowed_counts()
    summary: dict[str, Any] = {
        "output": str(target),
        "kind": table.kind.value,
        "format": name,
        "pattern": pattern
        or FORMATS.get(name or "", table.pattern),  # the user's (a string schema's regex is rewritten for its quotes)
        "regex": table.pattern,  # as compiled
        "artifact_bytes": size,
        "tokenizer": vocab.name,
        "tokenizer_fingerprint": vocab.fingerprint,
        "vocab_size": vocab.vocab_size,
        "eos_token_ids": list(vocab.eos_token_ids),
        "states": table.num_states,
        "accepting_states": table.num_values,
        "allowed_pairs": table.num_allowed,
        "token_classes": stats.get("num_classes"),
        "class_pairs": stats.get("num_class_pairs"),
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
    t = key_value_table(escape(f"triec compile (pattern) → {target}"))
    if name:
        t.add_row("format", escape(name))
    t.add_row("pattern", escape(summary["pattern"]))
    t.add_row("DFA states", f"{table.num_states:,} ({table.num_values:,} accepting)")
    t.add_row(
        "allowed (state, token) pairs",
        f"{table.num_allowed:,}  (start {summary['root_allowed']:,}, max {summary['max_allowed']:,})",
    )
    if summary["token_classes"] is not None:
        t.add_row(
            "stored by token class",
            f"{summary['token_classes']:,} classes, {summary['class_pairs']:,} (state, class) pairs",
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
    if not isinstance(doc, dict) or doc.get("type") != "string":
        return None  # string_schema_regex answers None for anything else
    from triec.compiler.schema_keywords import check_keywords

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
    from triec.tokenizer.vocabulary import Vocabulary

    with phases.phase("tokenizer", "loading tokenizer"):
        vocab = Vocabulary.load(tokenizer, vocab_size=vocab_size, eos_token_ids=eos)
    with phases.phase("automaton", "building the vocabulary automaton (cached after the first run)"):
        vocab.automaton  # noqa: B018
    stats = CompileStats()
    with phases.phase("compile", f"compiling the {'tool registry' if shape['kind'] == 'tools' else shape['kind']}"):
        table = _schema_table(doc, values, vocab, engine, shape, stats)
    with phases.phase("write", f"writing {target}"):
        size = table.save(target, compress=zstd or str(target).endswith(".zst"))
    summary = _schema_summary(table, target, size, vocab, shape["threshold"], stats, phases, total0)
    if quiet:  # nothing on success, --json or not
        return
    if as_json:
        out.print_json(json.dumps(summary, ensure_ascii=False))
    else:
        _print_schema_summary(table, summary)


def _schema_table(doc: Any, values: str, vocab: Any, engine: str, shape: dict[str, Any], stats: Any) -> Any:
    """The schema-layer compile for the input's shape: a tool registry, a structural tag, or a JSON Schema."""
    from triec.schema.compile import compile_schema, compile_structural_tag, compile_tools

    if shape["kind"] == "tools":
        return compile_tools(
            doc,
            vocab,
            format=shape["tool_format"],
            engine=engine,
            parallel=shape["parallel"],
            whitespace=shape["whitespace"],
            stats=stats,
            source=values,
        )
    if shape["kind"] == "tag":
        return compile_structural_tag(doc, vocab, engine=engine, stats=stats, source=values)
    return compile_schema(
        doc,
        vocab,
        engine=engine,
        threshold=shape["threshold"],
        whitespace=shape["whitespace"],
        max_states=shape["max_states"],
        stats=stats,
        source=values,
    )


_SLOT_FIELDS = (
    "pointer",
    "regex",
    "pattern",
    "format",
    "values",
    "states",
    "allowed_pairs",
    "tail",
    "entries",
    "crossing",
)
"""What ``--json`` reports of each slot (of :func:`triec.verify.inspect.slot_summary`'s fields)."""


def _schema_summary(
    table: Any,
    target: Path,
    size: int,
    vocab: Any,
    threshold: int,
    stats: Any,
    phases: Phases,
    total0: float,
) -> dict[str, Any]:
    """What ``triec compile`` reports of a schema artifact (``--json`` prints it as it is): the artifact, its
    tokenizer and engine, each slot, what stayed in the engine, the counts and the phases' seconds."""
    from triec.verify.inspect import slot_summary, tail_rows

    slots = [slot_summary(table, i) for i in range(len(table.slots))]
    start = table.slots[table.start_slot] if table.start_slot >= 0 else None
    return {
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
        "slots": [{k: s[k] for k in _SLOT_FIELDS if k in s} for s in slots],
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


def _print_schema_summary(table: SchemaTable, summary: dict[str, Any]) -> None:
    t = key_value_table(escape(f"triec compile (schema, {summary['shape']}) → {summary['output']}"))
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
        if enums:
            t.add_row(
                "enums served by a trie",
                f"{enums} (at least {summary['enum_threshold']:,} members, or a tool call's names)",
            )
        if enums < len(summary["slots"]):
            t.add_row("pattern/format fields", f"{len(summary['slots']) - enums}, each served by a DFA table")
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
    t.add_row("slot states / allowed pairs", f"{summary['states']:,} / {summary['allowed_pairs']:,}")
    t.add_row("grammars", f"{summary['grammars']:,}")
    t.add_row("engine", f"{table.engine} {table.engine_version or ''}")
    t.add_row(
        "tokenizer", escape(f"{summary['tokenizer']}  ({summary['vocab_size']:,} wide, EOS {summary['eos_token_ids']})")
    )
    t.add_row("artifact", f"{summary['artifact_bytes']:,} bytes")
    t.add_row("time (ms)", "  ".join(f"{k} {1000 * v:.1f}" for k, v in summary["seconds"].items()))
    out.print(t)


def _print_summary(s: dict[str, Any]) -> None:
    t = key_value_table(escape(f"triec compile → {s['output']}"), "right")
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
    if "groups" in s:
        t.add_row("groups", escape(f"{s['groups']['count']:,}, spelled 'group{s['groups']['separator']}value'"))
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
