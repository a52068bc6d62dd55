"""The artifact file: a preamble, a msgpack header, and 64-byte-aligned arrays.

Layout (all integers little-endian; docs/format.md is the byte-by-byte spec)::

    0   8  magic  b"\\x89TRIEC\\r\\n"
    8   4  u32    format version (1, or 2 when the header records an encoding)
    12  4  u32    header length H
    16  4  u32    CRC-32 of the header bytes
    20  4  u32    reserved, 0
    24  H         header: msgpack map (no extension types, nothing executable)
    ...           zero padding up to data_start = align64(24 + H)
    data_start    sections at data_start + offset (offset % 64 == 0), zero padding
                  between them; the file ends where the last section ends

The writer is deterministic and atomic; the reader memory-maps the file and
hands out numpy views, or decompresses a zstd-wrapped artifact into memory.
Reading needs numpy and msgpack (zstandard only for compressed files).
"""

from __future__ import annotations

import mmap
import os
import stat
import struct
import tempfile
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from triec._version import __version__
from triec.encoding import Encoding
from triec.errors import ArtifactChecksumError, ArtifactError, ArtifactVersionError, OutputError, TokenizerMismatch

if TYPE_CHECKING:
    from triec.runtime import MaskTable

MAGIC = b"\x89TRIEC\r\n"
FORMAT_VERSION = 2  # the newest version this triec reads and writes
# Version 2 = version 1 plus the header's ``encoding`` map. A table of raw values
# with nothing around them is still written as version 1, byte for byte as
# before, so that older readers keep loading it; a table whose values are
# spelled (JSON, prefix, suffix) is version 2, which older readers refuse with
# "upgrade triec" instead of handing back the spelled strings as values.
PLAIN_FORMAT_VERSION = 1
PREAMBLE = struct.Struct("<8sIIII")
ALIGN = 64
MAX_HEADER = 1 << 20  # a header is a few hundred bytes; refuse anything absurd
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
FORMAT_NAME = "triec-masks"

# name -> (dtype, count expression); the order is the order in the file.
SECTIONS: tuple[tuple[str, str], ...] = (
    ("allowed_offsets", "<u4"),
    ("allowed_tokens", "<i4"),
    ("allowed_next", "<i4"),
    ("value_state", "<i4"),
    ("value_lcp", "<i4"),
    ("state_byte", "|u1"),
)


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _expected_counts(num_states: int, num_allowed: int, num_values: int) -> dict[str, int]:
    return {
        "allowed_offsets": num_states + 1,
        "allowed_tokens": num_allowed,
        "allowed_next": num_allowed,
        "value_state": num_values,
        "value_lcp": num_values,
        "state_byte": num_states,
    }


# ---------------------------------------------------------------- writing


def encode_artifact(table: MaskTable) -> bytes:
    """The artifact's bytes: a pure function of the table (same table, same bytes).

    A compiled tool schema (:class:`~triec.schema_table.SchemaTable`) is written as
    format ``"triec-schema"``: its trie's six sections, then the schema sections
    (:mod:`triec.schema_artifact`), and a ``schema`` map in the header.
    """
    import msgpack

    schema_table = table if getattr(table, "kind", None) == "tool-schema" else None
    trie = schema_table.trie if schema_table is not None else table  # type: ignore[attr-defined]
    if trie.num_allowed >= 2**32:
        raise ArtifactError(f"{trie.num_allowed} allowed pairs exceed the format's u32 offsets")
    arrays: list[tuple[str, str, bytes, int]] = []
    layout = list(SECTIONS)
    sources = {name: getattr(trie, name) for name, _ in SECTIONS}
    if schema_table is not None:
        from triec.schema_artifact import SCHEMA_SECTIONS, schema_arrays

        layout += SCHEMA_SECTIONS
        sources.update(schema_arrays(schema_table))
    for name, dtype in layout:
        a = np.ascontiguousarray(sources[name], dtype=np.dtype(dtype))
        arrays.append((name, dtype, a.tobytes(), int(a.shape[0])))
    sections = []
    offset = 0
    for name, dtype, raw, count in arrays:
        sections.append(
            {"name": name, "dtype": dtype, "count": count, "offset": offset, "length": len(raw), "crc32": zlib.crc32(raw)}
        )
        offset = _align(offset + len(raw))
    header: dict[str, Any] = {
        "format": FORMAT_NAME,
        "triec_version": __version__,
        "tokenizer": {"name": trie.tokenizer_name, "fingerprint": trie.tokenizer_fingerprint},
        "vocab_size": trie.vocab_size,
        "eos_token_ids": list(trie.eos_token_ids),
        "num_values": trie.num_values,
        "num_states": trie.num_states,
        "num_allowed": trie.num_allowed,
        "build_options": trie.build_options,
    }
    version = PLAIN_FORMAT_VERSION
    if not trie.encoding.plain:
        version = FORMAT_VERSION
        header["encoding"] = trie.encoding.to_header()
    if schema_table is not None:
        from triec.schema_artifact import FORMAT_NAME as SCHEMA_FORMAT
        from triec.schema_artifact import schema_header

        header["format"] = SCHEMA_FORMAT
        header["schema"] = schema_header(schema_table)
    header["sections"] = sections
    head = msgpack.packb(header, use_bin_type=True)
    out = bytearray(PREAMBLE.pack(MAGIC, version, len(head), zlib.crc32(head), 0))
    out += head
    data_start = _align(len(out))
    out += bytes(data_start - len(out))
    for sec, (_, _, raw, _) in zip(sections, arrays, strict=True):
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


def _write_and_rename(target: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent or Path("."))
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_artifact(table: MaskTable, path: str | os.PathLike[str], *, compress: bool | None = None) -> int:
    data = encode_artifact(table)
    if compress is None:
        compress = os.fspath(path).endswith(".zst")
    if compress:
        import zstandard

        data = zstandard.ZstdCompressor(level=19, write_checksum=True).compress(data)
    atomic_write(path, data)
    return len(data)


# ---------------------------------------------------------------- reading


def _fail(source: str, message: str) -> ArtifactError:
    return ArtifactError(f"{source}: {message}")


def _read_buffer(path: str | os.PathLike[str]) -> tuple[Any, bool]:
    """An mmap of the file, or the decompressed bytes of a zstd-wrapped artifact."""
    source = os.fspath(path)
    try:
        if not stat.S_ISREG(os.stat(source).st_mode):  # a pipe would block, a device would not end
            raise _fail(source, "not a regular file")
        with open(source, "rb") as fh:
            head = fh.read(len(ZSTD_MAGIC))
            if head == ZSTD_MAGIC:
                fh.seek(0)
                try:
                    import zstandard
                except ImportError as exc:
                    raise _fail(source, "is zstd-compressed; `pip install zstandard` to load it") from exc
                try:
                    with zstandard.ZstdDecompressor().stream_reader(fh) as reader:
                        return reader.read(), True
                except zstandard.ZstdError as exc:
                    raise _fail(source, f"corrupt zstd stream ({exc})") from exc
            size = os.fstat(fh.fileno()).st_size
            if size == 0:
                raise _fail(source, "file is empty")
            return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ), False
    except OSError as exc:
        raise ArtifactError(f"{source}: cannot read artifact ({exc.strerror or exc})") from exc


def _header(buf: Any, source: str) -> tuple[dict[str, Any], int, int]:
    size = len(buf)
    if size < PREAMBLE.size:
        raise _fail(source, f"file is {size} bytes, shorter than the {PREAMBLE.size}-byte preamble")
    magic, version, head_len, head_crc, reserved = PREAMBLE.unpack_from(buf, 0)
    if magic != MAGIC:
        raise _fail(source, f"magic: expected {MAGIC!r}, found {bytes(magic)!r}; not a triec artifact")
    if version > FORMAT_VERSION:
        raise ArtifactVersionError(
            f"{source}: format version {version} is newer than this triec supports ({FORMAT_VERSION}); upgrade triec"
        )
    if version not in (PLAIN_FORMAT_VERSION, FORMAT_VERSION):
        raise _fail(source, f"format version: expected {PLAIN_FORMAT_VERSION} or {FORMAT_VERSION}, found {version}")
    if reserved != 0:
        raise _fail(source, f"preamble reserved field: expected 0, found {reserved}")
    if head_len > MAX_HEADER or PREAMBLE.size + head_len > size:
        raise _fail(source, f"header length {head_len} exceeds the file or the {MAX_HEADER}-byte limit")
    head = bytes(buf[PREAMBLE.size : PREAMBLE.size + head_len])
    if zlib.crc32(head) != head_crc:
        raise ArtifactChecksumError(f"{source}: header CRC-32 mismatch; the file is corrupt")
    import msgpack

    try:
        header = msgpack.unpackb(head, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types
        raise _fail(source, f"header is not valid msgpack ({type(exc).__name__})") from exc
    if not isinstance(header, dict):
        raise _fail(source, "header: expected a map")
    return header, _align(PREAMBLE.size + head_len), version


def _header_length(buf: Any) -> int:
    return int(PREAMBLE.unpack_from(buf, 0)[2])


def _field(header: dict[str, Any], name: str, kind: type | tuple[type, ...], source: str) -> Any:
    value = header.get(name)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise _fail(source, f"header field {name!r}: expected {getattr(kind, '__name__', kind)}, found {value!r}")
    return value


def _count(header: dict[str, Any], name: str, source: str, upper: int = 2**32, where: str = "header field") -> int:
    value = header.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise _fail(source, f"{where} {name!r}: expected an integer, found {value!r:.40}")
    if not 0 <= value < upper:
        raise _fail(source, f"{where} {name!r}: {value} out of range 0..{upper - 1}")
    return value


def parse_artifact(buf: Any, source: str, *, verify: bool = False) -> dict[str, Any]:
    """Validate the layout and return the header plus numpy views of the sections."""
    header, data_start, version = _header(buf, source)
    if verify and any(buf[PREAMBLE.size + _header_length(buf) : data_start]):
        raise _fail(source, "padding after the header: expected zero bytes")
    from triec.schema_artifact import FORMAT_NAME as SCHEMA_FORMAT

    if header.get("format") not in (FORMAT_NAME, SCHEMA_FORMAT):
        raise _fail(source, f"header field 'format': expected {FORMAT_NAME!r} or {SCHEMA_FORMAT!r}, found {header.get('format')!r}")
    vocab_size = _count(header, "vocab_size", source, 2**31)
    if vocab_size < 1:
        raise _fail(source, "header field 'vocab_size': a mask is at least 1 token wide, found 0")
    num_states = _count(header, "num_states", source, 2**31)
    num_allowed = _count(header, "num_allowed", source)
    num_values = _count(header, "num_values", source, 2**31)
    if num_states < 1 or num_values < 1:
        raise _fail(source, "header: an artifact holds at least one value and one state")
    eos = _field(header, "eos_token_ids", list, source)
    if not all(isinstance(e, int) and not isinstance(e, bool) and 0 <= e < vocab_size for e in eos):
        raise _fail(source, f"header field 'eos_token_ids': expected ids in 0..{vocab_size - 1}, found {eos!r}")
    _field(header, "triec_version", str, source)
    _field(header, "build_options", dict, source)
    if version == PLAIN_FORMAT_VERSION and "encoding" in header:
        raise _fail(source, f"header field 'encoding': needs format version {FORMAT_VERSION}, the file says {version}")
    if version == FORMAT_VERSION:
        try:
            encoding = Encoding.from_header(header.get("encoding"))
        except ValueError as exc:
            raise _fail(source, f"header field 'encoding': {exc}") from None
        if encoding.plain:
            raise _fail(source, f"header field 'encoding': a raw encoding without prefix or suffix is written as version {PLAIN_FORMAT_VERSION}")
    tok = _field(header, "tokenizer", dict, source)
    if not isinstance(tok.get("fingerprint"), str) or not isinstance(tok.get("name"), str):
        raise _fail(source, "header field 'tokenizer': expected name and fingerprint strings")
    sections = _field(header, "sections", list, source)
    expected = _expected_counts(num_states, num_allowed, num_values)
    layout = list(SECTIONS)
    if header["format"] == SCHEMA_FORMAT:
        from triec.schema_artifact import SCHEMA_SECTIONS
        from triec.schema_artifact import expected_counts as schema_counts

        layout += SCHEMA_SECTIONS
        expected.update(schema_counts(header.get("schema"), source))
    elif "schema" in header:
        raise _fail(source, f"header field 'schema': only a {SCHEMA_FORMAT!r} artifact has one")
    if len(sections) != len(layout):
        raise _fail(source, f"header field 'sections': expected {len(layout)} sections, found {len(sections)}")
    size = len(buf)
    arrays: dict[str, np.ndarray] = {}
    cursor = 0
    for sec, (name, dtype) in zip(sections, layout, strict=True):
        if not isinstance(sec, dict) or sec.get("name") != name:
            raise _fail(source, f"section table: expected {name!r} next, found {sec!r:.80}")
        if sec.get("dtype") != dtype:
            raise _fail(source, f"section {name}: dtype expected {dtype}, found {sec.get('dtype')!r}")
        where = f"section {name}: field"
        count, offset, length = (_count(sec, key, source, 2**40, where) for key in ("count", "offset", "length"))
        crc = _count(sec, "crc32", source, 2**32, where)
        itemsize = np.dtype(dtype).itemsize
        if count != expected[name] or length != count * itemsize:
            raise _fail(
                source,
                f"section {name}: count expected {expected[name]} ({expected[name] * itemsize} bytes), "
                f"found count {count}, length {length}",
            )
        if offset != _align(cursor):
            raise _fail(source, f"section {name}: offset expected {_align(cursor)} (64-byte aligned), found {offset}")
        start = data_start + offset
        if start + length > size:
            raise _fail(source, f"section {name}: bytes {start}..{start + length} lie past the end of the file ({size})")
        view = np.frombuffer(buf, dtype=np.dtype(dtype), count=count, offset=start) if count else np.zeros(0, dtype)
        if verify and zlib.crc32(view.data if count else b"") != crc:
            raise ArtifactChecksumError(f"{source}: section {name}: CRC-32 mismatch; the file is corrupt")
        if verify and any(buf[data_start + cursor : start]):
            raise _fail(source, f"padding before section {name}: expected zero bytes")
        arrays[name] = view
        cursor = offset + length
    if data_start + cursor != size:
        raise _fail(source, f"file size: expected {data_start + cursor} bytes, found {size}")
    return {"header": header, "arrays": arrays, "format_version": version}


def load(
    path: str | os.PathLike[str],
    *,
    verify: bool = False,
    expect_fingerprint: str | None = None,
) -> MaskTable:
    """Open an artifact: memory-mapped (plain) or decompressed into memory (``.zst``).

    Layout, header CRC, section bounds and every value used as an index
    (:func:`triec.validate.check_indices`, about 0.6 ms at K = 100,000) are
    always checked, so a loaded table never indexes out of range; the value
    bytes are checked lazily (order and UTF-8, on first use). ``verify=True``
    also checks every section's CRC-32 and everything that makes the masks
    right (reads the whole file once). Failures raise subclasses of
    :class:`~triec.errors.ArtifactError` naming the file and the field.
    """
    from triec.runtime import MaskTable
    from triec.validate import check_indices, validate_contents

    source = os.fspath(path)
    buf, _compressed = _read_buffer(source)
    parsed = parse_artifact(buf, source, verify=verify)
    header, arrays = parsed["header"], parsed["arrays"]
    trie_arrays = {name: arrays[name] for name, _ in SECTIONS}
    table = MaskTable(
        **trie_arrays,
        vocab_size=header["vocab_size"],
        eos_token_ids=header["eos_token_ids"],
        tokenizer_fingerprint=header["tokenizer"]["fingerprint"],
        tokenizer_name=header["tokenizer"]["name"],
        build_options=header["build_options"],
        source=source,
        encoding=Encoding.from_header(header["encoding"]) if "encoding" in header else None,
    )
    table.header = header  # type: ignore[attr-defined]
    table.format_version = parsed["format_version"]  # type: ignore[attr-defined]
    if verify:
        validate_contents(table, source)
    else:
        check_indices(table, source)
    table._indices_checked = True
    if expect_fingerprint is not None and expect_fingerprint != table.tokenizer_fingerprint:
        raise TokenizerMismatch(
            f"{source}: compiled for tokenizer {table.tokenizer_fingerprint} ({table.tokenizer_name}), "
            f"expected {expect_fingerprint}"
        )
    if "schema" in header:
        from triec.schema_artifact import build_schema_table, check_schema_indices, validate_schema_contents

        schema_table = build_schema_table(table, header, arrays)
        schema_table.source, schema_table.header = source, header
        check_schema_indices(schema_table, source)
        if verify:
            validate_schema_contents(schema_table, source)
        return schema_table  # type: ignore[return-value]
    return table
