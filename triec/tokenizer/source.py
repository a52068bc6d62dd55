"""Find a tokenizer by name: a bundled one, a path, or a Hugging Face repo id.

This is the I/O edge of :class:`triec.Vocabulary`: it returns the parsed
``tokenizer.json`` plus whatever model configuration sits beside it (EOS ids,
logits width), and leaves decoding to :mod:`triec.tokenizer.token_bytes`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from triec.errors import TokenizerError

DEFAULT_TOKENIZER = "qwen2"

# Bundled tokenizers: zstd-compressed tokenizer.json files in triec/data/tokenizers.
# EOS names follow each model family's generation config.
BUNDLED: dict[str, dict[str, Any]] = {
    "gpt2": {"eos": ["<|endoftext|>"]},
    "qwen2": {"eos": ["<|endoftext|>", "<|im_end|>"]},
}

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")


@dataclass
class TokenizerSource:
    """A located tokenizer: its file's bytes as stored, the hints found around it, the JSON on demand.

    Parsing a 150k-token ``tokenizer.json`` costs a few hundred milliseconds, so
    it happens only when asked for (:attr:`tokenizer_json`); the decoded
    vocabulary cache needs only :attr:`content_digest`.
    """

    name: str  # what to record in artifacts so the tokenizer can be found again
    raw: bytes  # the tokenizer file's bytes as stored (zstd-compressed when ``compressed``)
    compressed: bool
    label: str  # how errors name the file
    eos_names: list[str] = field(default_factory=list)
    eos_ids: list[int] = field(default_factory=list)
    model_vocab_size: int | None = None

    @cached_property
    def content_digest(self) -> str:
        """sha256 of the file's bytes: a changed file (same path, new content) gets a new digest."""
        return hashlib.sha256(self.raw).hexdigest()

    @cached_property
    def tokenizer_json(self) -> dict[str, Any]:
        """The parsed ``tokenizer.json`` (decompressed first when stored compressed)."""
        raw = decompress(self.raw, self.label) if self.compressed else self.raw
        return _read_json_bytes(raw, self.label)


MAX_TOKENIZER_BYTES = 1 << 30
"""Largest tokenizer.json read (1 GiB; real ones are 2 to 35 MB)."""


def _read_json_bytes(raw: bytes, source: str) -> dict[str, Any]:
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TokenizerError(f"{source}: not valid JSON ({exc})") from exc
    except RecursionError:
        raise TokenizerError(f"{source}: not a tokenizer.json (JSON nested too deeply)") from None
    if not isinstance(doc, dict):
        raise TokenizerError(f"{source}: expected a JSON object at the top level")
    return doc


def decompress(raw: bytes, source: str) -> bytes:
    import zstandard

    try:
        return zstandard.ZstdDecompressor().decompress(raw, max_output_size=1 << 30)
    except zstandard.ZstdError as exc:
        raise TokenizerError(f"{source}: cannot decompress ({exc})") from exc


def _read_file(path: Path) -> bytes:
    try:
        if not path.is_file():
            raise TokenizerError(f"{path}: not a regular file, expected a tokenizer.json")
        if path.stat().st_size > MAX_TOKENIZER_BYTES:
            raise TokenizerError(f"{path}: over the {MAX_TOKENIZER_BYTES:,}-byte limit for a tokenizer file")
        return path.read_bytes()
    except OSError as exc:
        raise TokenizerError(f"{path}: cannot read tokenizer ({exc.strerror or exc})") from exc


def read_tokenizer_file(path: Path) -> dict[str, Any]:
    """The parsed JSON of a ``tokenizer.json`` (or ``tokenizer.json.zst``) file."""
    return _file_source(str(path), path).tokenizer_json


def _file_source(name: str, file: Path) -> TokenizerSource:
    return TokenizerSource(name=name, raw=_read_file(file), compressed=file.suffix == ".zst", label=str(file))


def _optional_json(path: Path) -> dict[str, Any]:
    try:
        if not path.is_file() or path.stat().st_size > MAX_TOKENIZER_BYTES:
            return {}
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _ids(value: Any) -> list[int]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
    return []


def _hints_from_configs(src: TokenizerSource, configs: dict[str, dict[str, Any]]) -> None:
    """EOS ids and logits width from generation_config / config / tokenizer_config."""
    gen, cfg, tok = (
        configs.get("generation_config.json", {}),
        configs.get("config.json", {}),
        configs.get("tokenizer_config.json", {}),
    )
    src.eos_ids = _ids(gen.get("eos_token_id")) or _ids(cfg.get("eos_token_id"))
    eos_token = tok.get("eos_token")
    if isinstance(eos_token, dict):
        eos_token = eos_token.get("content")
    if isinstance(eos_token, str):
        src.eos_names = [eos_token]
    width = cfg.get("vocab_size")
    if isinstance(width, int) and not isinstance(width, bool) and width > 0:
        src.model_vocab_size = width


_CONFIG_FILES = ("generation_config.json", "config.json", "tokenizer_config.json")


def _from_path(path: Path) -> TokenizerSource:
    if path.suffix == ".gguf" and not path.is_dir():
        return _from_gguf(path)
    if path.is_dir():
        for candidate in ("tokenizer.json", "tokenizer.json.zst"):
            if (path / candidate).is_file():
                file = path / candidate
                break
        else:
            raise TokenizerError(f"{path}: directory holds no tokenizer.json")
    else:
        file = path
    src = _file_source(str(file.resolve()), file)
    _hints_from_configs(src, {n: _optional_json(file.parent / n) for n in _CONFIG_FILES})
    return src


def _from_gguf(path: Path) -> TokenizerSource:
    """A GGUF file's tokenizer: its metadata rewritten as tokenizer.json (the cache keys on that text)."""
    from triec.tokenizer import gguf

    meta = gguf.read_metadata(path)
    doc = gguf.tokenizer_json(meta, str(path))
    raw = json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()
    src = TokenizerSource(name=str(path.resolve()), raw=raw, compressed=False, label=str(path))
    src.__dict__["tokenizer_json"] = doc  # already parsed (cached_property)
    src.eos_ids = gguf.eos_ids(meta, str(path))
    return src


def _from_bundle(name: str) -> TokenizerSource:
    # A plain path: importlib.resources costs 10 ms of imports, and setuptools installs package data as files.
    file = Path(__file__).parent.parent / "data" / "tokenizers" / f"{name}.json.zst"
    src = TokenizerSource(name=name, raw=_read_file(file), compressed=True, label=f"bundled tokenizer {name!r}")
    src.eos_names = list(BUNDLED[name]["eos"])
    return src


_HUB: dict[str, str | None] = {}


def _hub_unreachable(timeout: float = 3.0) -> str | None:
    """Why the Hugging Face hub cannot be reached (one TCP connection tried, once per process), or None."""
    if "why" not in _HUB:
        import socket
        from urllib.parse import urlparse

        try:
            from huggingface_hub import constants

            url = urlparse(constants.ENDPOINT)
            if getattr(constants, "HF_HUB_OFFLINE", False):
                _HUB["why"] = "HF_HUB_OFFLINE is set"
                return _HUB["why"]
            with socket.create_connection((url.hostname or "", url.port or 443), timeout=timeout):
                _HUB["why"] = None
        except OSError as exc:
            _HUB["why"] = f"offline: cannot reach the Hugging Face hub ({exc.strerror or exc})"
        except Exception:  # noqa: BLE001  no way to tell: let the client try
            _HUB["why"] = None
    return _HUB["why"]


def _from_hub(repo_id: str) -> TokenizerSource:
    try:
        from huggingface_hub import hf_hub_download
    except ImportError as exc:  # pragma: no cover - tokenizers depends on huggingface_hub
        raise TokenizerError(f"{repo_id!r}: huggingface_hub is not installed") from exc

    def fetch(filename: str, required: bool) -> Path | None:
        last: Exception | None = None
        for local_only in (True, False):
            if not local_only and _hub_unreachable() is not None:
                break  # offline: the hub client would retry for about 24 s before saying so
            try:
                return Path(hf_hub_download(repo_id, filename, local_files_only=local_only, etag_timeout=5))
            except Exception as exc:  # noqa: BLE001 - the hub raises many types; all mean "not available"
                last = exc
        if required:
            why = _hub_unreachable() or type(last).__name__
            raise TokenizerError(
                f"tokenizer {repo_id!r}: not a bundled name ({', '.join(sorted(BUNDLED))}), not a file or "
                f"directory, not in the local Hugging Face cache, and not downloadable ({why}). "
                "Pass a path to a tokenizer.json, or download it while online."
            ) from last
        return None

    file = fetch("tokenizer.json", required=True)
    assert file is not None
    src = _file_source(repo_id, file)
    configs = {}
    for name in _CONFIG_FILES:
        found = fetch(name, required=False)
        if found is not None:
            configs[name] = _optional_json(found)
    _hints_from_configs(src, configs)
    return src


def _looks_like_path(text: str) -> bool:
    """A missing file named like one is reported as a missing file, not looked up on the Hub."""
    return text.startswith((".", "~", "/")) or text.endswith((".json", ".zst", ".gguf"))


def locate(spec: str | os.PathLike[str] | None) -> TokenizerSource:
    """Resolve a tokenizer spec. Order: bundled name, existing path, Hugging Face id."""
    text = DEFAULT_TOKENIZER if spec is None else os.fspath(spec)
    if text in BUNDLED:
        return _from_bundle(text)
    path = Path(text).expanduser()
    if path.exists():
        return _from_path(path)
    if _REPO_ID.match(text) and not _looks_like_path(text):
        return _from_hub(text)
    raise TokenizerError(
        f"tokenizer {text!r} not found: not a bundled name ({', '.join(sorted(BUNDLED))}), "
        "not an existing tokenizer.json, GGUF file or directory, and not a Hugging Face repo id (owner/name)"
    )
