"""A vLLM release against triec's window (triec.integrations.vllm.internals.WINDOW): one command per question.

    python tools/vllm_release.py newest              # the newest vLLM on the package index: inside the window?
    python tools/vllm_release.py requirements [SRC]  # a release's requirements but the CUDA-only ones
    python tools/vllm_release.py check 0.35.0        # install that release's classes in a venv, print the plan

``requirements`` reads the ``Requires-Dist`` lines of vLLM's own METADATA (the
installed distribution, or a wheel file given as SRC), evaluates their markers
for this Python without extras, and leaves out what only runs on CUDA (torch and
its CUDA builds, which the sessions replace with the CPU torch, and the kernel
packages named by :data:`CUDA_ONLY`): what ``nox -s vllm_classes`` installs. ``check``
does the same in a fresh virtual environment (``--venv``, default under /tmp) and
prints :func:`~triec.integrations.vllm.internals.plan` for that release (the version
test skipped): which hooks the backend would run with, and what differs. Exit
codes: 0 inside the window / every required hook found; 1 outside / the backend
would stay off; 2 bad usage or a failed install.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CUDA_ONLY = re.compile(
    r"^(torch|torchaudio|torchvision|torchcodec|numba|nvidia-.*|.*-cu\d+|nvtx|flashinfer.*|apache-tvm-ffi|tilelang|"
    r"fastsafetensors|instanttensor|quack-kernels|tokenspeed-mla|humming-kernels|pynvvideocodec|xformers)$",
    re.IGNORECASE,
)
"""Requirements left out of a class-only install: torch (the CPU build is installed first, pinned) and the CUDA
kernels, video decoders and loaders vLLM's wheel pulls, which no module triec touches imports at import time."""

TORCH_CPU = "torch==2.13.0"  # resolves to a CPU build on the CI machines (local disk); an unpinned torch is CUDA


def _window() -> tuple[str, ...]:
    """internals.WINDOW, read from the source: this runs before nox installs triec into the session."""
    import ast

    tree = ast.parse((ROOT / "triec" / "integrations" / "vllm" / "internals.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "WINDOW" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise SystemExit("triec/integrations/vllm/internals.py defines no WINDOW")


def metadata(source: str | None) -> str:
    """vLLM's METADATA text: of the installed distribution, or of a wheel file."""
    if source is None:
        from importlib.metadata import distribution

        return distribution("vllm").read_text("METADATA") or ""
    with zipfile.ZipFile(source) as whl:
        name = next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))
        return whl.read(name).decode()


def requirements(text: str) -> list[str]:
    """The ``Requires-Dist`` lines that apply here without extras, minus :data:`CUDA_ONLY`, markers dropped."""
    from packaging.requirements import Requirement

    out = []
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        if CUDA_ONLY.match(req.name):
            continue
        req.marker = None
        out.append(str(req))
    return out


def newest() -> str:
    """The newest vLLM release on the package index (``pip index versions``)."""
    found = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "vllm"], capture_output=True, text=True, check=True
    )
    match = re.search(r"^vllm \(([^)]+)\)", found.stdout, re.MULTILINE)
    if match is None:
        raise SystemExit(f"cannot read pip's answer: {found.stdout[:200]!r}")
    return match.group(1)


def in_window(version: str, window: tuple[str, ...]) -> bool:
    return any(version == line or version.startswith(line + ".") for line in window)


def check(release: str, venv: Path) -> int:
    """Install ``release``'s classes in ``venv`` (torch CPU, vLLM without dependencies, its requirements but the
    CUDA ones, triec) and print the backend's plan there."""
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)

    def pip(*args: str) -> None:
        print("+ pip install", " ".join(args)[:160], file=sys.stderr)
        subprocess.run([str(py), "-m", "pip", "install", "-q", *args], check=True)

    try:
        pip(TORCH_CPU, "packaging")
        pip("--no-deps", f"vllm=={release}")
        listed = subprocess.run([str(py), __file__, "requirements"], capture_output=True, text=True, check=True)
        pip(*listed.stdout.split("\n")[:-1], "-e", str(ROOT))
    except subprocess.CalledProcessError as exc:
        print(f"install failed: {exc}", file=sys.stderr)
        return 2
    probe = (
        "import json; from triec.integrations.vllm import internals as i; p = i.plan(allow_untested=True); "
        "print(json.dumps({'version': p.version, 'in_window': i.in_window(p.version), 'off': p.off, "
        "'hooks': p.hooks, 'without': p.without, 'sparse_site': i.sparse_site() if 'sparse_apply' in p.hooks "
        "else None}))"
    )
    out = subprocess.run([str(py), "-c", probe], capture_output=True, text=True)
    if out.returncode != 0:
        print(out.stderr[-2000:], file=sys.stderr)
        return 2
    plan = json.loads(out.stdout.strip().splitlines()[-1])
    print(json.dumps(plan, indent=2))
    return 1 if plan["off"] else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("newest", help="is the newest vLLM on the package index inside the window?")
    req = sub.add_parser("requirements", help="a release's requirements but the CUDA-only ones, one a line")
    req.add_argument("source", nargs="?", help="a vLLM wheel file (default: the installed distribution)")
    chk = sub.add_parser("check", help="install a release's classes in a venv and print the backend's plan")
    chk.add_argument("release", help="a vLLM version, e.g. 0.34.0")
    chk.add_argument("--venv", type=Path, default=None, help="the virtual environment (default /tmp/triec-vllm-X)")
    args = parser.parse_args(argv)
    if args.command == "requirements":
        print("\n".join(requirements(metadata(args.source))))
        return 0
    if args.command == "newest":
        window = _window()
        version = newest()
        inside = in_window(version, window)
        lines = ", ".join(w + ".x" for w in window)
        print(
            f"newest vLLM on the index: {version}; triec's window: {lines}; "
            + ("inside" if inside else f"outside: run `python tools/vllm_release.py check {version}`")
        )
        return 0 if inside else 1
    return check(args.release, args.venv or Path(f"/tmp/triec-vllm-{args.release}"))


if __name__ == "__main__":
    sys.exit(main())
