"""Greedy decoding with a transformers model, one prompt at a time, under a pluggable constraint.

One loop serves every mode, so two constraints (triec's and xgrammar's) differ
only in the rows they give: the paper's output-equivalence check (Proposition
1) compares the token ids the same loop picks under each. The prompt is run
once per question and its KV cache copied for each decode, so modes and
engines pay one prefill, and ``seconds`` charges each decode with it.

Greedy picks the first highest logit among the allowed ids: the same id
whether the row is a list of ids (triec) or a bitmask over the whole
vocabulary (xgrammar), so ties cannot make two equal rows look different.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from triec.runtime.bitmask import clear_bits

if TYPE_CHECKING:
    from triec.integrations.matchers import RequestMatcher


class Constraint(Protocol):
    """What the loop asks of a constraint: the allowed ids, then the id picked."""

    def allowed(self, logits: Any) -> Any:  # numpy int array of ids, or a torch int32 bitmask (1, W)
        ...

    def accept(self, token: int) -> None: ...


@dataclass
class Decoded:
    ids: list[int]  # the new tokens, EOS excluded
    finished: bool  # ended with EOS (or a constraint's end) rather than at max_new_tokens
    seconds: float


class Prefilled:
    """A prompt run through the model once: its KV cache and the logits of its last position."""

    def __init__(self, cache: Any, logits: Any, length: int, seconds: float) -> None:
        self.cache, self.logits, self.length, self.seconds = cache, logits, length, seconds


class Greedy:
    """A causal LM and its EOS ids; :meth:`prefill` then :meth:`decode` (any number of times)."""

    def __init__(self, model: Any, eos_ids: list[int]) -> None:
        import torch

        self.torch = torch
        self.model = model
        self.eos = frozenset(eos_ids)

    def prefill(self, prompt_ids: list[int]) -> Prefilled:
        torch = self.torch
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = self.model(torch.tensor([prompt_ids]), use_cache=True)
        return Prefilled(out.past_key_values, out.logits[0, -1].float(), len(prompt_ids), time.perf_counter() - t0)

    def decode(
        self,
        pre: Prefilled,
        constraint: Constraint | None,
        max_new_tokens: int,
        forced: Any = None,
        settled: Any = None,
    ) -> Decoded:
        """Greedy new tokens after ``pre``.

        ``forced(ids)`` may return ids to append instead of a pick (the think
        budget); ``settled(ids)`` true stops early, the verdict being known.
        """
        torch = self.torch
        t0 = time.perf_counter()
        cache, logits, pos = copy.deepcopy(pre.cache), pre.logits, pre.length
        ids: list[int] = []
        finished = False
        with torch.inference_mode():
            while len(ids) < max_new_tokens:
                push = forced(ids) if forced is not None else None
                picks = list(push) if push else [self._pick(logits, constraint)]
                for token in picks:
                    if constraint is not None:
                        constraint.accept(token)
                if picks[-1] in self.eos:
                    finished = True
                    ids.extend(picks[:-1])
                    break
                ids.extend(picks)
                if settled is not None and settled(ids):
                    break
                step = torch.tensor([picks])
                positions = torch.arange(pos, pos + len(picks)).unsqueeze(0)
                out = self.model(step, past_key_values=cache, use_cache=True, position_ids=positions)
                cache, logits, pos = out.past_key_values, out.logits[0, -1].float(), pos + len(picks)
        return Decoded(ids, finished, pre.seconds + time.perf_counter() - t0)

    def _pick(self, logits: Any, constraint: Constraint | None) -> int:
        if constraint is None:
            return int(logits.argmax())
        allowed = constraint.allowed(logits)
        if isinstance(allowed, np.ndarray):
            if allowed.size == 0:
                raise RuntimeError("the constraint allows no token")
            ids = self.torch.from_numpy(allowed.astype(np.int64, copy=False))
            return int(ids[int(logits[ids].argmax())])
        from triec.runtime.torch import apply_bitmask

        masked = apply_bitmask(logits.unsqueeze(0), allowed.to(logits.device), inplace=False)
        return int(masked[0].argmax())


class TriecConstraint:
    """A triec matcher (``table.matcher()``, ``Triggered(...).matcher()``): rows as id lists."""

    def __init__(self, matcher: RequestMatcher, width: int) -> None:
        self.matcher, self.width = matcher, width

    def allowed(self, logits: Any) -> np.ndarray:
        ids = np.asarray(self.matcher.allowed())
        return ids[ids < self.width]

    def accept(self, token: int) -> None:
        if not self.matcher.accept_token(token):
            raise RuntimeError(f"triec refused token {token} it allowed")


class XGrammarConstraint:
    """An xgrammar ``GrammarMatcher``: rows as a bitmask, as xgrammar's own logits processors apply them.

    ``eos_until`` (think mode): xgrammar's ``triggered_tags`` lets EOS end the
    free text, and its ``at_least_one`` forces the tag at once, so neither says
    "free text, then the trigger must come". Until the bytes read hold the
    trigger, EOS is removed here, which is what triec's think mode does.
    """

    def __init__(
        self,
        matcher: Any,
        vocab_size: int,
        width: int,
        eos: frozenset[int],
        token_bytes: Any = None,
        eos_until: bytes | None = None,
    ) -> None:
        import xgrammar as xgr

        self.matcher, self.width = matcher, width
        self.buf = xgr.allocate_token_bitmask(1, vocab_size)
        self.eos = sorted(e for e in eos if e < width)
        self.token_bytes, self.eos_until, self.text = token_bytes, eos_until, b""

    def allowed(self, logits: Any) -> Any:
        """The row as xgrammar's int32 bitmask (1, W), applied by the runtime's one masking path."""
        self.matcher.fill_next_token_bitmask(self.buf, 0)
        if self.eos_until is not None and self.eos_until not in self.text:
            clear_bits(self.buf[0].numpy(), self.eos)
        return self.buf

    def accept(self, token: int) -> None:
        if self.token_bytes is not None and token < len(self.token_bytes):
            self.text += self.token_bytes[token]
        if not self.matcher.accept_token(token):
            raise RuntimeError(f"xgrammar refused token {token} it allowed")
