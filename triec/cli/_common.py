"""What every ``triec`` command shares: the app, consoles, exit codes, error reporting."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console, JustifyMethod
from rich.markup import escape
from typer.core import TyperCommand, TyperGroup

from triec._version import __version__
from triec.cli._coercion import install
from triec.errors import TriecError

if TYPE_CHECKING:
    from rich.table import Table


class _CommandParams:
    """What our commands and the group do to their parameters, once, where click builds them.

    Flags get a blank metavar: typer >= 0.29 prints every option's type in rich help,
    so ``--json`` would read ``--json <bool>`` as if it took a value (a flag's metavar is
    shown instead of its type; options that take values keep theirs). Plain parameters
    convert without pydantic (:mod:`triec.cli._coercion`, D16).
    """

    def get_params(self, ctx: Any) -> list[Any]:  # click's Context and Parameter (typer vendors click)
        params: list[Any] = super().get_params(ctx)  # type: ignore[misc]  # mixin: click's Command is next in the MRO
        for p in params:
            if (getattr(p, "is_flag", False) or getattr(p, "count", False)) and p.metavar is None:
                p.metavar = ""
        install(params)
        return params


class _Group(_CommandParams, TyperGroup):
    pass


class _Command(_CommandParams, TyperCommand):
    pass


class _App(typer.Typer):
    """The ``triec`` app: every command registered on it is a :class:`_Command` unless it names its own class."""

    def command(self, *args: Any, cls: type[TyperCommand] | None = None, **kwargs: Any) -> Callable[[Any], Any]:
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


def key_value_table(title: str, justify: JustifyMethod = "left") -> Table:
    """A titled table of two columns, names in bold and their values (``justify``): the summaries that
    ``triec compile`` and ``triec inspect`` print."""
    from rich.table import Table

    t = Table(title=title, show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column(justify=justify)
    return t


def _version(value: bool) -> None:
    if value:
        out.print(f"triec {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
    version: Annotated[
        bool | None, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = None,
) -> None:
    _state["debug"] = debug


def report_errors(fn: Callable[..., None]) -> Callable[..., None]:
    """User errors, and running out of memory, become one line on stderr and exit code 2 (``--debug`` shows the
    traceback); Ctrl-C exits 130."""

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
        except MemoryError:
            # numpy raises it for an allocation the process cannot get (a ulimit, a full machine): outputs are
            # written to a temporary name and renamed only when complete, so nothing half-written stays behind.
            if _state["debug"]:
                err.print_exception()
            err.print(
                "[bold red]error:[/] out of memory (the input is too large for this machine's memory or "
                "limit); nothing was written",
                highlight=False,
                soft_wrap=True,
            )
            raise typer.Exit(EXIT_USAGE) from None

    return wrapper
