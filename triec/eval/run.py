"""``triec eval``: does constraining help this model on this set? Modes side by side, per question.

Modes (each a way to get one value out of the model for the same question):

* ``free``: the model writes what it likes; valid when the reply, stripped of
  surrounding whitespace, is one of the values. Decoding stops as soon as the
  text can no longer become one (``free_early_stop``): the verdict is settled,
  and a chatty model would otherwise spend ``max_new_tokens`` on every item;
* ``trie``: the same prompt, decoding constrained to the values from the first
  token (triec's table), then EOS;
* ``think``: think-then-answer: the prompt asks for reasoning first, decoding
  is free until the trigger (``Answer:``), then constrained to a space and a
  value, then EOS (:class:`triec.Triggered`). After ``think_budget`` free
  tokens the trigger is written for the model (the same for every engine).

With ``compare=True`` each constrained mode is decoded a second time with
xgrammar's matcher in the same loop, and ``identical_to_xgrammar`` says whether
the token ids are equal: the output-equivalence check of the paper
(Proposition 1), item by item.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triec.errors import EvalError
from triec.eval.data import Item

MODES = ("free", "trie", "think", "canonical", "rank")
CONSTRAINED = ("trie", "think", "canonical")
"""``canonical``: the trie mode's prompt and set, each value allowed only as its encoder tokenization
(``tokenization="canonical"``); its outputs are compared with the trie mode's (``identical_to_trie``).
``rank``: the trie mode's prompt and table, the ``top_k`` most probable values (:func:`triec.rank`: exact
best-first search, or beam search of ``beams`` beams); its answer is the first, and Recall@1, Recall@k and MRR
(over the top k: 0 where the gold value is not among them) say where the gold value ranks."""
DEFAULT_TRIGGER = "Answer:"
DEFAULT_THINK_INSTRUCTION = (
    'Think briefly about which one fits, in one or two sentences. Then write "Answer:" followed by the answer alone.'
)


ENGINES = ("transformers", "llama.cpp", "mlx")
"""What decodes: a transformers model (float32, the GGUF converted once), llama.cpp (the GGUF as shipped) or
mlx-lm (the converted directory, float32; Metal on Apple silicon, mlx's CPU build elsewhere)."""
COMPARE = {"transformers": "xgrammar", "llama.cpp": "gbnf", "mlx": "xgrammar"}
"""The engine each one's outputs are compared with (``--compare``): xgrammar's masks, llama.cpp's own grammar."""


@dataclass
class EvalConfig:
    modes: tuple[str, ...] = ("free", "trie")
    compare_xgrammar: bool = False
    compare_gbnf: bool = False
    engine: str = "transformers"
    max_new_tokens: int = 48
    think_budget: int = 64
    trigger: str = DEFAULT_TRIGGER
    think_instruction: str = DEFAULT_THINK_INSTRUCTION
    threads: int | None = 1
    free_early_stop: bool = True
    top_k: int = 5
    beams: int | None = None  # rank mode: beam search of this many beams; None: exact best-first search
    max_expansions: int = 10_000
    strategies: tuple[
        str, ...
    ] = ()  # --strategy: full, shortlist:K, cascade:K, groups[:FILE] (triec/eval/strategies.py)
    retriever: str = "bm25"
    list_budget: int = 2_000  # --list-budget: prompt tokens the full strategy's listing of every candidate may take
    strategy_tables: str = "trie"  # --strategy-tables: trie (every spelling) or canonical (the encoder's only)

    def __post_init__(self) -> None:
        from triec.eval.strategies import RETRIEVERS, check_available, parse_strategies

        if self.strategies:
            check_available(parse_strategies(self.strategies))
        if self.strategy_tables not in ("trie", "canonical"):
            raise EvalError(f"--strategy-tables {self.strategy_tables!r}: choose trie or canonical")
        if self.retriever not in RETRIEVERS:
            raise EvalError(f"--retriever {self.retriever!r}: choose from {', '.join(RETRIEVERS)}")
        if self.top_k < 1 or (self.beams is not None and self.beams < 1) or self.max_expansions < 1:
            raise EvalError("--top-k, --beams and --max-expansions must be at least 1")
        unknown = [m for m in self.modes if m not in MODES]
        if unknown or not (self.modes or self.strategies):
            raise EvalError(f"unknown mode(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(MODES)}")
        if self.engine not in ENGINES:
            raise EvalError(f"--engine {self.engine!r}: choose from {', '.join(ENGINES)}")
        for name, on in (("xgrammar", self.compare_xgrammar), ("gbnf", self.compare_gbnf)):
            if on and COMPARE[self.engine] != name:
                raise EvalError(
                    f"--compare {name} needs --engine "
                    f"{' or '.join(e for e, c in COMPARE.items() if c == name)} (this run decodes with {self.engine})"
                )


@dataclass
class Outcome:
    """One question in one mode."""

    id: str
    mode: str
    output: str
    answer: str | None
    valid: bool
    correct: bool
    tokens: int
    seconds: float
    identical_to_xgrammar: bool | None = None
    xgrammar_output: str | None = None
    identical_to_trie: bool | None = None
    identical_to_gbnf: bool | None = None
    gbnf_output: str | None = None
    ranked: list[str] | None = None  # rank mode: the top k values, best first
    ranked_scores: list[float] | None = None
    gold_rank: int | None = None  # rank mode: the gold value's 1-based rank, 0 when not in the top k
    exact: bool | None = None  # rank mode: the list is proven the k most probable values
    retrieval_ranks: dict[str, int] | None = None  # shortlist/cascade: the gold value's 1-based rank per retriever
    level: int | None = None  # cascade: the level answered at (0: the first shortlist)
    level_widths: list[int] | None = None  # cascade: the values each level allowed (the escape aside)
    listed: str | None = None  # full (and a cascade's last level): "descriptions", "names" or "none" fit the budget

    def to_json(self) -> dict[str, Any]:
        doc = dict(self.__dict__)
        if self.ranked_scores is not None:
            doc["ranked_scores"] = [round(x, 4) for x in self.ranked_scores]
        for key in (
            "identical_to_xgrammar",
            "xgrammar_output",
            "identical_to_trie",
            "identical_to_gbnf",
            "gbnf_output",
            "ranked",
            "ranked_scores",
            "gold_rank",
            "exact",
            "retrieval_ranks",
            "level",
            "level_widths",
            "listed",
        ):
            if doc[key] is None:
                doc.pop(key)
        doc["seconds"] = round(self.seconds, 4)
        return doc


@dataclass
class ModeSummary:
    items: int = 0
    valid: int = 0
    correct: int = 0
    identical_to_xgrammar: int | None = None
    identical_to_trie: int | None = None
    identical_to_gbnf: int | None = None
    tokens: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)  # rank mode: each item's gold rank (0: not in the top k)
    exact: int = 0
    top_k: int | None = None
    retrieval: dict[str, list[int]] = field(default_factory=dict)  # per retriever: each item's gold rank
    levels: list[tuple[int, list[int]]] = field(default_factory=list)  # cascade: each item's level and widths

    def to_json(self) -> dict[str, Any]:
        from triec.eval.strategies import reached, recall

        doc: dict[str, Any] = {"items": self.items, "valid": self.valid, "correct": self.correct}
        if self.retrieval:
            doc["recall"] = {name: recall(ranks) for name, ranks in self.retrieval.items()}
        if self.levels:
            widened = sum(level > 0 for level, _ in self.levels)
            doc["widened"] = widened
            doc["widening_rate"] = round(widened / len(self.levels), 4)
            doc["reached"] = reached(self.levels)
        if self.ranks:
            n = len(self.ranks)
            doc["top_k"] = self.top_k
            doc["recall_at_1"] = round(sum(r == 1 for r in self.ranks) / n, 4)
            doc["recall_at_k"] = round(sum(r > 0 for r in self.ranks) / n, 4)
            doc["mrr"] = round(sum(1 / r for r in self.ranks if r > 0) / n, 4)
            doc["exact"] = self.exact
        if self.identical_to_xgrammar is not None:
            doc["identical_to_xgrammar"] = self.identical_to_xgrammar
        if self.identical_to_trie is not None:
            doc["identical_to_trie"] = self.identical_to_trie
        if self.identical_to_gbnf is not None:
            doc["identical_to_gbnf"] = self.identical_to_gbnf
        doc["tokens_mean"] = round(sum(self.tokens) / len(self.tokens), 2) if self.tokens else None
        doc["seconds_mean"] = round(sum(self.seconds) / len(self.seconds), 4) if self.seconds else None
        return doc


def summarize(outcomes: Iterable[Outcome], modes: Sequence[str]) -> dict[str, ModeSummary]:
    out = {m: ModeSummary() for m in modes}
    for o in outcomes:
        s = out[o.mode]
        s.items += 1
        s.valid += o.valid
        s.correct += o.correct
        s.tokens.append(o.tokens)
        s.seconds.append(o.seconds)
        if o.identical_to_xgrammar is not None:
            s.identical_to_xgrammar = (s.identical_to_xgrammar or 0) + o.identical_to_xgrammar
        if o.identical_to_trie is not None:
            s.identical_to_trie = (s.identical_to_trie or 0) + o.identical_to_trie
        if o.identical_to_gbnf is not None:
            s.identical_to_gbnf = (s.identical_to_gbnf or 0) + o.identical_to_gbnf
        for name, rank in (o.retrieval_ranks or {}).items():
            s.retrieval.setdefault(name, []).append(rank)
        if o.level is not None and o.level_widths is not None:
            s.levels.append((o.level, o.level_widths))
        if o.gold_rank is not None:
            s.ranks.append(o.gold_rank)
            s.exact += bool(o.exact)
    return out


def report_json(outcomes: list[Outcome], config: EvalConfig, meta: dict[str, Any]) -> dict[str, Any]:
    summary = summarize(outcomes, labels(config))
    if "rank" in summary:
        summary["rank"].top_k = config.top_k
    return {
        **meta,
        "modes": {m: s.to_json() for m, s in summary.items()},
        "items": [o.to_json() for o in outcomes],
    }


def labels(config: EvalConfig) -> tuple[str, ...]:
    """The modes, then the strategies (each outcome's ``mode`` is one of these)."""
    from triec.eval.strategies import parse_strategies

    return config.modes + (tuple(s.label for s in parse_strategies(config.strategies)) if config.strategies else ())


def resolve_model(path: str | os.PathLike[str], log: Callable[[str], None] | None = None) -> Path:
    """A model directory as is; a GGUF file turned into one (cached, :mod:`triec.eval.gguf_model`)."""
    p = Path(path)
    if p.suffix == ".gguf" and p.is_file():
        from triec.eval.gguf_model import prepare

        return prepare(p, log=log)
    if not (p / "config.json").is_file():
        raise EvalError(f"{p}: not a model directory (no config.json) and not a .gguf file")
    return p


class ModeRunner:
    """What every engine's evaluator shares: the modes, their sets and tables, the think budget, the verdicts.

    An engine supplies the model's vocabulary (``vocab``, ``width``), its prompts (:meth:`prompt_ids`), its
    text (:meth:`text`) and one greedy decode (:meth:`decode`) by triec's constraint, by the peer engine's
    (``peer``: ``"xgrammar"`` or ``"gbnf"``, the same values) or free.
    """

    peer: str | None = None
    vocab: Any
    width: int
    forced_trigger: list[int]

    def __init__(self, config: EvalConfig, values: Sequence[str] | None) -> None:
        self.config = config
        self.values = tuple(dict.fromkeys(values)) if values else None
        self._tables: dict[tuple[str, tuple[str, ...]], Any] = {}
        self._strategies: Any = None

    def strategy_runner(self) -> Any:
        """The ``--strategy`` runner (:mod:`triec.eval.strategies`), made on first use (after the model loaded)."""
        if self._strategies is None:
            from triec.eval.strategies import StrategyRunner, parse_strategies

            strategies = parse_strategies(self.config.strategies)
            self._strategies = StrategyRunner(self, strategies, self.config.retriever, Outcome)
        return self._strategies

    def decode_on(self, item: Item, table: Any, values: tuple[str, ...]) -> Any:
        """One greedy decode of ``item``'s trie-mode prompt constrained to ``table`` (a compact view of one of this
        runner's tables), answering ``values``: the strategies' shortlists, through any engine's :meth:`decode`."""
        key = ("trie", values)
        before = self._tables.get(key)
        self._tables[key] = table
        try:
            return self.decode(tuple(self.prompt_ids(item, "trie")), "trie", values, "triec", self.limit("trie"))
        finally:
            if before is None:
                self._tables.pop(key, None)
            else:
                self._tables[key] = before

    # -- what an engine supplies -----------------------------------------------------------------------------
    def prompt_ids(self, item: Item, mode: str) -> list[int]:
        raise NotImplementedError

    def text(self, ids: list[int]) -> str:
        raise NotImplementedError

    def decode(self, prompt: tuple[int, ...], mode: str, values: tuple[str, ...], by: str | None, limit: int) -> Any:
        """Greedy new tokens (``Decoded``): ``by`` is ``"triec"``, :attr:`peer` or None (free)."""
        raise NotImplementedError

    def scorer(self, prompt: tuple[int, ...]) -> Any:
        """Rank mode: the engine's :func:`triec.rank` scorer after ``prompt``."""
        raise NotImplementedError

    # -- shared ------------------------------------------------------------------------------------------------
    def messages(self, item: Item, mode: str) -> list[dict[str, str]] | None:
        if item.messages is None:
            return None
        messages = [dict(m) for m in item.messages]
        if mode == "think":
            messages[-1]["content"] += "\n\n" + self.config.think_instruction
        return messages

    def plain_prompt(self, item: Item, mode: str) -> str:
        assert item.prompt is not None
        return item.prompt + ("\n" + self.config.think_instruction + "\n" if mode == "think" else "")

    def item_values(self, item: Item) -> tuple[str, ...]:
        found = item.candidates or self.values
        if not found:
            raise EvalError(f"item {item.id}: no 'candidates' and no --values: nothing to constrain to")
        return found

    def table(self, mode: str, values: tuple[str, ...]) -> Any:
        """The mode's triec table (a :class:`Triggered` for think), compiled once per set."""
        from triec.compiler.entry import compile as compile_values
        from triec.runtime.trigger import Triggered

        key = (mode, values)
        if key not in self._tables:
            if mode in ("trie", "canonical"):
                self._tables[key] = compile_values(
                    values, self.vocab, tokenization="any" if mode == "trie" else "canonical"
                )
            else:
                table = compile_values(values, self.vocab, prefix=" ")
                self._tables[key] = Triggered(table, self.vocab, self.config.trigger)
        return self._tables[key]

    def forced(self, mode: str) -> Callable[[list[int]], list[int] | None] | None:
        """Think mode: after ``think_budget`` free tokens without the trigger, the ids written for the model."""
        if mode != "think":
            return None
        trigger = self.config.trigger.encode()
        budget, push = self.config.think_budget, self.forced_trigger
        token_bytes = self.vocab.token_bytes

        def forced(ids: list[int]) -> list[int] | None:
            if len(ids) != budget:
                return None
            text = b"".join(token_bytes[t] for t in ids if t < len(token_bytes))
            return None if trigger in text else push

        return forced

    def settled(self, values: tuple[str, ...]) -> Callable[[list[int]], bool]:
        """Free mode: true once the text, leading whitespace aside, is neither a value's prefix nor a value then whitespace."""

        def settled(ids: list[int]) -> bool:
            text = self.text(ids).lstrip()
            if text.endswith("\ufffd"):  # a character cut between tokens: wait for the rest
                return False
            core = text.rstrip()
            if core in values and text[len(core) :].isspace():
                return False
            return not any(v.startswith(text) for v in values)

        return settled

    def limit(self, mode: str) -> int:
        return self.config.max_new_tokens + (
            self.config.think_budget + len(self.forced_trigger) if mode == "think" else 0
        )

    # -- one item -----------------------------------------------------------------------------------------------
    def run(self, item: Item) -> list[Outcome]:
        out: list[Outcome] = []
        decoded: dict[str, list[int]] = {}  # per mode: the ids it decoded (canonical is compared with trie)
        compare = self.peer if (self.config.compare_xgrammar or self.config.compare_gbnf) else None
        for mode in self.config.modes:
            ids = tuple(self.prompt_ids(item, mode))
            if mode == "rank":
                out.append(self.rank(item, ids))
                continue
            values = self.item_values(item) if mode in CONSTRAINED else (item.candidates or self.values or ())
            got = self.decode(ids, mode, values, "triec" if mode in CONSTRAINED else None, self.limit(mode))
            text = self.text(got.ids)
            answer = self.parse(mode, text)
            valid = answer is not None and answer in values and (got.finished or mode == "free")
            outcome = Outcome(
                item.id, mode, text, answer, valid, valid and answer == item.gold, len(got.ids), got.seconds
            )
            decoded[mode] = got.ids
            if compare is not None and mode in ("trie", "think"):  # the peers' language is `any`'s
                ref = self.decode(ids, mode, values, compare, self.limit(mode))
                same = ref.ids == got.ids and ref.finished == got.finished
                setattr(outcome, f"identical_to_{compare}", same)
                if not same:
                    setattr(outcome, f"{compare}_output", self.text(ref.ids))
            out.append(outcome)
        if "trie" in decoded and "canonical" in decoded:
            out[self.config.modes.index("canonical")].identical_to_trie = decoded["trie"] == decoded["canonical"]
        if self.config.strategies:
            out += self.strategy_runner().run(item)
        return out

    def rank(self, item: Item, prompt: tuple[int, ...]) -> Outcome:
        """Rank mode: the item's values ranked (the trie mode's table), the first as the answer; the seconds
        include the prompt's prefill."""
        from triec.integrations.rank import rank

        values = self.item_values(item)
        table = self.table("trie", values)
        c = self.config
        t0 = time.perf_counter()
        found = rank(
            self.scorer(prompt),
            None,
            table,
            c.top_k,
            method="exact" if c.beams is None else "beam",
            beams=c.beams,
            max_expansions=c.max_expansions,
        )
        seconds = time.perf_counter() - t0
        top = found.values[0] if found.values else None
        gold = found.values.index(item.gold) + 1 if item.gold in found.values else 0
        valid = top is not None and top in values
        return Outcome(
            item.id,
            "rank",
            top or "",
            top,
            valid,
            valid and top == item.gold,
            len(found.paths[0]) - 1 if found.paths else 0,
            seconds,
            ranked=list(found.values),
            ranked_scores=list(found.scores),
            gold_rank=gold,
            exact=found.exact,
        )

    def parse(self, mode: str, text: str) -> str | None:
        if mode == "think":
            at = text.find(self.config.trigger)
            return None if at < 0 else text[at + len(self.config.trigger) :].strip()
        return text if mode in ("trie", "canonical") else text.strip()


class Evaluator(ModeRunner):
    """A transformers model (float32), its triec vocabulary, and the compiled sets; :meth:`run` answers one item
    in every mode; ``--compare xgrammar`` decodes the constrained modes again with xgrammar's matcher."""

    peer = "xgrammar"

    def __init__(self, model_dir: Path, config: EvalConfig, values: Sequence[str] | None = None) -> None:
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as exc:
            raise EvalError(f"triec eval needs torch and transformers: pip install 'triec[eval]' ({exc})") from exc
        from triec.eval.decode import Greedy
        from triec.tokenizer.vocabulary import Vocabulary

        super().__init__(config, values)
        if config.threads:
            torch.set_num_threads(config.threads)
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        self.model.eval()
        self.width = int(self.model.config.vocab_size)
        self.vocab = Vocabulary.load(model_dir, vocab_size=max(self.width, 0) or None)
        self.greedy = Greedy(self.model, list(self.vocab.eos_token_ids))
        self._grammars: dict[tuple[str, tuple[str, ...]], Any] = {}
        self._xgr_info: Any = None
        self._prefilled: dict[tuple[int, ...], Any] = {}
        if config.compare_xgrammar:
            try:
                import xgrammar as xgr
            except ImportError as exc:
                raise EvalError("--compare xgrammar needs xgrammar: pip install xgrammar") from exc
            self._xgr_info = xgr.TokenizerInfo.from_huggingface(self.tokenizer, vocab_size=self.width)
        trigger_ids = self.tokenizer.encode("\n" + config.trigger, add_special_tokens=False)
        self.forced_trigger = [int(t) for t in trigger_ids]

    def prompt_ids(self, item: Item, mode: str) -> list[int]:
        messages = self.messages(item, mode)
        if messages is not None:
            text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            return list(self.tokenizer.encode(text, add_special_tokens=False))
        return list(self.tokenizer.encode(self.plain_prompt(item, mode)))

    def text(self, ids: list[int]) -> str:
        text: str = self.tokenizer.decode(ids, skip_special_tokens=False)
        return text

    def decode(self, prompt: tuple[int, ...], mode: str, values: tuple[str, ...], by: str | None, limit: int) -> Any:
        if prompt not in self._prefilled:
            self._prefilled = {prompt: self.greedy.prefill(list(prompt))}  # free and trie share one prompt
        constraint = None
        if by == "triec":
            from triec.eval.decode import TriecConstraint

            constraint = TriecConstraint(self.table(mode, values).matcher(), self.width)
        elif by == "xgrammar":
            constraint = self._xgrammar_constraint(mode, values)
        settled = self.settled(values) if mode == "free" and self.config.free_early_stop else None
        return self.greedy.decode(self._prefilled[prompt], constraint, limit, forced=self.forced(mode), settled=settled)

    def scorer(self, prompt: tuple[int, ...]) -> Any:
        from triec.integrations.transformers import TransformersScorer

        return TransformersScorer(self.model, list(prompt))

    def _grammar(self, mode: str, values: tuple[str, ...]) -> Any:
        import xgrammar as xgr

        key = (mode, values)
        if key not in self._grammars:
            tag = xgrammar_structural_tag(mode, values, self.config.trigger)
            self._grammars[key] = xgr.GrammarCompiler(self._xgr_info, max_threads=1).compile_structural_tag(tag)
        return self._grammars[key]

    def _xgrammar_constraint(self, mode: str, values: tuple[str, ...]) -> Any:
        import xgrammar as xgr

        from triec.eval.decode import XGrammarConstraint

        matcher = xgr.GrammarMatcher(self._grammar(mode, values))
        until = self.config.trigger.encode() if mode == "think" else None
        return XGrammarConstraint(
            matcher,
            self._xgr_info.vocab_size,
            self.width,
            frozenset(self.vocab.eos_token_ids),
            self.vocab.token_bytes,
            until,
        )


def xgrammar_structural_tag(mode: str, values: tuple[str, ...], trigger: str) -> str:
    """xgrammar's structural tag for a constrained mode (``--compare xgrammar``): the values' alternation (trie), or
    free text until the trigger, then a space and one value (think)."""
    space = " " if mode == "think" else ""
    choice = {"type": "or", "elements": [{"type": "const_string", "value": space + v} for v in values]}
    if mode == "trie":
        fmt: dict[str, Any] = choice
    else:
        fmt = {
            "type": "triggered_tags",
            "triggers": [trigger],
            "at_least_one": False,
            "stop_after_first": True,
            "tags": [{"type": "tag", "begin": trigger, "content": choice, "end": ""}],
        }
    return json.dumps({"type": "structural_tag", "format": fmt})


def evaluate(
    evaluator: Evaluator,
    items: Sequence[Item],
    on_item: Callable[[int, list[Outcome]], None] | None = None,
) -> list[Outcome]:
    """Every item in every mode; a KeyboardInterrupt stops early and keeps what was measured."""
    outcomes: list[Outcome] = []
    if getattr(getattr(evaluator, "config", None), "strategies", ()):  # shortlists list descriptions found anywhere
        from triec.eval.strategies import descriptions_of

        evaluator.strategy_runner().descriptions = descriptions_of(items)
    try:
        for i, item in enumerate(items):
            got = evaluator.run(item)
            outcomes.extend(got)
            if on_item:
                on_item(i, got)
    except KeyboardInterrupt:
        pass
    return outcomes


def meta_for(model: str, model_dir: Path, data: str, config: EvalConfig, started: float) -> dict[str, Any]:
    return {
        "model": model,
        "model_dir": str(model_dir),
        "data": data,
        "config": {k: v for k, v in config.__dict__.items() if k != "think_instruction"}
        | {"modes": list(config.modes), "strategies": list(config.strategies)},
        "seconds": round(time.perf_counter() - started, 2),
    }
