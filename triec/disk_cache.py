"""Derived data cached on disk as verified ``.npz`` files: written atomically, trusted only when intact.

The automaton cache and the decoded-vocabulary cache share these rules. A
cache entry is a pure function of its key, so any doubt (missing file, bad
zip, another key, another format, a digest mismatch) means "not cached": the
caller rebuilds and rewrites it. A cache never changes a result.
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np


def cache_dir() -> Path:
    """``$TRIEC_CACHE_DIR``, else ``$XDG_CACHE_HOME/triec``, else ``~/.cache/triec``."""
    explicit = os.environ.get("TRIEC_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "triec"


def _digest(arrays: dict[str, np.ndarray], key: str, version: int) -> bytes:
    h = hashlib.sha256(f"{version}:{key}".encode())
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
        h.update(a.data)
    return h.digest()


def save_arrays(path: Path, key: str, version: int, arrays: dict[str, np.ndarray]) -> Path | None:
    """Write ``arrays`` with their key, format version and sha256 to a temporary file, then rename.

    Returns the path, or ``None`` when the cache cannot be written (a failure
    only costs the cache).
    """
    meta: dict[str, np.ndarray] = {
        "_version": np.array([version], dtype=np.int64),
        "_key": np.frombuffer(key.encode(), dtype=np.uint8),
        "_digest": np.frombuffer(_digest(arrays, key, version), dtype=np.uint8),
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, **{**meta, **arrays})  # type: ignore[arg-type]  # numpy's stub types **kwds as allow_pickle
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        return None
    return path


def load_arrays(path: Path, key: str, version: int, names: list[str]) -> dict[str, np.ndarray] | None:
    """The arrays ``names`` stored at ``path`` for ``key``, or ``None`` when in any doubt."""
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as npz:
            if set(npz.files) != {"_version", "_key", "_digest", *names}:
                return None
            data = {name: npz[name] for name in npz.files}
        if data["_version"].tolist() != [version] or data["_key"].tobytes().decode() != key:
            return None
        arrays = {name: data[name] for name in names}
        if data["_digest"].tobytes() != _digest(arrays, key, version):
            return None
        return arrays
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, UnicodeDecodeError, EOFError):
        return None
