"""Check an artifact state by state against independent derivations of its masks.

triec's promise is that in every state the allowed tokens equal what an exact
finite-state engine computes for the same values and vocabulary. This module
makes that promise checkable on the user's own artifact and tokenizer:

1. integrity: checksums, format, ranges (``triec.load(verify=True)``), and the
   tokenizer's fingerprint against the one recorded in the artifact;
2. state selection: every state up to a limit, else a seeded sample that always
   holds the start and every state of byte depth <= 2 (the widest masks);
3. per state, the artifact's mask row against another derivation: the
   pyahocorasick reference (plus brute force on small sets), or a peer engine
   driven to the state along a token path the artifact itself provides;
4. decode walks: random allowed tokens from the start until EOS, every step's
   mask compared, each walk ending on a value.

This module loads and checks the artifact, then hands it to its kind's checks: :mod:`~triec.verify.masks` (a value
set), :mod:`~triec.verify.patterns` (a pattern or format), :mod:`~triec.verify.schemas` (a schema or tool registry);
what they report is :mod:`~triec.verify.report`. Pure logic: no printing. docs/verify.md explains what is compared
and why.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from triec.artifact.formats import load
from triec.engines import ENGINES
from triec.errors import ArtifactError, TokenizerError, TriecError
from triec.runtime.ids import IDS_FINGERPRINT
from triec.runtime.kinds import Table, TableKind
from triec.runtime.table import MaskTable
from triec.tokenizer.resolve import resolve_vocabulary
from triec.tokenizer.vocabulary import Vocabulary
from triec.verify.masks import (
    BRUTE_FORCE_BUDGET,
    compare_canonical,
    compare_engine,
    compare_reference,
    compare_reference_sampled,
    verify_masks,
)
from triec.verify.patterns import verify_pattern
from triec.verify.report import (
    DEFAULT_STATES,
    DEFAULT_WALKS,
    MAX_EXAMPLES,
    PROGRESS_EVERY,
    CheckProgress,
    CheckResult,
    Mismatch,
    ProgressFn,
    VerifyReport,
    VerifyRun,
)
from triec.verify.schemas import verify_schema
from triec.verify.states import select_states, state_depths

__all__ = [  # the driver's own names, and those callers have imported from here (their homes are named above)
    "AGAINST",
    "BRUTE_FORCE_BUDGET",
    "DEFAULT_STATES",
    "DEFAULT_WALKS",
    "MAX_EXAMPLES",
    "PROGRESS_EVERY",
    "WRONG_TOKENIZER",
    "CheckProgress",
    "CheckResult",
    "Mismatch",
    "ProgressFn",
    "VerifyReport",
    "compare_canonical",
    "compare_engine",
    "compare_reference",
    "compare_reference_sampled",
    "load_checked",
    "parse_against",
    "select_states",
    "state_depths",
    "verify",
]

AGAINST: tuple[str, ...] = ("reference", *ENGINES)

WRONG_TOKENIZER = (
    "an artifact compiled for one tokenizer and served with another yields plausible but wrong masks: "
    "the token ids point at different bytes, so nothing fails loudly"
)


def load_checked(path: str, tokenizer: str | None) -> tuple[Table | None, Vocabulary | None, VerifyReport]:
    """Load with full checks, resolve the tokenizer, compare fingerprints.

    Without ``tokenizer`` the name recorded in the artifact is used. Returns
    ``(None, None, report)`` when integrity fails. A tokenizer that cannot be
    found at all raises :class:`TokenizerError` (a usage problem, exit 2).
    """
    report = VerifyReport(artifact=str(path))
    if not Path(path).exists():
        raise TriecError(f"{path}: no such artifact file")
    if not Path(path).is_file():
        raise TriecError(f"{path}: not a regular file, expected an artifact")
    try:
        table = load(path, verify=True)
    except ArtifactError as exc:
        report.integrity_problems.append(str(exc))
        return None, None, report
    report.tokenizer = tokenizer or table.tokenizer_name
    if isinstance(table, MaskTable) and table.ids and not tokenizer and table.tokenizer_fingerprint == IDS_FINGERPRINT:
        report.fingerprint = table.tokenizer_fingerprint  # bound to no tokenizer: nothing to resolve
        report.num_values, report.num_states = table.num_values, table.num_states
        report.vocab_size, report.eos_token_ids = table.vocab_size, list(table.eos_token_ids)
        report.integrity_ok = True
        return table, None, report
    report.fingerprint = table.tokenizer_fingerprint
    report.num_values, report.num_states = table.num_values, table.num_states
    report.vocab_size, report.eos_token_ids = table.vocab_size, list(table.eos_token_ids)
    if not report.tokenizer:
        raise TokenizerError(f"{path}: the artifact records no tokenizer name; pass one with -t")
    vocab, problems = resolve_vocabulary(report.tokenizer, table)
    if problems:
        report.integrity_problems.append(
            f"{path}: wrong tokenizer {report.tokenizer!r}: {'; '.join(problems)}. "
            f"{WRONG_TOKENIZER[0].upper()}{WRONG_TOKENIZER[1:]}"
        )
        return None, vocab, report
    report.integrity_ok = True
    return table, vocab, report


def parse_against(raw: Sequence[str]) -> list[str]:
    """``reference``, engine names, comma lists and ``all`` (reference + every engine)."""
    names: list[str] = []
    for chunk in raw:
        for part in chunk.split(","):
            part = part.strip()
            if not part:
                continue
            if part == "all":
                names.extend(AGAINST)
            elif part in AGAINST:
                names.append(part)
            else:
                raise TriecError(f"--against: expected reference, {', '.join(ENGINES)} or all, found {part!r}")
    return list(dict.fromkeys(names)) or ["reference"]


def verify(
    path: str,
    *,
    tokenizer: str | None = None,
    against: Sequence[str] = ("reference",),
    states: int = DEFAULT_STATES,
    seed: int = 0,
    walks: int = DEFAULT_WALKS,
    explicit: Sequence[str] = (),
    max_examples: int = MAX_EXAMPLES,
    progress: ProgressFn | None = None,
) -> VerifyReport:
    """Run every check. Engines named in ``explicit`` must be installed
    (:class:`EngineUnavailable`); others that are missing are reported as skipped.
    ``progress`` hears how far each comparison has come (:class:`CheckProgress`)."""
    t0 = time.perf_counter()
    table, vocab, report = load_checked(path, tokenizer)
    report.seed = seed
    run = VerifyRun(against, explicit, walks, seed, max_examples, states)
    if isinstance(table, MaskTable) and table.ids:  # no tokenizer needed: the items' token trie is the oracle
        from triec.verify.ids import verify_ids

        verify_ids(table, report, against, max_examples)
    elif table is None or vocab is None:
        pass
    elif table.kind is TableKind.TOOL_SCHEMA:
        verify_schema(table, vocab, report, run)
    elif table.kind is TableKind.PATTERN:
        verify_pattern(table, vocab, report, run)
    else:
        assert isinstance(table, MaskTable), f"{path}: a {table.kind} table"  # the kinds an artifact holds
        verify_masks(
            table,
            vocab,
            report,
            against,
            explicit,
            states=states,
            seed=seed,
            walks=walks,
            max_examples=max_examples,
            progress=progress,
        )
    report.seconds = time.perf_counter() - t0
    return report
