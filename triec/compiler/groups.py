"""Group-then-value tables (the paper's appendix I): each value spelled under its group's label.

One table holds both levels: the compiled strings are ``label + SEP + value`` (:func:`spell_grouped`), so the model
writes a group's label, the separator, then one value of that group, and the trie makes every step exact. The answer
is the value: everything after the first ``SEP`` (:func:`triec.runtime.groups.split_answer`). That split is sound
because no label holds ``SEP`` and none ends where ``SEP`` could begin inside it (:func:`check_label`: the first
``SEP`` of ``label + SEP`` is the one written after it).

Groups come from a file (:func:`groups_from_file`, lines ``value<TAB>group``), from a namespace separator in the
values (:func:`groups_by_separator`: ``slack.send`` -> ``slack``), or from k-means over vectors
(:func:`groups_by_kmeans`; :func:`term_vectors` makes word TF-IDF vectors of names and descriptions when no
embeddings are given). Pure functions but for reading the file; numpy only.
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from triec.errors import ValuesError

if TYPE_CHECKING:
    from triec.runtime.table import MaskTable
    from triec.tokenizer.vocabulary import Vocabulary

DEFAULT_SEPARATOR = " > "
"""What stands between a group's label and a value in the compiled strings."""
OTHER = "other"
""":func:`groups_by_separator`'s catch-all label for values without a namespace (made unique if a namespace has it)."""
MAX_LABEL_BYTES = 256
"""Longest label: the model writes it (and round 1 of ``triec eval --strategy groups`` lists every one)."""
MAX_FILE_BYTES = 1 << 30
"""Largest groups file read, as for a values file (compiler/values.py)."""
MAX_KMEANS_WORK = 20_000_000_000
"""Most multiply-adds k-means may spend (values x groups x dimensions x iterations): about a minute of numpy."""
KMEANS_ITERATIONS = 30
MAX_TERMS = 1024
"""Dimensions of :func:`term_vectors`: the most frequent words (by documents holding them)."""
MAX_VECTOR_CELLS = 64 << 20
""":func:`term_vectors` holds at most this many floats (256 MB): fewer dimensions for many values."""


def check_separator(sep: str) -> str:
    """``sep`` when it can separate: non-empty text, no newline (labels and values are lines)."""
    if not isinstance(sep, str) or not sep:
        raise ValuesError("group separator: expected non-empty text")
    if "\n" in sep or "\r" in sep or "\0" in sep:
        raise ValuesError(f"group separator {sep!r}: no newline, carriage return or NUL")
    return sep


def label_problem(label: str, sep: str) -> str | None:
    """Why ``label`` cannot be a group label under ``sep`` (None when it can)."""
    if not label:
        return "an empty group label"
    if len(label.encode("utf-8", "surrogatepass")) > MAX_LABEL_BYTES:
        return f"group label of {len(label.encode('utf-8', 'surrogatepass')):,} bytes (at most {MAX_LABEL_BYTES})"
    if label != label.strip():
        return f"group label {label[:60]!r} starts or ends with whitespace"
    if (label + sep).find(sep) != len(label):
        return f"group label {label[:60]!r} holds the separator {sep!r} (or ends in its beginning)"
    return None


def check_label(label: str, sep: str) -> str:
    problem = label_problem(label, sep)
    if problem is not None:
        raise ValuesError(problem)
    return label


def groups_from_file(path: str | os.PathLike[str], sep: str = DEFAULT_SEPARATOR) -> dict[str, str]:
    """value -> group of a file of lines ``value<TAB>group`` (split at the last tab; blank lines skipped).

    Errors name ``FILE:LINE``: a line without a tab, an empty value or group, a group label ``sep`` cannot follow
    (:func:`label_problem`), a value given two groups (the same line twice is allowed).
    """
    file = Path(path)
    try:
        if file.stat().st_size > MAX_FILE_BYTES:
            raise ValuesError(f"{file}: over {MAX_FILE_BYTES:,} bytes; a groups file is one line per value")
        raw = file.read_bytes()
    except OSError as exc:
        raise ValuesError(f"{file}: cannot read ({exc.strerror or exc})") from exc
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bad = raw.count(b"\n", 0, exc.start) + 1
        raise ValuesError(f"{file}:{bad}: not UTF-8 ({exc.reason})") from None
    check_separator(sep)
    group_of: dict[str, str] = {}
    line_of: dict[str, int] = {}
    for number, raw_line in enumerate(text.split("\n"), start=1):
        line = raw_line.removesuffix("\r")
        if not line.strip():
            continue
        where = f"{file}:{number}"
        value, tab, group = line.rpartition("\t")
        if not tab:
            raise ValuesError(f"{where}: expected 'value<TAB>group', found no tab in {line[:60]!r}")
        if not value:
            raise ValuesError(f"{where}: empty value before the tab")
        problem = label_problem(group, sep)
        if problem is not None:
            raise ValuesError(f"{where}: {problem}")
        before = group_of.setdefault(value, group)
        if before != group:
            raise ValuesError(
                f"{where}: value {value[:60]!r} is in group {group[:60]!r} here and in {before[:60]!r} at line "
                f"{line_of[value]}; a value belongs to one group"
            )
        line_of.setdefault(value, number)
    if not group_of:
        raise ValuesError(f"{file}: no 'value<TAB>group' lines")
    return group_of


def groups_by_separator(values: Iterable[str], sep: str, other: str = OTHER) -> dict[str, str]:
    """value -> its namespace, the text before the first ``sep`` (``slack.send`` -> ``slack``).

    Values without one (or starting with it) go to one catch-all group, ``other`` (``other_2``... where a
    namespace is called that): a group of its own per such value would list them all in round 1 again, which is
    what grouping avoids. Labels are checked where they are spelled (:func:`spell_grouped`).
    """
    check_separator(sep)
    found: dict[str, str | None] = {}
    for v in values:
        at = v.find(sep)
        found[v] = v[:at] if at > 0 else None
    taken = {g for g in found.values() if g is not None}
    rest = _unique(other, taken)
    return {v: rest if g is None else g for v, g in found.items()}


def _unique(name: str, taken: set[str]) -> str:
    if name not in taken:
        return name
    n = 2
    while f"{name}_{n}" in taken:
        n += 1
    return f"{name}_{n}"


def default_group_count(k: int) -> int:
    """The paper's G = sqrt(K), rounded, at least 1."""
    return max(1, round(math.sqrt(k)))


def kmeans(vectors: np.ndarray, g: int, seed: int = 0, iterations: int = KMEANS_ITERATIONS) -> np.ndarray:
    """Cluster ids (int64, numbered by first member) of k-means with k-means++ seeding: deterministic for a seed.

    Lloyd's iterations on squared Euclidean distance until no assignment changes; an emptied cluster takes the
    point farthest from its centre. Refuses more than :data:`MAX_KMEANS_WORK` multiply-adds.
    """
    x = np.asarray(vectors, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise ValuesError(f"k-means: expected a non-empty 2-D array of vectors, found shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValuesError("k-means: the vectors hold NaN or infinity")
    k, dim = x.shape
    check_kmeans_work(k, g, dim, iterations)
    rng = np.random.default_rng(seed)
    sq = np.einsum("ij,ij->i", x, x)
    centres = _plus_plus(x, sq, g, rng)
    assign = np.full(k, -1, dtype=np.int64)
    for _ in range(iterations):
        dist = sq[:, None] - 2.0 * (x @ centres.T) + np.einsum("ij,ij->i", centres, centres)[None, :]
        new = dist.argmin(axis=1)
        if np.array_equal(new, assign):
            break
        assign = new
        counts = np.bincount(assign, minlength=g)
        onehot = np.zeros((k, g))
        onehot[np.arange(k), assign] = 1.0
        sums = onehot.T @ x
        for c in np.flatnonzero(counts == 0):  # an empty cluster: the worst-served point
            far = int(dist[np.arange(k), assign].argmax())
            sums[c], counts[c] = x[far], 1
            assign[far] = c
            dist[far, :] = 0.0
        centres = sums / counts[:, None]
    _, first = np.unique(assign, return_index=True)
    order = np.argsort(first, kind="stable")
    renumber = np.empty(int(assign.max()) + 1, dtype=np.int64)
    renumber[np.unique(assign)[order]] = np.arange(order.shape[0])
    result: np.ndarray = renumber[assign]
    return result


def check_kmeans_work(k: int, g: int, dim: int, iterations: int = KMEANS_ITERATIONS) -> None:
    """Refuse k-means of ``g`` groups over ``k`` vectors of ``dim`` before any work: ``g`` out of 1..k, or more
    than :data:`MAX_KMEANS_WORK` multiply-adds (about 15 s of numpy on two cores)."""
    if not 1 <= g <= k:
        raise ValuesError(f"k-means: {g:,} groups for {k:,} values; choose 1 to {k:,}")
    work = k * g * dim * iterations
    if work > MAX_KMEANS_WORK:
        raise ValuesError(
            f"k-means over {k:,} values x {g:,} groups x {dim:,} dimensions is {work:.1e} multiply-adds, over "
            f"the {MAX_KMEANS_WORK:.0e} limit; give the groups in a file or by a separator, or fewer dimensions"
        )


def term_dimensions(k: int) -> int:
    """How many words :func:`term_vectors` keeps for ``k`` texts: :data:`MAX_TERMS`, fewer past
    :data:`MAX_VECTOR_CELLS` (at least 16)."""
    return max(16, min(MAX_TERMS, MAX_VECTOR_CELLS // max(1, k)))


def _plus_plus(x: np.ndarray, sq: np.ndarray, g: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeding: each next centre drawn with probability by squared distance to the nearest so far."""
    chosen = [int(rng.integers(x.shape[0]))]
    best = np.maximum(sq - 2.0 * (x @ x[chosen[0]]) + sq[chosen[0]], 0.0)
    for _ in range(1, g):
        total = float(best.sum())
        nxt = int(rng.choice(x.shape[0], p=best / total)) if total > 0 else int(rng.integers(x.shape[0]))
        chosen.append(nxt)
        best = np.minimum(best, np.maximum(sq - 2.0 * (x @ x[nxt]) + sq[nxt], 0.0))
    return x[chosen].copy()


_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def words(text: str) -> list[str]:
    """Lower-case words of a name or a description: split at punctuation, underscores and camelCase."""
    return [w.lower() for w in _WORD.findall(text)]


def term_vectors(texts: Sequence[str], max_terms: int | None = None) -> np.ndarray:
    """float32 TF-IDF rows (L2-normalised) over the ``max_terms`` words most documents hold (default
    :func:`term_dimensions`).

    The vectors k-means needs when no embeddings are given: ``name + " " + description`` per value. Costs
    O(words) to count and values x ``max_terms`` x 4 bytes to hold (1,853 BFCL tools: 7.6 MB).
    """
    max_terms = term_dimensions(len(texts)) if max_terms is None else max_terms
    docs = [Counter(words(t)) for t in texts]
    df = Counter(w for d in docs for w in d)
    terms = [w for w, n in sorted(df.items(), key=lambda kv: (-kv[1], kv[0])) if n < len(docs) or len(docs) == 1]
    terms = terms[:max_terms]
    column = {w: i for i, w in enumerate(terms)}
    out = np.zeros((len(docs), max(1, len(terms))), dtype=np.float32)
    idf = {w: math.log((1 + len(docs)) / (1 + df[w])) + 1.0 for w in terms}
    for row, d in enumerate(docs):
        for w, n in d.items():
            col = column.get(w)
            if col is not None:
                out[row, col] = (1.0 + math.log(n)) * idf[w]
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    np.divide(out, norms, out=out, where=norms > 0)
    return out


def cluster_labels(values: Sequence[str], assign: np.ndarray, sep: str = DEFAULT_SEPARATOR) -> list[str]:
    """A label per cluster a model can write: the word most of its members' names hold that no earlier cluster
    took (ties alphabetical), else its top word numbered (``get_2``); ``group_N`` for a cluster of no words."""
    members: dict[int, Counter[str]] = {}
    for v, c in zip(values, assign.tolist(), strict=True):
        members.setdefault(int(c), Counter()).update(set(words(v)))
    taken: set[str] = set()
    labels = []
    for c in range(int(assign.max()) + 1):
        ranked = [w for w, _ in sorted(members.get(c, Counter()).items(), key=lambda kv: (-kv[1], kv[0]))]
        ranked = [w for w in ranked if label_problem(w, sep) is None]
        pick = next((w for w in ranked if w not in taken), None)
        if pick is None:
            pick = _unique(ranked[0] if ranked else f"group_{c + 1}", taken)
        taken.add(pick)
        labels.append(pick)
    return labels


def groups_by_kmeans(
    values: Sequence[str], vectors: np.ndarray, g: int | None = None, seed: int = 0, sep: str = DEFAULT_SEPARATOR
) -> dict[str, str]:
    """value -> label of k-means over ``vectors`` (one row per value, in order): ``g`` groups (default
    :func:`default_group_count`), labelled by :func:`cluster_labels`."""
    if len(values) != len(vectors):
        raise ValuesError(f"k-means: {len(vectors):,} vectors for {len(values):,} values; give one row per value")
    assign = kmeans(vectors, g or default_group_count(len(values)), seed)
    labels = cluster_labels(values, assign, sep)
    return {v: labels[int(c)] for v, c in zip(values, assign.tolist(), strict=True)}


def spell_grouped(values: Iterable[str], group_of: Mapping[str, str], sep: str = DEFAULT_SEPARATOR) -> list[str]:
    """``label + sep + value`` for each value: the strings a grouped table compiles. Every value needs a group,
    and every label :func:`check_label`."""
    check_separator(sep)
    checked: set[str] = set()
    out = []
    for v in values:
        label = group_of.get(v)
        if label is None:
            raise ValuesError(f"value {v[:60]!r} has no group")
        if label not in checked:
            checked.add(check_label(label, sep))
        out.append(label + sep + v)
    return out


def grouped_options(sep: str, count: int) -> dict[str, Any]:
    """The ``build_options.groups`` map of a grouped table (docs/format.md, "Grouped tables")."""
    return {"separator": sep, "count": int(count)}


def with_groups(header: Any, sep: str, count: int) -> Any:
    """``header`` (a table's ``TableHeader``) with ``build_options.groups`` set."""
    from dataclasses import replace

    return replace(header, build_options={**header.build_options, "groups": grouped_options(sep, count)})


def compile_grouped(
    values: Iterable[str],
    group_of: Mapping[str, str],
    vocab: Vocabulary | str | None = None,
    sep: str = DEFAULT_SEPARATOR,
    **options: Any,
) -> MaskTable:
    """``triec.compile`` of :func:`spell_grouped`'s strings, its header's ``build_options`` saying it is grouped.

    ``group_of`` maps each value to its label (:func:`groups_from_file`, :func:`groups_by_separator`,
    :func:`groups_by_kmeans`); ``options`` as for :func:`triec.compile` (encoding, layout, tokenization...).
    ``table.values`` are the spelled strings; :func:`triec.runtime.groups.split_answer` gives (label, value).
    """
    from triec.compiler.entry import compile as compile_values

    items = list(dict.fromkeys(values))
    spelled = spell_grouped(items, group_of, sep)
    table = compile_values(spelled, vocab, **options)
    count = len({group_of[v] for v in items})
    table.hold_header(with_groups(table.table_header, sep, count))
    return table
