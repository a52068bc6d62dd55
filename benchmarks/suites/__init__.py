"""The suites: one module per question, each runnable alone or all together (``python -m benchmarks SUITE``).

A suite module has:

* ``unavailable() -> str | None``: why it cannot run on this machine (a framework or a device missing), or None;
* ``run(quick: bool) -> dict``: a result (:mod:`benchmarks.results`), every cell measured side by side in this
  run; ``quick`` runs it at its smallest size (CI proves each suite still runs; those figures are not timings);
* ``tables(result) -> dict[str, str]``: its Markdown tables by name (the ``<!-- bench:SUITE:NAME -->`` blocks of
  docs/benchmarks.md);
* optionally ``plots(result, directory) -> list[Path]``: PNG files drawn from the result.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, Protocol, cast

NAMES: dict[str, str] = {
    "peers": "triec against xgrammar, llguidance and outlines-core on one value set (`triec bench`)",
    "compile_load": "compile time and its phases, artifact size, load time and peak memory, by K, set and tokenizer",
    "cli": "the `triec` command line as whole processes, next to Python's own start-up",
    "steps": "mask rows and decode steps: the mask writer, batches, the torch table on CPU, restrict",
    "schemas": "a tool-call schema (one enum of names + arguments): compile_schema against llguidance and xgrammar",
    "tools": "tool registries (compile_tools) against llguidance and xgrammar on the whole format",
    "enums": "large enums anywhere in a JSON schema against llguidance and xgrammar",
    "trigger": "think-then-answer and tool_choice=auto's triggered tags, against xgrammar's structural tag",
    "canonical": "tokenization='canonical' against 'any': compile, size, rows, advance",
    "patterns": "fixed-format strings (date, time, date-time, uuid, ipv4): pattern tables against xgrammar and llguidance",
    "scale": "large sets with little sharing (titles to 10M, issue 43): the tail layout against the full one, tool names",
    "vllm": "triec inside vLLM: the logits processors, the structured-outputs backend, the host bitmask path",
    "sglang": "triec's SGLang grammar backend against SGLang's xgrammar backend",
    "llamacpp": "triec's llama.cpp processor against llama.cpp's own GBNF grammar, speed against free decoding",
    "eval": "a trained model (SmolLM2-135M): BFCL function names, triec against free and xgrammar",
    "beams": "constrained beam search: GENRE-style linking over 1M titles, a 135M model's step, semantic IDs, vLLM",
    "mlx_outlines": "MLX decoding constrained against free; Outlines' Choice (outlines-core) against triec's processor",
    "gpu": "the torch table and the fused Triton kernels on a CUDA device, against the numpy runtime",
}
"""Every suite, in the order ``triec bench all`` runs them, with what it measures."""


class Suite(Protocol):
    def unavailable(self) -> str | None: ...
    def run(self, quick: bool) -> dict[str, Any]: ...
    def tables(self, result: dict[str, Any]) -> dict[str, str]: ...


def load(name: str) -> Suite:
    """The module of suite ``name`` (imported on first use: a suite's frameworks load only when it runs)."""
    if name not in NAMES:
        raise KeyError(f"no suite {name!r}; the suites: {', '.join(NAMES)}")
    module: ModuleType = importlib.import_module(f"benchmarks.suites.{name}")
    return cast(Suite, module)


def plots_of(name: str) -> Any:
    """The suite's ``plots`` function, or None when it draws none."""
    return getattr(load(name), "plots", None)
