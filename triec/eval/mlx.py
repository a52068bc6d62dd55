"""``triec eval --engine mlx``: the modes on mlx-lm, the model directory the GGUF is converted to (float32).

One greedy loop drives the model and the logits processors exactly as mlx-lm calls them (``tokens``: the prompt
and every token so far, 1-D; ``logits``: (1, V)): triec's (:class:`triec.integrations.mlx.MLXConstraint`, what
users run), or with ``--compare xgrammar`` xgrammar's matcher filling the mask for the same set and xgrammar's
own mlx kernel applying it (:class:`XGrammarProcessor`), or none (free). Greedy picks the first highest logit,
so two constraints that allow the same ids pick the same token. The think budget's forced trigger is appended
to the sequence both processors follow. The prompt is run once and its KV cache copied for each decode (on
mlx's CPU build a prompt costs about 0.1 s a token).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from triec.errors import EvalError
from triec.eval.data import Item
from triec.eval.decode import Decoded
from triec.eval.run import EvalConfig, ModeRunner, xgrammar_structural_tag


class XGrammarProcessor:
    """xgrammar as an mlx-lm logits processor (the oracle of ``--compare xgrammar``): it accepts each token past
    the first call's sequence, fills xgrammar's bitmask (:class:`triec.eval.decode.XGrammarConstraint`, think
    mode's EOS rule included) and applies it with xgrammar's ``apply_token_bitmask_mlx``."""

    def __init__(self, constraint: Any, vocab_size: int) -> None:
        self.constraint, self.vocab_size = constraint, vocab_size
        self.read: int | None = None

    def __call__(self, tokens: Any, logits: Any) -> Any:
        import mlx.core as mx
        from xgrammar.kernels.apply_token_bitmask_mlx import apply_token_bitmask_mlx

        if self.read is None:
            self.read = len(tokens)
        for t in tokens[self.read :].tolist():
            self.constraint.accept(int(t))
        self.read = len(tokens)
        if self.constraint.matcher.is_terminated():  # mlx-lm runs one step past EOS before it stops: unused
            return logits
        row = mx.array(self.constraint.allowed(None).numpy())
        return apply_token_bitmask_mlx(row, logits, self.vocab_size)


class MLXEvaluator(ModeRunner):
    """An mlx-lm model, its checked vocabulary, the compiled sets; ``--compare xgrammar`` decodes again with
    xgrammar's masks in the same loop."""

    peer = "xgrammar"

    def __init__(self, model_dir: Path, config: EvalConfig, values: Sequence[str] | None = None) -> None:
        try:
            import mlx.core as mx
            from mlx_lm import load
        except ImportError as exc:
            raise EvalError(f"--engine mlx needs mlx and mlx-lm: pip install 'triec[mlx]' ({exc})") from exc
        from triec.integrations.mlx import logits_width
        from triec.tokenizer.vocabulary import Vocabulary

        super().__init__(config, values)
        self.mx = mx
        self.model, self.tokenizer = load(str(model_dir))
        self.width = logits_width(self.model, self.tokenizer)
        self.eos = frozenset(int(t) for t in self.tokenizer.eos_token_ids)
        self.vocab = Vocabulary.load(model_dir, vocab_size=self.width, eos_token_ids=sorted(self.eos))
        self.forced_trigger = [int(t) for t in self.tokenizer.encode("\n" + config.trigger, add_special_tokens=False)]
        self._constraints: dict[tuple[str, tuple[str, ...]], Any] = {}
        self._grammars: dict[tuple[str, tuple[str, ...]], Any] = {}
        self._prefilled: dict[tuple[int, ...], list[Any]] = {}
        self._xgr_info: Any = None
        if config.compare_xgrammar:
            try:
                import xgrammar as xgr
                from transformers import AutoTokenizer
            except ImportError as exc:
                raise EvalError(
                    f"--compare xgrammar needs xgrammar and transformers: pip install xgrammar ({exc})"
                ) from exc
            hf = AutoTokenizer.from_pretrained(model_dir)
            self._xgr_info = xgr.TokenizerInfo.from_huggingface(
                hf, vocab_size=self.width, stop_token_ids=sorted(self.eos)
            )

    def prompt_ids(self, item: Item, mode: str) -> list[int]:
        messages = self.messages(item, mode)
        if messages is not None:
            text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            return list(self.tokenizer.encode(text, add_special_tokens=False))
        return list(self.tokenizer.encode(self.plain_prompt(item, mode)))

    def text(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=False))

    def constraint(self, mode: str, values: tuple[str, ...]) -> Any:
        """triec's constraint for a mode's set, made once (think: the table of " value"s with the trigger)."""
        from triec.integrations.mlx import MLXConstraint

        key = (mode, values)
        if key not in self._constraints:
            table = self.table(mode, values)
            if mode == "think":  # a Triggered: the constraint makes its own from the table of " value"s
                made = MLXConstraint(
                    self.model, self.tokenizer, table.table, trigger=self.config.trigger, vocab=self.vocab
                )
            else:
                made = MLXConstraint(self.model, self.tokenizer, table, vocab=self.vocab)
            self._constraints[key] = made
        return self._constraints[key]

    def _xgrammar(self, mode: str, values: tuple[str, ...]) -> XGrammarProcessor:
        import xgrammar as xgr

        from triec.eval.decode import XGrammarConstraint

        key = (mode, values)
        if key not in self._grammars:
            tag = xgrammar_structural_tag(mode, values, self.config.trigger)
            self._grammars[key] = xgr.GrammarCompiler(self._xgr_info, max_threads=1).compile_structural_tag(tag)
        until = self.config.trigger.encode() if mode == "think" else None
        constraint = XGrammarConstraint(
            xgr.GrammarMatcher(self._grammars[key]),
            self._xgr_info.vocab_size,
            self.width,
            self.eos,
            self.vocab.token_bytes,
            until,
        )
        return XGrammarProcessor(constraint, self._xgr_info.vocab_size)

    def _prefill(self, prompt: tuple[int, ...]) -> list[Any]:
        """The KV cache of every prompt token but the last (the loop's first step runs that one)."""
        if prompt not in self._prefilled:
            from mlx_lm.models.cache import make_prompt_cache

            cache = make_prompt_cache(self.model)
            if len(prompt) > 1:
                self.model(self.mx.array([list(prompt[:-1])]), cache=cache)
                self.mx.eval([c.state for c in cache])
            self._prefilled = {prompt: cache}  # free and trie share one prompt
        return copy.deepcopy(self._prefilled[prompt])

    def scorer(self, prompt: tuple[int, ...]) -> Any:
        from triec.integrations.mlx import MLXScorer

        return MLXScorer(self.model, list(prompt))

    def decode(
        self, prompt: tuple[int, ...], mode: str, values: tuple[str, ...], by: str | None, limit: int
    ) -> Decoded:
        mx = self.mx
        t0 = time.perf_counter()
        cache = self._prefill(prompt)
        processors: list[Any] = []
        if by == "triec":
            processors = [self.constraint(mode, values).processor()]
        elif by == "xgrammar":
            processors = [self._xgrammar(mode, values)]
        forced = self.forced(mode)
        settled = self.settled(values) if mode == "free" and self.config.free_early_stop else None
        seq, step = list(prompt), [prompt[-1]]
        ids: list[int] = []
        finished = False
        while len(ids) < limit:
            push = forced(ids) if forced is not None else None
            if push:  # the think budget ran out: the trigger is written for the model
                ids.extend(push)
                seq.extend(push)
                step = step + list(push)
            logits = self.model(mx.array([step]), cache=cache)[:, -1, :]
            tokens = mx.array(seq, dtype=mx.int32)
            for p in processors:
                logits = p(tokens, logits)
            token = int(mx.argmax(logits, axis=-1).item())
            if token in self.eos:
                finished = True
                break
            ids.append(token)
            seq.append(token)
            step = [token]
            if settled is not None and settled(ids):
                break
        return Decoded(ids, finished, time.perf_counter() - t0)
