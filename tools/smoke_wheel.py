"""Smoke test of an INSTALLED triec wheel, run from outside the source tree (nox session ``wheel``).

An editable checkout hides missing package data (the bundled tokenizers, py.typed):
this script imports the installed package, checks what the sdist and the wheel
hold, then drives the ``triec`` console script the way a new user would:
compile the example set with both bundled tokenizers, load the artifacts, follow
each value's bytes token by token, inspect, verify, ``triec bench`` on a small set
(triec alone: this session installs the wheel and no peer engine), and read the help.

    python tools/smoke_wheel.py DIST_DIR     # DIST_DIR: where `python -m build` wrote the sdist and wheel

Every check asserts a real outcome; the first failure stops it with exit 1.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

SOURCE_ROOT = Path(__file__).resolve().parent.parent

SDIST_MUST_HOLD = [
    "pyproject.toml",
    "README.md",
    "LICENSE",
    "CHANGELOG.md",
    "MANIFEST.in",
    "noxfile.py",
    "triec/__init__.py",
    "triec/_version.py",
    "triec/py.typed",
    "triec/data/tokenizers/gpt2.json.zst",
    "triec/data/tokenizers/qwen2.json.zst",
    "tests/conftest.py",
    "tests/cases.py",
    "fixtures/golden/tiny-gpt2.triec",
    "fixtures/tokenizers/phi3/tokenizer.json.zst",
    "examples/tools.txt",
    "docs/format.md",
    "docs/cli.md",
    "docs/serving/vllm.md",
    "tools/smoke_wheel.py",
    "benchmarks/__main__.py",
]
WHEEL_MUST_HOLD = [
    "triec/__init__.py",
    "triec/py.typed",
    "triec/cli/__main__.py",
    "triec/bench/peers.py",
    "triec/bench/runner.py",
    "triec/data/tokenizers/gpt2.json.zst",
    "triec/data/tokenizers/qwen2.json.zst",
]


def check(cond: bool, what: str) -> None:
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        raise SystemExit(1)
    print(f"ok  {what}")


def run(*args: str, stdin: str | None = None, expect: int = 0) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=600)
    if proc.returncode != expect:
        print(proc.stdout[-2000:], proc.stderr[-2000:], sep="\n", file=sys.stderr)
        check(False, f"{' '.join(args)} exits {expect}, not {proc.returncode}")
    return proc


def check_dists(dist: Path) -> tuple[Path, Path]:
    import triec

    sdists, wheels = sorted(dist.glob("triec-*.tar.gz")), sorted(dist.glob("triec-*.whl"))
    check(len(sdists) == 1 and len(wheels) == 1, f"one sdist and one wheel in {dist}")
    sdist, wheel = sdists[0], wheels[0]
    check(
        f"triec-{triec.__version__}" in sdist.name and f"triec-{triec.__version__}-" in wheel.name,
        f"both carry the version {triec.__version__}",
    )
    with tarfile.open(sdist) as tf:
        top = f"triec-{triec.__version__}/"
        names = {n[len(top) :] for n in tf.getnames() if n.startswith(top)}
    missing = [n for n in SDIST_MUST_HOLD if n not in names]
    check(not missing, f"sdist holds the package, tests, fixtures, docs and examples (missing: {missing})")
    check(not [n for n in names if "__pycache__" in n or n.endswith(".pyc")], "sdist holds no bytecode caches")
    with zipfile.ZipFile(wheel) as zf:
        wnames = set(zf.namelist())
        meta = zf.read(f"triec-{triec.__version__}.dist-info/METADATA").decode()
    missing = [n for n in WHEEL_MUST_HOLD if n not in wnames]
    check(not missing, f"wheel holds the package data (missing: {missing})")
    check(
        not [
            n for n in wnames if n.startswith(("tests/", "fixtures/", "tools/", "benchmarks/", "triec/bench/suites/"))
        ],
        "wheel holds triec/ only (no benchmark suites)",
    )
    check(f"triec-{triec.__version__}.dist-info/licenses/LICENSE" in wnames, "wheel carries the LICENSE file")
    check("License-Expression: Apache-2.0" in meta, "metadata: SPDX license expression")
    check("Classifier: Typing :: Typed" in meta and "Project-URL: " in meta, "metadata: classifiers and URLs")
    return sdist, wheel


def check_installed() -> None:
    import importlib.metadata

    import triec

    where = Path(triec.__file__).resolve()
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    check(where.parent == site / "triec", f"triec imports from the installed wheel ({where.parent}), not the checkout")
    check(importlib.metadata.version("triec") == triec.__version__, "installed metadata version == triec.__version__")
    check((where.parent / "py.typed").is_file(), "py.typed is installed")
    direct = json.loads(importlib.metadata.distribution("triec").read_text("direct_url.json") or "{}")
    check(not direct.get("dir_info", {}).get("editable", False), "the install is not editable")
    exe = shutil.which("triec")
    check(
        exe is not None and Path(exe).parent == Path(sys.executable).parent,
        f"console script `triec` beside this python ({exe})",
    )


def follow(table, token_bytes: list[bytes], value: str) -> int:
    """Reach ``value`` by allowed tokens only (longest fitting token first): the mask's own promise."""
    rest, state = value.encode(), table.start
    eos = set(table.eos_token_ids)
    while rest:
        fits = [t for t in table.allowed(state).tolist() if t not in eos and rest.startswith(token_bytes[t])]
        if not fits:
            check(False, f"some allowed token continues {value!r}")
        t = max(fits, key=lambda i: len(token_bytes[i]))
        state, rest = table.advance(state, t), rest[len(token_bytes[t]) :]
    return state


def check_tokenizer(name: str, tools: Path, work: Path) -> None:
    import triec

    out = work / f"tools-{name}.triec"
    summary = json.loads(run("triec", "compile", str(tools), "-t", name, "-o", str(out), "--json").stdout)
    values = [v for v in tools.read_text(encoding="utf-8").splitlines() if v]
    check(
        out.is_file() and summary["values"] == len(set(values)) and summary["tokenizer"] == name,
        f"triec compile {tools.name} -t {name}: {summary['values']:,} values, {summary['states']:,} states",
    )

    table = triec.load(out, verify=True)
    vocab = triec.Vocabulary.load(name)
    table.check_tokenizer(vocab)
    check(
        table.num_values == len(set(values)) and table.header["triec_version"] == triec.__version__,
        f"triec.load: {table.num_values:,} values, written by triec {table.header['triec_version']}",
    )
    for v in values[:: max(1, len(values) // 25)]:
        s = follow(table, vocab.token_bytes, v)
        if not (
            table.is_accepting(s) and table.value(s) == v and set(table.eos_token_ids) <= set(table.allowed(s).tolist())
        ):
            check(False, f"{v!r} ends on an accepting state that allows EOS")
    check(
        True,
        f"{len(values[:: max(1, len(values) // 25)])} values reached token by token, each accepting with EOS allowed",
    )
    check(
        table.state_for_prefix("slack.get_") is not None and table.state_for_prefix("no such tool") is None,
        "prefixes inside the set have a state, others none",
    )

    report = json.loads(run("triec", "inspect", str(out), "--json", "--widest", "3").stdout)
    check(
        report["values"] == table.num_values
        and report["tokenizer"]["name"] == name
        and len(report["widest_states"]) == 3,
        "triec inspect --json: values, tokenizer, widest states",
    )
    text = run("triec", "inspect", str(out), "--prefix", "slack.get_").stdout
    check("first values below" in text and "slack.get_" in text, "triec inspect --prefix shows the state")
    verdict = json.loads(run("triec", "verify", str(out), "--states", "2000", "--walks", "20", "--json").stdout)
    check(verdict["ok"] and verdict["checks"][0]["states_checked"] > 0, "triec verify against the reference: ok")


def check_bench(work: Path) -> None:
    """``triec bench`` on a small set, from the installed wheel: each cell in its own process (``python -m
    triec.bench.runner``). triec alone: the session installs no peer engine (a peer that is installed would run
    too, with ``--engines``). A suite is the checkout's (``python -m benchmarks``): asked for one, the command says
    so and exits 2."""
    out = work / "bench.json"
    small = ["--k", "10,100", "--engines", "triec", "--repeat", "1", "--batch", "1,8", "--paths", "3", "--quiet"]
    run("triec", "bench", *small, "--json", str(out))
    rows = json.loads(out.read_text())["results"]
    check(
        [r["k"] for r in rows] == [10, 100] and all(r["engines"]["triec"]["status"] == "ok" for r in rows),
        "triec bench --k 10,100 --engines triec: every cell ok",
    )
    check("python -m benchmarks" in run("triec", "bench", "peers", expect=2).stderr, "triec bench SUITE points there")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dist", type=Path, help="directory holding the built sdist and wheel")
    args = ap.parse_args()
    dist = args.dist.resolve()
    t0 = time.perf_counter()
    base = Path(tempfile.gettempdir()).resolve()
    if base == SOURCE_ROOT or SOURCE_ROOT in base.parents:  # nox points TMPDIR into .nox/ inside the checkout
        base = Path("/tmp") if Path("/tmp").is_dir() else Path.home()
    with tempfile.TemporaryDirectory(prefix="triec-smoke-", dir=base) as tmp:
        work = Path(tmp).resolve()
        check(SOURCE_ROOT not in work.parents, f"working in {work}, outside the source tree")
        os.chdir(work)  # outside the source tree: nothing resolves against the checkout
        os.environ["TRIEC_CACHE_DIR"] = str(work / "cache")  # a cold automaton cache, like a new user
        sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() not in (SOURCE_ROOT, SOURCE_ROOT / "tools")]
        sdist, _ = check_dists(dist)
        check_installed()
        with tarfile.open(sdist) as tf:  # the example set, as shipped in the sdist
            member = tf.extractfile(next(n for n in tf.getnames() if n.endswith("/examples/tools.txt")))
            assert member is not None
            tools = work / "tools.txt"
            tools.write_bytes(member.read())
        for name in ("qwen2", "gpt2"):
            check_tokenizer(name, tools, work)

        piped = run(
            "triec",
            "compile",
            "-",
            "-t",
            "gpt2",
            "-o",
            str(work / "answer.triec"),
            "--json",
            stdin='{"enum": ["yes", "no", "", "naïve 日本"]}',
        )
        check(json.loads(piped.stdout)["values"] == 4, 'triec compile - (a JSON Schema enum on stdin, with "")')
        import triec

        t = triec.load(work / "answer.triec")
        check(t.is_accepting(t.start) and t.value(t.start) == "", "the empty value accepts at the start")
        probe = (
            "import sys, triec.runtime as r; r.MaskTable; import triec.artifact as a; a.load(sys.argv[1]); "
            "bad = sorted({'torch', 'typer', 'rich', 'tokenizers', 'transformers'} & set(sys.modules)); print(bad); "
            "sys.exit(1 if bad else 0)"
        )
        run(sys.executable, "-c", probe, str(work / "answer.triec"))
        check(True, "loading an artifact imports no torch, typer, rich or tokenizers")

        helptext = run("triec", "--help").stdout
        check(all(c in helptext for c in ("compile", "verify", "inspect", "bench")), "triec --help lists every command")
        helps = helptext + "".join(run("triec", c, "--help").stdout for c in ("compile", "verify", "inspect", "bench"))
        check("--json" in helps and "<bool>" not in helps, "help shows flags without a <bool> label")
        check(triec.__version__ in run("triec", "--version").stdout, "triec --version")
        run("triec", "compile", str(work / "missing.txt"), expect=2)
        check(True, "a missing values file exits 2")
        check_bench(work)
    print(f"wheel smoke test passed in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
