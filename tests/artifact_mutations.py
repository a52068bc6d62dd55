"""Mutating real artifacts for the fuzz tests: where a file's sections lie, and rewrites that keep it parseable.

Shared by tests/test_fuzz_content.py (int32 words and bit flips in the sections of mask tables) and
tests/test_fuzz_layouts.py (formats 4 and 5 and pattern tables: header fields, words, zeroed runs, bit flips).
Every helper keeps the file's format version and recomputes the header's CRC, so a mutation reaches the checks
past the preamble; recomputing the section CRCs too (:func:`with_section_crcs`) makes the content checks, not the
checksum, what must catch it.
"""

from __future__ import annotations

import random
import struct
import zlib
from typing import Any

import msgpack

from triec.artifact.container import ALIGN, PREAMBLE


class Seed:
    """A real artifact and where its sections lie."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.version = struct.unpack_from("<I", data, 8)[0]
        head_len = struct.unpack_from("<I", data, 12)[0]
        self.header_end = PREAMBLE.size + head_len
        self.header = msgpack.unpackb(data[PREAMBLE.size : self.header_end], raw=False)
        self.data_start = (self.header_end + ALIGN - 1) // ALIGN * ALIGN
        self.sections = [
            (sec["name"], self.data_start + sec["offset"], sec["length"]) for sec in self.header["sections"]
        ]
        counts = [v for v in _ints(self.header) if 0 < v < 2**32]
        self.hostile = sorted(
            {0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFE, 0xFFFF, 0x10000}
            | {x & 0xFFFFFFFF for n in counts for x in (n - 1, n, n + 1)}
        )

    def fresh_header(self) -> dict[str, Any]:
        """A private copy of the header (to rewrite)."""
        out: dict[str, Any] = msgpack.unpackb(self.data[PREAMBLE.size : self.header_end], raw=False)
        return out


def _ints(value: Any) -> list[int]:
    """Every int in a header (the counts hostile words are made of)."""
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _ints(v)]
    if isinstance(value, list):
        return [x for v in value for x in _ints(v)]
    return []


def repack(seed: Seed, header: dict[str, Any], body: bytes | bytearray) -> bytes:
    """The file of ``header`` (its CRC recomputed, the seed's version kept) over ``body``, the bytes from
    ``data_start`` on (sections lie at offsets from it, so a header of another length moves nothing)."""
    head = msgpack.packb(header, use_bin_type=True)
    out = bytearray(struct.pack("<8sIIII", seed.data[:8], seed.version, len(head), zlib.crc32(head), 0)) + head
    out += bytes((len(out) + ALIGN - 1) // ALIGN * ALIGN - len(out))
    return bytes(out) + bytes(body)


def with_section_crcs(seed: Seed, buf: bytes | bytearray) -> bytes:
    """``buf`` (the seed's layout, sections changed in place) with every section's CRC-32 recomputed."""
    header = seed.fresh_header()
    for sec, (_, start, length) in zip(header["sections"], seed.sections, strict=True):
        sec["crc32"] = zlib.crc32(bytes(buf[start : start + length]))
    return repack(seed, header, buf[seed.data_start :])


def overwrite_words(seed: Seed, buf: bytearray, rng: random.Random) -> str:
    """One to three aligned 32-bit words of one section set to hostile values; what was written."""
    name, start, length = rng.choice([s for s in seed.sections if s[2] >= 4])
    writes = []
    for _ in range(rng.randint(1, 3)):
        at = start + 4 * rng.randrange(length // 4)
        value = rng.choice(seed.hostile) if rng.random() < 0.85 else rng.getrandbits(32)
        struct.pack_into("<I", buf, at, value)
        writes.append(f"{(at - start) // 4}={value:#x}")
    return f"words {name}[{', '.join(writes)}]"


def flip_bit(seed: Seed, buf: bytearray, rng: random.Random) -> str:
    """One bit flipped past the header; where."""
    at = rng.randrange(seed.header_end, len(buf))
    bit = rng.randrange(8)
    buf[at] ^= 1 << bit
    inside = [name for name, start, length in seed.sections if start <= at < start + length]
    return f"bit {bit} of byte {at} ({inside[0] if inside else 'padding'})"


def zero_run(seed: Seed, buf: bytearray, rng: random.Random, most: int = 4096) -> str:
    """Up to ``most`` bytes of one section zeroed (a whole small section); which."""
    name, start, length = rng.choice([s for s in seed.sections if s[2] >= 1])
    n = rng.randint(1, min(length, most))
    at = start + rng.randrange(length - n + 1)
    buf[at : at + n] = bytes(n)
    return f"zeros {name}[{at - start}:{at - start + n}]"


def hostile_values(old: Any) -> list[Any]:
    """Values a header field may be rewritten to: other types, ints out of range, wrong strings."""
    out: list[Any] = [None, True, 1.5, [], {}, [2**40], {"a": 1}, "x", "", "triec-schema", "triec-masks", "date"]
    out += [-1, 0, 1, 2**31 - 1, 2**31, 2**32, 2**32 + 1, 2**63 - 1, -(2**63)]
    if isinstance(old, int) and not isinstance(old, bool):
        out += [old - 1, old + 1, old * 2, -old]
    if isinstance(old, str):
        out += [old + "x", old[:-1], old.upper(), "\x00", "\udcff"[:0] + "\x7f"]
    return out


def header_paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path into a header's maps and lists (each leaf and each container)."""
    out = [path] if path else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += header_paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += header_paths(v, (*path, i))
    return out


def rewrite_field(seed: Seed, rng: random.Random) -> tuple[bytes, str]:
    """The seed with one header field (at any depth) rewritten to a hostile value, the header CRC recomputed."""
    header = seed.fresh_header()
    path = rng.choice(header_paths(header))
    parent: Any = header
    for key in path[:-1]:
        parent = parent[key]
    new = rng.choice(hostile_values(parent[path[-1]]))
    parent[path[-1]] = new
    spelled = "/".join(map(str, path))
    return repack(seed, header, seed.data[seed.data_start :]), f"header {spelled}={new!r:.40}"


class GreedyEncoder:
    """A longest-match encoder over a small vocabulary (canonical tables need one; a tokenizers.Tokenizer's
    ``encode_batch`` shape)."""

    class _Encoding:
        def __init__(self, ids: list[int]) -> None:
            self.ids = ids

    def __init__(self, token_bytes: list[bytes]) -> None:
        self.ids: dict[bytes, int] = {}
        for i, b in enumerate(token_bytes):
            if b:
                self.ids.setdefault(b, i)
        self.longest = max(map(len, self.ids))

    def encode_batch(self, texts: list[str], add_special_tokens: bool = False) -> list[GreedyEncoder._Encoding]:
        return [self._Encoding(self._encode(t.encode("utf-8"))) for t in texts]

    def _encode(self, raw: bytes) -> list[int]:
        out, at = [], 0
        while at < len(raw):
            for n in range(min(self.longest, len(raw) - at), 0, -1):
                hit = self.ids.get(raw[at : at + n])
                if hit is not None:
                    out.append(hit)
                    at += n
                    break
            else:
                raise ValueError(f"no token spells byte {raw[at]:#x}")
        return out
