"""The artifact file: what is written to disk and mapped back in a serving process.

* :mod:`~triec.artifact.container`: preamble, msgpack header, 64-byte-aligned sections with CRCs,
  atomic writes; knows nothing of what the sections mean;
* :mod:`~triec.artifact.formats`: the formats by header name, each registering its reader and writer;
  ``triec.load`` and ``table.save`` dispatch through it;
* :mod:`~triec.artifact.header`: the header keys every format shares (a table's ``TableHeader``), written and read;
* :mod:`~triec.artifact.masks`: the mask-table format on top of the container.

The names below were ``triec.artifact``'s in 0.1 (a module then).
"""

from triec.artifact.container import (
    ALIGN,
    FORMAT_VERSION,
    MAGIC,
    MAX_HEADER,
    PLAIN_FORMAT_VERSION,
    PREAMBLE,
    ZSTD_MAGIC,
    atomic_write,
)
from triec.artifact.formats import encode_artifact, load, parse_artifact, write_artifact
from triec.artifact.masks import FORMAT_NAME, SECTIONS

__all__ = [
    "ALIGN",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "MAGIC",
    "MAX_HEADER",
    "PLAIN_FORMAT_VERSION",
    "PREAMBLE",
    "SECTIONS",
    "ZSTD_MAGIC",
    "atomic_write",
    "encode_artifact",
    "load",
    "parse_artifact",
    "write_artifact",
]
