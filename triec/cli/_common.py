"""What every ``triec`` command shares: the app, consoles, exit codes, error reporting, phase timing."""

from __future__ import annotations

import functools
import time
from contextlib import contextmanager
from typing import Annotated, Any, Callable, Iterator, Optional

import typer
import typer.core
from rich.console import Console
from rich.markup import escape

from triec._version import __version__
from triec.cli._coercion import install
from triec.errors import TriecError


class _Command(typer.core.TyperCommand):
    """A command whose plain parameters convert without pydantic (:mod:`triec.cli._coercion`)."""

    def get_params(self, ctx: Any) -> list[Any]:  # the parameters plus the --help option, made here
        params = super().get_params(ctx)
        install(params)
        return params


class _Group(typer.core.TyperGroup):
    def get_params(self, ctx: Any) -> list[Any]:
        params = super().get_params(ctx)
        install(params)
        return params


class _App(typer.Typer):
    """Every command registered on the app is a :class:`_Command` unless it names its own class."""

    def command(self, *args: Any, cls: Any = None, **kwargs: Any) -> Any:
        return super().command(*args, cls=cls or _Command, **kwargs)


app = _App(
    cls=_Group,
    name="triec",
    help="Compile finite sets of strings into exact constrained-decoding masks.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err = Console(stderr=True)
out = Console()

EXIT_OK, EXIT_CHECK_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
_state: dict[str, Any] = {"debug": False}


def _version(value: bool) -> None:
    if value:
        out.print(f"triec {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
    version: Annotated[
        Optional[bool], typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = None,
) -> None:
    _state["debug"] = debug


def report_errors(fn: Callable[..., None]) -> Callable[..., None]:
    """User errors become one line on stderr and exit code 2 (``--debug`` shows the traceback); Ctrl-C exits 130."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            fn(*args, **kwargs)
        except TriecError as exc:
            if _state["debug"]:
                err.print_exception()
            err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
            raise typer.Exit(EXIT_USAGE) from None
        except KeyboardInterrupt:
            # Files are written to a temporary name and renamed, so nothing partial is left behind.
            err.print("interrupted; no partial file was left behind")
            raise typer.Exit(EXIT_INTERRUPTED) from None

    return wrapper


class Phases:
    """Times named phases and shows a spinner while one runs (stderr, interactive only)."""

    def __init__(self, show: bool) -> None:
        self.show = show and err.is_terminal
        self.seconds: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str, label: str) -> Iterator[None]:
        t0 = time.perf_counter()
        if self.show:
            with err.status(f"{label}...", spinner="dots"):
                yield
        else:
            yield
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0


