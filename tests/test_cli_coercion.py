"""The CLI's own conversion of plain parameters returns exactly what typer's pydantic conversion returns.

triec.cli._coercion converts canonical values of plain types without importing
pydantic (docs/decisions.md D16) and hands everything else to typer. Here every
parameter of every command is converted both ways over a corpus of inputs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main

pytest.importorskip("typer._coercion", reason="the conversion patch targets typer 0.29's internals")
from typer._click import Context
from typer._coercion import build_runtime_param

from triec.cli import app
from triec.cli._coercion import _KEEP, convert, kind_of

ROOT = Path(__file__).resolve().parent.parent

CORPUS: dict[str, list[object]] = {
    "str": ["", "abc", " spaced ", "日本", "-", '{"tool": ', "0"],
    "path": ["a.triec", "./x/y.json", "~/z", "/abs/path", "-"],
    "int": ["0", "1", "-3", "42", "007", "50000", "1.5", " 5", "+5", "1_000", "abc", "", 0, 1, 50_000, -1],
    "float": ["1", "1.5", "300.0", "-2", "0.5", "1e3", "abc", ".5", 300.0, 1.0],
    "list_str": [("a", "b"), (), ("1,2",), ["x"]],
    "bool": [True, False],
}


def all_params() -> list[tuple[str, object, object]]:
    group = typer.main.get_command(app)
    out = []
    for name, cmd in [("triec", group), *sorted(group.commands.items())]:
        ctx = Context(cmd)
        for p in cmd.get_params(ctx):
            out.append((f"{name} {p.name}", p, ctx))
    return out


PARAMS = all_params()


def test_every_parameter_is_converted_here() -> None:
    missing = [label for label, p, _ in PARAMS if kind_of(p) is None]
    assert not missing, f"these parameters would import pydantic on every command: {missing}"


@pytest.mark.parametrize(("label", "param", "ctx"), PARAMS, ids=[label for label, _, _ in PARAMS])
def test_conversion_equals_typers(label: str, param: object, ctx: object) -> None:
    kind = kind_of(param)
    assert kind is not None
    theirs = build_runtime_param(param.type_descriptor)  # type: ignore[attr-defined]
    converted = 0
    for value in CORPUS[kind]:
        ours = convert(kind, value, param.type_descriptor.parameter_info)  # type: ignore[attr-defined]
        if ours is _KEEP:
            continue  # typer's own conversion decides: same behaviour by construction
        expected = theirs._coerce_value(value, param=param, ctx=ctx)
        assert type(ours) is type(expected) and ours == expected, (label, value, ours, expected)
        converted += 1
    assert converted > 0


def test_out_of_range_and_malformed_values_get_typers_messages(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    values = tmp_path / "v.txt"
    values.write_text("a\n")
    for arg, message in (("0", "greater than or equal to 1"), ("abc", "valid integer"), ("1.5", "valid integer")):
        result = CliRunner().invoke(app, ["compile", str(values), "-t", "gpt2", "--vocab-size", arg])
        assert result.exit_code == 2 and message in " ".join(result.stderr.split()), result.stderr


def test_a_command_runs_without_pydantic(tmp_path: Path) -> None:
    values = tmp_path / "v.txt"
    values.write_text("a\nb\n")
    probe = (
        "import sys\n"
        f"sys.argv = ['triec', 'compile', {str(values)!r}, '-t', 'gpt2', '-o', {str(tmp_path / 'v.triec')!r}, '-q',"
        " '--vocab-size', '50304', '--eos', '50256', '--prefix', '<', '--encoding', 'json']\n"
        "from triec.cli import main\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
        "import json\nprint(json.dumps('pydantic' in sys.modules))"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) is False
    assert (tmp_path / "v.triec").exists()
