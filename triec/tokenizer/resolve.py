"""The tokenizer a table was compiled for, found again: decoded as the table records, and every way it differs.

A table records its tokenizer's name and fingerprint; serving a schema table's
engine and ``triec verify`` need the decoded vocabulary back, and must refuse a
tokenizer that only looks like the right one (docs/verify.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from triec.tokenizer.source import locate
from triec.tokenizer.token_bytes import decode_token_bytes
from triec.tokenizer.vocabulary import Vocabulary

if TYPE_CHECKING:
    from triec.runtime.kinds import Table


def resolve_vocabulary(spec: str, table: Table) -> tuple[Vocabulary, list[str]]:
    """The tokenizer ``spec`` decoded with the artifact's EOS ids and padded to its mask width,
    plus every way it does not fit the artifact (empty when it is the one compiled for).

    A tokenizer that cannot be found or read raises :class:`TokenizerError` (a
    usage problem); one that is found but differs is a failed check: fingerprint,
    width (more token ids than the mask holds) and EOS ids that are not its token
    ids are each named, with both sides' values.
    """
    src = locate(spec)
    token_bytes, family = decode_token_bytes(src.tokenizer_json, src.name, ())  # Vocabulary blanks EOS ids itself,
    # keeping the text of those that are text tokens (eos_texts: verify warns about values that hold it)
    n, width = len(token_bytes), table.vocab_size
    vocab = Vocabulary(
        token_bytes, eos_token_ids=table.eos_token_ids, vocab_size=max(n, width), name=src.name, family=family
    ).with_source(src)  # its encoder, for canonical tables
    if vocab.fingerprint == table.tokenizer_fingerprint:
        return vocab, []
    problems = [
        f"the artifact was compiled for tokenizer {table.tokenizer_fingerprint} ({table.tokenizer_name or 'unnamed'}, "
        f"masks {width:,} wide), this tokenizer is {vocab.fingerprint} ({n:,} token ids, "
        f"with the artifact's EOS ids {list(table.eos_token_ids)})"
    ]
    recorded = getattr(table, "build_options", {}).get("tokenizer_tokens")  # a schema table records none
    if n > width:
        problems.append(f"widths differ: {n:,} token ids do not fit the artifact's {width:,}-wide masks")
    elif isinstance(recorded, int) and not isinstance(recorded, bool) and recorded != n:
        problems.append(f"widths differ: the artifact's tokenizer had {recorded:,} token ids, this one has {n:,}")
    foreign = [e for e in table.eos_token_ids if e >= n]
    if foreign:
        problems.append(f"EOS ids {foreign} are not token ids of this tokenizer (0..{n - 1:,})")
    return vocab, problems
