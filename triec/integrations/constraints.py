"""A request's constraint as a triec grammar, or "delegate": what triec serves exactly, for any serving backend.

Serving engines hand a grammar backend a constraint as a string of some kind
(a ``choice`` list, a ``regex``, a ``json`` schema, a ``structural_tag``).
A few of those are finite sets of strings triec compiles exactly; the rest
belong to the server's own grammar backend, unchanged. :class:`Constraints`
makes that decision and compiles what it keeps, framework-free (numpy; no
SGLang or vLLM import), so the SGLang backend (:mod:`triec.integrations.sglang`)
and a vLLM structured-outputs backend share it:

* ``choice`` lists: :meth:`Constraints.choice`, one table per distinct list;
* a ``regex`` that is an alternation of literals (``(a|b|c)``, ``^(?:a|b)$``,
  ``a|b``, Python's ``re.escape`` spellings, ``\\uXXXX``...):
  :func:`literal_alternation` decides, anything with a real metacharacter is
  delegated;
* a ``json`` schema that is a string enum (``{"enum": [...]}``, compiled as
  JSON string literals) or a flat enum-and-const object (compact output only,
  :func:`triec.compiler.json_schema.parse_schema`); other schemas go to
  :data:`SchemaHook` (the schema layer plugs in there) or are delegated;
* an artifact by name, ``{"x-triec-artifact": NAME}`` as the json schema
  (docs/decisions.md D21), from the directory store of the vLLM processors
  (names, not paths; D20).

Compiled tables are cached by the content of the list within a memory bound
(:class:`Limits`), and each list is bounded in count and bytes so a client cannot
make the server compile without bound; a refusal is a
:class:`~triec.errors.RequestError` with a one-line reason, which the backends
turn into a rejected request. Each request gets a matcher
(:class:`~triec.integrations.matchers.RequestMatcher`) from its :class:`TableGrammar`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from triec._compat import renamed
from triec.encoding import JSON, RAW, Encoding
from triec.errors import RequestError, ValuesError
from triec.integrations.limits import Limits, table_nbytes
from triec.integrations.matchers import RequestMatcher
from triec.integrations.serving import ArtifactStore, ServedModel, TriecRequest, admit_artifact, restrict_values

if TYPE_CHECKING:
    from triec.runtime.kinds import Table
    from triec.tokenizer.vocabulary import Vocabulary

log = logging.getLogger("triec.constraints")

ARTIFACT_KEYWORD = "x-triec-artifact"
"""JSON-schema vendor keyword naming an artifact: ``{"x-triec-artifact": "tools"}`` (D21)."""

RESTRICT_KEYWORD = "x-triec-restrict"
"""Optional next to :data:`ARTIFACT_KEYWORD`: the values of the artifact this request may produce."""

ANNOTATIONS = frozenset(
    {"$schema", "$id", "$comment", "title", "description", "examples", "default", "deprecated", "readOnly", "writeOnly"}
)
"""Schema keywords that never change the set of instances (a string enum may carry them)."""


@dataclass(frozen=True)
class Delegate:
    """Not triec's: the server's own backend serves this constraint, unchanged. ``reason`` is for logs."""

    reason: str


@dataclass(eq=False)
class TableGrammar:
    """A compiled constraint every request with it shares; :meth:`matcher` starts one sequence at the start state.

    ``table`` is a plain :class:`~triec.runtime.table.MaskTable` (a list, an
    artifact) or, through the schema hook, another kind of table. ``key``
    identifies the content (a hash of the encoding and the distinct values, of
    the schema, or the artifact's name, file version and subset); ``nbytes`` is
    what the cache counts for it. ``artifact`` and ``parent`` are set for
    artifacts by name (``parent``: the whole artifact's table, ``table`` the
    subset's when restricted).
    """

    table: Table
    key: str
    nbytes: int = 0
    artifact: str | None = None
    parent: Table | None = None

    def matcher(self) -> RequestMatcher:
        """A new request's matcher at the start (the table's own: a TableMatcher, a SchemaMatcher)."""
        matcher: RequestMatcher = self.table.matcher()
        return matcher

    @property
    def vocab_size(self) -> int:
        return self.table.vocab_size

    @property
    def words_per_row(self) -> int:
        return self.table.words_per_row


Served = TableGrammar | Delegate

SchemaHook = Callable[[dict[str, Any], "Vocabulary", bool], "Table | None"]
"""``hook(schema, vocab, any_whitespace)``: a table for a JSON schema the finite cases here do not cover, or None.

The default, :func:`schema_layer_table`, is the schema layer (tool registries behind vLLM's required schema, large
enums anywhere); the table is cached by the schema's text; a hook raising :class:`~triec.errors.ValuesError` (a
shape it does not take) delegates.
"""

StructuralTagHook = Callable[[dict[str, Any], "Vocabulary"], "Table | None"]
"""``hook(tag, vocab)``: a table for a structural tag, or None; the default, :func:`structural_tag_table`, serves
tool calls whose begins carry the names (docs/decisions.md D23); a :class:`~triec.errors.ValuesError` delegates."""


def schema_layer_table(doc: dict[str, Any], vocab: Vocabulary, any_whitespace: bool) -> Table | None:
    """The schema layer's table for a JSON schema, in the server's own whitespace convention, run by xgrammar
    (what the backends delegate to): vLLM's ``tool_choice="required"`` array over a tool registry
    (:func:`triec.schema.compile.compile_tools`), or any schema with large enums anywhere
    (:func:`triec.schema.compile.compile_schema`). Raises SchemaShapeError (delegated) when no trie has
    anything to serve."""
    from triec.schema.compile import compile_schema, compile_tools
    from triec.schema.tools import tools_from_required_schema

    whitespace = "any" if any_whitespace else "compact"
    registry = tools_from_required_schema(doc)
    if registry is not None:
        tools, parallel = registry
        return compile_tools(tools, vocab, format="vllm", engine="xgrammar", parallel=parallel, whitespace=whitespace)
    return compile_schema(doc, vocab, engine="xgrammar", whitespace=whitespace)


def structural_tag_table(tag: dict[str, Any], vocab: Vocabulary) -> Table | None:
    """The schema layer's table for a structural tag whose begins a trie serves (tool calls with the names in the
    begins: vLLM's hermes tags for ``required`` and named tools); raises SchemaShapeError (delegated) otherwise."""
    from triec.schema.compile import compile_structural_tag

    return compile_structural_tag(tag, vocab, engine="xgrammar")


# ----------------------------------------------------------------------------- limits and the cache


class _Cache:
    """Compiled grammars by content key, least recently used first out, within a bound in bytes."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.nbytes = 0
        self._items: OrderedDict[str, TableGrammar] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> TableGrammar | None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, grammar: TableGrammar) -> None:
        if grammar.nbytes > self.max_bytes:
            return  # served, not kept
        with self._lock:
            old = self._items.pop(grammar.key, None)
            if old is not None:
                self.nbytes -= old.nbytes
            self._items[grammar.key] = grammar
            self.nbytes += grammar.nbytes
            while self.nbytes > self.max_bytes:
                _, dropped = self._items.popitem(last=False)
                self.nbytes -= dropped.nbytes

    def peek(self, key: str) -> TableGrammar | None:
        """The entry without refreshing its place."""
        with self._lock:
            return self._items.get(key)

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.nbytes = 0


# ----------------------------------------------------------------------------- regex: alternations of literals

# One token of a pattern, outside character classes. Escapes are literal only where Python's re and xgrammar
# (the engine a delegated regex goes to) read them alike: \xHH not followed by another hex digit (xgrammar reads
# every hex digit that follows), \uHHHH, \UHHHHHHHH, \n \r \t \f \v \a, and a backslash before any character that
# is not an ASCII letter or digit. Any other escape (\d \b \0 \1 \N{..} \e ...) is not a literal.
_TOKEN = re.compile(
    r"(?P<run>[^\\()|^$.*+?\[\]{}]+)"
    r"|\\(?:x(?P<x>[0-9A-Fa-f]{2})(?![0-9A-Fa-f])|u(?P<u>[0-9A-Fa-f]{4})|U(?P<U>[0-9A-Fa-f]{8})"
    r"|(?P<ctl>[nrtfva])|(?P<lit>[^0-9A-Za-z])|(?P<bad>.?))"
    r"|(?P<bar>\|)|(?P<open>\((?:\?:)?)|(?P<close>\))|(?P<caret>\^)|(?P<dollar>\$)|(?P<meta>.)",
    re.S,
)
_CONTROL = {"n": "\n", "r": "\r", "t": "\t", "f": "\f", "v": "\v", "a": "\a"}
_LIT, _BAR, _OPEN, _CLOSE, _CARET, _DOLLAR, _OTHER = range(7)


def _tokens(pattern: str) -> list[tuple[int, str]] | None:
    """The pattern as (kind, literal text) tokens; None at the first token that can never be part of a literal."""
    out: list[tuple[int, str]] = []
    for m in _TOKEN.finditer(pattern):
        kind = m.lastgroup
        if kind == "run":
            out.append((_LIT, m.group("run")))
        elif kind in ("x", "u", "U"):
            cp = int(m.group(kind), 16)
            if cp > 0x10FFFF or 0xD800 <= cp <= 0xDFFF:
                return None  # no character (xgrammar and re disagree on surrogates): not ours
            out.append((_LIT, chr(cp)))
        elif kind == "ctl":
            out.append((_LIT, _CONTROL[m.group("ctl")]))
        elif kind == "lit":
            out.append((_LIT, m.group("lit")))
        elif kind == "bar":
            out.append((_BAR, "|"))
        elif kind == "open":
            if m.group("open") == "(" and pattern.startswith("?", m.end()):
                return None  # (?i) (?P<n>..) (?=..) ...: an extension, not a plain group
            out.append((_OPEN, ""))
        elif kind == "close":
            out.append((_CLOSE, ""))
        elif kind == "caret":
            out.append((_CARET, ""))
        elif kind == "dollar":
            out.append((_DOLLAR, ""))
        else:  # meta, bad
            return None
    return out


def literal_alternation(pattern: str) -> list[str] | None:
    """The literals of ``pattern`` when its full matches are exactly those strings, else None (delegate).

    Accepted: ``a|b|c``, wrapped at most once in ``(...)`` or ``(?:...)`` spanning
    the whole pattern, optionally anchored ``^...$``; every literal character plain
    (no ``.*+?()[]{}|^$\\``) or escaped as Python's ``re.escape`` writes it, or as
    ``\\xHH``, ``\\uHHHH``, ``\\UHHHHHHHH``, ``\\n \\r \\t \\f \\v \\a``. Anything else,
    a quantifier, a class, a nested group, ``\\d``, flags, returns None: a real
    regex, which the server's own backend serves. Empty alternatives are values
    (``(a|)`` is ``["a", ""]``), duplicates are kept. Values that are no UTF-8
    text (lone surrogates) return None.
    """
    toks = _tokens(pattern)
    if toks is None:
        return None
    i, j = 0, len(toks)
    if i < j and toks[i][0] == _CARET:
        i += 1
    if i < j and toks[j - 1][0] == _DOLLAR:
        j -= 1
    if j - i >= 2 and toks[i][0] == _OPEN and toks[j - 1][0] == _CLOSE:
        i, j = i + 1, j - 1
    values: list[str] = []
    cur: list[str] = []
    for kind, text in toks[i:j]:
        if kind == _LIT:
            cur.append(text)
        elif kind == _BAR:
            values.append("".join(cur))
            cur = []
        else:
            return None  # a group inside, a second anchor, an anchor in the middle
    values.append("".join(cur))
    for v in values:
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            return None
    return values


# ----------------------------------------------------------------------------- json schemas


def string_enum(doc: Any) -> list[str] | None:
    """The members of ``{"enum": [...]}`` / ``{"type": "string", "enum": [...]}`` (annotations allowed), else None."""
    if not isinstance(doc, dict):
        return None
    keys = set(doc) - ANNOTATIONS
    if keys != {"enum"} and not (keys == {"enum", "type"} and doc["type"] == "string"):
        return None
    members = doc["enum"]
    if not isinstance(members, list) or not members or not all(isinstance(m, str) for m in members):
        return None
    return members


def content_key(values: Sequence[str], encoding: Encoding) -> str:
    """The cache key of a list: sha256 of its encoding and its distinct values (order and duplicates do not matter)."""
    doc = [encoding.name, encoding.prefix, encoding.suffix, sorted(set(values))]
    return hashlib.sha256(json.dumps(doc, ensure_ascii=False).encode("utf-8", "surrogatepass")).hexdigest()


# ----------------------------------------------------------------------------- the decision


@dataclass
class Constraints:
    """Turns constraints into triec grammars for one served vocabulary, or says delegate.

    ``vocab`` is the served tokenizer's (its EOS ids the model's stop tokens, its
    width the logits'). ``any_whitespace`` is the server's JSON setting: triec's
    object instances are compact, so object schemas are served only when it is
    False (string enums are the same either way). ``tokenizer`` is what
    ``Vocabulary.load`` took for ``vocab`` (to fingerprint it with an artifact's
    own EOS ids); ``artifact_dir`` defaults to ``$TRIEC_ARTIFACT_DIR``.
    ``served`` is the model artifacts are admitted against (default: ``vocab``'s,
    :meth:`ServedModel.of <triec.integrations.serving.ServedModel.of>`), whose
    stop ids are the server's unless a request passes its own; ``fix_stops`` is
    what a refusal for EOS ids that would not stop suggests. ``artifact_store``
    returns the store artifacts are looked up in (default: one store over
    ``artifact_dir``; the vLLM backend passes the process's,
    :func:`triec.integrations.serving.store`, which the processors use too).
    Thread-safe: backends compile in worker threads.
    """

    vocab: Vocabulary
    any_whitespace: bool = True
    limits: Limits = field(default_factory=Limits.from_env)
    tokenizer: str | None = None
    artifact_dir: str | os.PathLike[str] | None = None
    schema_hook: SchemaHook | None = field(default_factory=lambda: schema_layer_table)
    structural_tag_hook: StructuralTagHook | None = field(default_factory=lambda: structural_tag_table)
    served: ServedModel | None = None
    fix_stops: str = "compile the artifact with the served model's EOS ids"
    artifact_store: Callable[[], ArtifactStore] | None = None

    def __post_init__(self) -> None:
        self.cache = _Cache(self.limits.cache_bytes)
        if self.served is None:
            self.served = ServedModel.of(self.vocab, self.tokenizer)
        self._store: ArtifactStore | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------- compiled lists

    def choice(self, values: Sequence[str], *, encoding: str | Encoding = RAW, kind: str = "choice") -> TableGrammar:
        """The grammar of exactly one of ``values`` (spelled per ``encoding``); RequestError for a list triec refuses.

        ``kind`` names the constraint in messages (``choice``, ``regex``, ``json``).
        """
        if isinstance(values, str) or not isinstance(values, Sequence):
            raise RequestError(f"a {kind} list must be a list of strings, not {type(values).__name__}")
        bad = next((v for v in values if not isinstance(v, str)), None)
        if bad is not None:
            raise RequestError(f"{kind} values must be strings, not {type(bad).__name__} {bad!r:.60}")
        if not values:
            raise RequestError(f"a {kind} list needs at least one value")
        self.limits.check(values, f"this {kind} list")
        enc = encoding if isinstance(encoding, Encoding) else Encoding(encoding)
        key = content_key(values, enc)
        found = self.cache.get(key)
        if found is not None:
            return found
        import triec.compiler.entry as build

        try:
            table = build.compile(values, self.vocab, encoding=enc)
        except ValuesError as exc:
            raise RequestError(f"{kind} values cannot be compiled: {exc}") from None
        return self._keep(table, key)

    def regex(self, pattern: str) -> Served:
        """A literal alternation's grammar (:func:`literal_alternation`), else :class:`Delegate`."""
        values = literal_alternation(pattern)
        if values is None:
            return Delegate("not an alternation of literals")
        return self.choice(values, kind="regex")

    def json_schema(self, schema: str | dict[str, Any], *, stops: Iterable[int] | None = None) -> Served:
        """A string enum, a flat enum-and-const object (compact output), an artifact by name, the schema hook's, or
        Delegate. ``stops``: the request's stop ids (an artifact's EOS ids must be among them; default the served
        model's)."""
        if isinstance(schema, str):
            try:
                doc = json.loads(schema)
            except (ValueError, RecursionError):
                return Delegate("not valid JSON")  # the server reports it as it always does
        else:
            doc = schema
        if isinstance(doc, dict) and ARTIFACT_KEYWORD in doc:
            return self._artifact_schema(doc, stops)
        members = string_enum(doc)
        if members is not None:
            return self.choice(members, encoding=JSON, kind="json")
        from triec.compiler.json_schema import is_object_schema, parse_schema

        if is_object_schema(doc):
            try:
                members, enc = parse_schema(doc)
            except ValuesError as exc:
                return self._schema_layer(doc, f"not a flat enum-and-const object ({exc})")
            if self.any_whitespace:  # its instances are not only the compact ones: the schema layer's, if any
                return self._schema_layer(doc, "an object schema while the server allows whitespace")
            return self.choice(members, encoding=enc, kind="json")
        return self._schema_layer(doc, "not a string enum")

    def _schema_layer(self, doc: Any, why: str) -> Served:
        """Schemas the schema layer compiles (:attr:`schema_hook`), or Delegate."""
        if self.schema_hook is None or not isinstance(doc, dict):
            return Delegate(why)
        text = json.dumps(doc, ensure_ascii=False)  # key order kept: it orders the output
        key = "schema:" + hashlib.sha256(f"{self.any_whitespace}:{text}".encode("utf-8", "surrogatepass")).hexdigest()
        found = self.cache.get(key)
        if found is not None:
            return found
        try:
            table = self.schema_hook(doc, self.vocab, self.any_whitespace)
        except ValuesError as exc:
            return Delegate(f"{why}; the schema layer: {exc}")
        return Delegate(why) if table is None else self._keep(table, key)

    def structural_tag(self, tag: str | dict[str, Any]) -> Served:
        """:attr:`structural_tag_hook`'s table for a tool-call tag, or Delegate."""
        if self.structural_tag_hook is None:
            return Delegate("structural tags are the server's")
        try:
            doc = json.loads(tag) if isinstance(tag, str) else tag
        except (ValueError, RecursionError):
            return Delegate("not valid JSON")
        if not isinstance(doc, dict):
            return Delegate("not a structural tag object")
        text = json.dumps(doc, ensure_ascii=False)
        key = "tag:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        found = self.cache.get(key)
        if found is not None:
            return found
        try:
            table = self.structural_tag_hook(doc, self.vocab)
        except ValuesError as exc:
            return Delegate(f"the schema layer: {exc}")
        return Delegate("not a tool-call tag triec serves") if table is None else self._keep(table, key)

    def _keep(self, table: Table, key: str) -> TableGrammar:
        grammar = TableGrammar(table, key, table_nbytes(table))
        self.cache.put(grammar)
        return grammar

    # ------------------------------------------------------------- artifacts by name

    def _artifact_schema(self, doc: dict[str, Any], stops: Iterable[int] | None) -> TableGrammar:
        extra = sorted(set(doc) - {ARTIFACT_KEYWORD, RESTRICT_KEYWORD})
        if extra:
            raise RequestError(
                f"a schema naming a triec artifact holds only {ARTIFACT_KEYWORD!r} and {RESTRICT_KEYWORD!r}, "
                f"not {extra[0]!r:.60}"
            )
        name = doc[ARTIFACT_KEYWORD]
        if not isinstance(name, str):
            raise RequestError(f"{ARTIFACT_KEYWORD!r} must be an artifact name (a string), not {type(name).__name__}")
        restrict = doc.get(RESTRICT_KEYWORD)
        values = None if restrict is None else restrict_values(restrict, RESTRICT_KEYWORD)
        return self.artifact(name, values, stops=stops)

    def artifact(
        self, name: str, restrict: Sequence[str] | None = None, *, stops: Iterable[int] | None = None
    ) -> TableGrammar:
        """The named artifact of the directory (optionally narrowed to ``restrict``), admitted for the served model.

        Through the serving core's one door (:func:`~triec.integrations.serving.admit_artifact`): the name must be
        a plain name inside the directory, the file valid, its masks as wide as the logits, its tokenizer the
        served one, and its EOS ids among ``stops`` (default: the served model's); RequestError names the first
        failure. Artifacts are read into memory (never mapped: a file truncated under a mapping kills the
        process, D24) and subsets compacted once by the :class:`~triec.integrations.serving.ArtifactStore`
        (the vLLM processors' too), which reloads a file that changed.
        """
        assert self.served is not None
        request = TriecRequest(name, None if restrict is None else restrict_values(restrict, RESTRICT_KEYWORD))
        stop_ids = self.served.stop_ids(None) if stops is None else {int(t) for t in stops}
        key, table, parent = admit_artifact(
            request, self._artifact_store(), self.served, stop_ids, fix_stops=self.fix_stops
        )
        if table is parent:
            return TableGrammar(parent, f"artifact:{name}", 0, name, parent)  # the store keeps the table
        ckey = (
            "artifact:" + hashlib.sha256(json.dumps([str(k) for k in key]).encode("utf-8", "surrogatepass")).hexdigest()
        )
        found = self.cache.get(ckey)
        if found is not None and found.table is table:
            return found
        grammar = TableGrammar(table, ckey, table_nbytes(table), name, parent)
        self.cache.put(grammar)
        return grammar

    def is_live(self, grammar: TableGrammar) -> bool:
        """Whether a request with ``grammar``'s constraint would get it again now.

        False once the cache dropped it (a backend keeping its own copies lets them
        go then, so the cache bound holds) or its artifact file changed or vanished.
        """
        if grammar.artifact is not None:
            try:
                if self._artifact_store().table(grammar.artifact) is not grammar.parent:
                    return False
            except RequestError:
                return False
            if grammar.table is grammar.parent:
                return True
        return self.cache.peek(grammar.key) is grammar

    def _artifact_store(self) -> ArtifactStore:
        if self.artifact_store is not None:
            return self.artifact_store()
        with self._lock:
            if self._store is None:
                self._store = ArtifactStore(self.artifact_dir)
            return self._store

    def clear(self) -> None:
        """Forget every compiled table (a backend's cache flush)."""
        self.cache.clear()


__all__ = [
    "ANNOTATIONS",
    "ARTIFACT_KEYWORD",
    "RESTRICT_KEYWORD",
    "Constraints",
    "Delegate",
    "SchemaHook",
    "Served",
    "StructuralTagHook",
    "TableGrammar",
    "content_key",
    "literal_alternation",
    "string_enum",
]

__getattr__ = renamed(
    __name__,
    {
        "Matcher": "triec.integrations.matchers:RequestMatcher",
        "fill_rows": "triec.integrations.matchers:fill_rows",
        "BATCH_ROWS": "triec.integrations.matchers:BATCH_ROWS",
    },
)
