"""triec's SGLang grammar backend on a real SGLang server (CUDA): not measured yet.

SGLang's model runner needs CUDA kernels, and no GPU machine with SGLang's wheels has run triec yet; the
``sglang`` nox session tests the backend through SGLang's own classes on CPU, and ``tools/sglang_server.py``
checks a server end to end. This suite reports ``skipped`` until a driver that times a server exists.
"""

from __future__ import annotations

from typing import Any


def unavailable() -> str | None:
    return "no SGLang benchmark driver yet (tools/sglang_server.py checks a CUDA server end to end)"


def run(quick: bool) -> dict[str, Any]:
    raise RuntimeError(unavailable())


def tables(result: dict[str, Any]) -> dict[str, str]:
    return {}
