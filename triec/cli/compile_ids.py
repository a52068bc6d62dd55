"""``triec compile --ids FILE``: a semantic-ID catalog (one item per line, token ids separated by spaces).

No tokenizer is needed beyond the mask width and the EOS ids: ``--vocab-size`` and ``--eos`` alone (the table
is then bound to no tokenizer, fingerprint ``"none"``), or ``-t TOKENIZER`` (bound to it; ``--vocab-size`` and
``--eos`` override its own). Bad input is one line naming ``FILE:LINE``, exit 2 (:mod:`triec.compiler.ids`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from triec.cli._common import key_value_table, out
from triec.errors import TriecError

if TYPE_CHECKING:
    from triec.runtime.table import MaskTable


def compile_ids_file(
    ids: str,
    output: Path,
    tokenizer: str | None,
    vocab_size: int | None,
    eos: list[int] | None,
    *,
    zstd: bool,
    as_json: bool,
    quiet: bool,
) -> None:
    """Read, check and compile FILE, write the artifact to ``output``, print the summary."""
    from triec.cli._progress import Phases
    from triec.compiler.entry import CompileStats, ids_fields
    from triec.compiler.ids import check_items, ids_table, parse_ids
    from triec.compiler.values import read_bounded

    if tokenizer is None and (vocab_size is None or eos is None):
        raise TriecError("--ids: give the mask width and the EOS ids (--vocab-size N --eos ID), or -t TOKENIZER")
    phases = Phases(show=not (quiet or as_json))
    total0 = time.perf_counter()
    with phases.phase("read", f"reading {ids}"):
        raw, source = read_bounded(ids, "semantic-ID file")
        items = parse_ids(raw, source)
        del raw
    with phases.phase("tokenizer", "loading tokenizer" if tokenizer else "mask width and EOS ids"):
        fields = ids_fields(tokenizer, vocab_size, eos)
    stats = CompileStats()
    with phases.phase("compile", f"compiling {len(items):,} items (token trie)"):
        check_items(items, fields["vocab_size"], fields["eos_token_ids"])
        table, stats.duplicates = ids_table(items, fields)
    with phases.phase("write", f"writing {output}"):
        compressed = zstd or str(output).endswith(".zst")
        size = table.save(output, compress=compressed)
    summary = ids_summary(table, stats.duplicates, phases.seconds, time.perf_counter() - total0)
    summary.update(output=str(output), artifact_bytes=size, compressed=compressed)
    if quiet:
        return
    if as_json:
        out.print_json(json.dumps(summary))
    else:
        print_ids_summary(summary)


def ids_summary(table: MaskTable, duplicates: int, seconds: dict[str, float], total: float) -> dict[str, Any]:
    """What ``--ids`` reports (``--json``'s keys, in their order), less where it was written."""
    counts = table.allowed_offsets[1:].astype("int64") - table.allowed_offsets[:-1]
    return {
        "output": "",
        "artifact_bytes": 0,
        "compressed": False,
        "tokenizer": table.tokenizer_name,
        "tokenizer_fingerprint": table.tokenizer_fingerprint,
        "vocab_size": table.vocab_size,
        "eos_token_ids": list(table.eos_token_ids),
        "tokenization": table.tokenization,
        "values": table.num_values,
        "duplicates_removed": duplicates,
        "value_tokens": int(table.value_lcp.sum()) + table.num_states - 1,
        "states": table.num_states,
        "allowed_pairs": table.num_allowed,
        "layout": "full",
        "max_allowed": int(counts.max()),
        "root_allowed": int(counts[0]),
        "seconds": {k: round(v, 6) for k, v in {**seconds, "total": total}.items()},
    }


def print_ids_summary(s: dict[str, Any]) -> None:
    t = key_value_table(escape(f"triec compile --ids → {s['output']}"), "right")
    dups = f"  ({s['duplicates_removed']:,} duplicates removed)" if s["duplicates_removed"] else ""
    t.add_row("items (K)", f"{s['values']:,}{dups}")
    t.add_row("ids", f"{s['value_tokens']:,}")
    t.add_row("tokenization", "ids (a token trie: one state per token edge)")
    t.add_row("states", f"{s['states']:,}")
    t.add_row(
        "allowed (state, token) pairs",
        f"{s['allowed_pairs']:,}  (root {s['root_allowed']:,}, max {s['max_allowed']:,})",
    )
    name = s["tokenizer"] or "no tokenizer"
    t.add_row("tokenizer", escape(f"{name}  ({s['vocab_size']:,} wide, EOS {s['eos_token_ids']})"))
    t.add_row("artifact", f"{s['artifact_bytes']:,} bytes" + (" (zstd)" if s["compressed"] else ""))
    t.add_row("time (ms)", "  ".join(f"{k} {1000 * v:.1f}" for k, v in s["seconds"].items()))
    out.print(t)
