#!/usr/bin/env python3
"""Regenerate the golden artifacts in fixtures/golden/ and their README.

The golden files pin the artifacts' exact bytes: tests/test_artifact.py compiles
the same values (tests/test_schema_artifact.py the same schemas, listed in
fixtures/golden/schemas.json) with the same tokenizer and requires a
byte-for-byte match. The files of the first schema layout (``legacy`` in the
manifest, format versions 1/2) were written by triec before slots and grammars
and are never regenerated: this triec reads them and writes none. Run this
script only when the file format or the triec version changes on purpose:

    .venv/bin/python tools/make_golden.py

and commit the new artifact and README together with the change that caused them.
"""

from __future__ import annotations

import hashlib
import json
import struct
import sys
from pathlib import Path

import triec
from triec.artifact.container import PLAIN_FORMAT_VERSION

ROOT = Path(__file__).resolve().parent.parent
GOLDEN_DIR = ROOT / "fixtures" / "golden"
ARTIFACT = GOLDEN_DIR / "tiny-gpt2.triec"
README = GOLDEN_DIR / "README.md"
MANIFEST = GOLDEN_DIR / "schemas.json"

# Keep in step with GOLDEN_VALUES in tests/test_artifact.py. The set covers a shared
# prefix (get / get_user), a multi-byte UTF-8 character and the empty string.
VALUES = ["get", "get_user", "list_files", "héllo", ""]
TOKENIZER = "gpt2"  # bundled with triec, so the golden file needs no download

README_TEXT = """\
# Golden artifact

`tiny-gpt2.triec` is a triec artifact (format version {format_version}, written by
triec {version}) compiled from the values

    {values}

with the bundled `gpt2` tokenizer ({tokens} tokens, EOS {eos}), through the Python API
(`triec.compile(VALUES, "gpt2").save(path)`).

- size: {size} bytes
- sha256: `{sha256}`
- tokenizer fingerprint: `{fingerprint}`

It was made by `tools/make_golden.py`. `tests/test_artifact.py` compiles the same
values again and requires the same bytes, byte for byte, and requires the loaded
file to answer `allowed()` identically for every state.

The file changes only when the artifact format or the triec version (recorded in
its header) changes. When that happens on purpose, regenerate it deliberately with

    .venv/bin/python tools/make_golden.py

review the difference, and commit the new artifact and this README with the change.
A golden test failing without such a change means the writer stopped being
deterministic or the format changed by accident: fix the code, not the fixture.

## Schema artifacts

Listed in `schemas.json`, each with the JSON Schema (the `*.schema.json` beside
it) or tool registry (`*.tools.json`) it was compiled from.
`tests/test_schema_artifact.py` compiles each again
(`triec.compile_schema(schema, tokenizer, engine=..., threshold=...)`,
`triec.compile_tools(tools, tokenizer, format=..., engine=...)`) and
requires the same bytes, the header's `engine_version` set to the one recorded
(the tables do not depend on the engine's version, the header names it), and
checks that each loads with `verify=True`, serves, and matches its engine on the
whole schema with 0 mismatches.

Written by this triec (format version 3, slots and grammars):

{schema_rows}

Frozen: written by triec 0.1.0 in the first schema layout (format version 1,
docs/format.md "The first schema layout (read, never written)"), at commit
ecfd868, with `triec.compile_schema(schema, "gpt2", engine=ENGINE).save(path)`.
This triec reads them (one start slot and one grammar each) and never writes
that layout, so they are not regenerated; the tests require that they keep
loading, serving and verifying:

{legacy_rows}
"""


def _row(path: Path, what: str) -> str:
    data = path.read_bytes()
    size = f"{len(data)} bytes"
    if path.name.endswith(".zst"):
        import zstandard

        data = zstandard.ZstdDecompressor().decompress(data)
        size += f" (zstd; {len(data)} bytes inside)"
    version = struct.unpack_from("<I", data, 8)[0]
    return f"- `{path.name}`: {what}; format version {version}, {size}, sha256 of the artifact `{hashlib.sha256(data).hexdigest()}`"


def make_schema_goldens() -> tuple[str, str]:
    """Compile every schema of the manifest's ``schema`` list; describe them and the frozen ``legacy`` ones."""
    manifest = json.loads(MANIFEST.read_text(encoding="utf-8"))
    rows = []
    for entry in manifest["schema"]:
        schema = json.loads((GOLDEN_DIR / entry["schema"]).read_text(encoding="utf-8"))
        table = triec.compile_schema(schema, entry["tokenizer"], engine=entry["engine"], threshold=entry["threshold"])
        path = GOLDEN_DIR / entry["artifact"]
        table.save(path)  # zstd-wrapped when the name ends in .zst
        slots = ", ".join(f"{s['pointer']} (K = {s['values']})" for s in table.info["slots"])
        rows.append(
            _row(
                path,
                f"`{entry['schema']}`, {entry['tokenizer']}, {entry['engine']} "
                f"(threshold {entry['threshold']}): slots {slots}",
            )
        )
    for entry in manifest.get("tools", []):
        tools = json.loads((GOLDEN_DIR / entry["tools"]).read_text(encoding="utf-8"))
        from triec.schema.compile import compile_tools

        table = compile_tools(
            tools, entry["tokenizer"], format=entry["format"], engine=entry["engine"], parallel=entry["parallel"]
        )
        path = GOLDEN_DIR / entry["artifact"]
        table.save(path)
        rows.append(
            _row(
                path,
                f"the registry `{entry['tools']}` ({len(tools)} tools), {entry['tokenizer']}, "
                f"{entry['engine']}, format {entry['format']}",
            )
        )
    legacy = [
        _row(GOLDEN_DIR / e["artifact"], f"`{e['schema']}`, {e['tokenizer']}, {e['engine']}")
        for e in manifest["legacy"]
    ]
    return "\n".join(rows), "\n".join(legacy)


def main() -> int:
    table = triec.compile(VALUES, TOKENIZER)
    GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
    size = table.save(ARTIFACT, compress=False)
    data = ARTIFACT.read_bytes()
    vocab = triec.Vocabulary.load(TOKENIZER)
    schema_rows, legacy_rows = make_schema_goldens()
    README.write_text(
        README_TEXT.format(
            format_version=PLAIN_FORMAT_VERSION,
            version=triec.__version__,
            values=VALUES,
            tokens=vocab.num_tokens,
            eos=list(vocab.eos_token_ids),
            size=size,
            sha256=hashlib.sha256(data).hexdigest(),
            fingerprint=table.tokenizer_fingerprint,
            schema_rows=schema_rows,
            legacy_rows=legacy_rows,
        ),
        encoding="utf-8",
    )
    print(f"wrote {ARTIFACT.relative_to(ROOT)} ({size} bytes) and {README.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
