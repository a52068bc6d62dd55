"""The serving core every engine integration shares: artifacts by name, the served model, request arguments and
admission. Framework-free: importing it pulls in neither vLLM nor SGLang nor torch (numpy and triec's runtime).

Safety model. A request names an artifact; the name is resolved inside the
directory the operator set in ``TRIEC_ARTIFACT_DIR`` and nowhere else. Every
check that can fail on user input runs at admission (:func:`check_request`:
the engine answers HTTP 400 and keeps serving). Inside an engine step nothing
raises on user input: a request that still cannot be served there (its
artifact vanished in between) is masked to EOS only and ends at once.

Used by the vLLM processors and structured-outputs backend
(:mod:`triec.integrations.vllm`), SGLang's backend and the framework-free
:class:`~triec.integrations.constraints.Constraints` (artifacts by name).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from triec.errors import RequestError, TriecError
from triec.integrations.limits import Limits, table_nbytes
from triec.runtime.table import MaskTable
from triec.schema.table import SchemaTable

log = logging.getLogger("triec.serving")

ENV_DIR = "TRIEC_ARTIFACT_DIR"
"""Environment variable: the only directory requests may name artifacts in."""

ARG_NAME = "triec"
"""``extra_args`` / ``vllm_xargs`` key: the artifact's name (``tools`` is ``$TRIEC_ARTIFACT_DIR/tools.triec``)."""

ARG_RESTRICT = "restrict"
"""``extra_args`` key: an optional list of values narrowing the artifact for this request."""

SUFFIX = ".triec"
MAX_RESTRICT = 100_000
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")

Table = MaskTable | SchemaTable


def is_schema(table: Table) -> bool:
    """A schema artifact (its rows from one host matcher per request), not a plain mask table."""
    return table.host_matched


@dataclass(frozen=True)
class TriecRequest:
    """The parsed triec arguments of one request."""

    name: str
    restrict: tuple[str, ...] | None = None


def parse_extra_args(extra_args: dict[str, Any] | None) -> TriecRequest | None:
    """The request's triec arguments, ``None`` when it is unconstrained; RequestError when malformed."""
    if not extra_args or not isinstance(extra_args, dict):
        return None
    name = extra_args.get(ARG_NAME)
    restrict = extra_args.get(ARG_RESTRICT)
    if name is None:
        if restrict is not None:
            raise RequestError(f"{ARG_RESTRICT!r} needs {ARG_NAME!r}: name the artifact whose values it narrows")
        return None
    if not isinstance(name, str) or not _NAME.match(name) or ".." in name:
        raise RequestError(
            f"{ARG_NAME!r} must be an artifact name (letters, digits, '_', '-', '.'; no path), not {name!r:.80}"
        )
    if restrict is None:
        return TriecRequest(name)
    if isinstance(restrict, str):
        restrict = [restrict]
    if not isinstance(restrict, list) or not restrict:
        raise RequestError(f"{ARG_RESTRICT!r} must be a non-empty list of values")
    if len(restrict) > MAX_RESTRICT:
        raise RequestError(f"{ARG_RESTRICT!r} holds {len(restrict)} values; at most {MAX_RESTRICT} are accepted")
    bad = next((v for v in restrict if not isinstance(v, str)), None)
    if bad is not None:
        raise RequestError(f"{ARG_RESTRICT!r} values must be strings, not {type(bad).__name__} {bad!r:.80}")
    return TriecRequest(name, tuple(sorted(set(restrict))))


# ----------------------------------------------------------------------------- artifacts


Version = tuple[int, int, int, int, int, str]
"""One loaded version of an artifact file: (device, inode, size, mtime ns, ctime ns, blake2b of the bytes)."""

SETTLE_S = 2.0
"""A file changed less than this long ago is not trusted by its stamp alone (file times tick coarsely: an in-place
rewrite of the same size within one tick keeps the stamp), so hits re-read it and compare the bytes' digest."""


def _stamp(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class _Unstable(Exception):
    """The file changed while it was read."""


def _read_version(path: Path) -> tuple[Version, bytes, bool]:
    """The file's bytes, read into private memory: (their version, the bytes, whether the file had settled).

    The stamp is taken from the open file before and after the read, and from the
    path after it; if any differ, the bytes may mix two versions (_Unstable).
    """
    import hashlib
    import time

    with open(path, "rb") as fh:
        before = _stamp(os.fstat(fh.fileno()))
        data = fh.read()
        after = _stamp(os.fstat(fh.fileno()))
    now = _stamp(os.stat(path))
    if not before == after == now:
        raise _Unstable("the file changed while it was read")
    if len(data) != before[2]:
        raise _Unstable(f"read {len(data)} of {before[2]} bytes")
    settled = time.time_ns() - max(before[3], before[4]) > SETTLE_S * 1e9
    return (*before, hashlib.blake2b(data, digest_size=16).hexdigest()), data, settled


@dataclass
class _Loaded:
    version: Version
    table: Table
    settled: bool


def _cache_bytes() -> int:
    """``TRIEC_CACHE_BYTES`` (256 MiB by default): the bound of every cache of compiled or compacted tables."""
    return Limits.from_env().cache_bytes


class ArtifactStore:
    """Artifacts by name inside one directory, loaded once (reloaded when the file changes).

    Served tables never depend on the file after loading: each version is read
    into private memory (as ``triec.load(path, copy=True)`` does: no mapping that
    a truncation could turn into SIGBUS, nor that an in-place overwrite could
    change under a request) and its CRC-32s are checked. A file is re-read when
    its (device, inode, size, mtime, ctime) stamp moves, and while it is younger
    than :data:`SETTLE_S` on every use (compared by digest). A file that changed
    while it was read, or does not parse (half-written, corrupt), is refused
    with a :class:`RequestError` (HTTP 400) and its table dropped from the store,
    while requests already holding the previous table finish on it (they keep
    their own reference). A deleted file's table is dropped the same way.

    Restricted subsets are compacted into standalone tables and kept in an
    LRU cache within ``max_subsets`` tables and ``max_subset_bytes`` bytes
    (default ``TRIEC_CACHE_BYTES``, 256 MiB), so requests repeating a subset
    share one table; the subsets of a replaced version are dropped with it.
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None, *, max_subsets: int = 256,
                 max_subset_bytes: int | None = None) -> None:  # fmt: skip
        raw = os.environ.get(ENV_DIR) if directory is None else os.fspath(directory)
        self.directory = Path(raw).resolve() if raw else None
        self._tables: dict[str, _Loaded] = {}
        self._failed: dict[str, tuple[tuple[int, ...], str]] = {}  # name -> (stamp, message) of a settled bad file
        self._subsets: OrderedDict[tuple[str, Version, tuple[str, ...]], tuple[MaskTable, int]] = OrderedDict()
        self._max_subsets = max_subsets
        self._max_subset_bytes = _cache_bytes() if max_subset_bytes is None else max_subset_bytes
        self._lock = threading.Lock()

    def subset_bytes(self) -> int:
        """Bytes held by the cached subsets (:func:`~triec.integrations.limits.table_nbytes` of each)."""
        with self._lock:
            return sum(n for _, n in self._subsets.values())

    def path(self, name: str) -> Path:
        """The artifact file a name stands for; RequestError when it is not inside the directory."""
        if self.directory is None:
            raise RequestError(f"this server serves no triec artifacts (the operator did not set {ENV_DIR})")
        if not _NAME.match(name) or ".." in name:
            raise RequestError(f"{name!r:.80} is not an artifact name")
        path = self.directory / (name + SUFFIX)
        real = path.resolve()
        if real.parent != self.directory and self.directory not in real.parents:
            raise RequestError(f"artifact {name!r} is a link leading out of the artifact directory: refused")
        if not real.is_file():
            self._forget(name)
            raise RequestError(f"no artifact named {name!r} on this server")
        return real

    def table(self, name: str) -> Table:
        """The named artifact's table; RequestError when it is missing or invalid."""
        table, _ = self._load(name)
        return table

    def _forget(self, name: str) -> None:
        """Drop a name's table and subsets (its file is gone or no longer valid)."""
        with self._lock:
            self._tables.pop(name, None)
            for key in [k for k in self._subsets if k[0] == name]:
                del self._subsets[key]

    def _load(self, name: str) -> tuple[Table, Version]:
        from triec.artifact.formats import load_buffer

        path = self.path(name)
        try:
            stamp = _stamp(os.stat(path))
        except OSError as exc:
            self._forget(name)
            raise RequestError(f"artifact {name!r} cannot be read") from exc
        with self._lock:
            found = self._tables.get(name)
            if found is not None and found.settled and found.version[:5] == stamp:
                return found.table, found.version
            failed = self._failed.get(name)
            if failed is not None and failed[0] == stamp:
                raise RequestError(failed[1])
        try:
            version, data, settled = _read_version(path)
        except _Unstable as exc:  # being written right now: refuse this request, look again on the next
            raise RequestError(f"artifact {name!r} is being written; try again ({exc})") from None
        except OSError as exc:
            self._forget(name)
            raise RequestError(f"artifact {name!r} cannot be read ({exc.strerror or exc})") from None
        with self._lock:
            found = self._tables.get(name)
            if found is not None and found.version == version:
                found.settled = settled
                return found.table, version
        try:
            table = load_buffer(data, str(path), checksums=True)
        except TriecError as exc:
            message = f"artifact {name!r} is not a valid triec artifact: {exc}"
            self._forget(name)
            if settled:  # a young file may still be being written: look at it again next time
                with self._lock:
                    self._failed[name] = (version[:5], message)
            raise RequestError(message) from None
        with self._lock:
            self._failed.pop(name, None)
            self._tables[name] = _Loaded(version, table, settled)
            for key in [k for k in self._subsets if k[0] == name and k[1] != version]:
                del self._subsets[key]
        return table, version

    def resolve(self, request: TriecRequest) -> tuple[tuple[Any, ...], Table]:
        """(cache key, table) for a request: the artifact, or its compacted subset."""
        table, version = self._load(request.name)
        if request.restrict is None:
            return (request.name, version), table
        if not table.restrictable:
            raise RequestError(
                f"{ARG_RESTRICT!r} cannot narrow artifact {request.name!r}: it is a tool-call schema; compile a "
                "schema whose name enum holds just the wanted tools instead"
            )
        key = (request.name, version, request.restrict)
        with self._lock:
            found = self._subsets.get(key)
            if found is not None:
                self._subsets.move_to_end(key)
                return key, found[0]
        try:
            sub = table.restrict(request.restrict).compact()
        except TriecError as exc:
            raise RequestError(f"{ARG_RESTRICT!r} for artifact {request.name!r}: {exc}") from exc
        nbytes = table_nbytes(sub)
        if nbytes > self._max_subset_bytes:
            return key, sub  # served, not kept
        with self._lock:
            self._subsets[key] = (sub, nbytes)
            total = sum(n for _, n in self._subsets.values())
            while len(self._subsets) > self._max_subsets or total > self._max_subset_bytes:
                total -= self._subsets.popitem(last=False)[1][1]
        return key, sub


# ----------------------------------------------------------------------------- admission


@dataclass
class ServedModel:
    """What admission needs to know about the served model."""

    tokenizer: str
    vocab_size: int
    eos_token_id: int | None  # the tokenizer's EOS: vLLM stops on it unless ignore_eos
    generation_eos_ids: tuple[int, ...]  # generation_config's eos_token_id: stop ids unless ignore_eos

    def __post_init__(self) -> None:
        self._fingerprints: dict[tuple[int, ...], str] = {}
        self._lock = threading.Lock()

    def fingerprint(self, eos_token_ids: Sequence[int]) -> str:
        """The served tokenizer's vocabulary fingerprint, with the artifact's EOS ids.

        Decoding a 150k-token tokenizer costs about 0.4 s the first time; triec's
        vocabulary cache keeps the result on disk, and the engine process loads
        it at start-up (the vLLM processors' ``engine_start``), so the frontend's first request
        reads the cache (about 15 ms) and later ones the memo here.
        """
        key = tuple(sorted(set(int(e) for e in eos_token_ids)))
        with self._lock:
            fp = self._fingerprints.get(key)
            if fp is None:
                fp = self._fingerprints[key] = served_fingerprint(self.tokenizer, self.vocab_size, key)
        return fp

    def know(self, eos_token_ids: Sequence[int], fingerprint: str) -> None:
        """Record a fingerprint already computed (an engine that loaded the vocabulary itself)."""
        with self._lock:
            self._fingerprints[tuple(sorted(set(int(e) for e in eos_token_ids)))] = fingerprint

    def stop_ids(self, params: Any) -> set[int]:
        """Token ids that will end ``params``'s request (as vLLM's scheduler decides after admission)."""
        stops = {int(t) for t in (getattr(params, "stop_token_ids", None) or ())}
        if not getattr(params, "ignore_eos", False):
            if self.eos_token_id is not None:
                stops.add(int(self.eos_token_id))
            stops.update(self.generation_eos_ids)
        return stops


def served_fingerprint(tokenizer: str, vocab_size: int, eos: tuple[int, ...]) -> str:
    """The fingerprint of ``Vocabulary.load(tokenizer, vocab_size, eos)`` (decoded once per tokenizer file:
    triec's vocabulary cache keeps the decoded bytes on disk, so later processes load them in milliseconds)."""
    from triec.tokenizer.vocabulary import Vocabulary

    return Vocabulary.load(tokenizer, vocab_size=vocab_size, eos_token_ids=eos).fingerprint


def served_model_from_config(model_config: Any, eos_token_id: int | None = None) -> ServedModel:
    """A :class:`ServedModel` from vLLM's ``ModelConfig`` (and the tokenizer's EOS id when known)."""
    gen = {}
    try:
        gen = model_config.try_get_generation_config() or {}
    except Exception:  # a model without a generation config
        gen = {}
    eos = gen.get("eos_token_id")
    gen_ids = (eos,) if isinstance(eos, int) else tuple(int(e) for e in (eos or ()))
    return ServedModel(
        tokenizer=str(model_config.tokenizer),
        vocab_size=int(model_config.get_vocab_size()),
        eos_token_id=eos_token_id,
        generation_eos_ids=gen_ids,
    )


def check_request(params: Any, served: ServedModel | None, store: ArtifactStore) -> TriecRequest | None:
    """Every admission check for one request's ``SamplingParams``; RequestError names the first failure."""
    request = parse_extra_args(getattr(params, "extra_args", None))
    if request is None:
        return None
    if served is None:
        raise RequestError("triec cannot tell which model this server runs (unsupported engine version?)")
    _, table = store.resolve(request)
    if int(getattr(params, "min_tokens", 0) or 0) > 0:
        raise RequestError("min_tokens > 0 cannot be combined with triec: EOS would be masked at a complete value")
    if getattr(params, "structured_outputs", None) is not None:
        raise RequestError("a request takes either triec or structured_outputs, not both")
    admit(f"artifact {request.name!r}", table, store.table(request.name), served, served.stop_ids(params),
          fix_stops="ignore_eos, or a model whose EOS differs: add them to stop_token_ids")  # fmt: skip
    return request


def admit(what: str, table: Table, parent: Table, served: ServedModel, stops: set[int], *, fix_stops: str) -> None:
    """The checks every engine makes before serving ``table`` (a view of ``parent``) to ``served``; RequestError.

    The masks are as wide as the model's logits, the vocabulary is the model's (fingerprint, EOS ids included),
    every EOS id the table ends values with stops the engine (``stops``), and a schema table's engine is installed.
    """
    if parent.vocab_size != served.vocab_size:
        raise RequestError(
            f"{what} has masks {parent.vocab_size} wide; the served model's logits are "
            f"{served.vocab_size} wide (compile it with --vocab-size {served.vocab_size})"
        )
    if served.fingerprint(parent.eos_token_ids) != parent.tokenizer_fingerprint:
        raise RequestError(
            f"{what} was compiled for another tokenizer ({parent.tokenizer_name or 'unnamed'}, "
            f"{parent.tokenizer_fingerprint[:19]}...) than the served model's ({served.tokenizer})"
        )
    missing = sorted(set(table.eos_token_ids) - stops)
    if missing:
        raise RequestError(
            f"{what} ends values with EOS ids {list(table.eos_token_ids)}, but {missing} would not "
            f"stop generation ({fix_stops})"
        )
    engine = table.required_engine
    if engine is not None:
        import importlib.util

        if importlib.util.find_spec(engine) is None:
            raise RequestError(
                f"{what} is a tool-call schema whose arguments run in {engine}, which this "
                f"server does not have installed (pip install {engine})"
            )


def warm_schema(table: SchemaTable) -> None:
    """Set up a schema table's engine before its first request: the engine over the vocabulary, the grammar
    the output starts in (or a table's only grammar), and the matchers' token lookups. A registry's argument
    grammars are left to their first use."""
    table.driver()
    if table.start_grammar >= 0:
        table.template(table.start_grammar)
    elif len(table.grammars) == 1:
        table.template(0)
    table.matcher()



# ----------------------------------------------------------------------------- the process's store

_STORE: ArtifactStore | None = None

def store() -> ArtifactStore:
    """The process's artifact store (``TRIEC_ARTIFACT_DIR`` read on first use)."""
    global _STORE
    if _STORE is None:
        _STORE = ArtifactStore()
    return _STORE


def reset_store(directory: str | os.PathLike[str] | None = None) -> ArtifactStore:
    """Replace the process's store (tests; an operator changing the directory)."""
    global _STORE
    _STORE = ArtifactStore(directory)
    return _STORE


__all__ = [
    "ARG_NAME", "ARG_RESTRICT", "ENV_DIR", "MAX_RESTRICT", "SETTLE_S", "SUFFIX", "ArtifactStore", "ServedModel", "Table",
    "TriecRequest", "check_request", "is_schema", "parse_extra_args", "reset_store", "served_fingerprint",
    "served_model_from_config", "store", "warm_schema",
]  # fmt: skip
