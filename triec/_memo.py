"""Derived structures computed once per table and dropped with it."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def per_table(build: Callable[[Any], T]) -> Callable[[Any], T]:
    """Memoize ``build(table)`` per table object, without keeping the table alive.

    Serving-side indexes (bitmask words, restrict's path index) cost O(table)
    to build and are reused by every writer, device upload or view of it.
    """
    cache: weakref.WeakKeyDictionary[Any, T] = weakref.WeakKeyDictionary()

    @functools.wraps(build)
    def cached(table: Any) -> T:
        found = cache.get(table)
        if found is None:
            found = build(table)
            cache[table] = found
        return found

    return cached
