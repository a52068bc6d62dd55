#!/usr/bin/env python3
"""Regenerate the golden artifact fixtures/golden/tiny-gpt2.triec and its README.

The golden file pins the artifact's exact bytes: tests/test_artifact.py compiles
the same values with the same tokenizer and requires a byte-for-byte match. Run
this script only when the file format or the triec version changes on purpose:

    .venv/bin/python scripts/make_golden.py

and commit the new artifact and README together with the change that caused them.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import triec
from triec.artifact.container import PLAIN_FORMAT_VERSION

ROOT = Path(__file__).resolve().parent.parent
GOLDEN_DIR = ROOT / "fixtures" / "golden"
ARTIFACT = GOLDEN_DIR / "tiny-gpt2.triec"
README = GOLDEN_DIR / "README.md"

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

It was made by `scripts/make_golden.py`. `tests/test_artifact.py` compiles the same
values again and requires the same bytes, byte for byte, and requires the loaded
file to answer `allowed()` identically for every state.

The file changes only when the artifact format or the triec version (recorded in
its header) changes. When that happens on purpose, regenerate it deliberately with

    .venv/bin/python scripts/make_golden.py

review the difference, and commit the new artifact and this README with the change.
A golden test failing without such a change means the writer stopped being
deterministic or the format changed by accident: fix the code, not the fixture.
"""


def main() -> int:
    table = triec.compile(VALUES, TOKENIZER)
    GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
    size = table.save(ARTIFACT, compress=False)
    data = ARTIFACT.read_bytes()
    vocab = triec.Vocabulary.load(TOKENIZER)
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
        ),
        encoding="utf-8",
    )
    print(f"wrote {ARTIFACT.relative_to(ROOT)} ({size} bytes) and {README.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
