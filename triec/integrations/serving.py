"""The serving core every server integration shares: artifacts by name, the served model, request arguments and
admission. Framework-free: importing it pulls in neither vLLM nor SGLang nor torch (numpy and triec's runtime).

Safety model. A request names an artifact; the name is resolved inside the
directory the operator set in ``TRIEC_ARTIFACT_DIR`` and nowhere else. Every
check that can fail on user input runs at admission (:func:`check_request`:
the server answers HTTP 400 and keeps serving). Inside a server's step nothing
raises on user input: a request that still cannot be served there (its
artifact vanished in between) is masked to EOS only and ends at once.

The one door to serving: every artifact a request names, through any server
integration (the vLLM processors and structured-outputs backend, SGLang's
backend through :class:`~triec.integrations.constraints.Constraints`,
llama.cpp), is resolved by :class:`ArtifactStore` and admitted by
:func:`admit` (:func:`admit_artifact` does both); nothing else refuses an
artifact. The served vocabulary is decoded and memoized here only
(:func:`served_vocabulary`), and restrict values are checked here only
(:func:`restrict_values`).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from triec._compat import renamed
from triec.errors import RequestError, TriecError
from triec.integrations.limits import Limits, table_nbytes
from triec.runtime.table import MaskTable
from triec.schema.table import SchemaTable

if TYPE_CHECKING:
    from triec.runtime.kinds import Table
    from triec.tokenizer.vocabulary import Vocabulary

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

ServedTable = MaskTable | SchemaTable
"""What the store hands out: a plain mask table or a schema table (both answer :class:`triec.runtime.kinds.Table`)."""


def as_served_table(table: Table) -> ServedTable:
    """``table`` typed as the kind it is (no check, no copy): ``triec.load`` types what it loads as a
    :class:`~triec.runtime.kinds.Table` (the artifact layer is below both kinds and names neither), and its
    built-in formats build these two."""
    return cast(ServedTable, table)


def is_schema(table: ServedTable) -> bool:
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
    return TriecRequest(name, None if restrict is None else restrict_values(restrict, ARG_RESTRICT))


def restrict_values(raw: Any, key: str = ARG_RESTRICT) -> tuple[str, ...]:
    """The one check of the values a request narrows an artifact to (``restrict`` in ``extra_args``,
    ``x-triec-restrict`` in a JSON schema): a non-empty list of strings (a lone string is one value), at most
    :data:`MAX_RESTRICT`; returned sorted, without duplicates. RequestError names ``key`` and what is wrong."""
    values = [raw] if isinstance(raw, str) else raw
    if not isinstance(values, (list, tuple)) or not values:
        raise RequestError(f"{key!r} must be a non-empty list of strings, not {type(raw).__name__}")
    if len(values) > MAX_RESTRICT:
        raise RequestError(f"{key!r} holds {len(values)} values; at most {MAX_RESTRICT} are accepted")
    bad = next((v for v in values if not isinstance(v, str)), None)
    if bad is not None:
        raise RequestError(f"{key!r} values must be strings, not {type(bad).__name__} {bad!r:.80}")
    return tuple(sorted(set(values)))


def narrow(table: ServedTable, values: Any, what: str) -> ServedTable:
    """``table`` narrowed to an in-process request's ``values=`` (a shortlist: llama.cpp, MLX, Outlines), compacted;
    ``table`` itself when ``values`` is ``None``.

    The values are checked as a served request's ``restrict`` is (a lone string is one value; an empty list, a
    non-string, or a value the table does not hold is refused), with no count limit: in process, the caller's
    own memory is at stake. Every refusal is one :class:`~triec.errors.RequestError` naming ``what``, never
    the full set served instead.
    """
    if values is None:
        return table
    if not table.restrictable:
        raise RequestError(f"{what}: values= narrows a table of values, not a {table.kind} table")
    wanted = [values] if isinstance(values, str) else values
    if not isinstance(wanted, (list, tuple)) or not wanted:
        raise RequestError(f"{what}: values= must be a non-empty list of strings, not {type(values).__name__}")
    bad = next((v for v in wanted if not isinstance(v, str)), None)
    if bad is not None:
        raise RequestError(f"{what}: values= holds {type(bad).__name__} {bad!r:.80}; values are strings")
    try:
        return table.restrict(wanted).compact()
    except TriecError as exc:
        raise RequestError(f"{what}: values=: {exc}") from exc


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
    table: ServedTable
    settled: bool


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
    (default ``TRIEC_CACHE_BYTES``, 256 MiB: :class:`~triec.integrations.limits.Limits`), so requests repeating a subset
    share one table; the subsets of a replaced version are dropped with it.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        *,
        max_subsets: int = 256,
        max_subset_bytes: int | None = None,
    ) -> None:
        raw = os.environ.get(ENV_DIR) if directory is None else os.fspath(directory)
        self.directory = Path(raw).resolve() if raw else None
        self._tables: dict[str, _Loaded] = {}
        self._failed: dict[str, tuple[tuple[int, ...], str]] = {}  # name -> (stamp, message) of a settled bad file
        self._subsets: OrderedDict[tuple[str, Version, tuple[str, ...]], tuple[MaskTable, int]] = OrderedDict()
        self._max_subsets = max_subsets
        self._max_subset_bytes = Limits.from_env().cache_bytes if max_subset_bytes is None else max_subset_bytes
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

    def table(self, name: str) -> ServedTable:
        """The named artifact's table; RequestError when it is missing or invalid."""
        table, _ = self._load(name)
        return table

    def _forget(self, name: str) -> None:
        """Drop a name's table and subsets (its file is gone or no longer valid)."""
        with self._lock:
            self._tables.pop(name, None)
            for key in [k for k in self._subsets if k[0] == name]:
                del self._subsets[key]

    def _load(self, name: str) -> tuple[ServedTable, Version]:
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
            table = as_served_table(load_buffer(data, str(path), checksums=True))
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

    def resolve(self, request: TriecRequest) -> tuple[tuple[Any, ...], ServedTable]:
        """(cache key, table) for a request: the artifact, or its compacted subset."""
        found = self.open(request)
        return found.key, found.table

    def open(self, request: TriecRequest) -> Resolved:
        """The request's :class:`Resolved` table (the artifact, or its compacted subset) and the artifact it is of."""
        table, version = self._load(request.name)
        if request.restrict is None:
            return Resolved((request.name, version), table, table)
        if not table.restrictable:
            raise RequestError(
                f"artifact {request.name!r} is a {table.kind.value} table: restrict values cannot narrow it "
                "(restricting narrows a table of values only); for a tool-call schema, compile one whose name enum "
                "holds just the wanted tools instead"
            )
        key = (request.name, version, request.restrict)
        with self._lock:
            found = self._subsets.get(key)
            if found is not None:
                self._subsets.move_to_end(key)
                return Resolved(key, found[0], table)
        try:
            sub = table.restrict(request.restrict).compact()
        except TriecError as exc:
            raise RequestError(f"restricting artifact {request.name!r}: {exc}") from exc
        nbytes = table_nbytes(sub)
        if nbytes > self._max_subset_bytes:
            return Resolved(key, sub, table)  # served, not kept
        with self._lock:
            self._subsets[key] = (sub, nbytes)
            total = sum(n for _, n in self._subsets.values())
            while len(self._subsets) > self._max_subsets or total > self._max_subset_bytes:
                total -= self._subsets.popitem(last=False)[1][1]
        return Resolved(key, sub, table)


class Resolved(NamedTuple):
    """A request's artifact as the store resolved it: ``table`` is what the request is served (``parent``, the
    artifact's table, or its compacted subset); ``key`` identifies it (name, file version and subset)."""

    key: tuple[Any, ...]
    table: ServedTable
    parent: ServedTable


# ----------------------------------------------------------------------------- the served vocabulary

MAX_VOCABULARIES = 8
"""Decoded vocabularies :func:`served_vocabulary` keeps (a server serves one tokenizer, with one EOS set or a few)."""

_VOCABULARIES: OrderedDict[tuple[str, int | None, tuple[int, ...] | None], Vocabulary] = OrderedDict()
_VOCABULARIES_LOCK = threading.Lock()


def eos_key(eos_token_ids: Iterable[int]) -> tuple[int, ...]:
    """EOS ids as every memo here keys them: sorted, without duplicates."""
    return tuple(sorted({int(e) for e in eos_token_ids}))


def served_vocabulary(
    tokenizer: str | os.PathLike[str], vocab_size: int | None = None, eos_token_ids: Iterable[int] | None = None
) -> Vocabulary:
    """The served tokenizer's decoded vocabulary: ``Vocabulary.load(tokenizer, vocab_size=..., eos_token_ids=...)``,
    once per process and arguments (the last :data:`MAX_VOCABULARIES` kept).

    The one place an integration loads the vocabulary it serves: admission's fingerprints, the schema tables'
    binding, the vLLM backend's and SGLang's grammars share these objects (and each one's token automaton). The
    first load of a 150k-token tokenizer decodes it (about 0.4 s); triec's vocabulary cache keeps the result on
    disk, so later processes read it in milliseconds. Loads are serialized: a second caller waits for the first.
    """
    key = (
        os.fspath(tokenizer),
        None if vocab_size is None else int(vocab_size),
        None if eos_token_ids is None else eos_key(eos_token_ids),
    )
    with _VOCABULARIES_LOCK:
        found = _VOCABULARIES.get(key)
        if found is None:
            from triec.tokenizer.vocabulary import Vocabulary

            found = Vocabulary.load(key[0], vocab_size=key[1], eos_token_ids=key[2])
            _VOCABULARIES[key] = found
            while len(_VOCABULARIES) > MAX_VOCABULARIES:
                _VOCABULARIES.popitem(last=False)
        _VOCABULARIES.move_to_end(key)
        return found


def served_fingerprint(tokenizer: str, vocab_size: int, eos: tuple[int, ...]) -> str:
    """The fingerprint of the served vocabulary with EOS ids ``eos`` (:func:`served_vocabulary`)."""
    return served_vocabulary(tokenizer, vocab_size, eos).fingerprint


# ----------------------------------------------------------------------------- admission


@dataclass
class ServedModel:
    """What admission needs to know about the served model.

    ``tokenizer`` is what :func:`served_vocabulary` loads the served vocabulary from; ``None`` when the server has
    a vocabulary but no file to load it from (:meth:`know` records it, and only its EOS set can be fingerprinted).
    """

    tokenizer: str | None
    vocab_size: int
    eos_token_id: int | None  # the tokenizer's EOS: vLLM stops on it unless ignore_eos
    generation_eos_ids: tuple[int, ...]  # generation_config's eos_token_id: stop ids unless ignore_eos
    _known: dict[tuple[int, ...], Vocabulary] = field(default_factory=dict, init=False, repr=False, compare=False)
    _fingerprints: dict[tuple[int, ...], str] = field(default_factory=dict, init=False, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)

    @classmethod
    def of(cls, vocab: Vocabulary, tokenizer: str | None = None) -> ServedModel:
        """The model a decoded vocabulary serves (its width, its EOS ids the stop ids); ``tokenizer``: what it was
        loaded from, so other EOS sets can be fingerprinted too."""
        served = cls(tokenizer, vocab.vocab_size, None, vocab.eos_token_ids)
        served.know(vocab)
        return served

    @property
    def name(self) -> str:
        """The served tokenizer, as messages name it."""
        if self.tokenizer is not None:
            return self.tokenizer
        return next((v.name for v in self._known.values()), "unnamed")

    def know(self, vocab: Vocabulary) -> None:
        """Serve ``vocab`` for its EOS ids (a vocabulary the server loaded and checked itself: llama.cpp's GGUF, the
        one a backend was built with), so its fingerprint is not computed again."""
        with self._lock:
            self._known[vocab.eos_token_ids] = vocab
            self._fingerprints[vocab.eos_token_ids] = vocab.fingerprint

    def vocabulary(self, eos_token_ids: Iterable[int] | None = None) -> Vocabulary:
        """The served vocabulary with these EOS ids (the tokenizer's own when None): one it was told of
        (:meth:`know`), else :func:`served_vocabulary`'s. RequestError when it has no tokenizer to load from."""
        if eos_token_ids is not None:
            with self._lock:
                found = self._known.get(eos_key(eos_token_ids))
            if found is not None:
                return found
        if self.tokenizer is None:
            raise RequestError(
                f"the served vocabulary ({self.name}) cannot be loaded with EOS ids {list(eos_token_ids or ())}: "
                "the server did not say which tokenizer it serves"
            )
        return served_vocabulary(self.tokenizer, self.vocab_size, eos_token_ids)

    def fingerprint(self, eos_token_ids: Sequence[int]) -> str | None:
        """The served tokenizer's vocabulary fingerprint, with the artifact's EOS ids (None: cannot be told).

        vLLM's engine process decodes the served tokenizer at start-up (the vLLM processors' ``warm_up``, the
        backend's vocabulary thread), so the frontend's first request reads triec's vocabulary cache from disk
        (about 15 ms) and later ones the memo here.
        """
        key = eos_key(eos_token_ids)
        with self._lock:
            fp = self._fingerprints.get(key)
        if fp is None:
            if self.tokenizer is None:
                return None
            fp = self.vocabulary(key).fingerprint
            with self._lock:
                self._fingerprints[key] = fp
        return fp

    def stop_ids(self, params: Any) -> set[int]:
        """Token ids that will end ``params``'s request (as vLLM's scheduler decides after admission); ``params``
        None: a request without stop ids of its own."""
        stops = {int(t) for t in (getattr(params, "stop_token_ids", None) or ())}
        if not getattr(params, "ignore_eos", False):
            if self.eos_token_id is not None:
                stops.add(int(self.eos_token_id))
            stops.update(self.generation_eos_ids)
        return stops


def served_model_from_config(model_config: Any, eos_token_id: int | None = None) -> ServedModel:
    """A :class:`ServedModel` from vLLM's ``ModelConfig`` (and the tokenizer's EOS id when known)."""
    gen: dict[str, Any] = {}
    try:
        gen = model_config.try_get_generation_config() or {}
    except Exception:  # noqa: BLE001 - a model without a generation config
        gen = {}
    eos = gen.get("eos_token_id")
    gen_ids = (eos,) if isinstance(eos, int) else tuple(int(e) for e in (eos or ()))
    return ServedModel(
        tokenizer=str(model_config.tokenizer),
        vocab_size=int(model_config.get_vocab_size()),
        eos_token_id=eos_token_id,
        generation_eos_ids=gen_ids,
    )


STOPS_HINT = "ignore_eos, or a model whose EOS differs: add them to stop_token_ids"
"""What a refusal for EOS ids that would not stop a vLLM request suggests (the processors and the backend)."""


def check_request(params: Any, served: ServedModel | None, store: ArtifactStore) -> TriecRequest | None:
    """Every admission check for one request's ``SamplingParams``; RequestError names the first failure."""
    request = parse_extra_args(getattr(params, "extra_args", None))
    if request is None:
        return None
    served = known_server(served)
    if int(getattr(params, "min_tokens", 0) or 0) > 0:
        raise RequestError("min_tokens > 0 cannot be combined with triec: EOS would be masked at a complete value")
    if getattr(params, "structured_outputs", None) is not None:
        raise RequestError("a request takes either triec or structured_outputs, not both")
    admit_artifact(request, store, served, served.stop_ids(params), fix_stops=STOPS_HINT)
    return request


def known_server(served: ServedModel | None) -> ServedModel:
    """``served``, or RequestError where the server could not tell which model it runs (no artifact can be admitted
    without its width and tokenizer)."""
    if served is None:
        raise RequestError(
            "triec cannot tell which model this server runs (an unsupported server version?): artifacts are refused"
        )
    return served


def admit_artifact(
    request: TriecRequest, store: ArtifactStore, served: ServedModel, stops: Iterable[int], *, fix_stops: str
) -> Resolved:
    """The one door for an artifact a request names, whatever the server: resolved by ``store`` (the file, then its
    restricted subset) and admitted (:func:`admit`). RequestError names the first failure."""
    found = store.open(request)
    admit(f"artifact {request.name!r}", found.table, found.parent, served, set(stops), fix_stops=fix_stops)
    return found


def admit(
    what: str, table: ServedTable, parent: ServedTable, served: ServedModel, stops: set[int], *, fix_stops: str
) -> None:
    """The checks every server makes before serving ``table`` (a view of ``parent``) to ``served``; RequestError.

    The masks are as wide as the model's logits, the vocabulary is the model's (fingerprint, EOS ids included),
    every EOS id the table ends values with stops the server (``stops``), and a schema table's grammar engine is
    installed. ``fix_stops`` says how a request or server makes those EOS ids stop.
    """
    if parent.vocab_size != served.vocab_size:
        raise RequestError(
            f"{what} has masks {parent.vocab_size} wide; the served model's logits are "
            f"{served.vocab_size} wide (compile it with --vocab-size {served.vocab_size})"
        )
    try:
        fingerprint = served.fingerprint(parent.eos_token_ids)
    except RequestError:
        raise
    except TriecError as exc:
        raise RequestError(f"triec cannot read the served tokenizer ({served.name}): {exc}") from None
    if fingerprint != parent.tokenizer_fingerprint:
        raise RequestError(
            f"{what} was compiled for another tokenizer ({parent.tokenizer_name or 'unnamed'}, "
            f"{parent.tokenizer_fingerprint[:19]}...) than the served model's ({served.name})"
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
    """Set up a schema table's grammar engine before its first request: the engine over the vocabulary, the grammar
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
    "ARG_NAME",
    "ARG_RESTRICT",
    "ENV_DIR",
    "MAX_RESTRICT",
    "MAX_VOCABULARIES",
    "SETTLE_S",
    "STOPS_HINT",
    "SUFFIX",
    "ArtifactStore",
    "Resolved",
    "ServedModel",
    "ServedTable",
    "TriecRequest",
    "admit",
    "admit_artifact",
    "as_served_table",
    "check_request",
    "eos_key",
    "is_schema",
    "known_server",
    "narrow",
    "parse_extra_args",
    "reset_store",
    "restrict_values",
    "served_fingerprint",
    "served_model_from_config",
    "served_vocabulary",
    "store",
    "warm_schema",
]

__getattr__ = renamed(__name__, {"Table": "triec.integrations.serving:ServedTable"})
