"""The public surface: one map in triec/__init__.py, and every public exception in triec/errors.py."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import triec

INIT = Path(triec.__file__)


def _type_checking_imports() -> dict[str, str]:
    """name -> module of every import inside ``if TYPE_CHECKING:`` in triec/__init__.py."""
    tree = ast.parse(INIT.read_text())
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.module, ast.unparse(imp)
                found.update({a.asname or a.name: imp.module for a in imp.names})
    return found


def test_type_checking_block_names_what_the_lazy_map_does() -> None:
    assert _type_checking_imports() == triec._WHERE


def test_all_is_the_lazy_map() -> None:
    # the same names, once each (listed in ruff's RUF022 order: constants, classes, then functions)
    assert sorted(triec.__all__) == sorted(["__version__", *triec._WHERE]) and len(set(triec.__all__)) == len(
        triec.__all__
    )
    assert sorted(dir(triec)) == sorted(set(dir(triec)) | set(triec.__all__))


@pytest.mark.parametrize("name", sorted(triec._WHERE))
def test_each_name_is_defined_where_the_map_says(name: str) -> None:
    value = getattr(triec, name)
    module = triec._WHERE[name]
    assert getattr(importlib.import_module(module), name) is value
    if inspect.isclass(value) or inspect.isfunction(value):
        assert value.__module__ == module


def _package_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(triec.__path__, "triec.") if not m.name.endswith(".__main__"))


def _framework_binding(module: str, cls: type) -> bool:
    """An integration's error that must also be its framework's type (vLLM answers 400 for a ``VLLMClientError``):
    allowed where it is a triec error too, so ``except TriecError`` still catches it."""
    import triec.errors

    foreign = [b for b in cls.__mro__[1:] if not b.__module__.startswith(("triec", "builtins"))]
    return module.startswith("triec.integrations.") and bool(foreign) and issubclass(cls, triec.errors.TriecError)


def test_every_public_exception_lives_in_errors_and_is_exported() -> None:
    """A public ``Exception`` subclass defined anywhere in the package is defined in triec/errors.py and in ``triec``."""
    import triec.errors

    outside = []
    for name in _package_modules():
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:  # an optional framework (vLLM) that is not installed here
            assert exc.name and not exc.name.startswith("triec"), exc
            continue
        for attr, value in vars(module).items():
            if (
                (
                    inspect.isclass(value)
                    and issubclass(value, Exception)
                    and value.__module__ == name
                    and not attr.startswith("_")
                )
                and name != "triec.errors"
                and not _framework_binding(name, value)
            ):
                outside.append(f"{name}.{attr}")
    assert outside == []
    defined = {
        a
        for a, v in vars(triec.errors).items()
        if inspect.isclass(v) and issubclass(v, Exception) and v.__module__ == "triec.errors"
    }
    assert defined == {n for n, m in triec._WHERE.items() if m == "triec.errors"}


def test_every_public_class_name_is_defined_once() -> None:
    """One definition per public name (issue 41): each class name not starting with ``_`` is defined by one ``class``
    statement across the package, so a name (``Matcher``, ``TriecGrammar``, ``TriecLogitsProcessor``) means one
    thing. An old name kept for one release is an alias of the same class, not a definition."""
    found: dict[str, list[str]] = {}
    for path in sorted(INIT.parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                found.setdefault(node.name, []).append(f"{path.relative_to(INIT.parent.parent)}:{node.lineno}")
    assert {name: where for name, where in found.items() if len(where) > 1} == {}
