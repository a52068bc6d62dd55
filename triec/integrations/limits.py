"""What a server lets requests make it compile, and what compiled tables hold: one place for both bounds.

:class:`Limits` reads ``TRIEC_MAX_CHOICES``, ``TRIEC_MAX_CHOICE_BYTES`` and
``TRIEC_CACHE_BYTES``; :func:`table_nbytes` is the estimate every cache of tables
(compiled lists, the processors' device tables, compacted subsets) is bounded by.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from triec.errors import RequestError, ValuesError
from triec.runtime.kinds import Table


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValuesError(f"{name}={raw!r}: expected an integer") from None
    if value <= 0:
        raise ValuesError(f"{name}={raw!r}: expected a positive integer")
    return value


@dataclass(frozen=True)
class Limits:
    """What one request may make the server compile, and how much compiled tables the cache keeps.

    Defaults: 100,000 values and 8 MiB of value bytes (UTF-8, as given) per list, and a
    256 MiB cache; ``TRIEC_MAX_CHOICES``, ``TRIEC_MAX_CHOICE_BYTES`` and ``TRIEC_CACHE_BYTES``
    override them (:meth:`from_env`). At the limits a compile takes about a second.
    """

    max_values: int = 100_000
    max_bytes: int = 8 << 20
    cache_bytes: int = 256 << 20

    @classmethod
    def from_env(cls) -> Limits:
        d = cls()
        return cls(
            max_values=_env_int("TRIEC_MAX_CHOICES", d.max_values),
            max_bytes=_env_int("TRIEC_MAX_CHOICE_BYTES", d.max_bytes),
            cache_bytes=_env_int("TRIEC_CACHE_BYTES", d.cache_bytes),
        )

    def check(self, values: Sequence[str], what: str) -> None:
        """RequestError when ``values`` exceed the per-list limits."""
        if len(values) > self.max_values:
            raise RequestError(
                f"{what} holds {len(values)} values; this server compiles at most {self.max_values} (TRIEC_MAX_CHOICES)"
            )
        if sum(len(v.encode("utf-8", "surrogatepass")) for v in values) > self.max_bytes:
            raise RequestError(f"{what} holds more than {self.max_bytes} bytes of values (TRIEC_MAX_CHOICE_BYTES)")


def table_nbytes(table: Table) -> int:
    """An estimate of the memory a compiled table holds while served (the table's own ``served_nbytes``)."""
    return int(table.served_nbytes)


__all__ = ["Limits", "table_nbytes"]
