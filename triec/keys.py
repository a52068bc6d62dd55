"""From the user's values to a table's keys: spelled, UTF-8 checked, sorted, deduplicated.

Every table (a compile, a restricted view of one) is built from the exact
strings it serves as sorted, unique UTF-8 keys; this is the one place that
makes them and names the offending value when one cannot be.
"""

from __future__ import annotations

from collections.abc import Iterable

from triec.encoding import Encoding
from triec.errors import ValuesError


def prepare_values(values: Iterable[str | bytes]) -> tuple[list[bytes], int]:
    """UTF-8 encode, dedupe and sort by bytes. Returns (keys, duplicates removed)."""
    items = values if isinstance(values, list) else list(values)
    try:
        encoded = list(map(str.encode, items))  # fast path: a list of str
    except (TypeError, UnicodeEncodeError):
        encoded = [encode_value(i, v) for i, v in enumerate(items)]
    encoded.sort()  # sorting a list beats sorting a set: better locality
    keys = list(dict.fromkeys(encoded))  # drops adjacent duplicates, keeps order
    if not keys:
        raise ValuesError("no values: a mask table needs at least one value")
    return keys, len(encoded) - len(keys)


def spell_all(values: Iterable[str | bytes], encoding: Encoding) -> Iterable[str | bytes]:
    """Each value as the string compiled for it; raw values pass through untouched."""
    if encoding.plain:
        return values
    return [encoding.spell(_as_text(i, v)) for i, v in enumerate(values)]


def _as_text(i: int, v: object) -> str:
    if isinstance(v, str):
        return v
    return encode_value(i, v).decode("utf-8")


def encode_value(i: int, v: object) -> bytes:
    """Value number ``i`` as UTF-8 bytes; :class:`ValuesError` names it when it is no valid text."""
    if isinstance(v, str):
        try:
            return v.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValuesError(f"value {i}: not encodable as UTF-8 ({exc.reason})") from exc
    if isinstance(v, (bytes, bytearray, memoryview)):
        b = bytes(v)
        try:
            b.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValuesError(f"value {i}: invalid UTF-8 at byte {exc.start}") from exc
        return b
    raise ValuesError(f"value {i}: expected a string, found {type(v).__name__}")
