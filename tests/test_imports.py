"""What each entry point imports: start-up time is mostly imports (docs/decisions.md D16)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = (
    "numpy",
    "typer",
    "rich",
    "pydantic",
    "tokenizers",
    "msgpack",
    "zstandard",
    "torch",
    "transformers",
    "ahocorasick",
)


def loaded_after(code: str) -> set[str]:
    """Top-level packages among HEAVY imported by a fresh interpreter running ``code``."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_import_triec_imports_nothing_heavy() -> None:
    assert loaded_after("import triec") == set()


def test_runtime_is_numpy_only() -> None:
    assert loaded_after("import triec.runtime") == set()  # its names resolve on first use
    assert loaded_after("from triec.runtime import MaskTable") == {"numpy"}
    assert loaded_after("import triec.runtime.pattern, triec.runtime.table") == {"numpy"}


def test_help_needs_no_numpy() -> None:
    code = "import sys\nsys.argv = ['triec', '--help']\nfrom triec.cli import main\ntry:\n    main()\nexcept SystemExit:\n    pass"
    assert "numpy" not in loaded_after(code)


def test_names_resolve_lazily() -> None:
    import triec

    for name in triec.__all__:
        assert getattr(triec, name) is not None
    assert triec.compile.__module__ == "triec.compiler.entry" and triec.load.__module__ == "triec.artifact.formats"


def test_serving_core_is_framework_free() -> None:
    """The serving core every integration shares (artifacts, the served model, requests, admission) and the
    framework-free constraints pull in no serving framework and no torch: SGLang's artifact path must not
    load a vLLM module, and a llama.cpp processor none at all."""
    code = (
        "import sys, triec.integrations.serving, triec.integrations.constraints\n"
        + "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('vllm', 'sglang', 'torch') "
        + "or m.startswith('triec.integrations.vllm'))\nassert not bad, bad"
    )
    assert "torch" not in loaded_after(code)
