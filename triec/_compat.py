"""The module paths of triec 0.1, kept importable for one release (0.2) with a ``DeprecationWarning``.

0.2 laid the package out in layers (docs/architecture.md); a module that moved
is listed in :data:`MOVED` with its new home (or homes, when it was split). An
import of an old path gets a module that warns once, naming the new path, and
hands out the new modules' objects themselves (``triec.compiler.compile is
triec.build.compile.compile``), so old code and new code share state. The
old paths need no files: a finder on ``sys.meta_path`` answers for exactly these
names after the regular finders found nothing. Old paths that are packages now
(``triec.runtime``, ``triec.artifact``, ``triec.engines``) are the new modules
themselves and re-export their old names without a warning.
"""

from __future__ import annotations

import sys
import warnings
from importlib.machinery import ModuleSpec
from types import BuiltinFunctionType, FrameType, FunctionType, ModuleType
from typing import Any

REMOVED_IN = "0.3"

MOVED: dict[str, tuple[str, ...]] = {
    # base
    "triec.csr": ("triec._arrays",),
    "triec.memo": ("triec._memo",),
    # runtime
    "triec.mask_writer": ("triec.runtime.mask_writer",),
    "triec.restrict": ("triec.runtime.restrict",),
    "triec.torch_table": ("triec.runtime.torch",),
    "triec.validate": ("triec.runtime.validate",),
    "triec.word_masks": ("triec.runtime.word_masks",),
    # tokenizer
    "triec.automaton": ("triec.tokenizer.automaton",),
    "triec.token_bytes": ("triec.tokenizer.token_bytes",),
    "triec.tokenizer_source": ("triec.tokenizer.source",),
    "triec.vocab_cache": ("triec.tokenizer.cache",),
    "triec.vocabulary": ("triec.tokenizer.vocabulary",),
    # compiler
    "triec.json_schema": ("triec.compiler.json_schema",),
    "triec.keysort": ("triec.compiler.keysort",),
    "triec.reference": ("triec.compiler.reference",),
    "triec.values": ("triec.compiler.values",),
    "triec.walk": ("triec.compiler.walk",),
    # schema
    # (0.2 replaced D19's straddle tables, precomputed rows and Continuation with slots and grammars: the
    # old paths point at the modules that do their work now; names without a counterpart are gone)
    "triec.continuation": ("triec.schema.grammar",),
    "triec.schema_artifact": ("triec.schema.artifact", "triec.schema.artifact.legacy"),
    "triec.schema_compiler": ("triec.schema.compile",),
    "triec.schema_table": ("triec.schema.table", "triec.schema.matcher"),
    "triec.straddle": ("triec.schema.slot", "triec.tokenizer.index"),
    "triec.tool_schema": ("triec.schema.shape",),
    # check
    "triec.inspect": ("triec.verify.inspect",),
    "triec.schema_verify": ("triec.verify.schemas",),
    # vllm
    "triec.integrations.vllm._core": ("triec.integrations.vllm.batch", "triec.integrations.serving", "triec.errors"),
    # 0.2's own paths before issue 41 renamed them (never released; kept one release all the same)
    "triec.build": ("triec.compiler",),
    "triec.build.compile": ("triec.compiler.entry",),
    "triec.build.canonical": ("triec.compiler.canonical",),
    "triec.build.json_schema": ("triec.compiler.json_schema",),
    "triec.build.keysort": ("triec.compiler.keysort",),
    "triec.build.reference": ("triec.compiler.reference",),
    "triec.build.values": ("triec.compiler.values",),
    "triec.build.walk": ("triec.compiler.walk",),
    "triec.check": ("triec.verify", "triec.bench", "triec.synthetic"),
    "triec.check.bench": ("triec.bench.peers",),
    "triec.check.inspect": ("triec.verify.inspect",),
    "triec.check.paths": ("triec.verify.paths",),
    "triec.check.registries": ("triec.synthetic.registries",),
    "triec.check.schema_verify": ("triec.verify.schemas",),
    "triec.check.states": ("triec.verify.states",),
    "triec.check.synthetic": ("triec.synthetic.sets",),
    "triec.check.verify": ("triec.verify.tables",),
    "triec.runtime.host": ("triec.runtime.numpy",),
}
"""Old module path -> the modules that hold its names now (searched in order; the first is named in the warning)."""

RENAMED: dict[str, dict[str, str]] = {
    "triec.integrations.vllm._core": {
        "Table": "triec.integrations.serving:ServedTable",
        "engine_eos_ids": "triec.integrations.vllm.batch:model_eos_ids",
        "engine_served": "triec.integrations.vllm.batch:config_served_model",
        "engine_start": "triec.integrations.vllm.batch:warm_up",
    },
}
"""Old module path -> {old name: ``"new.module:new_name"``}: names of a moved module that were renamed since (issue 41:
"engine" is a grammar engine). Each resolves to the new object; importing the old path already warned."""


def _renamed(module: str, name: str) -> Any:
    import importlib

    home, _, new = RENAMED[module][name].partition(":")
    return getattr(importlib.import_module(home), new)


class _MovedModule(ModuleType):
    """An old path: every attribute is looked up in the new homes, never copied (so monkeypatches of them show)."""

    __homes__: tuple[ModuleType, ...] = ()
    __all__: list[str]

    def __getattr__(self, name: str) -> Any:
        if name in RENAMED.get(self.__name__, {}):
            return _renamed(self.__name__, name)
        for home in self.__homes__:
            try:
                return getattr(home, name)
            except AttributeError:
                continue
        raise AttributeError(f"module {self.__name__!r} has no attribute {name!r} (it moved to {self.__doc__})")

    def __dir__(self) -> list[str]:
        return sorted(set().union(*(dir(home) for home in self.__homes__), RENAMED.get(self.__name__, {})))


class _Finder:
    """Finds the paths in :data:`MOVED` (installed last on ``sys.meta_path``; regular files always win)."""

    @classmethod
    def find_spec(cls, name: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if name not in MOVED:
            return None
        loader: Any = cls  # a Loader by protocol (create_module, exec_module), not by class
        spec = ModuleSpec(name, loader, origin="moved", is_package=any(m.startswith(name + ".") for m in MOVED))
        if spec.submodule_search_locations is not None:
            spec.submodule_search_locations = []  # a moved package: its moved submodules are found here too
        return spec

    @staticmethod
    def create_module(spec: ModuleSpec) -> ModuleType:
        return _MovedModule(spec.name)

    @staticmethod
    def exec_module(module: _MovedModule) -> None:  # the module create_module made
        import importlib

        targets = MOVED[module.__name__]
        module.__homes__ = tuple(importlib.import_module(t) for t in targets)
        module.__doc__ = ", ".join(targets)
        names = {n for home in module.__homes__ for n in _public(home)} | set(RENAMED.get(module.__name__, {}))
        module.__all__ = sorted(names)
        warnings.warn(
            f"{module.__name__} is deprecated and will be removed in triec {REMOVED_IN}: "
            f"import from {targets[0]} instead" + (f" (or {', '.join(targets[1:])})" if targets[1:] else ""),
            DeprecationWarning,
            stacklevel=_importer_level(),
        )


def _public(home: ModuleType) -> list[str]:
    """What ``from old import *`` gives: a module's public names and triec's objects it imports (an exception
    that moved to triec.errors, say), not the modules, typing helpers and third-party names it imports."""
    if hasattr(home, "__all__"):
        return list(home.__all__)
    out = []
    for name, value in vars(home).items():
        if name.startswith("_") or name in ("TYPE_CHECKING", "annotations") or isinstance(value, ModuleType):
            continue
        foreign = not str(getattr(value, "__module__", "")).startswith("triec")
        if isinstance(value, (type, FunctionType, BuiltinFunctionType)) and foreign:
            continue
        out.append(name)
    return out


def _importer_level() -> int:
    """The ``stacklevel`` of the frame whose import reached here: ``warnings`` itself skips importlib's bootstrap
    frames, so count the others (this module, ``importlib.import_module``) up to the importer."""
    import importlib

    skip = {__file__, importlib.__file__}
    frame: FrameType | None = sys._getframe(1)
    level = 0
    while frame is not None:
        name = frame.f_code.co_filename
        if not ("importlib" in name and "_bootstrap" in name):
            level += 1
            if name not in skip:
                break
        frame = frame.f_back
    return level


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (``import triec`` does this)."""
    if _Finder not in sys.meta_path:
        finder: Any = _Finder  # a MetaPathFinder by protocol (find_spec), not by class
        sys.meta_path.append(finder)


def reexport(package: str, names: dict[str, str]) -> tuple[Any, Any]:
    """``__getattr__`` and ``__dir__`` for a package that was a module in 0.1: its old names, each resolved from its
    new home on first use (nothing imported before), the same objects, no warning (the path itself stayed)."""
    import importlib

    def __getattr__(name: str) -> Any:  # noqa: N807 - PEP 562
        home = names.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(home), name)

    def __dir__() -> list[str]:  # noqa: N807 - PEP 562
        return sorted(set(names) | set(sys.modules[package].__dict__))

    return __getattr__, __dir__


def renamed(module: str, names: dict[str, str]) -> Any:
    """``__getattr__`` for a module some of whose names were renamed or moved (issue 41): each old name in ``names``
    (old name -> ``"new.module:new_name"``) resolves to the new object, with a ``DeprecationWarning`` naming it, for
    one release. The new module is imported on first use only."""
    import importlib

    def __getattr__(name: str) -> Any:  # noqa: N807 - PEP 562
        target = names.get(name)
        if target is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        home, _, new = target.partition(":")
        warnings.warn(
            f"{module}.{name} is deprecated and will be removed in triec {REMOVED_IN}: use {home}.{new}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(home), new)

    return __getattr__
