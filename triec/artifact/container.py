"""The artifact container: a preamble, a msgpack header, and 64-byte-aligned arrays, whatever they hold.

Layout (all integers little-endian; docs/format.md is the byte-by-byte spec)::

    0   8  magic  b"\\x89TRIEC\\r\\n"
    8   4  u32    format version (1; 2 when the header records an encoding; 3 for the
                  schema layout of slots and grammars)
    12  4  u32    header length H
    16  4  u32    CRC-32 of the header bytes
    20  4  u32    reserved, 0
    24  H         header: msgpack map (no extension types, nothing executable)
    ...           zero padding up to data_start = align64(24 + H)
    data_start    sections at data_start + offset (offset % 64 == 0), zero padding
                  between them; the file ends where the last section ends

This module knows nothing of what the sections mean: a format
(:mod:`triec.artifact.masks`, :mod:`triec.schema.artifact`) names its sections
and header fields, and the container writes them deterministically and
atomically, and reads them back validated (memory-mapped, or decompressed into
memory from a zstd-wrapped file). Reading needs numpy and msgpack (zstandard
only for compressed files), both imported on use.
"""

from __future__ import annotations

import mmap
import os
import stat
import struct
import tempfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from triec.errors import ArtifactChecksumError, ArtifactError, ArtifactVersionError, OutputError

MAGIC = b"\x89TRIEC\r\n"
FORMAT_VERSION = 6  # the newest version this triec reads and writes
# Version 2 = version 1 plus the header's ``encoding`` map. A table of raw values
# with nothing around them is still written as version 1, byte for byte as
# before, so that older readers keep loading it; a table whose values are
# spelled (JSON, prefix, suffix) is version 2, which older readers refuse with
# "upgrade triec" instead of handing back the spelled strings as values.
# Version 3 is written for one layout only, the ``triec-schema`` tables of slots
# and grammars (docs/format.md); mask tables keep versions 1 and 2, byte for byte.
PLAIN_FORMAT_VERSION = 1
ENCODED_FORMAT_VERSION = 2
SCHEMA_FORMAT_VERSION = 3
# Version 4 is a mask table in the tail layout: the rows of branching states only, the vocabulary's token index
# after them (tail states' rows are served from the values); written only for such a table.
TAILS_FORMAT_VERSION = 4
# Version 5 is a ``triec-schema`` table holding a pattern slot (a format or pattern field served from its DFA's
# rows): version 3's sections and slot columns, plus each pattern slot's regex and DFA; written only for such a table.
SCHEMA_PATTERNS_FORMAT_VERSION = 5
# Version 6 is a ``triec-pattern`` table whose rows are stored by token class (tokens that act alike on the DFA,
# triec.runtime.token_classes): its size follows the distinct behaviours, not vocabulary x states.
PATTERN_CLASSES_FORMAT_VERSION = 6
VERSIONS = (
    PLAIN_FORMAT_VERSION,
    ENCODED_FORMAT_VERSION,
    SCHEMA_FORMAT_VERSION,
    TAILS_FORMAT_VERSION,
    SCHEMA_PATTERNS_FORMAT_VERSION,
    PATTERN_CLASSES_FORMAT_VERSION,
)
PREAMBLE = struct.Struct("<8sIIII")
ALIGN = 64
MAX_HEADER = 1 << 20  # a header is a few hundred bytes; refuse anything absurd
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
MAX_INFLATED = 1 << 34
"""A zstd-wrapped artifact inflates to at most this many bytes (16 GiB; ``TRIEC_MAX_ARTIFACT_BYTES`` overrides;
docs/decisions.md D13). The bound is checked before inflating: from the frame's declared size, and from the
header's section table, which is read first; a stream that holds more than its header declares is refused."""

Layout = Sequence[tuple[str, str]]
"""(section name, numpy dtype string) in file order."""


def align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


# ---------------------------------------------------------------- writing


def encode(header: dict[str, Any], sections: Sequence[tuple[str, str, np.ndarray]], version: int) -> bytes:
    """The file's bytes: ``header`` (a msgpack map; the section table is added as its last field,
    ``"sections"``) and each ``(name, dtype, array)`` in order. A pure function: same input, same bytes."""
    import msgpack

    arrays: list[tuple[str, str, bytes, int]] = []
    for name, dtype, source in sections:
        a = np.ascontiguousarray(source, dtype=np.dtype(dtype))
        arrays.append((name, dtype, a.tobytes(), int(a.shape[0])))
    table: list[dict[str, Any]] = []
    offset = 0
    for name, dtype, raw, count in arrays:
        table.append(
            {
                "name": name,
                "dtype": dtype,
                "count": count,
                "offset": offset,
                "length": len(raw),
                "crc32": zlib.crc32(raw),
            }
        )
        offset = align(offset + len(raw))
    header["sections"] = table
    head = msgpack.packb(header, use_bin_type=True)
    out = bytearray(PREAMBLE.pack(MAGIC, version, len(head), zlib.crc32(head), 0))
    out += head
    data_start = align(len(out))
    out += bytes(data_start - len(out))
    for sec, (_, _, raw, _) in zip(table, arrays, strict=True):
        out += bytes(data_start + sec["offset"] - len(out))
        out += raw
    return bytes(out)


def atomic_write(path: str | os.PathLike[str], data: bytes) -> None:
    """Write to a temporary file in the same directory, fsync, then rename over ``path``.

    Raises :class:`OutputError` when that cannot be done, and refuses to
    replace anything but a regular file (renaming over ``/dev/null`` as root
    would replace the device).
    """
    target = Path(path)
    if target.is_dir():
        raise OutputError(f"{target}: is a directory, expected a file path")
    if target.exists() and not target.is_file():
        raise OutputError(f"{target}: exists and is not a regular file; refusing to replace it")
    if not (target.parent or Path(".")).is_dir():
        raise OutputError(f"{target}: directory {target.parent} does not exist")
    try:
        _write_and_rename(target, data)
    except OSError as exc:
        raise OutputError(f"{target}: cannot write ({exc.strerror or exc})") from exc


def new_file_mode(target: Path) -> int:
    """The mode a finished file gets: the target's own when it exists (a replaced file keeps its permissions), else
    what ``open()`` would give, 0o666 less the umask (``mkstemp`` creates 0o600, which would hide results and
    artifacts from the user's group)."""
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except OSError:
        mask = os.umask(0)  # the only portable way to read it; set straight back
        os.umask(mask)
        return 0o666 & ~mask


def _write_and_rename(target: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent or Path("."))
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, new_file_mode(target))
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write(data: bytes, path: str | os.PathLike[str], *, compress: bool | None = None) -> int:
    """Write an encoded artifact atomically; ``compress`` (default: ``path`` ends in ``.zst``) wraps it in zstd.

    Returns the number of bytes written.
    """
    if compress is None:
        compress = os.fspath(path).endswith(".zst")
    if compress:
        import zstandard

        data = zstandard.ZstdCompressor(level=19, write_checksum=True).compress(data)
    atomic_write(path, data)
    return len(data)


# ---------------------------------------------------------------- reading


def fail(source: str, message: str) -> ArtifactError:
    """The error for a file that is not a valid artifact, naming it."""
    return ArtifactError(f"{source}: {message}")


def read_buffer(path: str | os.PathLike[str], *, copy: bool = False) -> tuple[Any, bool]:
    """An mmap of the file, or the decompressed bytes of a zstd-wrapped artifact; and whether it was compressed.

    ``copy`` reads a plain file into private memory instead of mapping it: the
    buffer then does not change, nor fault (SIGBUS), when the file is later
    overwritten in place or truncated.
    """
    source = os.fspath(path)
    try:
        if not stat.S_ISREG(os.stat(source).st_mode):  # a pipe would block, a device would not end
            raise fail(source, "not a regular file")
        with open(source, "rb") as fh:
            head = fh.read(len(ZSTD_MAGIC))
            if head == ZSTD_MAGIC:
                fh.seek(0)
                return inflate(fh, source), True
            size = os.fstat(fh.fileno()).st_size
            if size == 0:
                raise fail(source, "file is empty")
            if copy:
                fh.seek(0)
                return fh.read(), False
            return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ), False
    except OSError as exc:
        raise ArtifactError(f"{source}: cannot read artifact ({exc.strerror or exc})") from exc


def max_inflated() -> int:
    """:data:`MAX_INFLATED`, or ``TRIEC_MAX_ARTIFACT_BYTES`` when set."""
    raw = os.environ.get("TRIEC_MAX_ARTIFACT_BYTES", "").strip()
    return int(raw) if raw.isdigit() else MAX_INFLATED


def inflate(stream: Any, source: str) -> bytes:
    """The bytes of a zstd-wrapped artifact, decompressed within bounds (a decompression bomb costs nothing).

    ``stream`` is a binary file object at the frame's start. The frame's declared content size, when it has
    one, is checked against :func:`max_inflated` before anything is inflated; then the preamble and the header
    are inflated and checked (a stream that is not a triec artifact is refused after its first 24 bytes), and
    exactly the size the header's section table declares is inflated: a stream that is shorter, or longer, or
    declares more than the limit, is refused. Memory: the artifact's own size, never the stream's.
    """
    try:
        import zstandard
    except ImportError as exc:
        raise fail(source, "is zstd-compressed; `pip install zstandard` to load it") from exc
    limit = max_inflated()
    start = stream.tell()
    declared = zstandard.frame_content_size(stream.read(18)) if hasattr(zstandard, "frame_content_size") else -1
    stream.seek(start)
    if declared > limit:
        raise fail(
            source,
            f"zstd frame declares {declared:,} bytes inflated; the limit is {limit:,} (TRIEC_MAX_ARTIFACT_BYTES)",
        )

    def exactly(reader: Any, n: int, what: str) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = reader.read(min(n - len(out), 1 << 24))
            if not chunk:
                raise fail(source, f"{what}: the zstd stream ends after {len(out):,} of {n:,} bytes")
            out += chunk
        return bytes(out)

    try:
        with zstandard.ZstdDecompressor().stream_reader(stream, read_across_frames=True) as reader:
            head = reader.read(PREAMBLE.size)
            if len(head) < PREAMBLE.size or head[: len(MAGIC)] != MAGIC:
                raise fail(source, f"magic: expected {MAGIC!r}, found {head[: len(MAGIC)]!r}; not a triec artifact")
            head_len = PREAMBLE.unpack(head)[2]
            if head_len > MAX_HEADER:
                raise fail(source, f"header length {head_len} exceeds the {MAX_HEADER}-byte limit")
            head += exactly(reader, head_len, "header")
            header, data_start, _ = read_header(head, source)
            total = data_start
            for sec in field(header, "sections", list, source):
                if isinstance(sec, dict):
                    end = count(sec, "offset", source, 2**40, "section field") + count(
                        sec, "length", source, 2**40, "section field"
                    )
                    total = max(total, data_start + end)
            if total > limit:
                raise fail(
                    source, f"header declares {total:,} bytes; the limit is {limit:,} (TRIEC_MAX_ARTIFACT_BYTES)"
                )
            data = head + exactly(reader, total - len(head), "sections")
            if reader.read(1):
                raise fail(source, f"the zstd stream holds more than the {total:,} bytes its header declares")
            return data
    except zstandard.ZstdError as exc:
        raise fail(source, f"corrupt zstd stream ({exc})") from exc


def read_header(buf: Any, source: str, *, verify: bool = False) -> tuple[dict[str, Any], int, int]:
    """The preamble and the header map, checked: ``(header, data_start, format version)``.

    ``verify`` also checks that the padding after the header is zero.
    """
    size = len(buf)
    if size < PREAMBLE.size:
        raise fail(source, f"file is {size} bytes, shorter than the {PREAMBLE.size}-byte preamble")
    magic, version, head_len, head_crc, reserved = PREAMBLE.unpack_from(buf, 0)
    if magic != MAGIC:
        raise fail(source, f"magic: expected {MAGIC!r}, found {bytes(magic)!r}; not a triec artifact")
    if version > FORMAT_VERSION:
        raise ArtifactVersionError(
            f"{source}: format version {version} is newer than this triec supports ({FORMAT_VERSION}); upgrade triec"
        )
    if version not in VERSIONS:
        raise fail(source, f"format version: expected one of {', '.join(map(str, VERSIONS))}, found {version}")
    if reserved != 0:
        raise fail(source, f"preamble reserved field: expected 0, found {reserved}")
    if head_len > MAX_HEADER or PREAMBLE.size + head_len > size:
        raise fail(source, f"header length {head_len} exceeds the file or the {MAX_HEADER}-byte limit")
    head = bytes(buf[PREAMBLE.size : PREAMBLE.size + head_len])
    if zlib.crc32(head) != head_crc:
        raise ArtifactChecksumError(f"{source}: header CRC-32 mismatch; the file is corrupt")
    import msgpack

    try:
        header = msgpack.unpackb(head, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types
        raise fail(source, f"header is not valid msgpack ({type(exc).__name__})") from exc
    if not isinstance(header, dict):
        raise fail(source, "header: expected a map")
    data_start = align(PREAMBLE.size + head_len)
    if verify and any(buf[PREAMBLE.size + head_len : data_start]):
        raise fail(source, "padding after the header: expected zero bytes")
    return header, data_start, version


def field(header: dict[str, Any], name: str, kind: type | tuple[type, ...], source: str) -> Any:
    """Header field ``name``, which must be of type ``kind``."""
    value = header.get(name)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise fail(source, f"header field {name!r}: expected {getattr(kind, '__name__', kind)}, found {value!r}")
    return value


def count(header: dict[str, Any], name: str, source: str, upper: int = 2**32, where: str = "header field") -> int:
    """Integer field ``name`` of a map, in ``0 .. upper - 1``."""
    value = header.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise fail(source, f"{where} {name!r}: expected an integer, found {value!r:.40}")
    if not 0 <= value < upper:
        raise fail(source, f"{where} {name!r}: {value} out of range 0..{upper - 1}")
    return value


def read_sections(
    buf: Any,
    source: str,
    header: dict[str, Any],
    data_start: int,
    layout: Layout,
    expected: dict[str, int],
    *,
    verify: bool,
    checksums: bool = False,
) -> dict[str, np.ndarray]:
    """numpy views of the sections ``layout`` names, each checked against the header's section table.

    Every section must have the expected name, dtype and count (``expected[name]``),
    the next 64-byte-aligned offset, and lie inside the file, which must end where
    the last one ends. ``verify`` also checks each section's CRC-32 and that the
    padding between sections is zero; ``checksums`` the CRC-32s alone.
    """
    sections = field(header, "sections", list, source)
    if len(sections) != len(layout):
        raise fail(source, f"header field 'sections': expected {len(layout)} sections, found {len(sections)}")
    size = len(buf)
    arrays: dict[str, np.ndarray] = {}
    cursor = 0
    for sec, (name, dtype) in zip(sections, layout, strict=True):
        if not isinstance(sec, dict) or sec.get("name") != name:
            raise fail(source, f"section table: expected {name!r} next, found {sec!r:.80}")
        if sec.get("dtype") != dtype:
            raise fail(source, f"section {name}: dtype expected {dtype}, found {sec.get('dtype')!r}")
        where = f"section {name}: field"
        n, offset, length = (count(sec, key, source, 2**40, where) for key in ("count", "offset", "length"))
        crc = count(sec, "crc32", source, 2**32, where)
        itemsize = np.dtype(dtype).itemsize
        if n != expected[name] or length != n * itemsize:
            raise fail(
                source,
                f"section {name}: count expected {expected[name]} ({expected[name] * itemsize} bytes), "
                f"found count {n}, length {length}",
            )
        if offset != align(cursor):
            raise fail(source, f"section {name}: offset expected {align(cursor)} (64-byte aligned), found {offset}")
        start = data_start + offset
        if start + length > size:
            raise fail(source, f"section {name}: bytes {start}..{start + length} lie past the end of the file ({size})")
        view = np.frombuffer(buf, dtype=np.dtype(dtype), count=n, offset=start) if n else np.zeros(0, dtype)
        if (verify or checksums) and zlib.crc32(view.data if n else b"") != crc:
            raise ArtifactChecksumError(f"{source}: section {name}: CRC-32 mismatch; the file is corrupt")
        if verify and any(buf[data_start + cursor : start]):
            raise fail(source, f"padding before section {name}: expected zero bytes")
        arrays[name] = view
        cursor = offset + length
    if data_start + cursor != size:
        raise fail(source, f"file size: expected {data_start + cursor} bytes, found {size}")
    return arrays
