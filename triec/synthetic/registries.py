"""Seeded synthetic tool registries: K tools, each with its own argument schema (tests and ``benchmarks/suites/tools.py``).

API::

    from triec.synthetic.registries import make_registry, respell, schema_kinds
    tools = make_registry(2000, seed=0)                      # OpenAI shape
    tools = make_registry(500, seed=1, hard_names=0.1)       # 10% hard names
    tools = make_registry(10000, seed=0, profile="flat")     # BFCL-like flat argument schemas
    mcp = make_registry(100, seed=2, spelling="mcp")         # {"name", "description", "inputSchema"}
    ant = respell(tools, "anthropic")                        # {"name", "description", "input_schema"}

CLI::

    python -m triec.synthetic.registries 2000 --seed 0 [--hard-names 0.1] [--spelling openai|mcp|anthropic]
        [--share 0.0] [--refused 0.0] [-o tools.json]

``make_registry(k, seed, *, hard_names=0.0, spelling="openai", share=0.0, refused=0.0, profile="rich")``:

* deterministic for (k, seed, options): ``random.Random(seed)`` only, no hash-seed dependence;
* names are unique; realistic spellings: ``service.verb_noun`` (``calendar.create_event``),
  ``verb_noun`` snake_case, ``service-api.verb_noun`` (dash), ``camelCase``, ``Service_1_VerbNoun``
  (BFCL/SGD style), and prefix chains (``get``, ``get_user``, ``get_user_by_id``: a name that is a
  prefix of another);
* ``hard_names`` (fraction in [0, 1], or True = 0.1): names with ``"``, ``\\``, ``/``, tab,
  newline, other control characters (U+0001, U+001F), DEL (U+007F), U+2028, non-ASCII Latin/CJK,
  astral-plane emoji, spaces, and very long names (200-400 characters); hard names are what a
  JSON-escaping bug or a byte-level trie bug would trip over, not what the OpenAI API would accept;
* every tool's ``parameters`` is distinct from every other's as a language (descriptions, titles
  and defaults are ignored in the distinctness check), unless ``share`` > 0: that fraction of
  tools reuses the parameters of an earlier tool verbatim;
* argument schemas mix: string (plain, ``enum``, ``minLength``/``maxLength``, a simple
  ``pattern``, ``format`` in FORMATS), integer/number with ``minimum``/``maximum`` (also
  ``exclusiveMinimum``), boolean, nullable (``"type": [T, "null"]``), arrays (``items``,
  ``minItems``/``maxItems``, arrays of objects), nested objects (up to 3 levels), optional
  properties (not in ``required``), ``additionalProperties: false`` (on about half the objects;
  the peers differ when it is absent: xgrammar's strict mode forbids extra keys, llguidance
  allows them), ``$defs``/``$ref`` (tool-private definitions named ``<Kind>_<tool index>``,
  definitions shared verbatim by many tools such as ``Money``/``GeoPoint`` -- vLLM merges every
  tool's ``$defs`` into one top-level ``$defs`` and refuses a name defined twice differently --
  and a recursive ``FilterNode``), ``anyOf`` of two object shapes, ``const``; plus tools with
  ``"parameters": {}``, ``{"type": "object", "properties": {}}`` and no ``parameters`` at all;
* ``profile="flat"``: BFCL-like flat schemas instead (1-6 properties of type string, string enum,
  integer (sometimes bounded), number, boolean, array of strings; no formats, patterns, nesting,
  ``$ref`` or ``additionalProperties``), still distinct per tool;
* ``refused`` (fraction): tools whose schema one peer refuses (llguidance: ``uniqueItems``,
  ``format: uri-reference``, a lookahead ``pattern``, ``not``; xgrammar: ``minProperties`` above what
  the strict object allows (both refuse it), a ``false`` property schema, fractional ``minimum`` on an integer, draft-4 array ``items``); they
  carry ``"x-refused-by"`` (``llguidance``, ``xgrammar`` or ``both``; ``minProperties`` above what
  the object allows is refused by both) in the tool entry, outside the schema, so a test knows;
* ``spelling``: ``openai`` -> ``{"type": "function", "function": {"name", "description",
  "parameters"}}``; ``mcp`` -> ``{"name", "description", "inputSchema"}``; ``anthropic`` ->
  ``{"name", "description", "input_schema"}``. A tool without parameters has no schema key in
  every spelling (MCP and Anthropic require one: pass ``fill_missing=True`` to :func:`respell`
  to write ``{"type": "object", "properties": {}}`` instead).

FORMATS are the string formats both peers accept and enforce (probed on llguidance 1.9.1 and
xgrammar 0.2.9): llguidance refuses every other format ("Unknown format"); xgrammar accepts any
format name and enforces only some (see RESULTS.md).
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import sys
from typing import Any, ClassVar

FORMATS = ("date", "date-time", "time", "duration", "email", "hostname", "ipv4", "ipv6", "uuid", "uri")

SERVICES = [
    "calendar",
    "mail",
    "drive",
    "billing",
    "crm",
    "inventory",
    "shipping",
    "payments",
    "search",
    "maps",
    "weather",
    "news",
    "music",
    "video",
    "photos",
    "contacts",
    "tasks",
    "notes",
    "chat",
    "tickets",
    "hr",
    "payroll",
    "analytics",
    "ads",
    "storage",
    "compute",
    "dns",
    "cdn",
    "auth",
    "iam",
    "kv",
    "queue",
    "logs",
    "metrics",
    "alerts",
    "deploy",
    "git",
    "ci",
    "wiki",
    "docs",
    "sheets",
    "slides",
    "forms",
    "survey",
    "booking",
    "hotel",
    "flight",
    "car_rental",
    "restaurant",
    "recipe",
    "fitness",
    "health",
    "pharmacy",
    "bank",
    "brokerage",
    "crypto",
    "tax",
    "insurance",
    "realestate",
    "school",
    "library",
    "museum",
    "events",
    "sports",
    "lottery",
    "translate",
    "ocr",
    "speech",
    "vision",
    "llm",
    "vectorstore",
    "sql",
    "graph",
    "iot",
    "thermostat",
    "lights",
    "lock",
    "camera",
    "vacuum",
    "garden",
    "pet",
    "travel",
    "currency",
    "stocks",
]
VERBS = [
    "get",
    "list",
    "create",
    "update",
    "delete",
    "search",
    "find",
    "fetch",
    "add",
    "remove",
    "set",
    "cancel",
    "book",
    "send",
    "schedule",
    "archive",
    "restore",
    "export",
    "import",
    "sync",
    "validate",
    "compute",
    "estimate",
    "convert",
    "translate",
    "summarize",
    "rank",
    "recommend",
    "approve",
    "reject",
    "assign",
    "close",
    "open",
    "upload",
    "download",
    "share",
    "invite",
    "subscribe",
    "unsubscribe",
    "refresh",
    "enable",
    "disable",
    "start",
    "stop",
    "pause",
    "resume",
    "retry",
]
NOUNS = [
    "user",
    "users",
    "event",
    "events",
    "invoice",
    "invoices",
    "order",
    "orders",
    "item",
    "items",
    "product",
    "products",
    "message",
    "messages",
    "file",
    "files",
    "folder",
    "folders",
    "ticket",
    "tickets",
    "comment",
    "comments",
    "report",
    "reports",
    "account",
    "accounts",
    "payment",
    "payments",
    "refund",
    "refunds",
    "shipment",
    "shipments",
    "address",
    "addresses",
    "contact",
    "contacts",
    "task",
    "tasks",
    "project",
    "projects",
    "team",
    "teams",
    "member",
    "members",
    "role",
    "roles",
    "policy",
    "policies",
    "key",
    "keys",
    "secret",
    "secrets",
    "record",
    "records",
    "table",
    "tables",
    "query",
    "queries",
    "job",
    "jobs",
    "run",
    "runs",
    "build",
    "builds",
    "release",
    "releases",
    "alert",
    "alerts",
    "metric",
    "metrics",
    "dashboard",
    "dashboards",
    "playlist",
    "track",
    "album",
    "photo",
    "album_art",
    "reservation",
    "reservations",
    "flight",
    "flights",
    "hotel",
    "hotels",
    "room",
    "rooms",
    "car",
    "cars",
    "recipe",
    "recipes",
    "workout",
    "workouts",
    "prescription",
    "quote",
    "quotes",
    "portfolio",
    "position",
    "positions",
    "rate",
    "rates",
    "forecast",
    "forecasts",
    "note",
    "notes",
    "page",
    "pages",
    "document",
    "documents",
    "sheet",
    "cell",
    "cells",
    "form",
    "responses",
    "subscription",
    "subscriptions",
    "webhook",
    "webhooks",
    "device",
    "devices",
    "reading",
    "readings",
    "schedule",
    "schedules",
]
PROPS = [
    "query",
    "limit",
    "offset",
    "page",
    "page_size",
    "cursor",
    "user_id",
    "account_id",
    "order_id",
    "item_id",
    "event_id",
    "file_id",
    "folder_id",
    "project_id",
    "team_id",
    "start_date",
    "end_date",
    "start_time",
    "end_time",
    "timezone",
    "email",
    "phone",
    "name",
    "title",
    "description",
    "notes",
    "tags",
    "labels",
    "category",
    "categories",
    "status",
    "priority",
    "currency",
    "amount",
    "price",
    "quantity",
    "unit",
    "location",
    "city",
    "country",
    "postal_code",
    "latitude",
    "longitude",
    "radius",
    "language",
    "locale",
    "format",
    "include_archived",
    "include_deleted",
    "dry_run",
    "force",
    "recursive",
    "verbose",
    "sort_by",
    "sort_order",
    "fields",
    "filter",
    "filters",
    "metadata",
    "attachments",
    "recipients",
    "subject",
    "body",
    "due_date",
    "reminder",
    "duration_minutes",
    "max_results",
    "min_rating",
    "rating",
    "color",
    "size",
    "brand",
    "model",
    "year",
    "month",
    "day",
    "hour",
    "url",
    "callback_url",
    "webhook_url",
    "ip_address",
    "hostname",
    "uuid",
    "session_id",
    "token",
    "scope",
    "scopes",
    "region",
    "zone",
    "retries",
    "timeout_seconds",
    "threshold",
    "percentage",
    "enabled",
    "visibility",
    "role",
    "permissions",
    "owner",
]
WORDS = [
    "fast",
    "slow",
    "red",
    "green",
    "blue",
    "small",
    "medium",
    "large",
    "low",
    "normal",
    "high",
    "urgent",
    "open",
    "closed",
    "pending",
    "active",
    "inactive",
    "draft",
    "published",
    "archived",
    "asc",
    "desc",
    "daily",
    "weekly",
    "monthly",
    "yearly",
    "json",
    "csv",
    "xml",
    "pdf",
    "png",
    "celsius",
    "fahrenheit",
    "metric",
    "imperial",
    "economy",
    "business",
    "first",
    "public",
    "private",
    "internal",
]
HARD_PIECES = [
    '"',
    "\\",
    "/",
    "\t",
    "\n",
    "\x01",
    "\x1f",
    "\x7f",
    "\u2028",
    " ",
    "é",
    "ß",
    "Ω",
    "日本語",
    "데이터",
    "😀",
    "🚀",
    "\u00a0",
    "'",
    "`",
    "{",
    "}",
    "<tool_call>",
    "%",
    "$",
    "\\u0041",
    "\\n",
]


def _canon(s: Any) -> str:
    """Canonical JSON of a schema without annotations (the language-relevant part)."""
    notes = ("description", "title", "default", "examples")

    def schema(x: Any) -> Any:
        if isinstance(x, list):
            return [schema(v) for v in x]
        if not isinstance(x, dict):
            return x
        out = {}
        for k, v in sorted(x.items()):
            if k in notes:
                continue
            if k in ("properties", "$defs", "definitions", "patternProperties") and isinstance(v, dict):
                out[k] = {n: schema(sub) for n, sub in sorted(v.items())}
            elif k in ("enum", "const", "required"):
                out[k] = v
            else:
                out[k] = schema(v)
        return out

    return json.dumps(schema(s), sort_keys=True, ensure_ascii=False)


class _Gen:
    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)
        self.tool_index = 0
        self.in_def = False
        self.flat = False

    # ------------------------------------------------------------------ names
    def name(self) -> str:
        r = self.r
        svc, verb, noun = r.choice(SERVICES), r.choice(VERBS), r.choice(NOUNS)
        style = r.random()
        if style < 0.40:
            return f"{svc}.{verb}_{noun}"
        if style < 0.62:
            return f"{verb}_{noun}" + (f"_by_{r.choice(PROPS)}" if r.random() < 0.3 else "")
        if style < 0.72:
            return f"{svc.replace('_', '-')}-api.{verb}_{noun}"
        if style < 0.84:
            return verb + "".join(p.capitalize() for p in noun.split("_")) + (r.choice(["", "V2", "ById", "s"]))
        if style < 0.92:
            return f"{svc.capitalize()}_{r.randint(1, 4)}_{verb.capitalize()}{noun.capitalize().replace('_', '')}"
        return f"{svc}.{r.choice(NOUNS)}.{verb}"

    def hard_name(self) -> str:
        r = self.r
        base = self.name()
        kind = r.random()
        if kind < 0.15:  # very long
            parts = [base]
            while sum(map(len, parts)) < r.randint(200, 400):
                parts.append(r.choice(NOUNS + VERBS))
            return "_".join(parts)
        n = r.randint(1, 3)
        chars = list(base)
        for _ in range(n):
            chars.insert(r.randint(0, len(chars)), r.choice(HARD_PIECES))
        return "".join(chars)

    # ------------------------------------------------------------------ schemas
    def flat_leaf(self, prop: str) -> dict[str, Any]:
        """BFCL-like: string, string enum, integer/number (sometimes bounded), boolean, array of strings."""
        r = self.r
        k = r.random()
        d: dict[str, Any] = {"description": f"The {prop.replace('_', ' ')}."}
        if k < 0.45:
            d["type"] = "string"
        elif k < 0.60:
            d.update(type="string", enum=r.sample(WORDS, r.randint(2, 6)))
        elif k < 0.75:
            d["type"] = "integer"
            if r.random() < 0.3:
                d.update(minimum=0, maximum=r.choice([10, 100, 1000]))
        elif k < 0.83:
            d["type"] = "number"
        elif k < 0.93:
            d["type"] = "boolean"
        else:
            d.update(type="array", items={"type": "string"})
        if r.random() < 0.2 and d["type"] == "string" and "enum" in d:
            d["default"] = d["enum"][0]
        return d

    def leaf(self, prop: str) -> dict[str, Any]:
        r = self.r
        if self.flat:
            return self.flat_leaf(prop)
        k = r.random()
        d: dict[str, Any] = {"description": f"The {prop.replace('_', ' ')}."}
        if k < 0.22:
            d["type"] = "string"
        elif k < 0.34:
            d.update(type="string", enum=r.sample(WORDS, r.randint(2, 6)))
        elif k < 0.44:
            d.update(type="string", format=r.choice(FORMATS))
        elif k < 0.49:
            d.update(type="string", minLength=r.randint(1, 3), maxLength=r.randint(8, 64))
        elif k < 0.52:
            d.update(
                type="string",
                pattern=r.choice(
                    ["^[A-Z]{3}$", "^[a-z0-9_-]{3,16}$", "^\\+?[0-9]{7,15}$", "^[A-Z]{2}[0-9]{2}[A-Z0-9]{4,30}$"]
                ),
            )
        elif k < 0.64:
            lo = r.choice([0, 1, -100, 0])
            d.update(type="integer")
            if r.random() < 0.7:
                d["minimum"] = lo
            if r.random() < 0.6:
                d["maximum"] = lo + r.choice([10, 100, 1000, 65535])
        elif k < 0.72:
            d.update(type="number")
            if r.random() < 0.5:
                d["minimum"] = r.choice([0, -90, -180, 0.5])
                if r.random() < 0.6:
                    d["maximum"] = d["minimum"] + r.choice([1, 180, 360, 99.5])
            elif r.random() < 0.4:
                d["exclusiveMinimum"] = 0
        elif k < 0.82:
            d.update(type="boolean")
        elif k < 0.87:
            d.update(type=[r.choice(["string", "integer", "number", "boolean"]), "null"])
        elif k < 0.89:
            d.update(const=r.choice(WORDS))
        else:
            item = self.leaf(prop + "_item")
            item.pop("description", None)
            d.update(type="array", items=item)
            if r.random() < 0.6:
                d["minItems"] = r.randint(0, 2)
            if r.random() < 0.5:
                d["maxItems"] = r.randint(max(d.get("minItems", 0), 1), 10)
        if r.random() < 0.1 and "type" in d and d["type"] == "string" and "enum" in d:
            d["default"] = d["enum"][0]
        return d

    def obj(self, depth: int, defs: dict[str, Any], n_min: int = 1, n_max: int = 6) -> dict[str, Any]:
        r = self.r
        props: dict[str, Any] = {}
        for p in r.sample(PROPS, r.randint(n_min, n_max)):
            k = 1.0 if self.flat else r.random()
            if depth < 3 and k < 0.10:
                props[p] = self.obj(depth + 1, defs, 1, 4)
            elif depth < 3 and k < 0.16:
                props[p] = {
                    "type": "array",
                    "items": self.obj(depth + 1, defs, 1, 3),
                    "minItems": r.randint(0, 1),
                    **({"maxItems": r.randint(2, 20)} if r.random() < 0.5 else {}),
                }
            elif k < 0.22:
                props[p] = self.ref(defs)
            elif depth < 3 and k < 0.24:
                props[p] = {"anyOf": [self.obj(depth + 1, defs, 1, 2), self.obj(depth + 1, defs, 1, 2)]}
            else:
                props[p] = self.leaf(p)
        o: dict[str, Any] = {"type": "object", "properties": props}
        keys = list(props)
        req = [p for p in keys if r.random() < 0.55]
        if req:
            o["required"] = req
        if not self.flat and r.random() < 0.5:
            o["additionalProperties"] = False
        return o

    SHARED_DEFS: ClassVar[dict[str, Any]] = {
        "Money": {
            "type": "object",
            "properties": {
                "amount": {"type": "number", "minimum": 0},
                "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
            },
            "required": ["amount", "currency"],
            "additionalProperties": False,
        },
        "GeoPoint": {
            "type": "object",
            "properties": {
                "lat": {"type": "number", "minimum": -90, "maximum": 90},
                "lon": {"type": "number", "minimum": -180, "maximum": 180},
            },
            "required": ["lat", "lon"],
            "additionalProperties": False,
        },
        "DateRange": {
            "type": "object",
            "properties": {"start": {"type": "string", "format": "date"}, "end": {"type": "string", "format": "date"}},
            "required": ["start"],
            "additionalProperties": False,
        },
        "FilterNode": {
            "type": "object",
            "properties": {
                "field": {"type": "string"},
                "op": {"type": "string", "enum": ["eq", "ne", "lt", "gt", "in"]},
                "value": {"type": ["string", "number", "boolean", "null"]},
                "and": {"type": "array", "items": {"$ref": "#/$defs/FilterNode"}, "maxItems": 4},
            },
            "required": ["field", "op"],
            "additionalProperties": False,
        },
    }

    def ref(self, defs: dict[str, Any]) -> dict[str, Any]:
        r = self.r
        if self.in_def or r.random() < 0.5:
            name = r.choice(sorted(self.SHARED_DEFS))
            defs[name] = copy.deepcopy(self.SHARED_DEFS[name])
        else:
            kind = r.choice(["Address", "Person", "LineItem", "Options", "Window", "Attachment"])
            name = f"{kind}_{self.tool_index}"
            if name not in defs:
                self.in_def = True  # a private definition refers only to shared ones: no unbounded recursion
                defs[name] = self.obj(3, defs, 1, 4)
                self.in_def = False
        return {"$ref": f"#/$defs/{name}"}

    def parameters(self) -> tuple[bool, Any]:
        """(present, schema)."""
        r = self.r
        k = r.random()
        if k < 0.02:
            return False, None
        if k < 0.04:
            return True, {}
        if k < 0.06:
            return True, {"type": "object", "properties": {}}
        defs: dict[str, Any] = {}
        o = self.obj(0, defs)
        if defs:
            o["$defs"] = defs
        return True, o

    def refused_parameters(self) -> tuple[dict[str, Any], str]:
        r = self.r
        i = self.tool_index
        options: list[tuple[str, dict[str, Any]]] = [
            (
                "llguidance",
                {
                    "type": "object",
                    "properties": {
                        "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
                        "n": {"type": "integer", "minimum": i},
                    },
                },
            ),
            (
                "llguidance",
                {
                    "type": "object",
                    "properties": {
                        "link": {"type": "string", "format": "uri-reference"},
                        "n": {"type": "integer", "maximum": i},
                    },
                },
            ),
            (
                "llguidance",
                {
                    "type": "object",
                    "properties": {"code": {"type": "string", "pattern": f"^(?!x)[a-z]{{{1 + i % 5}}}$"}},
                },
            ),
            ("llguidance", {"type": "object", "properties": {"v": {"not": {"type": "string"}}, "n": {"const": i}}}),
            (
                "both",
                {"type": "object", "properties": {"a": {"type": "string"}, "n": {"const": i}}, "minProperties": 3},
            ),
            ("xgrammar", {"type": "object", "properties": {"a": {"type": "integer", "maximum": i}, "legacy": False}}),
            (
                "xgrammar",
                {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0.5, "maximum": i + 1.5}}},
            ),
            (
                "xgrammar",
                {
                    "type": "object",
                    "properties": {"pair": {"type": "array", "items": [{"type": "string"}, {"const": i}]}},
                },
            ),
        ]
        who, schema = r.choice(options)
        return schema, who


def make_registry(
    k: int,
    seed: int = 0,
    *,
    hard_names: float | bool = 0.0,
    spelling: str = "openai",
    share: float = 0.0,
    refused: float = 0.0,
    profile: str = "rich",
) -> list[dict[str, Any]]:
    if hard_names is True:
        hard_names = 0.1
    if profile not in ("rich", "flat"):
        raise ValueError(f"profile {profile!r}: rich or flat")
    g = _Gen(seed)
    g.flat = profile == "flat"
    r = g.r
    names: set[str] = set()
    seen_schemas: set[str] = set()
    tools: list[dict[str, Any]] = []
    pool: list[Any] = []
    chain_base: list[str] = []
    while len(tools) < k:
        g.tool_index = len(tools)
        # name
        if chain_base and r.random() < 0.04:
            name = chain_base.pop() + r.choice(["_by_id", "_v2", "s", "_all", ".batch"])
        elif r.random() < float(hard_names):
            name = g.hard_name()
        else:
            name = g.name()
        if name in names:
            continue
        if r.random() < 0.05:
            chain_base.append(name)
        # schema
        extra: dict[str, Any] = {}
        if refused and r.random() < refused:
            params, who = g.refused_parameters()
            present = True
            extra["x-refused-by"] = who
        elif pool and share and r.random() < share:
            present, params = True, copy.deepcopy(r.choice(pool))
        else:
            for _attempt in range(50):
                present, params = g.parameters()
                c = _canon(params) if present else "<missing>"
                if params in ({}, {"type": "object", "properties": {}}) or not present:
                    break  # the empty shapes may repeat: they are one language each by design
                if c not in seen_schemas:
                    break
            else:
                raise RuntimeError("could not draw a distinct schema")
            if present and params not in ({}, {"type": "object", "properties": {}}):
                seen_schemas.add(_canon(params))
                pool.append(params)
        names.add(name)
        fn: dict[str, Any] = {"name": name, "description": _describe(name)}
        if present:
            fn["parameters"] = params
        tools.append({"type": "function", "function": fn, **extra})
    return respell(tools, spelling) if spelling != "openai" else tools


def _describe(name: str) -> str:
    words = name.replace(".", " ").replace("_", " ").replace("-", " ")
    return f"Call {words[:80].strip()}."


def respell(tools: list[dict[str, Any]], spelling: str, *, fill_missing: bool = False) -> list[dict[str, Any]]:
    """OpenAI-shape tools in another spelling: ``openai``, ``mcp`` or ``anthropic``."""
    key = {"openai": "parameters", "mcp": "inputSchema", "anthropic": "input_schema"}[spelling]
    out = []
    for t in tools:
        fn = t.get("function", t)
        params = fn.get("parameters", fn.get("inputSchema", fn.get("input_schema")))
        has = any(x in fn for x in ("parameters", "inputSchema", "input_schema"))
        if not has and fill_missing:
            params, has = {"type": "object", "properties": {}}, True
        body: dict[str, Any] = {"name": fn["name"], "description": fn.get("description", "")}
        if has:
            body[key] = copy.deepcopy(params)
        extra = {k: v for k, v in t.items() if k.startswith("x-")}
        out.append({"type": "function", "function": body, **extra} if spelling == "openai" else {**body, **extra})
    return out


def schema_kinds(tools: list[dict[str, Any]]) -> dict[str, int]:
    """How many tools use each kind of schema feature (for a report)."""
    from collections import Counter

    c: Counter[str] = Counter()

    def walk(s: Any, top: bool) -> None:
        if isinstance(s, list):
            for x in s:
                walk(x, False)
            return
        if not isinstance(s, dict):
            return
        for kw in (
            "enum",
            "const",
            "format",
            "pattern",
            "minimum",
            "maximum",
            "exclusiveMinimum",
            "minItems",
            "maxItems",
            "minLength",
            "maxLength",
            "$ref",
            "$defs",
            "anyOf",
            "additionalProperties",
            "items",
        ):
            if kw in s:
                c[kw if kw != "format" else f"format:{s['format']}"] += 1
        t = s.get("type")
        if isinstance(t, list):
            c["type:[T,null]"] += 1
        elif t:
            c[f"type:{t}"] += 1
        for k, v in s.items():
            if k in ("properties", "$defs"):
                for x in v.values():
                    walk(x, False)
            elif isinstance(v, (dict, list)) and k not in ("enum", "const", "required"):
                walk(v, False)

    for t in tools:
        fn = t.get("function", t)
        p = fn.get("parameters", fn.get("inputSchema", fn.get("input_schema", "<missing>")))
        if p == "<missing>":
            c["tools:missing parameters"] += 1
        elif p == {}:
            c["tools:parameters {}"] += 1
        elif p == {"type": "object", "properties": {}}:
            c["tools:no properties"] += 1
        else:
            walk(p, True)
    return dict(sorted(c.items()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("k", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hard-names", type=float, default=0.0)
    ap.add_argument("--spelling", choices=["openai", "mcp", "anthropic"], default="openai")
    ap.add_argument("--share", type=float, default=0.0)
    ap.add_argument("--refused", type=float, default=0.0)
    ap.add_argument("--profile", choices=["rich", "flat"], default="rich")
    ap.add_argument("-o", "--out")
    a = ap.parse_args()
    tools = make_registry(
        a.k, a.seed, hard_names=a.hard_names, spelling=a.spelling, share=a.share, refused=a.refused, profile=a.profile
    )
    text = json.dumps(tools, ensure_ascii=False, indent=1) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
        print(f"{len(tools)} tools -> {a.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
