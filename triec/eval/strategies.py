"""``triec eval --strategy``: how the model chooses among many values (issue 52; the paper's appendices I and J).

* ``full``: constrained to every candidate, the item's own prompt (the ``trie`` mode under another name);
* ``shortlist:K``: the retriever's top K candidates (the query: the user's last message) listed in the system
  message with their descriptions, decoding constrained to those K (a restricted view; no escape, no widening:
  a gold value the retriever missed is a valid, wrong answer, which is what a shortlist alone costs);
  ``shortlist:K:names`` lists the names alone, ``shortlist:K:none`` nothing (the constraint alone narrows);
* ``cascade:K``: the same with K, then 2K, each listing and allowing the escape value (``none_of_these``: "none
  of the functions above fits"); choosing it re-prompts at the next level; the last level is the full strategy's
  prompt and set, without the escape. Tokens and seconds count every level and the retrieval (``cascade:K:names``:
  the names alone);
* ``groups[:FILE]``: group, then value (``triec/eval/groups_strategy.py``): the FILE's groups, else k-means.

The parent table of a cascade is compiled once per candidate set with the escape; every level is a view of it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from triec.errors import EvalError
from triec.eval.data import Item

RETRIEVERS = ("bm25", "embed")
"""``--retriever``: bm25 (bm25s over names and descriptions) or embed (the served model's input embeddings)."""
RECALL_AT = (5, 20, 50)
LISTINGS = ("descriptions", "names", "none")
"""What a shortlist's system message lists (``shortlist:K[:names|:none]``): each name with its description, the
names alone (about a third of the prompt tokens on BFCL), or nothing (the item's own prompt, as the full strategy's
when its listing does not fit: the shortlist then only narrows the constraint). A cascade lists, so its escape can
be chosen: descriptions or names."""
ESCAPE_TEXT = "none of the functions above fits"
SYSTEM = (
    "You can call exactly one of these functions:\n{functions}\n\n"
    "Reply with the name of the function that answers the user's request, and nothing else."
)
"""The system message a shortlist level lists its values in (the wording of ``triec bfcl``'s prompts)."""


@dataclass(frozen=True)
class Strategy:
    kind: str  # full, shortlist, cascade or groups
    k: int | None = None
    file: str | None = None
    listing: str = "descriptions"  # what a shortlist's prompt shows: LISTINGS (shortlist:20:names, shortlist:20:none)

    @property
    def label(self) -> str:
        """The strategy as written: the mode name its outcomes carry (``cascade:20``, ``shortlist:20:names``)."""
        if self.k is not None:
            return f"{self.kind}:{self.k}" + ("" if self.listing == "descriptions" else f":{self.listing}")
        return f"{self.kind}:{self.file}" if self.file else self.kind


CHOICES = "full, shortlist:K[:names|:none], cascade:K[:names], groups[:FILE]"


def parse_strategies(spec: str | Sequence[str]) -> tuple[Strategy, ...]:
    """``full,shortlist:20,cascade:20,groups:FILE`` (or a sequence of those) as strategies; errors name the part."""
    parts = [p.strip() for p in (spec.split(",") if isinstance(spec, str) else spec) if p.strip()]
    if not parts:
        raise EvalError(f"--strategy names no strategy; choose from {CHOICES}")
    found: list[Strategy] = []
    for part in parts:
        kind, _, arg = part.partition(":")
        if kind == "full" and not arg:
            found.append(Strategy("full"))
        elif kind in ("shortlist", "cascade"):
            size, _, how = arg.partition(":")
            if not size.isdigit() or int(size) < 1:
                raise EvalError(f"--strategy {part!r}: {kind} needs a size of at least 1, e.g. {kind}:20")
            how = how or "descriptions"
            allowed = LISTINGS if kind == "shortlist" else LISTINGS[:2]  # a cascade's escape must be listed
            if how not in allowed:
                raise EvalError(
                    f"--strategy {part!r}: after the size, {' or '.join(':' + a for a in allowed[1:])} "
                    "(what the prompt lists; descriptions when left out)"
                )
            found.append(Strategy(kind, int(size), listing=how))
        elif kind == "groups":
            found.append(Strategy("groups", file=arg or None))
        else:
            raise EvalError(f"--strategy {part!r}: choose from {CHOICES}")
    labels = [s.label for s in found]
    if len(set(labels)) != len(labels):
        raise EvalError(f"--strategy {','.join(parts)!r} names a strategy twice")
    return tuple(found)


def listing(names: Sequence[str], descriptions: dict[str, str], escape: str | None = None) -> str:
    """The system message listing ``names`` (with their descriptions), and the escape line when there is one."""
    lines = [f"- {n}: {descriptions[n].strip()}" if descriptions.get(n, "").strip() else f"- {n}" for n in names]
    if escape is not None:
        lines.append(f"- {escape}: {ESCAPE_TEXT}")
    return SYSTEM.format(functions="\n".join(lines))


EMPTY_ITEM = Item(id="", gold="", messages=[{"role": "user", "content": ""}])
"""A conversation of one empty user turn: what a listing costs in prompt tokens is measured on it."""


def with_listing(item: Item, system: str) -> Item:
    """The item with its system message replaced by ``system`` (added first when it has none; a plain prompt gets
    it as a first paragraph); the rest of the conversation, worked examples included, stays."""
    import dataclasses

    if item.messages is None:
        return dataclasses.replace(item, prompt=f"{system}\n\n{item.prompt or ''}")
    rest = item.messages[1:] if item.messages and item.messages[0]["role"] == "system" else item.messages
    return dataclasses.replace(item, messages=[{"role": "system", "content": system}, *rest])


def query_of(item: Item) -> str:
    """What the retriever reads: the user's last message (a plain prompt as a whole)."""
    if item.messages is None:
        return item.prompt or ""
    return next((m["content"] for m in reversed(item.messages) if m["role"] == "user"), item.messages[-1]["content"])


def descriptions_of(items: Sequence[Item]) -> dict[str, str]:
    """Each value's description from the data: items' ``functions`` (BFCL's documents) and ``descriptions`` maps."""
    found: dict[str, str] = {}
    for item in items:
        given = item.extra.get("descriptions")
        if isinstance(given, dict):
            for name, text in given.items():
                if isinstance(name, str) and isinstance(text, str):
                    found.setdefault(name, text)
        for fn in item.extra.get("functions") or []:
            if isinstance(fn, dict) and isinstance(fn.get("name"), str):
                found.setdefault(fn["name"], str(fn.get("description") or ""))
    return found


def check_available(strategies: Sequence[Strategy]) -> None:
    """Refuse, before any model loads, what would fail later: a groups FILE that cannot be read or parsed."""
    for strategy in strategies:
        if strategy.kind == "groups" and strategy.file is not None:
            from triec.compiler.groups import groups_from_file
            from triec.errors import ValuesError

            try:
                groups_from_file(strategy.file)
            except ValuesError as exc:
                raise EvalError(f"--strategy {strategy.label}: {exc}") from None


def groups_strategy(runner: Any, item: Item, strategy: Strategy) -> Any:
    """The groups strategy's outcome for one item (:func:`triec.eval.groups_strategy.groups_strategy`): one
    ``runner.outcome`` whose ``mode`` is ``strategy.label``, decoded by the engine's ``ModeRunner``."""
    from triec.eval import groups_strategy as groups

    outcome: Any = groups.groups_strategy(runner, item, strategy)
    return outcome


class StrategyRunner:
    """The strategies of one evaluation on any engine's :class:`~triec.eval.run.ModeRunner` (its prompts, its
    greedy decode, its tables)."""

    def __init__(self, modes: Any, strategies: Sequence[Strategy], retriever: str, outcome: Any) -> None:
        """``outcome``: the class of one answer (``triec.eval.run.Outcome``, passed in: run imports this module)."""
        if retriever not in RETRIEVERS:
            raise EvalError(f"--retriever {retriever!r}: choose from {', '.join(RETRIEVERS)}")
        self.modes, self.strategies, self.retriever, self.outcome = modes, tuple(strategies), retriever, outcome
        self.descriptions: dict[str, str] = {}
        # --strategy-tables: the byte trie (every spelling of a value: "trie") or one spelling a value ("canonical")
        self.tables: str = str(getattr(getattr(modes, "config", None), "strategy_tables", "trie"))
        self._full_listing: dict[tuple[str, ...], tuple[str, str | None]] = {}
        self.groups_runs: dict[str | None, Any] = {}  # --strategy groups[:FILE]: one GroupsStrategy per FILE
        self._retrievers: dict[tuple[str, tuple[str, ...]], Any] = {}
        model = getattr(modes, "model", None)  # embed: a transformers model's input embeddings (not mlx's, llama.cpp's)
        embeds = callable(getattr(model, "get_input_embeddings", None)) and hasattr(modes, "tokenizer")
        self.available = ("bm25", "embed") if embeds else ("bm25",)
        if retriever not in self.available:
            raise EvalError(f"--retriever {retriever} needs --engine transformers (the model's input embeddings)")

    def needs_retrieval(self) -> bool:
        return any(s.kind in ("shortlist", "cascade") for s in self.strategies)

    def retrieve(self, name: str, candidates: tuple[str, ...]) -> Any:
        """The retriever ``name`` over ``candidates`` (built once per candidate set)."""
        from triec import shortlist

        key = (name, candidates)
        if key not in self._retrievers:
            described = [self.descriptions.get(c, "") for c in candidates]
            if name == "bm25":
                self._retrievers[key] = shortlist.BM25(candidates, described)
            else:
                encode = shortlist.model_encoder(self.modes.model, self.modes.tokenizer)
                self._retrievers[key] = shortlist.Embedding(candidates, described, encode=encode)
        return self._retrievers[key]

    def run(self, item: Item) -> list[Any]:
        candidates = self.modes.item_values(item)
        ranks: dict[str, int] = {}
        ranked: list[str] = []
        spent = 0.0
        if self.needs_retrieval():
            query = query_of(item)
            for name in self.available:
                retriever = self.retrieve(name, candidates)
                t0 = time.perf_counter()
                order = retriever.rank(query)
                if name == self.retriever:
                    ranked, spent = order, time.perf_counter() - t0
                ranks[name] = order.index(item.gold) + 1
        out = []
        for strategy in self.strategies:
            if strategy.kind == "groups":
                out.append(groups_strategy(self, item, strategy))
                continue
            if strategy.kind == "full":
                outcome = self.full(item, candidates, strategy.label)
            elif strategy.kind == "shortlist":
                outcome = self.shortlist(item, candidates, ranked, strategy)
            else:
                outcome = self.cascade(item, candidates, ranked, strategy)
            if strategy.kind != "full":
                outcome.seconds += spent
                outcome.retrieval_ranks = dict(ranks)
            out.append(outcome)
        return out

    def listed(self, item: Item, names: Sequence[str], strategy: Strategy, escape: str | None = None) -> Item:
        """``item`` with ``names`` listed as ``strategy.listing`` says (:data:`LISTINGS`): the listing's prefill is
        all a shortlist costs over the full set's unlisted prompt (retrieval and the view take under a millisecond)."""
        if strategy.listing == "none":
            return item
        shown = self.descriptions if strategy.listing == "descriptions" else {}
        return with_listing(item, listing(names, shown, escape))

    # -- decoding ----------------------------------------------------------------------------------------------
    def decode_on(self, item: Item, table: Any, values: tuple[str, ...]) -> Any:
        return self.modes.decode_on(item, table, values)

    def _outcome(self, item: Item, label: str, values: tuple[str, ...], got: Any) -> Any:
        text = self.modes.text(got.ids)
        valid = got.finished and text in values
        return self.outcome(item.id, label, text, text, valid, valid and text == item.gold, len(got.ids), got.seconds)

    def full_prompt(self, item: Item, candidates: tuple[str, ...]) -> tuple[Item, str]:
        """The full set's prompt: every candidate listed with its description when that fits ``--list-budget``
        prompt tokens, else their names when those fit, else the item's own prompt (the constraint alone: at
        K = 1,853 even the names take about 15,000 tokens). Returns the prompt and which listing it holds."""
        key = candidates
        if key not in self._full_listing:
            budget = int(getattr(getattr(self.modes, "config", None), "list_budget", 2_000))
            self._full_listing[key] = ("none", None)
            for kind, text in (
                ("descriptions", listing(candidates, self.descriptions)),
                ("names", listing(candidates, {})),
            ):
                # the listing's own cost in tokens, measured on an item-free prompt (the same for every item)
                if len(self.modes.prompt_ids(with_listing(EMPTY_ITEM, text), "trie")) <= budget:
                    self._full_listing[key] = (kind, text)
                    break
        kind, chosen = self._full_listing[key]
        return (item if chosen is None else with_listing(item, chosen)), kind

    def full(self, item: Item, candidates: tuple[str, ...], label: str) -> Any:
        prompt, kind = self.full_prompt(item, candidates)
        ids = tuple(self.modes.prompt_ids(prompt, "trie"))
        got = self.modes.decode(ids, self.tables, candidates, "triec", self.modes.limit("trie"))
        outcome = self._outcome(item, label, candidates, got)
        outcome.listed = kind
        return outcome

    def shortlist(self, item: Item, candidates: tuple[str, ...], ranked: list[str], strategy: Strategy) -> Any:
        from triec.shortlist import compacted

        top = tuple(ranked[: strategy.k])
        view = self.modes.table(self.tables, candidates).restrict(top)
        prompt = self.listed(item, top, strategy)
        return self._outcome(item, strategy.label, top, self.decode_on(prompt, compacted(view), top))

    def cascade(self, item: Item, candidates: tuple[str, ...], ranked: list[str], strategy: Strategy) -> Any:
        from triec import shortlist

        escape = shortlist.ESCAPE
        if escape in candidates:
            raise EvalError(f"item {item.id}: a candidate is the escape value {escape!r}; rename it")
        table = self.modes.table(self.tables, (*candidates, escape))
        assert strategy.k is not None
        cascade = shortlist.Cascade(table, ranked, min(strategy.k, len(candidates)))
        tokens, seconds = 0, 0.0

        def decode(view: Any, listed: list[str]) -> str | None:
            nonlocal tokens, seconds
            last = view is shortlist.full_view(table, escape)
            allowed = candidates if last else (*listed, escape)
            prompt = self.full_prompt(item, candidates)[0] if last else self.listed(item, listed, strategy, escape)
            got = self.decode_on(prompt, shortlist.compacted(view), tuple(allowed))
            tokens, seconds = tokens + len(got.ids), seconds + got.seconds
            text: str = self.modes.text(got.ids)
            return text if got.finished and text in allowed else None  # None: invalid, the cascade stops

        result = shortlist.run(cascade, decode)
        answer = result.answer
        valid = answer is not None and answer in candidates
        return self.outcome(
            item.id,
            strategy.label,
            " | ".join(a if a is not None else "(invalid)" for a in result.answers),
            answer,
            valid,
            valid and answer == item.gold,
            tokens,
            seconds,
            level=result.level,
            level_widths=list(cascade.levels),
        )


def recall(ranks: Sequence[int], at: Sequence[int] = RECALL_AT) -> dict[str, float]:
    """Recall@k per k: the share of items whose gold value the retriever put in its top k (rank 1-based)."""
    n = len(ranks) or 1
    return {f"recall_at_{k}": round(sum(0 < r <= k for r in ranks) / n, 4) for k in at}


def reached(levels: Sequence[tuple[int, list[int]]]) -> dict[str, int]:
    """How many items a cascade answered at each level (``k=20``, ``k=40``, ``full``)."""
    count: dict[tuple[bool, int], int] = {}  # (last level?, width): the levels in order, the full set last
    for level, widths in levels:
        key = (level == len(widths) - 1, widths[level])
        count[key] = count.get(key, 0) + 1
    out: dict[str, int] = {}
    for last, width in sorted(count):  # the full level of sets of different sizes: one "full"
        name = "full" if last else f"k={width}"
        out[name] = out.get(name, 0) + count[last, width]
    return out
