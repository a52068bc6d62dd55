"""``triec eval --engine llama.cpp``: the modes on llama.cpp, with the GGUF as shipped (quantized, no conversion).

Decoding is llama-cpp-python's own ``generate`` (greedy), constrained by triec's processor
(:class:`triec.integrations.llama_cpp.LlamaCppConstraint`, the integration users run) or, with
``--compare gbnf``, by llama.cpp's own grammar for the same set (:mod:`triec.engines.gbnf`: the values'
alternation; think mode: free text up to the trigger, then the values). The table's EOS ids are the model's
end-of-generation ids, the ids llama.cpp's grammar allows at a complete value, so both sides choose among
the same rows. The think budget's forced trigger is a new ``generate`` call on the longer sequence (its
KV cache reused): triec's processor follows it, and GBNF continues with the values' grammar.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from triec.errors import EvalError
from triec.eval.data import Item
from triec.eval.decode import Decoded
from triec.eval.run import EvalConfig, ModeRunner


class LlamaCppEvaluator(ModeRunner):
    """A GGUF loaded by llama.cpp, its checked vocabulary, and the compiled sets."""

    peer = "gbnf"

    def __init__(
        self, gguf: Path, config: EvalConfig, values: Sequence[str] | None = None, *, n_ctx: int = 4096
    ) -> None:
        try:
            import llama_cpp
        except ImportError as exc:
            raise EvalError(
                f"--engine llama.cpp needs llama-cpp-python: pip install 'triec[llamacpp]' ({exc})"
            ) from exc
        from triec.integrations.llama_cpp import eog_ids, model_vocabulary

        super().__init__(config, values)
        if not (gguf.suffix == ".gguf" and gguf.is_file()):
            raise EvalError(f"{gguf}: --engine llama.cpp runs a .gguf file")
        self.lc = llama_cpp
        self.llm = llama_cpp.Llama(str(gguf), n_ctx=n_ctx, n_threads=config.threads or None, verbose=False, seed=0)
        self.eog = frozenset(eog_ids(self.llm))
        self.vocab = model_vocabulary(self.llm, eos_token_ids=sorted(self.eog))
        self.width = int(self.llm.n_vocab())
        self.forced_trigger = [
            int(t) for t in self.llm.tokenize(("\n" + config.trigger).encode(), add_bos=False, special=False)
        ]
        template = self.llm.metadata.get("tokenizer.chat_template")
        self._chat = None
        if template:
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter

            from triec.integrations.llama_cpp import llama_model

            piece = llama_model(self.llm).token_get_text
            self._chat = Jinja2ChatFormatter(
                template,
                eos_token=piece(self.llm.token_eos()),
                bos_token=piece(self.llm.token_bos()) if self.llm.token_bos() >= 0 else "",
            )
        self._constraints: dict[tuple[str, tuple[str, ...]], Any] = {}
        self._grammars: dict[tuple[str, tuple[str, ...]], Any] = {}

    def prompt_ids(self, item: Item, mode: str) -> list[int]:
        messages = self.messages(item, mode)
        if messages is not None:
            if self._chat is None:
                raise EvalError(f"item {item.id}: chat messages, but the GGUF holds no chat template")
            text = self._chat(messages=messages).prompt
            return list(self.llm.tokenize(text.encode(), add_bos=False, special=True))
        return list(self.llm.tokenize(self.plain_prompt(item, mode).encode(), add_bos=True, special=False))

    def text(self, ids: list[int]) -> str:
        data: bytes = self.llm.detokenize(ids, special=True)
        return data.decode("utf-8", "replace")

    def table(self, mode: str, values: tuple[str, ...]) -> Any:
        """As every engine's, but a canonical table takes llama.cpp's own tokenization of each value."""
        if mode != "canonical":
            return super().table(mode, values)
        from triec.compiler.entry import compile as compile_values
        from triec.integrations.llama_cpp import LlamaCppEncoder

        key = (mode, values)
        if key not in self._tables:
            self._tables[key] = compile_values(
                values, self.vocab, tokenization="canonical", encoder=LlamaCppEncoder(self.llm)
            )
        return self._tables[key]

    def constraint(self, mode: str, values: tuple[str, ...]) -> Any:
        from triec.integrations.llama_cpp import LlamaCppConstraint

        key = (mode, values)
        if key not in self._constraints:
            table = self.table(mode, values)
            if mode == "think":  # a Triggered: the processor makes its own from the table of " value"s
                table = LlamaCppConstraint(self.llm, table.table, trigger=self.config.trigger, vocab=self.vocab)
            else:
                table = LlamaCppConstraint(self.llm, table, vocab=self.vocab)
            self._constraints[key] = table
        return self._constraints[key]

    def grammar(self, mode: str, values: tuple[str, ...], answer_only: bool = False) -> Any:
        from triec.engines.gbnf import after_trigger, alternation

        key = (mode + ("/answer" if answer_only else ""), values)
        if key not in self._grammars:
            if mode != "think":
                text = alternation(values)
            elif answer_only:
                text = alternation(values, prefix=" ")
            else:
                text = after_trigger(self.config.trigger, values, prefix=" ")
            self._grammars[key] = self.lc.LlamaGrammar.from_string(text, verbose=False)
        return self._grammars[key]

    def scorer(self, prompt: tuple[int, ...]) -> Any:
        from triec.integrations.llama_cpp import LlamaCppScorer

        return LlamaCppScorer(self.llm, list(prompt))

    def decode(
        self, prompt: tuple[int, ...], mode: str, values: tuple[str, ...], by: str | None, limit: int
    ) -> Decoded:
        t0 = time.perf_counter()
        kwargs: dict[str, Any] = {}
        if by == "triec":
            kwargs = self.constraint(mode, values).generation_kwargs()
        elif by == "gbnf":
            kwargs = {"grammar": self.grammar(mode, values)}
        forced = self.forced(mode)
        settled = self.settled(values) if mode == "free" and self.config.free_early_stop else None
        ids: list[int] = []
        finished = False
        self.llm.reset()
        gen = self.llm.generate(list(prompt), temp=0.0, top_k=1, reset=True, **kwargs)
        try:
            while len(ids) < limit:
                push = forced(ids) if forced is not None else None
                if push:  # the think budget ran out: write the trigger, then decode on from there
                    gen.close()
                    ids.extend(push)
                    if by == "gbnf":
                        kwargs = {"grammar": self.grammar(mode, values, answer_only=True)}
                    gen = self.llm.generate(list(prompt) + ids, temp=0.0, top_k=1, reset=True, **kwargs)
                    continue
                token = next(gen, None)
                if token is None or int(token) in self.eog:  # None: the stopping criterion ended a value
                    finished = True
                    break
                ids.append(int(token))
                if settled is not None and settled(ids):
                    break
        finally:
            gen.close()
        return Decoded(ids, finished, time.perf_counter() - t0)
