"""Tool registries: K tools, each with its own argument schema, in the call formats models are trained to write.

A registry compiles to one slot (the tool names, after the format's literal
prefix and before its literal tail) and one grammar per distinct argument
schema: the format's call with the name reduced to a marker, fed up to the
arguments once (its *template*). The name picks the grammar (the slot's
``value_grammar``), so no argument grammar is compiled before a sequence first
chooses its tool. Formats that allow several calls continue, after a call, into
the same names slot (a second marker in each tool's grammar).

Formats (compact convention: ``", "`` and ``": "``, properties in order):

=========  ==========================================================  ==================
format     output                                                      calls
=========  ==========================================================  ==================
vllm       ``[{"name": N, "parameters": P}, ...]`` (vLLM's             1 or more (1 with
           ``tool_choice="required"`` schema)                          ``parallel=False``)
hermes     ``<tool_call>\\n{"name": N, "arguments": A}\\n</tool_call>``   1 or more, ``\\n``
                                                                       between
llama3     ``{"name": N, "parameters": P}``                            1
object     ``{"name": N, "arguments": A}``                             1
=========  ==========================================================  ==================
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from triec.encoding import json_string_literal
from triec.errors import ToolsError
from triec.schema.grammar import GrammarSpec

if TYPE_CHECKING:
    from triec.schema.table import SchemaTable

FORMATS = ("vllm", "hermes", "llama3", "object")
NO_ARGUMENTS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
"""What a tool without ``parameters`` takes: exactly ``{}``."""
_CONTROL = re.compile("[\x00-\x1f\x7f]")
_DEFS = ("$defs", "definitions")


@dataclass(frozen=True)
class Tool:
    name: str
    parameters: Any  # a JSON Schema (dict or bool)
    description: str = ""


@dataclass(frozen=True)
class Format:
    name: str
    key: str  # "parameters" or "arguments"
    prefix: str  # before the first call's name
    local_prefix: str  # the part of ``prefix`` the call's grammar reads itself
    multi: bool  # whether calls may follow calls

    @property
    def tail(self) -> str:
        return ", " + json_string_literal(self.key) + ": "


_FORMATS = {
    "vllm": Format("vllm", "parameters", '[{"name": ', '[{"name": ', True),
    "hermes": Format("hermes", "arguments", '<tool_call>\n{"name": ', '{"name": ', True),
    "llama3": Format("llama3", "parameters", '{"name": ', '{"name": ', False),
    "object": Format("object", "arguments", '{"name": ', '{"name": ', False),
}


def tool_format(name: str) -> Format:
    if name not in _FORMATS:
        raise ToolsError(f"unknown tool format {name!r}; expected one of {', '.join(FORMATS)}")
    return _FORMATS[name]


# ---------------------------------------------------------------- reading registries


def looks_like_tools(doc: Any) -> bool:
    """A JSON array of tool entries, or an object ``{"tools": [...]}`` (MCP's ``tools/list`` result)."""
    if isinstance(doc, dict) and isinstance(doc.get("tools"), list):
        doc = doc["tools"]
    return (
        isinstance(doc, list)
        and bool(doc)
        and all(isinstance(t, dict) and ("name" in t or "function" in t) for t in doc)
    )


def parse_tools(doc: Any, source: str = "tools", engine: str = "llguidance") -> list[Tool]:
    """Tools from the OpenAI (``{"type": "function", "function": {...}}`` or the function object itself), MCP
    (``inputSchema``) and Anthropic (``input_schema``) spellings. Errors name the entry and the field."""
    if isinstance(doc, dict) and isinstance(doc.get("tools"), list):
        doc = doc["tools"]
    if not isinstance(doc, list) or not doc:
        raise ToolsError(f'{source}: expected a non-empty JSON array of tools (or {{"tools": [...]}})')
    out: list[Tool] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(doc):
        where = f"{source}: tools[{i}]"
        if not isinstance(entry, dict):
            raise ToolsError(f"{where}: expected an object, found {type(entry).__name__}")
        fn = entry
        if "function" in entry:
            fn = entry["function"]
            if not isinstance(fn, dict):
                raise ToolsError(f"{where}.function: expected an object, found {type(fn).__name__}")
            if entry.get("type", "function") != "function":
                raise ToolsError(f'{where}.type: expected "function", found {entry.get("type")!r}')
            where += ".function"
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise ToolsError(f"{where}.name: expected a non-empty string, found {name!r}")
        if engine == "llguidance" and _CONTROL.search(name):
            raise ToolsError(
                f"{where}.name: {name!r} holds a control character, which llguidance accepts in several "
                "spellings; compile with engine xgrammar or rename the tool"
            )
        if name in seen:
            raise ToolsError(f"{where}.name: {name!r} is already the name of tools[{seen[name]}]; names must be unique")
        seen[name] = i
        params: Any = NO_ARGUMENTS
        for key in ("parameters", "inputSchema", "input_schema"):
            if key in fn:
                params = fn[key]
                if params is None:
                    params = NO_ARGUMENTS
                elif not isinstance(params, (dict, bool)):
                    raise ToolsError(f"{where}.{key}: expected a JSON Schema object, found {type(params).__name__}")
                break
        desc = fn.get("description", "")
        out.append(Tool(name, params, desc if isinstance(desc, str) else ""))
    return out


def _check_refs(schema: dict[str, Any], where: str) -> None:
    """A tool's ``$ref`` must point into its own ``$defs``/``definitions``: its schema moves inside the call's."""

    def visit(node: Any, path: str) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and not any(ref.startswith(f"#/{d}/") for d in _DEFS):
                raise ToolsError(
                    f"{where}{path}.$ref: {ref!r} points outside the tool's $defs; only '#/$defs/...' "
                    "references can move into a call's schema"
                )
            for k, v in node.items():
                visit(v, f"{path}.{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                visit(v, f"{path}[{i}]")

    visit(schema, "")


# ---------------------------------------------------------------- per-tool grammars


def _split_defs(params: Any) -> tuple[Any, dict[str, Any]]:
    """The parameters without their ``$defs``, and those defs (hoisted to the call schema's root)."""
    if not isinstance(params, dict):
        return params, {}
    defs = {d: params[d] for d in _DEFS if isinstance(params.get(d), dict)}
    return {k: v for k, v in params.items() if k not in defs}, defs


def _branch(fmt: Format, name_value: Any, params: Any, strict: bool) -> dict[str, Any]:
    branch: dict[str, Any] = {
        "properties": {"name": {"type": "string", "enum": [name_value]}, fmt.key: params},
        "required": ["name", fmt.key],
    }
    if strict:
        branch = {"type": "object", **branch, "additionalProperties": False}
    return branch


def call_grammar(
    fmt: Format, params: Any, *, parallel: bool, name_marker: str, next_marker: str, whitespace: str = "compact"
) -> GrammarSpec:
    """One tool's grammar: its call with the name ``name_marker``, then (multi-call formats) the next call up to
    its name, ``next_marker``, where the names slot takes over again."""
    from triec.schema.shape import canonical_json

    body, defs = _split_defs(params)
    if fmt.name == "vllm":
        alts = [_branch(fmt, name_marker, body, strict=False)]
        if parallel:
            alts.append({"properties": {"name": {"type": "string", "enum": [next_marker]}}, "required": ["name"]})
        schema: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"type": "object", "anyOf": alts}}
        if not parallel:
            schema["maxItems"] = 1
        return GrammarSpec(canonical_json({**schema, **defs}), whitespace=whitespace)
    schema = {**_branch(fmt, name_marker, body, strict=True), **defs}
    if fmt.name == "hermes":
        after = ["\n</tool_call>"]
        if parallel:
            after.append('\n</tool_call>\n<tool_call>\n{"name": ' + json_string_literal(next_marker))
        return GrammarSpec(canonical_json(schema), tuple(after))
    return GrammarSpec(canonical_json(schema), whitespace=whitespace)


def start_grammar(fmt: Format, parallel: bool, next_marker: str) -> GrammarSpec:
    """With any whitespace the text before the first name is not literal: a grammar of the format's start, whose
    only call's name is the marker where the names slot takes over."""
    from triec.schema.shape import canonical_json

    stub = {"type": "object", "properties": {"name": {"type": "string", "enum": [next_marker]}}, "required": ["name"]}
    if fmt.name == "vllm":
        schema: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"type": "object", "anyOf": [stub]}}
        if not parallel:
            schema["maxItems"] = 1
        return GrammarSpec(canonical_json(schema), whitespace="any")
    return GrammarSpec(canonical_json(stub), whitespace="any")


def call_template(fmt: Format, name_marker: str, *, tail: bool = True) -> bytes:
    """What a tool's grammar reads before its arguments (or, ``tail=False``, before what follows the name): the call
    up to there, the name being the marker."""
    return (fmt.local_prefix + json_string_literal(name_marker) + (fmt.tail if tail else "")).encode("utf-8")


def lazy_call_grammar(
    fmt: Format, name: str, params: Any, parallel: bool, markers: tuple[str, str], whitespace: str = "compact"
) -> Callable[[], GrammarSpec]:
    """The grammar of one tool, built when a sequence first picks the tool (the build never walks or serializes K
    schemas; a schema problem is reported then, naming the tool)."""

    def make() -> GrammarSpec:
        if isinstance(params, dict):
            _check_refs(params, f"tool {name!r}: parameters")
        spec = call_grammar(
            fmt, params, parallel=parallel, name_marker=markers[0], next_marker=markers[1], whitespace=whitespace
        )
        text = spec.schema + "".join(spec.after)
        if text.count(markers[0]) != 1 or text.count(markers[1]) != (1 if parallel and fmt.multi else 0):
            raise ToolsError(
                f"a tool's parameters hold U+{ord(markers[0]):X} or U+{ord(markers[1]):X}, private-use "
                "characters triec marks names with; remove them from the schema"
            )
        return spec

    return make


# ---------------------------------------------------------------- the whole format, for oracles


def whole_format(tools: list[Tool], fmt: Format, *, parallel: bool) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The format over every tool as one JSON Schema (and what follows it): what the engines compile as the
    oracle (vLLM's ``tool_choice="required"`` schema for ``vllm``; an ``anyOf`` of calls otherwise)."""
    defs: dict[str, Any] = {}
    alts = []
    for t in tools:
        body, d = _split_defs(t.parameters)
        for k, v in d.items():
            defs.setdefault(k, {}).update(v)
        alts.append(_branch(fmt, t.name, body, strict=fmt.name != "vllm"))
    if fmt.name == "vllm":
        schema: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"type": "object", "anyOf": alts}}
        if not parallel:
            schema["maxItems"] = 1
    else:
        schema = {"anyOf": alts}
    return {**schema, **defs}, ()


def hermes_lark(schema: dict[str, Any], parallel: bool) -> str:
    """llguidance's grammar of the hermes format: tagged calls, each the JSON of one call, ``\\n`` between."""
    options = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
    start = 'start: call ("\\n" call)*' if parallel else "start: call"
    return (
        '%llguidance {"no_forcing": true}\n'
        + start
        + '\ncall: "<tool_call>\\n" j "\\n</tool_call>"\nj: %json '
        + json.dumps({**schema, "x-guidance": options}, ensure_ascii=False)
    )


def hermes_ebnf(json_ebnf: str, parallel: bool) -> str:
    """xgrammar's grammar of the hermes format, around the EBNF xgrammar made of the calls' JSON Schema."""
    body = re.sub(r"^root ::=", "call_json ::=", json_ebnf, count=1, flags=re.M)
    root = 'root ::= call ("\\n" call)*' if parallel else "root ::= call"
    return root + '\ncall ::= "<tool_call>\\n" call_json "\\n</tool_call>"\n' + body


def tools_of(table: SchemaTable) -> list[Tool]:
    """The registry a compiled (or loaded) tools table serves: each name with its argument schema, in name order."""
    fmt = tool_format(table.info["format"])
    slot = table.slots[0]  # the names
    grammar_of = slot.value_grammar
    assert grammar_of is not None  # a names slot: each name's argument grammar
    out = []
    for v, name in enumerate(table.values_of(0)):
        spec = json.loads(table.grammars[int(grammar_of[v])].spec.schema)
        branch = spec["items"]["anyOf"][0] if fmt.name == "vllm" else spec
        params = branch["properties"][fmt.key]
        defs = {d: spec[d] for d in _DEFS if d in spec}
        if defs and isinstance(params, dict):
            params = {**params, **defs}
        out.append(Tool(name, params))
    return out


def whole_format_grammar(tools: list[Tool], fmt: Format, parallel: bool, drv: Any, whitespace: str = "compact") -> Any:
    """The engine compiled on the whole format over every tool: the oracle a tools table must equal."""
    schema, _ = whole_format(tools, fmt, parallel=parallel)
    if fmt.name != "hermes":
        return drv.compile(schema, whitespace)
    if drv.name == "llguidance":
        return drv.compile_lark(hermes_lark(schema, parallel), "tool-call grammar")
    xgr = drv.xgr
    g = xgr.Grammar.from_json_schema(
        json.dumps(schema, ensure_ascii=False), any_whitespace=False, separators=(", ", ": ")
    )
    return drv.engine.compiler.compile_grammar(xgr.Grammar.from_ebnf(hermes_ebnf(str(g), parallel)))


def tools_from_required_schema(doc: Any) -> tuple[list[Tool], bool] | None:
    """The registry behind vLLM's ``tool_choice="required"`` schema (``get_json_schema_from_tools``), and whether
    several calls are allowed (no ``"maxItems": 1``); None for any other schema."""
    if not isinstance(doc, dict) or doc.get("type") != "array" or doc.get("minItems") != 1:
        return None
    if set(doc) - {"type", "minItems", "maxItems", "items", *_DEFS} or doc.get("maxItems", 1) != 1:
        return None
    items = doc.get("items")
    if not isinstance(items, dict) or set(items) != {"type", "anyOf"} or items["type"] != "object":
        return None
    branches = items["anyOf"]
    if not isinstance(branches, list) or not branches:
        return None
    defs = {d: doc[d] for d in _DEFS if isinstance(doc.get(d), dict)}
    out: list[Tool] = []
    for b in branches:
        if not isinstance(b, dict) or set(b) != {"properties", "required"} or b["required"] != ["name", "parameters"]:
            return None
        props = b["properties"]
        if not isinstance(props, dict) or list(props) != ["name", "parameters"]:
            return None
        name = props["name"]
        if not (
            isinstance(name, dict)
            and set(name) == {"type", "enum"}
            and name["type"] == "string"
            and isinstance(name["enum"], list)
            and len(name["enum"]) == 1
            and isinstance(name["enum"][0], str)
        ):
            return None
        params = props["parameters"]
        if defs and isinstance(params, dict):
            params = {**params, **defs}
        out.append(Tool(name["enum"][0], params))
    if len({t.name for t in out}) != len(out) or not all(t.name for t in out):
        return None
    return out, "maxItems" not in doc
