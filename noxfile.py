"""Test environments, one command: ``pip install nox && nox`` (what CI's .ci/run calls).

Each session gets its own virtual environment because some of them cannot share
one (vLLM's CPU wheel pins its own torch and pulls a torchvision that breaks
transformers' model imports next to it). ``nox -s tests`` runs the main suite alone.
"""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = False
nox.options.error_on_missing_interpreters = True


@nox.session
def tests(session: nox.Session) -> None:
    """The main suite: real tokenizers, llguidance as the oracle, torch (CPU) and transformers."""
    session.install("-q", "-e", ".[test]")
    session.run("pytest", "-q", *session.posargs)
