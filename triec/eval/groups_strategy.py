"""``triec eval --strategy groups[:FILE]``: the model picks a group, then a value of it, in one grouped table.

Entry points (what ``triec/eval/strategies.py`` calls, lazily):

* ``GroupsStrategy(runner, grouping=None, *, descriptions=None, separator=" > ", examples=4, seed=0)``: one per
  run. ``runner`` is the transformers :class:`~triec.eval.run.Evaluator` (its tokenizer, greedy loop, vocabulary);
  ``grouping`` a groups file (lines ``value<TAB>group``) or None (k-means, G = sqrt(K), over word TF-IDF vectors of
  each value's name and description); ``descriptions`` value -> text shown in the listings.
* ``GroupsStrategy.answer(item) -> GroupsAnswer``: one question. ``decode_groups(item, table, runner, ...)`` is the
  same for a grouped table already compiled (:func:`triec.compiler.groups.compile_grouped`).

Round 1: the system prompt lists the G group labels, each with a few member names; the model writes ``label + SEP``
under a table of those G strings alone (so no token crosses into a value it has not been shown). Round 2: the system
prompt lists that group's members with their descriptions; the assistant's reply starts with the round-1 tokens and
decoding continues in the grouped table from the state after ``label + SEP``
(:func:`triec.runtime.groups.group_state`) to EOS. The answer is the value (:func:`~triec.runtime.groups.split_answer`).
Validity is 100% by construction: both rounds are exact, and the second can end only on a value of the chosen group.

What it costs against the flat trie (``GroupsAnswer``): ``tokens`` the model writes (the label and the separator
on top of the value), ``steps`` (greedy picks, EOS included), and a second prefill (``prompt_tokens`` per round);
what it saves is the prompt: G labels, then K/G descriptions, instead of K descriptions.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from triec.compiler.groups import DEFAULT_SEPARATOR
from triec.errors import EvalError
from triec.eval.data import Item

ROUND1 = (
    "The available functions are sorted into groups. The groups, each with some of its functions:\n{groups}\n\n"
    "Reply with the name of the group that holds the function answering the user's request, then '{sep}'."
)
ROUND2 = (
    "You can call exactly one of these functions (group {label}):\n{functions}\n\n"
    "Reply with the name of the function that answers the user's request, and nothing else."
)


@dataclass
class GroupsAnswer:
    """One question answered group-then-value (the fields a strategy's summary reads, and the two rounds')."""

    answer: str | None
    """The value (None when decoding ran out of tokens)."""
    group: str | None
    valid: bool
    output: str
    """What the model wrote, both rounds: ``label + SEP + value``."""
    tokens: int
    """Tokens the model wrote (EOS excluded), both rounds."""
    steps: int
    """Greedy picks (each a forward pass's logits), EOS included."""
    prompt_tokens: list[int]
    """Each round's prefill length."""
    seconds: float
    """Both rounds, prefills included."""
    rounds: list[dict[str, Any]] = field(default_factory=list)


def descriptions_of(items: Sequence[Item]) -> dict[str, str]:
    """name -> description of the functions the items carry (``extra["functions"]``, as ``triec bfcl`` writes)."""
    out: dict[str, str] = {}
    for item in items:
        for f in item.extra.get("functions") or []:
            if isinstance(f, dict) and isinstance(f.get("name"), str):
                out.setdefault(f["name"], str(f.get("description") or "").strip())
    return out


class GroupsStrategy:
    """Grouped tables per candidate set (compiled once each), and :meth:`answer` for one question."""

    def __init__(
        self,
        runner: Any,
        grouping: str | os.PathLike[str] | None = None,
        *,
        descriptions: Mapping[str, str] | None = None,
        separator: str = DEFAULT_SEPARATOR,
        examples: int = 4,
        seed: int = 0,
    ) -> None:
        for need in ("tokenizer", "greedy", "vocab", "width"):
            if not hasattr(runner, need):
                raise EvalError("--strategy groups decodes with the transformers engine (--engine transformers)")
        self.runner, self.separator, self.examples, self.seed = runner, separator, examples, seed
        self.descriptions = dict(descriptions or {})
        self.file_groups: dict[str, str] | None = None
        if grouping is not None:
            from triec.compiler.groups import groups_from_file

            self.file_groups = groups_from_file(grouping, separator)
        self._tables: dict[tuple[str, ...], Any] = {}
        self._labels: dict[int, Any] = {}

    def grouping(self, values: tuple[str, ...]) -> dict[str, str]:
        """value -> label for this candidate set: the file's, else k-means over names and descriptions."""
        if self.file_groups is not None:
            missing = [v for v in values if v not in self.file_groups]
            if missing:
                raise EvalError(f"--strategy groups: {len(missing):,} candidate(s) have no group, e.g. {missing[0]!r}")
            return {v: self.file_groups[v] for v in values}
        from triec.compiler.groups import groups_by_kmeans, term_vectors

        vectors = term_vectors([f"{v} {self.descriptions.get(v, '')}" for v in values])
        return groups_by_kmeans(values, vectors, None, self.seed, self.separator)

    def table(self, values: tuple[str, ...]) -> Any:
        """The grouped table of a candidate set (raw values, byte trie), compiled once."""
        if values not in self._tables:
            from triec.compiler.groups import compile_grouped

            self._tables[values] = compile_grouped(values, self.grouping(values), self.runner.vocab, self.separator)
        return self._tables[values]

    def answer(self, item: Item) -> GroupsAnswer:
        table = self.table(self.runner.item_values(item))
        return decode_groups(
            item, table, self.runner, descriptions=self.descriptions, examples=self.examples, labels=self._labels
        )


def decode_groups(
    item: Item,
    table: Any,
    runner: Any,
    *,
    descriptions: Mapping[str, str] | None = None,
    examples: int = 4,
    max_new_tokens: int | None = None,
    labels: dict[int, Any] | None = None,
) -> GroupsAnswer:
    """One question group-then-value in a grouped ``table`` (round 1, then round 2: the module's docstring).

    ``runner``: the transformers ``Evaluator``; ``labels`` a cache (id of table -> its labels table) across calls.
    """
    from triec.runtime.groups import group_members, group_state, separator

    sep = separator(table)
    if sep is None:
        raise EvalError("decode_groups: the table is not grouped (build_options.groups)")
    if not table.encoding.plain or getattr(table, "canonical", False):
        raise EvalError("decode_groups: a grouped table of raw values and any tokenization (a byte trie) decodes here")
    members = group_members(table)
    descriptions = descriptions or {}
    limit = max_new_tokens or runner.config.max_new_tokens
    t0 = time.perf_counter()
    listing = "\n".join(
        f"- {label}: {', '.join(vals[:examples])}{', ...' if len(vals) > examples else ''}"
        for label, vals in members.items()
    )
    prompt1 = _prompt(runner, item, ROUND1.format(groups=listing, sep=sep))
    label_table = _label_table(table, members, sep, runner.vocab, labels)
    ids1, steps1, s1 = _round(runner, prompt1, label_table, 0, limit)
    written = _bytes(runner, ids1)
    label = next((lb for lb in members if written == (lb + sep).encode()), None)
    rounds: list[dict[str, Any]] = [
        {"prompt_tokens": len(prompt1), "tokens": len(ids1), "steps": steps1, "seconds": s1}
    ]
    if label is None:  # ran out of tokens before the separator
        return GroupsAnswer(None, None, False, runner.text(ids1), len(ids1), steps1, [len(prompt1)], s1, rounds)
    functions = "\n".join(f"- {v}: {descriptions[v]}" if descriptions.get(v) else f"- {v}" for v in members[label])
    prompt2 = _prompt(runner, item, ROUND2.format(label=label, functions=functions)) + ids1
    ids2, steps2, s2 = _round(runner, prompt2, table, group_state(table, label), limit, finish=True)
    rounds.append({"prompt_tokens": len(prompt2), "tokens": len(ids2), "steps": steps2, "seconds": s2})
    output = runner.text(ids1 + ids2)
    text = (written + _bytes(runner, ids2)).decode("utf-8", "replace")
    value = text[len(label) + len(sep) :]
    valid = steps2 > len(ids2) and value in members[label]  # ended with EOS on a value of the group
    return GroupsAnswer(
        value if valid else None,
        label,
        valid,
        output,
        len(ids1) + len(ids2),
        steps1 + steps2,
        [len(prompt1), len(prompt2)],
        time.perf_counter() - t0,
        rounds,
    )


def _prompt(runner: Any, item: Item, system: str) -> list[int]:
    """The chat prompt: ``system``, then the item's turns but its own system messages (they list the flat set)."""
    turns = [m for m in (item.messages or []) if m["role"] != "system"]
    if not turns:
        turns = [{"role": "user", "content": item.prompt or ""}]
    text = runner.tokenizer.apply_chat_template(
        [{"role": "system", "content": system}, *turns], add_generation_prompt=True, tokenize=False
    )
    return list(runner.tokenizer.encode(text, add_special_tokens=False))


def _label_table(table: Any, members: Mapping[str, Any], sep: str, vocab: Any, cache: dict[int, Any] | None) -> Any:
    """The G strings ``label + SEP``: round 1's table (no string is a prefix of another: no label holds SEP)."""
    from triec.compiler.entry import compile as compile_values

    key = id(table)
    if cache is not None and key in cache and cache[key][0] is table:
        return cache[key][1]
    found = compile_values([label + sep for label in members], vocab)
    if cache is not None:
        cache[key] = (table, found)
    return found


def _round(runner: Any, prompt: list[int], table: Any, state: int, limit: int, finish: bool = False) -> Any:
    """Greedy tokens under ``table`` from ``state``: to EOS (``finish``) or until a string of it is complete (round
    1: the label and separator, whose only continuation would be EOS). Returns (ids, steps, seconds)."""
    from triec.eval.decode import TriecConstraint
    from triec.runtime.matcher import TableMatcher

    matcher = TableMatcher(table, state)
    constraint = TriecConstraint(matcher, runner.width)
    settled = None if finish else (lambda ids: matcher.value is not None)
    got = runner.greedy.decode(runner.greedy.prefill(prompt), constraint, limit, settled=settled)
    return got.ids, len(got.ids) + int(got.finished), got.seconds


def _bytes(runner: Any, ids: Sequence[int]) -> bytes:
    tb = runner.vocab.token_bytes
    return b"".join(tb[t] for t in ids if t < len(tb))


def groups_strategy(runner: Any, item: Item, strategy: Any) -> Any:
    """One item's outcome for ``triec eval --strategy groups[:FILE]`` (what :mod:`triec.eval.strategies` calls).

    ``runner`` is the :class:`~triec.eval.strategies.StrategyRunner`: its engine (``modes``), the data's
    descriptions, its ``outcome`` class, and ``groups_runs``, where one :class:`GroupsStrategy` per FILE is kept
    (its grouped tables compiled once per candidate set)."""
    run = runner.groups_runs.get(strategy.file)
    if run is None:
        run = runner.groups_runs[strategy.file] = GroupsStrategy(
            runner.modes, strategy.file, descriptions=runner.descriptions
        )
    got = run.answer(item)
    return runner.outcome(
        item.id,
        strategy.label,
        got.output,
        got.answer,
        got.valid,
        got.valid and got.answer == item.gold,
        got.tokens,
        got.seconds,
    )
