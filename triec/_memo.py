"""Derived structures computed once per table and dropped with it."""

from __future__ import annotations

import contextlib
import functools
import gc
import weakref
from collections.abc import Callable, Iterator
from typing import TypeVar

K = TypeVar("K")
T = TypeVar("T")


def per_table(build: Callable[[K], T]) -> Callable[[K], T]:
    """Memoize ``build(table)`` per table object, without keeping the table alive.

    Serving-side indexes (bitmask words, restrict's path index) cost O(table)
    to build and are reused by every writer, device upload or view of it.
    """
    cache: weakref.WeakKeyDictionary[K, T] = weakref.WeakKeyDictionary()

    @functools.wraps(build)
    def cached(table: K) -> T:
        found = cache.get(table)
        if found is None:
            found = build(table)
            cache[table] = found
        return found

    return cached


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while a bulk build allocates many small objects that all survive.

    A registry of 10,000 tools makes tens of thousands of dicts, closures and grammar records; each
    collection the allocations trigger walks every tracked object of the process (a served vocabulary's
    tuples included), which doubled ``compile_tools`` at 10,000 tools (1,175 -> 639 ms, same run). The
    previous state is restored; nested or concurrent uses never leave the collector off unless the
    caller had switched it off.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
