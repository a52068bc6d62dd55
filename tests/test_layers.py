"""The import rule of docs/architecture.md: each layer imports only from the layers below it, and nothing cycles.

Every module of the package is parsed (ast); its imports outside ``if TYPE_CHECKING:``,
at the top and inside functions alike, are edges of the graph. The test fails on an
edge from a layer to a higher one and on any cycle, except the few lazy edges listed
in :data:`LAZY_EDGES` (and, with their reasons, in docs/architecture.md). Counting the
``TYPE_CHECKING`` imports too, nothing cycles either: a table class sits on top of the
modules that serve it, which read it through a protocol below them (the runtime, the
schema, the tokenizer). And no module reads another's ``_``-prefixed names.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import triec

PACKAGE = Path(triec.__file__).resolve().parent
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"


def _doc_table(heading: str, first_column: str) -> list[list[str]]:
    """The cells of the markdown table under ``heading`` in docs/architecture.md whose first header cell is
    ``first_column`` (the rows after the header and its rule)."""
    text = ARCHITECTURE.read_text()
    section = text[text.index(heading) :]
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_column} |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split(" | ")])
    return rows


def _names(cell: str) -> tuple[str, ...]:
    return tuple(re.findall(r"`([^`]+)`", cell))


LAYER_ROWS = _doc_table("## Layers", "layer")
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = tuple((row[0], _names(row[1])) for row in LAYER_ROWS)
"""Bottom up, read from docs/architecture.md's layer table (its **modules** column). A module belongs to the layer
of the longest name it starts with (``triec`` itself: only exactly)."""
DECLARED: dict[str, set[str]] = {
    row[0]: {n.strip() for n in row[3].split(",") if n.strip() not in ("", "—")} for row in LAYER_ROWS
}
"""Each layer's **imports from below today** column."""

LAZY_EDGES: dict[tuple[str, str], str] = {
    (
        "triec.runtime.table",
        "triec.artifact.formats",
    ): "MaskTable.save writes its artifact; the artifact layer reads tables",
    (
        "triec.runtime.pattern",
        "triec.artifact.formats",
    ): "PatternTable.save writes its artifact; the artifact layer reads tables",
}
"""Upward edges allowed, each imported inside the one function that needs it."""


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    lazy: bool  # every import of target in source is inside a function
    line: int


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _targets(node: ast.Import | ast.ImportFrom, name: str, is_package: bool, known: set[str]) -> list[str]:
    if isinstance(node, ast.Import):
        bases = [a.name for a in node.names]
        return [max((m for m in known if b == m or b.startswith(m + ".")), key=len, default=b) for b in bases]
    if node.level:
        parts = name.split(".") if is_package else name.split(".")[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join([*parts, node.module] if node.module else parts)
    else:
        base = node.module or ""
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]


def _imports(name: str, path: Path, known: set[str], type_checking: bool = False) -> list[Edge]:
    """The edges of one module: every import (outside ``if TYPE_CHECKING:`` unless ``type_checking``), lazy when
    inside a function."""
    is_package = path.name == "__init__.py"
    found: list[Edge] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if (
                not type_checking
                and isinstance(child, ast.If)
                and ast.unparse(child.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
            ):
                for other in child.orelse:
                    visit(other, lazy)
                continue
            inner = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.extend(
                    Edge(name, t, inner, child.lineno)
                    for t in _targets(child, name, is_package, known)
                    if t in known and t != name
                )
            visit(child, inner)

    visit(ast.parse(path.read_text(), str(path)), False)
    return found


def edges(*, type_checking: bool = False) -> list[Edge]:
    """One edge per (importer, imported): lazy only when every import of it is inside a function; with
    ``type_checking``, the imports under ``if TYPE_CHECKING:`` count too."""
    found = modules()
    out: dict[tuple[str, str], Edge] = {}
    for name, path in found.items():
        for e in _imports(name, path, set(found), type_checking):
            seen = out.get((e.source, e.target))
            if seen is None or (seen.lazy and not e.lazy):
                out[(e.source, e.target)] = e
    return sorted(out.values(), key=lambda e: (e.source, e.target))


def layer_of(name: str) -> int:
    best = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            matches = name == prefix or (prefix != "triec" and name.startswith(prefix + "."))
            if matches and (best is None or len(prefix) > best[0]):
                best = (len(prefix), index)
    assert best is not None, f"{name} belongs to no layer: add it to LAYERS and to docs/architecture.md"
    return best[1]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_every_module_belongs_to_a_layer() -> None:
    assert [name for name, _ in LAYERS][:2] == ["base", "runtime"] and all(prefixes for _, prefixes in LAYERS)
    for name in modules():
        layer_of(name)


def test_the_docs_import_column_holds_what_the_code_imports() -> None:
    """Each layer's row in docs/architecture.md names every layer its modules import (lazy edges aside), and only
    layers below it: the table and the code cannot drift apart."""
    order = [name for name, _ in LAYERS]
    found: dict[str, set[str]] = {name: set() for name in order}
    for e in edges():
        if (e.source, e.target) in LAZY_EDGES:
            continue
        a, b = layer_of(e.source), layer_of(e.target)
        if a != b:
            found[order[a]].add(order[b])
    missing = {layer: sorted(found[layer] - DECLARED[layer]) for layer in order if found[layer] - DECLARED[layer]}
    assert missing == {}, "docs/architecture.md's layer table omits these imports"
    for layer in order:
        assert all(order.index(d) < order.index(layer) for d in DECLARED[layer]), layer


def test_the_module_table_has_one_row_per_module() -> None:
    """docs/architecture.md's module table: a row for every module of the package, none for a module that is gone."""
    rows = {_names(row[0])[0] for row in _doc_table("## Modules", "module") if _names(row[0])}
    files = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")}
    assert sorted(files - rows) == [], "modules without a row in docs/architecture.md"
    assert sorted(rows - files) == [], "rows in docs/architecture.md for modules that do not exist"


def test_no_module_imports_from_a_higher_layer() -> None:
    upward = [
        f"{e.source} -> {e.target} (line {e.line}{', lazy' if e.lazy else ''}): "
        f"{LAYERS[layer_of(e.source)][0]} imports {LAYERS[layer_of(e.target)][0]}"
        for e in edges()
        if layer_of(e.target) > layer_of(e.source) and (e.source, e.target) not in LAZY_EDGES
    ]
    assert upward == []


def test_the_import_graph_has_no_cycle() -> None:
    graph: dict[str, set[str]] = {}
    for e in edges():
        if (e.source, e.target) not in LAZY_EDGES:
            graph.setdefault(e.source, set()).add(e.target)
    assert cycles(graph) == []


def test_no_cycle_even_through_lazy_edges() -> None:
    """A lazy edge still runs the import when its function does: the graph with them has no cycle either."""
    graph: dict[str, set[str]] = {}
    for e in edges():
        graph.setdefault(e.source, set()).add(e.target)
    assert cycles(graph) == []


def test_the_package_imports_nothing_of_the_checkout() -> None:
    """The wheel carries triec/ only: no module of it imports the repository's benchmarks/ (or tests/, tools/),
    not even inside a function, so the installed ``triec bench`` runs without a checkout."""
    found = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                tops = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                tops = [(node.module or "").split(".")[0]]
            else:
                continue
            found += [f"{name} (line {node.lineno}): {t}" for t in tops if t in ("benchmarks", "tests", "tools")]
    assert found == []


def test_the_artifact_layer_imports_no_format_above_it() -> None:
    """Formats register themselves (artifact/formats.py): the loader reaches the schema format by name only."""
    upward = [
        (e.source, e.target)
        for e in edges()
        if e.source.startswith("triec.artifact") and layer_of(e.target) > layer_of(e.source)
    ]
    assert upward == []


def test_allowed_lazy_edges_exist_are_lazy_and_are_documented() -> None:
    by_pair = {(e.source, e.target): e for e in edges()}
    text = ARCHITECTURE.read_text()
    for (source, target), reason in LAZY_EDGES.items():
        edge = by_pair.get((source, target))
        assert edge is not None, f"{source} -> {target} is allowed but no longer exists: drop it from LAZY_EDGES"
        assert edge.lazy, f"{source} -> {target} must be imported inside the function that needs it"
        assert f"`{source}` → `{target}`" in text, f"docs/architecture.md does not list {source} -> {target} ({reason})"


def test_the_checker_sees_lazy_and_type_checking_imports() -> None:
    """The graph is only as good as its parser: a function-level import is an edge, a TYPE_CHECKING one is not
    (unless asked for)."""
    by_pair = {(e.source, e.target): e for e in edges()}
    assert by_pair[("triec.runtime.table", "triec.runtime.torch")].lazy  # inside MaskTable.to_torch
    assert not by_pair[("triec.runtime.table", "triec.runtime.states")].lazy
    assert ("triec.schema.table", "triec.schema.slot") not in by_pair  # under TYPE_CHECKING only
    assert ("triec.schema.table", "triec.schema.slot") in {(e.source, e.target) for e in edges(type_checking=True)}


def test_no_cycle_even_through_type_checking_imports() -> None:
    """Two modules that need each other's names, even for annotations only, cannot be read one without the other:
    the lower one states what it reads as a protocol of its own (runtime/arrays.py, runtime/kinds.py,
    schema/parts.py, the automaton's ``TokenSource``)."""
    graph: dict[str, set[str]] = {}
    for e in edges(type_checking=True):
        graph.setdefault(e.source, set()).add(e.target)
    assert cycles(graph) == []


# ----------------------------------------------------------------------------- the runtime reads downward

TABLE_LAZY: dict[str, str] = {
    "triec.runtime.torch": "torch is optional: `import triec.runtime` stays numpy-only (tests/test_imports.py)",
    "triec.artifact.formats": "MaskTable.save writes its artifact; the artifact layer sits above (LAZY_EDGES)",
}
"""The only imports runtime/table.py makes inside a function, each for its reason."""

SERVED_BY: dict[str, tuple[str, ...]] = {
    "triec.runtime.table": (
        "triec.runtime.arrays",
        "triec.runtime.kinds",
        "triec.runtime.states",
        "triec.runtime.validate",
        "triec.runtime.word_masks",
        "triec.runtime.mask_writer",
        "triec.runtime.matcher",
        "triec.runtime.restrict",
    ),
    "triec.schema.table": ("triec.schema.parts", "triec.schema.matcher"),
    "triec.tokenizer.vocabulary": ("triec.tokenizer.automaton",),
}
"""A table class (or the vocabulary) and what it composes, imported at its top (downward)."""


def test_the_runtime_reads_downward() -> None:
    """No module of the runtime imports runtime/table.py, not even lazily or for annotations: the behaviours read
    a table as ``TableArrays`` (runtime/arrays.py) or ``SetTable`` (runtime/kinds.py), and ``MaskTable`` composes
    them from above."""
    found = [
        f"{e.source} (line {e.line})"
        for e in edges(type_checking=True)
        if e.target == "triec.runtime.table" and e.source.startswith("triec.runtime.")
    ]
    assert found == []


def test_table_classes_compose_what_serves_them_from_above() -> None:
    """Each composer imports what serves it at its top; none of those imports it back, in any form."""
    every = edges(type_checking=True)
    top = {(e.source, e.target) for e in edges() if not e.lazy}
    for composer, served in SERVED_BY.items():
        assert [m for m in served if (composer, m) not in top] == [], f"{composer} imports these at its top"
        back = [f"{e.source} (line {e.line})" for e in every if e.target == composer and e.source in served]
        assert back == [], f"these import {composer}: read it through the protocol below it"


def test_the_mask_table_imports_in_functions_only_what_it_must() -> None:
    """runtime/table.py imports at its top, but for the listed optional or upward modules (their reasons in
    :data:`TABLE_LAZY`)."""
    tree = ast.parse(modules()["triec.runtime.table"].read_text())
    inner = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    inner.update(a.name for a in node.names)
                elif isinstance(node, ast.ImportFrom):
                    inner.add(node.module or "")
    assert inner == set(TABLE_LAZY)


INTEGRATION_MODULES = (
    "triec.integrations.vllm",
    "triec.integrations.sglang",
    "triec.integrations.transformers",
    "triec.integrations.llama_cpp",
    "triec.integrations.mlx",
)
"""Each framework's integration: none imports another's (the shared parts live in the serving core and, for the
in-process engines, integrations/local.py). integrations/outlines.py is not one: Outlines wraps three of them."""

FRAMEWORK_FREE = (
    "triec.integrations.serving",
    "triec.integrations.constraints",
    "triec.integrations.limits",
    "triec.integrations.matchers",
)
"""The serving core and what it stands on: no serving framework, no torch."""


def _owner(name: str) -> str | None:
    return next((m for m in INTEGRATION_MODULES if name == m or name.startswith(m + ".")), None)


def test_no_integration_imports_another_integrations_module() -> None:
    crossing = [
        f"{e.source} -> {e.target} (line {e.line})"
        for e in edges()
        if _owner(e.source) and _owner(e.target) and _owner(e.source) != _owner(e.target)
    ]
    assert crossing == []


def test_the_serving_core_imports_no_framework() -> None:
    """Read from the source, imports inside functions included (tests/test_imports.py checks a fresh interpreter)."""
    found = []
    for name in FRAMEWORK_FREE:
        tree = ast.parse(modules()[name].read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                found += [
                    f"{name}: {n}"
                    for n in names
                    if n.split(".")[0] in ("vllm", "sglang", "torch", "llama_cpp") or _owner(n) is not None
                ]
    assert found == []


def test_integrations_ask_the_table_not_its_kind() -> None:
    """Per-kind behaviour is an attribute or method of the table protocol (runtime/kinds.py): the integrations and
    the eval loop hold no ``TableKind`` branch."""
    found = [
        f"{name} line {node.lineno}"
        for name, path in modules().items()
        if name.startswith(("triec.integrations", "triec.eval"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "TableKind"
    ]
    assert found == []


def test_engine_privates_stay_in_their_module() -> None:
    """One engine interface: outside an engine's own module (and in tools/ and benchmarks/) nothing reads its
    private objects, and llguidance's parser limits are written once (engines/llguidance.py)."""
    import re

    scripts = sorted((PACKAGE.parent / "tools").glob("*.py")) + sorted((PACKAGE.parent / "benchmarks").rglob("*.py"))
    found = []
    for name, path in [*modules().items(), *((p.name, p) for p in scripts)]:
        text = path.read_text()
        if name in ("triec.engines.llguidance", "triec.engines.xgrammar", "triec.engines.outlines_core"):
            continue
        found += [f"{name}: {m.group(0)}" for m in re.finditer(r"\._(llg|xgr|oc)\b|LLParserLimits\(", text)]
    assert found == []
    assert (PACKAGE / "engines" / "llguidance.py").read_text().count("LLParserLimits(") == 1


# ----------------------------------------------------------------------------- private names stay in their module

PRIVATE_ACCESS_ELSEWHERE: frozenset[str] = frozenset()
"""Modules that still read another module's ``_``-prefixed names (none: triec's own privates stay in their module)."""

FRAMEWORK_PRIVATE: dict[tuple[str, str], str] = {
    (
        "triec.cli._coercion",
        "_runtime_param",
    ): "typer keeps a parameter's converter there; D16 replaces it without pydantic",
    ("triec.integrations.llama_cpp", "_model"): "llama-cpp-python's model handle (llama_model): pieces, EOG, text",
    (
        "triec.integrations.sglang",
        "_allocate_token_bitmask",
    ): "SGLang's bitmask allocator, so rows match its xgrammar's",
    (
        "triec.integrations.sglang",
        "_tokenizer_info",
    ): "the fallback xgrammar backend's tokenizer info, shared not rebuilt",
    ("triec.integrations.vllm.internals", "_validate_structured_outputs"): "the frontend hook the backend wraps (D22)",
    (
        "triec.integrations.vllm.internals",
        "_masked_reasoning_ends",
    ): "vLLM's reasoning-end bookkeeping, read in one room",
    ("triec.integrations.vllm.internals", "_preprocess_cmpl"): "LLM.beam_search's prompts to engine inputs",
    ("triec.integrations.vllm.internals", "_lora_request_to_seq"): "LLM.beam_search's LoRA request per prompt",
    ("triec.integrations.vllm.internals", "_render_and_run_requests"): "LLM.beam_search's one engine call a step",
}
"""Frameworks' own private names triec must reach (no public hook exists): each read in the one module listed, with
why. Every other ``_``-prefixed read across modules fails the test."""

STDLIB_PRIVATE = frozenset({"sys._getframe"})
"""Documented interpreter functions whose names start with ``_``."""

_ATTRIBUTE_FUNCTIONS = ("getattr", "setattr", "hasattr", "delattr")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defined_here(tree: ast.AST) -> set[str]:
    """The ``_``-prefixed names a module defines: functions, classes, assigned names, ``self._x`` / ``cls._x``
    attributes, ``__slots__`` entries."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            found.add(node.attr)
        elif isinstance(node, ast.Assign) and "__slots__" in [ast.unparse(t) for t in node.targets]:
            found.update(str(c.value) for c in ast.walk(node.value) if isinstance(c, ast.Constant))
    return {n for n in found if _private(n)}


def _own(node: ast.expr) -> bool:
    """``self``, ``cls`` or ``super()``: an object's own names, wherever its class was written."""
    if isinstance(node, ast.Name):
        return node.id in ("self", "cls")
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


def private_reads(name: str, path: Path, known: set[str]) -> list[str]:
    """Where a module reads (or writes) a ``_``-prefixed name another module defines.

    Allowed: an object's own names (``self._x``, ``cls._x``, ``super()._x``); any object's ``_x`` where this
    module defines ``_x`` (``other._x`` in the class that defines it: a copy, ``__eq__``); dunders; a package's
    ``_``-prefixed *modules* (package-internal, not one module's privates); :data:`STDLIB_PRIVATE`.
    Flagged: ``x._y`` otherwise, ``getattr(x, "_y")`` and its siblings, ``from m import _y`` of a non-module.
    """
    tree = ast.parse(path.read_text(), str(path))
    here = _defined_here(tree)
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            if not (_own(node.value) or node.attr in here or ast.unparse(node) in STDLIB_PRIVATE):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _ATTRIBUTE_FUNCTIONS
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
        ):
            if not (_own(node.args[0]) or node.args[1].value in here):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom):
            for alias, target in zip(node.names, _targets(node, name, is_package, known), strict=True):
                if _private(alias.name) and not (target in known and target.rsplit(".", 1)[-1] == alias.name):
                    found.append(f"line {node.lineno}: from {node.module} import {alias.name}")
    return found


def test_no_module_reads_another_modules_private_names() -> None:
    """A ``_``-prefixed name is its module's own: the modules above read a public name (``MaskTable.from_compile``,
    ``TableArrays``' queries, ``slot.below_group``, ``source.decompress``), never another module's private one."""
    found, clean = [], []
    known = set(modules())
    for name, path in sorted(modules().items()):
        allowed = {attr for (module, attr) in FRAMEWORK_PRIVATE if module == name}
        reads = private_reads(name, path, known)
        for attr in allowed:
            assert any(re.search(rf"\b{attr}\b", r) for r in reads), f"{name} no longer reads {attr}: drop it"
        reads = [r for r in reads if not any(re.search(rf"\b{a}\b", r) for a in allowed)]
        if name in PRIVATE_ACCESS_ELSEWHERE:
            clean += [] if reads else [name]
        else:
            found += [f"{name} {r}" for r in reads]
    assert found == []
    assert clean == [], "no longer reads another module's private names: drop it from PRIVATE_ACCESS_ELSEWHERE"


def test_the_private_check_sees_each_form(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from triec import _compat\nfrom triec.runtime.table import _hidden\n"
        "class A:\n    __slots__ = ('_s',)\n    def __init__(self):\n        self._mine = 1\n"
        "    def copy(self, other):\n        other._mine = other._s\n        return super()._base, sys._getframe(0)\n"
        "def f(table, t):\n    return table._derive, getattr(t, '_x'), setattr(t, '_mine', 1), t.__dict__\n"
    )
    reads = private_reads("triec.sample", sample, set(modules()))
    assert sorted(r.split(": ", 1)[1] for r in reads) == [
        "from triec.runtime.table import _hidden",
        "getattr(t, '_x')",
        "table._derive",
    ]
