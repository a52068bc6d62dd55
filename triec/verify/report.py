"""What ``triec verify`` reports: a mismatch, one comparison's result, the whole report, and progress as it runs.

Shared by every table kind's checks (:mod:`~triec.verify.masks`, :mod:`~triec.verify.patterns`,
:mod:`~triec.verify.schemas`) and the driver (:mod:`~triec.verify.tables`), so that none of them imports another
for its types. Pure data: no printing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from triec.verify.paths import escape_bytes

if TYPE_CHECKING:
    from triec.tokenizer.vocabulary import Vocabulary

DEFAULT_STATES = 50_000
DEFAULT_WALKS = 100
MAX_EXAMPLES = 10
PROGRESS_EVERY = 256  # states between progress reports (a report costs a call; a state, microseconds)


@dataclass
class Mismatch:
    """One state where two derivations disagree."""

    state: int
    prefix: str  # escaped
    problem: str  # what disagreed, in words
    only_triec: list[dict[str, Any]] = field(default_factory=list)  # [{"id": 123, "bytes": "..."}]
    only_other: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class CheckResult:
    """The comparison of the artifact with one derivation (reference or engine)."""

    against: str
    status: str = "ok"  # ok | mismatch | skipped | error
    version: str | None = None
    reason: str = ""  # why skipped, or the engine's error
    states_checked: int = 0
    walks: int = 0
    walk_steps: int = 0
    mismatches: int = 0
    examples: list[Mismatch] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    def add(self, mismatch: Mismatch, max_examples: int = MAX_EXAMPLES) -> None:
        self.mismatches += 1
        self.status = "mismatch"
        if len(self.examples) < max_examples:
            self.examples.append(mismatch)


@dataclass
class VerifyReport:
    """Everything ``triec verify`` found; ``ok`` decides the exit code."""

    artifact: str
    tokenizer: str = ""
    fingerprint: str = ""
    num_values: int = 0
    num_states: int = 0
    vocab_size: int = 0
    eos_token_ids: list[int] = field(default_factory=list)
    integrity_ok: bool = False
    integrity_problems: list[str] = field(default_factory=list)
    states_selected: int = 0
    sampled: bool = False
    seed: int = 0
    unreachable_states: int = 0
    tail_states: int = 0  # the tail layout: states whose rows are served from the values (version 4)
    values_sampled: int = 0  # past REFERENCE_VALUES: the values the reference ran on (0: every value)
    warnings: list[str] = field(default_factory=list)  # what holds but may not be meant (an EOS id that is text)
    schema: dict[str, Any] | None = None  # a schema artifact: engine, shape, slots, enums left in the engine
    pattern: dict[str, Any] | None = None  # a pattern artifact: regex, format, states, accepting states, DFA edges
    checks: list[CheckResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Integrity held, nothing mismatched, and at least one comparison ran."""
        ran = [c for c in self.checks if c.status != "skipped"]
        return self.integrity_ok and bool(ran) and all(c.status == "ok" for c in ran)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["ok"] = self.ok
        return d


@dataclass(frozen=True)
class CheckProgress:
    """How far one comparison has come: what ``verify(progress=...)`` is told as it runs.

    ``phase`` is ``preparing`` (the reference's own derivation), ``loading`` (the
    engine over the vocabulary), ``compiling`` (the engine's grammar), ``states``, ``walks``, then ``done``, or ``skipped`` / ``error``
    when the engine could not finish.
    """

    against: str
    phase: str
    states: int
    states_total: int
    walks: int = 0
    walks_total: int = 0


ProgressFn = Callable[[CheckProgress], None]


@dataclass(frozen=True)
class VerifyRun:
    """What one ``triec verify`` asks of every table kind's checks: the comparisons (``against``; an engine named in
    ``explicit`` must be installed), the walks and their seed, the states to compare, the examples kept."""

    against: Sequence[str]
    explicit: Sequence[str]
    walks: int
    seed: int
    max_examples: int
    states: int


def token_list(ids: Sequence[int], vocab: Vocabulary, limit: int = 8) -> list[dict[str, Any]]:
    """The first ``limit`` token ids of a mismatch, each with its bytes spelled for people (``<eos>``, ``<padding>``)."""
    out = []
    for t in list(ids)[:limit]:
        b = vocab.token_bytes[t] if 0 <= t < vocab.num_tokens else b""
        label = "<eos>" if t in vocab.eos_token_ids else ("<padding>" if t >= vocab.num_tokens else escape_bytes(b))
        out.append({"id": int(t), "bytes": label})
    return out
