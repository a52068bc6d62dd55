"""The import rule of docs/architecture.md: each layer imports only from the layers below it, and nothing cycles.

Every module of the package is parsed (ast); its imports outside ``if TYPE_CHECKING:``,
at the top and inside functions alike, are edges of the graph. The test fails on an
edge from a layer to a higher one and on any cycle, except the few lazy edges listed
in :data:`LAZY_EDGES` (and, with their reasons, in docs/architecture.md).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import triec

PACKAGE = Path(triec.__file__).resolve().parent
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("triec._version", "triec._compat", "triec.errors", "triec.encoding", "triec.keys", "triec.trie",
              "triec._arrays", "triec._memo", "triec.disk_cache")),
    ("runtime", ("triec.runtime",)),
    ("artifact", ("triec.artifact",)),
    ("tokenizer", ("triec.tokenizer",)),
    ("compiler", ("triec.compiler",)),
    ("engines", ("triec.engines",)),
    ("schema", ("triec.schema",)),
    ("synthetic", ("triec.synthetic",)),
    ("verify", ("triec.verify",)),
    ("bench", ("triec.bench",)),
    ("integrations", ("triec.integrations",)),
    ("eval", ("triec.eval",)),
    ("cli", ("triec.cli",)),
    ("package", ("triec",)),  # the public surface: names resolved on first use, so nothing inside imports it
)  # fmt: skip
"""Bottom up. A module belongs to the layer of the longest name it starts with (``triec`` itself: only exactly)."""

LAZY_EDGES: dict[tuple[str, str], str] = {
    ("triec.runtime.table", "triec.artifact.formats"): "MaskTable.save writes its artifact; the artifact layer reads tables",
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


def _imports(name: str, path: Path, known: set[str]) -> list[Edge]:
    """The edges of one module: every import outside ``if TYPE_CHECKING:``, lazy when inside a function."""
    is_package = path.name == "__init__.py"
    found: list[Edge] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and ast.unparse(child.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
                for other in child.orelse:
                    visit(other, lazy)
                continue
            inner = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.extend(
                    Edge(name, t, inner, child.lineno) for t in _targets(child, name, is_package, known) if t in known and t != name
                )
            visit(child, inner)

    visit(ast.parse(path.read_text(), str(path)), False)
    return found


def edges() -> list[Edge]:
    """One edge per (importer, imported): lazy only when every import of it is inside a function."""
    found = modules()
    out: dict[tuple[str, str], Edge] = {}
    for name, path in found.items():
        for e in _imports(name, path, set(found)):
            seen = out.get((e.source, e.target))
            if seen is None or (seen.lazy and not e.lazy):
                out[(e.source, e.target)] = e
    return sorted(out.values(), key=lambda e: (e.source, e.target))


def layer_of(name: str) -> int:
    best = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if name == prefix or (prefix != "triec" and name.startswith(prefix + ".")):
                if best is None or len(prefix) > best[0]:
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
    for name in modules():
        layer_of(name)


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


def test_the_artifact_layer_imports_no_format_above_it() -> None:
    """Formats register themselves (artifact/formats.py): the loader reaches the schema format by name only."""
    upward = [(e.source, e.target) for e in edges() if e.source.startswith("triec.artifact") and layer_of(e.target) > layer_of(e.source)]
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
    """The graph is only as good as its parser: a function-level import is an edge, a TYPE_CHECKING one is not."""
    by_pair = {(e.source, e.target): e for e in edges()}
    assert by_pair[("triec.runtime.table", "triec.runtime.torch")].lazy  # inside MaskTable.to_torch
    assert not by_pair[("triec.runtime.table", "triec.runtime.states")].lazy
    assert ("triec.runtime.word_masks", "triec.runtime.table") not in by_pair  # under TYPE_CHECKING only


INTEGRATION_MODULES = ("triec.integrations.vllm", "triec.integrations.sglang", "triec.integrations.transformers",
                       "triec.integrations.llama_cpp", "triec.integrations.mlx")
"""Each framework's integration: none imports another's (the shared parts live in the serving core and, for the
in-process engines, integrations/local.py). integrations/outlines.py is not one: Outlines wraps three of them."""

FRAMEWORK_FREE = ("triec.integrations.serving", "triec.integrations.constraints", "triec.integrations.limits")
"""The serving core and what it stands on: no serving framework, no torch."""


def _owner(name: str) -> str | None:
    return next((m for m in INTEGRATION_MODULES if name == m or name.startswith(m + ".")), None)


def test_no_integration_imports_another_integrations_module() -> None:
    crossing = [f"{e.source} -> {e.target} (line {e.line})" for e in edges()
                if _owner(e.source) and _owner(e.target) and _owner(e.source) != _owner(e.target)]  # fmt: skip
    assert crossing == []


def test_the_serving_core_imports_no_framework() -> None:
    """Read from the source, imports inside functions included (tests/test_imports.py checks a fresh interpreter)."""
    found = []
    for name in FRAMEWORK_FREE:
        tree = ast.parse(modules()[name].read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                found += [f"{name}: {n}" for n in names if n.split(".")[0] in ("vllm", "sglang", "torch", "llama_cpp")
                          or _owner(n) is not None]  # fmt: skip
    assert found == []


def test_integrations_ask_the_table_not_its_kind() -> None:
    """Per-kind behaviour is an attribute or method of the table protocol (runtime/kinds.py): the integrations and
    the eval loop hold no ``TableKind`` branch."""
    found = [f"{name} line {node.lineno}" for name, path in modules().items()
             if name.startswith(("triec.integrations", "triec.eval"))
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "TableKind"]  # fmt: skip
    assert found == []


def test_engine_privates_stay_in_their_module() -> None:
    """One engine interface: outside an engine's own module (and in the benchmark scripts) nothing reads its
    private objects, and llguidance's parser limits are written once (engines/llguidance.py)."""
    import re

    scripts = sorted((PACKAGE.parent / "scripts").glob("*.py"))
    found = []
    for name, path in [*modules().items(), *((p.name, p) for p in scripts)]:
        text = path.read_text()
        if name in ("triec.engines.llguidance", "triec.engines.xgrammar", "triec.engines.outlines_core"):
            continue
        found += [f"{name}: {m.group(0)}" for m in re.finditer(r"\._(llg|xgr|oc)\b|LLParserLimits\(", text)]
    assert found == []
    assert (PACKAGE / "engines" / "llguidance.py").read_text().count("LLParserLimits(") == 1
