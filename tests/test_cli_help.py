"""``triec --help`` and every command's help: flags read as flags, options that take values show their type."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from triec.cli import app

# command -> (flags it has, an option that takes a value)
COMMANDS = {
    "": (["--debug", "--version", "--help"], None),
    "compile": (["--zstd", "--json", "--quiet", "--help"], "--vocab-size"),
    "verify": (["--json", "--help"], "--states"),
    "inspect": (["--json", "--help"], "--widest"),
    "bench": (["--help"], "--repeat"),
}


def help_text(command: str) -> str:
    result = CliRunner().invoke(app, [*([command] if command else []), "--help"], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("command", list(COMMANDS))
def test_flags_have_no_type_label(command: str) -> None:
    text = help_text(command)
    flags, valued = COMMANDS[command]
    rows = {line.split()[1]: line for line in text.splitlines() if line.startswith("│ --")}
    for flag in flags:
        assert flag in rows, (flag, text)
        assert "<bool>" not in rows[flag] and "BOOLEAN" not in rows[flag], rows[flag]
    assert "<bool>" not in text
    if valued:  # the type column itself still renders: only flags lose their label
        assert "int" in rows[valued].lower(), rows[valued]
