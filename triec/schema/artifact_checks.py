"""Load checks of a schema table (formats 3 and 5) that make what loads safe to serve (issue 49).

:mod:`triec.schema.artifact` checks every index against its array; these check what the serving path reads
besides: header fields read without a use that would refuse them (the convention), a trie slot's rows in the order
``advance`` searches them, its keys decoding to the values ``values_of`` returns, and the ``info`` fields the
table reads. Each raises :class:`~triec.errors.ArtifactError` (the header) or
:class:`~triec.errors.ArtifactContentError` naming the section, in one line; each is vectorized or one C-level
parse, so a load stays at the price of the index checks.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from triec.errors import ArtifactContentError, ArtifactError
from triec.schema.shape import CONVENTION


def check_convention(schema: dict[str, Any], source: str) -> None:
    """The header's ``convention`` is the one triec writes and serves (:data:`~triec.schema.shape.CONVENTION`):
    the grammars were compiled in it, so any other value (another type, a number for ``property_order``) describes
    a table this triec never wrote."""
    found = schema.get("convention")
    if found != CONVENTION:
        raise ArtifactError(
            f"{source}: header field 'schema': 'convention': expected {CONVENTION}, found {found!r:.80}"
        )


def check_rows_ascending(offsets: np.ndarray, tokens: np.ndarray, where: str) -> None:
    """A trie slot's tokens strictly ascend within each state: ``advance`` binary-searches the row that ``allowed``
    lists whole, so a row out of order (a zeroed run) would list a token it then refuses. O(P + S) vectorized."""
    p = int(tokens.shape[0])
    if p < 2:
        return
    step = tokens[1:].astype(np.int64) - tokens[:-1]
    starts = np.zeros(p, dtype=bool)
    off = np.asarray(offsets[1:-1], dtype=np.int64)
    starts[off[off < p]] = True
    if ((step <= 0) & ~starts[1:]).any():
        raise ArtifactContentError(
            f"{where}: section allowed_tokens: expected strictly ascending ids within each state"
        )


def check_info(info: dict[str, Any], source: str) -> None:
    """The ``info`` fields the table itself reads (``prefix``, ``shape``) have their types."""
    for key in ("prefix", "shape"):
        if key in info and not isinstance(info[key], str):
            raise ArtifactContentError(f"{source}: section info: {key!r}: expected a string, found {info[key]!r:.40}")


def check_slot_values(keys: Sequence[bytes], skip: int, as_json: bool, where: str) -> None:
    """A trie slot's keys decode to the values ``values_of`` returns: UTF-8, and (``as_json``) each past its first
    ``skip`` bytes one JSON string literal. One parse of all keys as a JSON array of exactly ``len(keys)`` strings
    (a C-level pass; a key holding a separator would change the count), rather than one call per key."""
    try:
        texts = [k[skip:].decode("utf-8") for k in keys]
    except UnicodeDecodeError:
        raise ArtifactContentError(f"{where}: section state_byte: a value is not valid UTF-8") from None
    if not as_json or not texts:
        return
    try:
        values = json.loads("[" + ",".join(texts) + "]")
    except (json.JSONDecodeError, RecursionError):
        values = None
    if not (isinstance(values, list) and len(values) == len(texts) and all(isinstance(v, str) for v in values)):
        raise ArtifactContentError(f"{where}: section state_byte: a value is not a JSON string literal")
