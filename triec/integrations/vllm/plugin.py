"""The ``vllm.general_plugins`` entry point: triec's structured-outputs backend, switched on by ``TRIEC_VLLM_BACKEND=1``.

vLLM calls :func:`register` in each of its processes (frontend, engine core,
workers) when it starts. Installing triec does nothing by itself: without the
variable :func:`register` returns at once. With it, the plugin asks
:mod:`.internals` (the one module that reads vLLM's code) for a plan: a release
of :data:`.internals.WINDOW`, and every hook checked on its own. A required hook that
differs (the frontend's admission, the engine's ``compile_grammar``) keeps the
backend off with one line saying what, so nothing is ever served unchecked; an
optimization that differs (the start-up vocabulary build, the worker's sparse
host path) is left out, with one line each, and the backend is on without it. A
release outside the window stays off unless the operator sets
``TRIEC_VLLM_ALLOW_UNTESTED=1``, which skips the version test only.
docs/decisions.md D22 says what is replaced, how a release joins the window and
how to retire it. This module imports nothing heavy until it is switched on.
"""

from __future__ import annotations

import logging
import os

from triec._compat import renamed
from triec.integrations.vllm import internals

ENV = "TRIEC_VLLM_BACKEND"
"""Environment variable: ``1`` switches the backend on (in every vLLM process; set it where the server starts)."""

ALLOW_UNTESTED_ENV = "TRIEC_VLLM_ALLOW_UNTESTED"
"""Environment variable: ``1`` lets the backend run on a vLLM outside :data:`.internals.WINDOW` when every other check
passes."""

log = logging.getLogger("triec.vllm.plugin")
# vLLM configures its own "vllm" logger in the frontend only after the plugins are loaded: this logger has its own
# handler, so the line saying whether the backend is on is never lost.
if not log.handlers:
    _handler = logging.StreamHandler()
    _handler.setFormatter(
        logging.Formatter("%(levelname)s %(asctime)s [triec pid %(process)d] %(message)s", "%m-%d %H:%M:%S")
    )
    log.addHandler(_handler)
    log.propagate = False
log.setLevel(logging.INFO)
_backend_log = logging.getLogger("triec.vllm.backend")
if not _backend_log.handlers:
    _backend_log.addHandler(log.handlers[0])
    _backend_log.propagate = False
_backend_log.setLevel(os.environ.get("TRIEC_VLLM_LOG", "INFO").upper())

_state = {"on": False}


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def plan() -> internals.Plan:
    """The backend's plan on this vLLM (off and why, or the hooks it runs with); never raises."""
    return internals.plan(allow_untested=_truthy(ALLOW_UNTESTED_ENV))


def mismatch() -> str | None:
    """None when the backend can be on with this vLLM, else what differs (one line; never raises)."""
    return plan().off


def register() -> None:
    """The entry point: switch the backend on where ``TRIEC_VLLM_BACKEND=1`` and this vLLM matches; never raises."""
    if not _truthy(ENV) or _state["on"]:
        return
    found = plan()
    if found.off is not None:
        log.warning("triec vLLM backend stays off: %s; structured outputs are vLLM's own", found.off)
        return
    try:
        from triec.integrations.vllm import patches

        patches.install(found.hooks)
    except Exception as exc:  # noqa: BLE001
        log.warning("triec vLLM backend stays off: %s: %s", type(exc).__name__, exc)
        return
    _state["on"] = True
    if not internals.in_window(found.version):
        log.warning(
            "triec vLLM backend on an untested vLLM %s (%s=1): every other check passed",
            found.version,
            ALLOW_UNTESTED_ENV,
        )
    for line in found.lines():
        log.warning("triec vLLM backend on %s", line)
    log.info(
        "triec vLLM backend on (vLLM %s): choice, literal regex, enum and artifact JSON, tool calls by triec; "
        "the rest by xgrammar",
        found.version,
    )


def is_on() -> bool:
    """Whether :func:`register` switched the backend on in this process."""
    return _state["on"]


__all__ = ["ALLOW_UNTESTED_ENV", "ENV", "is_on", "mismatch", "plan", "register"]

__getattr__ = renamed(
    __name__,
    {
        "TESTED": "triec.integrations.vllm.internals:WINDOW",
        "tested": "triec.integrations.vllm.internals:in_window",
        "tag_compiler": "triec.integrations.vllm.internals:tag_compiler",
    },
)
