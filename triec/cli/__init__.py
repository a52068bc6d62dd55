"""The ``triec`` command line. Exit codes: 0 success, 1 a check failed, 2 bad usage or input.

Each command lives in its own module and registers itself on the shared app.
"""

from __future__ import annotations

import sys

from triec.cli import bench as _bench  # noqa: F401 - registers `triec bench`
from triec.cli import compile as _compile  # noqa: F401 - registers `triec compile`
from triec.cli import eval as _eval  # noqa: F401 - registers `triec eval` and `triec bfcl`
from triec.cli import inspect as _inspect  # noqa: F401 - registers `triec inspect`
from triec.cli import verify as _verify  # noqa: F401 - registers `triec verify`
from triec.cli._common import EXIT_CHECK_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, app, err

__all__ = ["EXIT_CHECK_FAILED", "EXIT_OK", "EXIT_USAGE", "app", "main"]


def main() -> None:
    """Console entry point (``triec``): usage errors too are one line on stderr and exit 2."""
    from rich.markup import escape

    try:  # typer >= 0.20 vendors click; older ones use click itself
        from typer._click import exceptions as click
    except ImportError:  # pragma: no cover - depends on the installed typer
        from click import exceptions as click  # type: ignore[no-redef]  # the same module, at its older home

    abort = getattr(click, "Abort", KeyboardInterrupt)  # typer's vendored click has no Abort: Ctrl-C propagates
    try:
        code = app(standalone_mode=False)
    except click.UsageError as exc:  # bad option value, unknown option, missing argument
        message = exc.format_message()
        if message:  # empty after no_args_is_help has printed the help
            where = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            err.print(f"[bold red]error:[/] {escape(message)}{escape(where)}", highlight=False, soft_wrap=True)
        sys.exit(EXIT_USAGE)
    except (abort, KeyboardInterrupt):  # Ctrl-C outside a command body
        err.print("interrupted; no partial file was left behind")
        sys.exit(EXIT_INTERRUPTED)
    except click.ClickException as exc:
        err.print(f"[bold red]error:[/] {escape(exc.format_message())}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    sys.exit(code if isinstance(code, int) else EXIT_OK)
