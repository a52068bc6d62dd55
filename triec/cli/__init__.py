"""The ``triec`` command line. Exit codes: 0 success, 1 a check failed, 2 bad usage or input.

Each command lives in its own module and registers itself on the shared app.
"""

from __future__ import annotations

from triec.cli import bench as _bench  # noqa: F401 - registers `triec bench`
from triec.cli import compile as _compile  # noqa: F401 - registers `triec compile`
from triec.cli import inspect as _inspect  # noqa: F401 - registers `triec inspect`
from triec.cli import verify as _verify  # noqa: F401 - registers `triec verify`
from triec.cli._common import EXIT_CHECK_FAILED, EXIT_OK, EXIT_USAGE, app

__all__ = ["EXIT_CHECK_FAILED", "EXIT_OK", "EXIT_USAGE", "app", "main"]


def main() -> None:
    """Console entry point (``triec``)."""
    app()
