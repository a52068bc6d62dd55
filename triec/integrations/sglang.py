"""An SGLang grammar backend, ``--grammar-backend triec``: triec serves the finite sets, xgrammar the rest.

SGLang 0.5.23 has a registry of grammar backends (``register_grammar_backend``
in ``sglang.srt.constrained.base_grammar_backend``); ``create_grammar_backend``
builds a registered one by name in every scheduler process. :func:`register`
adds ``triec`` to it and to ``--grammar-backend``'s choices; SGLang calls it
itself in each of its processes through triec's ``sglang.srt.plugins`` entry
point (tools/sglang_launch.py registers it where entry points are filtered).

What a request asks for goes to :class:`~triec.integrations.constraints.Constraints`:
a ``regex`` that is an alternation of literals, a ``json`` schema that is a
string enum or (with ``--constrained-json-disable-any-whitespace``) a flat
enum-and-const object, and an artifact by name (``{"x-triec-artifact": NAME}``
as the json schema, docs/decisions.md D21) are served from triec tables;
everything else, EBNF and structural tags included, goes unchanged to the
xgrammar backend SGLang would have built for ``--grammar-backend xgrammar``.
The grammar objects behave as SGLang's xgrammar objects do (the same mask
buffer, apply kernels, rollback, ``copy`` at the start state), so one batch
mixes both. The only module importing SGLang.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from sglang.srt.constrained.base_grammar_backend import (
    GRAMMAR_BACKEND_REGISTRY,
    BaseGrammarBackend,
    BaseGrammarObject,
    GrammarRow,
    GrammarStats,
    InvalidGrammarObject,
    register_grammar_backend,
)

from triec._compat import renamed
from triec.errors import RequestError, TriecError
from triec.integrations.constraints import ARTIFACT_KEYWORD, Constraints, Delegate, Served, TableGrammar
from triec.integrations.matchers import MatcherRows, RequestMatcher
from triec.integrations.serving import served_vocabulary

log = logging.getLogger("triec.sglang")

NAME = "triec"
"""The ``--grammar-backend`` name."""

KEY_TYPES = ("json", "regex", "ebnf", "structural_tag")


# ----------------------------------------------------------------------------- xgrammar's mask functions


def allocate_vocab_mask(vocab_size: int, batch_size: int, device: Any = None) -> torch.Tensor:
    """SGLang's xgrammar buffer: int32 ``(batch, ceil(V / 32))`` of -1 (all allowed) on the host, pinned where possible."""
    from sglang.srt.constrained.xgrammar_backend import _allocate_token_bitmask

    return _allocate_token_bitmask(vocab_size, batch_size)


def move_vocab_mask(vocab_mask: torch.Tensor, device: Any) -> torch.Tensor:
    return vocab_mask.to(device, non_blocking=True)


def apply_vocab_mask(logits: torch.Tensor, vocab_mask: torch.Tensor) -> None:
    """In place: disallowed logits to -inf, by the kernel SGLang's xgrammar grammars use on that device (CPU included)."""
    from sglang.srt.constrained.xgrammar_backend import XGrammarGrammar

    XGrammarGrammar.apply_vocab_mask(None, logits, vocab_mask)  # None as self: an instance method using no state


def _fill_host(vocab_mask: torch.Tensor, fill: Callable[[np.ndarray], object]) -> None:
    """Run ``fill`` on the buffer as a numpy array (SGLang's buffers are host tensors; others go through a copy)."""
    if vocab_mask.device.type == "cpu":
        fill(vocab_mask.numpy())
        return
    host = vocab_mask.cpu()
    fill(host.numpy())
    vocab_mask.copy_(host)


# ----------------------------------------------------------------------------- the grammar object


class TriecGrammarObject(BaseGrammarObject):
    """One request on a triec table, with SGLang's xgrammar grammar semantics.

    ``accept_token`` raises ValueError for a token the mask did not allow (the
    scheduler aborts that request) and ignores tokens once terminated;
    ``rollback(k)`` undoes k tokens, a terminating EOS included; ``copy`` is a
    fresh grammar at the start state (what SGLang's cache hits and parallel
    samples need; ``XGrammarGrammar.copy`` builds a new matcher too).
    """

    def __init__(
        self,
        grammar: TableGrammar,
        key_type: str,
        key_string: str,
        grammar_stats: GrammarStats | None = None,
    ) -> None:
        super().__init__()
        self.compiled = grammar
        self.matcher: RequestMatcher = grammar.matcher()
        self.key_type = key_type
        self.key_string = key_string
        self.grammar_stats = grammar_stats
        self.accepted_tokens: list[int] = []

    def accept_token(self, token: int) -> None:
        if self.matcher.is_terminated():
            return
        self.current_token = token
        if not self.matcher.accept_token(int(token)):
            raise ValueError(
                f"Tokens not accepted: {token}\nAccepted tokens: {self.accepted_tokens[-32:]}\n"
                f"Key string: {self.key_string[:200]}"
            )
        self.accepted_tokens.append(int(token))

    def rollback(self, k: int) -> None:
        if k <= 0:
            return
        self.matcher.rollback(k)  # ValueError past the history (xgrammar raises RuntimeError there)
        del self.accepted_tokens[-k:]

    def is_terminated(self) -> bool:
        return self.matcher.is_terminated()

    def allocate_vocab_mask(self, vocab_size: int, batch_size: int, device: Any) -> torch.Tensor:
        return allocate_vocab_mask(vocab_size, batch_size, device)

    def fill_vocab_mask(self, vocab_mask: torch.Tensor, idx: int) -> None:
        _fill_host(vocab_mask, lambda mask: self.matcher.fill_bitmask(mask[idx]))

    @staticmethod
    def fill_vocab_mask_batched(entries: list[GrammarRow], vocab_mask: torch.Tensor) -> None:
        """Every listed row: triec rows in one gather and scatter per table, other grammars through their own fill.

        SGLang calls this on the batch's first grammar with the rows of every
        backend's grammars (delegated xgrammar ones, reasoner wrappers), so
        foreign rows are filled by their own objects, as the base class does.
        """
        matchers: list[RequestMatcher] = []
        rows: list[int] = []
        for entry in entries:
            g = entry.grammar
            if type(g) is TriecGrammarObject:
                matchers.append(g.matcher)
                rows.append(entry.row)
            else:
                g.fill_vocab_mask(vocab_mask, entry.row)
        if matchers:
            with _ROWS_LOCK:
                _fill_host(vocab_mask, lambda mask: _ROWS.fill(matchers, mask, rows))

    @staticmethod
    def reset_vocab_mask(vocab_mask: torch.Tensor) -> None:
        vocab_mask.fill_(-1)

    @staticmethod
    def move_vocab_mask(vocab_mask: torch.Tensor, device: Any) -> torch.Tensor:
        return move_vocab_mask(vocab_mask, device)

    @staticmethod
    def apply_vocab_mask(logits: torch.Tensor, vocab_mask: torch.Tensor) -> None:
        apply_vocab_mask(logits, vocab_mask)

    def copy(self) -> TriecGrammarObject:
        stats = self.grammar_stats
        if stats is not None:
            stats = dataclasses.replace(stats, is_cache_hit=True, tree_traversal_time=[])
        return TriecGrammarObject(self.compiled, self.key_type, self.key_string, stats)

    def try_jump_forward(self, tokenizer: Any) -> tuple[list[int], str] | None:
        """The text every value below this state continues with, where the trie has one path; else None.

        None also where the forced bytes do not start at a character boundary
        (a token ended inside a character): text cannot carry them.
        """
        jump = getattr(self.matcher, "jump_forward", None)
        if jump is None or self.matcher.is_terminated():
            return None
        try:
            text = jump().decode("utf-8")
        except UnicodeDecodeError:
            return None
        return ([], text) if text else None

    def jump_forward_str_state(self, helper: tuple[list[int], str]) -> tuple[str, int]:
        return helper[1], -1

    def jump_and_retokenize(self, old_output_ids: list[int], new_output_ids: list[int], next_state: int) -> None:
        """XGrammarGrammar's: roll back to the common prefix, then accept the new ids."""
        k = 0
        for i, old in enumerate(old_output_ids):
            if i < len(new_output_ids) and old == new_output_ids[i]:
                k = i + 1
            else:
                break
        if k < len(old_output_ids):
            self.rollback(len(old_output_ids) - k)
        for i in range(k, len(new_output_ids)):
            if not self.matcher.accept_token(int(new_output_ids[i])):
                raise ValueError(f"Token not accepted during retokenization: {new_output_ids[i]} at position {i}")
            self.accepted_tokens.append(int(new_output_ids[i]))

    def __repr__(self) -> str:
        return (
            f"TriecGrammarObject(key_type={self.key_type!r}, key_string={self.key_string[:60]!r}, "
            f"accepted={len(self.accepted_tokens)})"
        )


_ROWS = MatcherRows()
"""The triec rows of SGLang's batches: schema tables' mask writers kept here, used under :data:`_ROWS_LOCK`."""
_ROWS_LOCK = threading.Lock()


class RefusedGrammar(InvalidGrammarObject):
    """A constraint triec refuses (SGLang aborts the request with HTTP 400: "Failed to compile ... grammar: ...").

    ``retry``: the refusal depends on the artifact directory (a missing file may be
    added), so SGLang's cache must not keep it; refusals of what was sent (limits,
    malformed arguments) are cached as any invalid grammar is.
    """

    def __init__(self, error_message: str, retry: bool) -> None:
        super().__init__(error_message)
        self.retry = retry


def triec_grammar(grammar: Any) -> TriecGrammarObject | None:
    """The TriecGrammarObject inside ``grammar`` (itself, or wrapped by SGLang's reasoner), else None."""
    for _ in range(4):
        if isinstance(grammar, TriecGrammarObject):
            return grammar
        grammar = getattr(grammar, "grammar", None)
        if grammar is None:
            return None
    return None


# ----------------------------------------------------------------------------- the backend


class _BoundedTriecCache:
    """SGLang's grammar cache keeps one grammar per distinct key, without bound; triec's it keeps only while triec would
    hand out the same again (:meth:`Constraints.is_live`), so the tables it holds stay within triec's cache bound and
    a changed artifact file is reloaded; refusals that depend on the artifact directory are not kept. Delegated
    grammars are cached as SGLang always does."""

    cache: dict[tuple[str, str], BaseGrammarObject]
    constraints: Constraints

    def _init_bounded_cache(self, constraints: Constraints) -> None:
        self.constraints = constraints
        self._triec_keys: OrderedDict[tuple[str, str], None] = OrderedDict()

    def get_cached_or_future_value(self, key: tuple[str, str], require_reasoning: bool) -> Any:
        if key in self._triec_keys:
            g = triec_grammar(self.cache.get(key))
            if g is None or not self.constraints.is_live(g.compiled):
                self.cache.pop(key, None)
                del self._triec_keys[key]
        return super().get_cached_or_future_value(  # type: ignore[misc]  # mixin: SGLang's backend is next in the MRO
            key, require_reasoning
        )

    def set_cache(self, key: tuple[str, str], value: BaseGrammarObject) -> None:
        if isinstance(value, RefusedGrammar) and value.retry:
            return
        super().set_cache(key, value)  # type: ignore[misc]  # mixin: SGLang's backend is next in the MRO
        if triec_grammar(value) is not None:
            self._triec_keys[key] = None
            for k in list(self._triec_keys):
                g = triec_grammar(self.cache.get(k))
                if g is None or not self.constraints.is_live(g.compiled):
                    self.cache.pop(k, None)
                    del self._triec_keys[k]

    def reset(self) -> None:
        super().reset()  # type: ignore[misc]  # mixin: SGLang's backend is next in the MRO
        self._triec_keys.clear()


class TriecGrammarBackend(_BoundedTriecCache, BaseGrammarBackend):
    """``dispatch_*``: a triec grammar where :class:`Constraints` serves the key, else the fallback's, unchanged.

    A refusal (a list past the limits, an artifact that cannot be served) is an
    ``InvalidGrammarObject``: SGLang rejects that request with HTTP 400 and keeps
    serving. ``fallback`` is SGLang's own xgrammar backend (None when xgrammar does
    not support the tokenizer: then only triec's constraints are served).
    """

    def __init__(self, constraints: Constraints, fallback: BaseGrammarBackend | None) -> None:
        super().__init__()
        self._init_bounded_cache(constraints)
        self.fallback = fallback

    # SGLang's reasoner wrapper reads these three off the backend it wraps.
    allocate_vocab_mask = staticmethod(allocate_vocab_mask)
    move_vocab_mask = staticmethod(move_vocab_mask)
    apply_vocab_mask = staticmethod(apply_vocab_mask)

    @property
    def is_support_token_filter(self) -> bool:
        return bool(self.fallback is not None and self.fallback.is_support_token_filter)

    def set_token_filter(
        self,
        vocab_mask: torch.Tensor,
        token_ids: list[int],
        batch_idx: int,
        is_allowed: bool = True,
        reset_vocab_mask: bool = True,
    ) -> None:
        """Strict thinking's token filter: xgrammar's (the mask layout is the same)."""
        if self.fallback is not None:
            self.fallback.set_token_filter(vocab_mask, token_ids, batch_idx, is_allowed, reset_vocab_mask)

    def reserve_framing_tokens(self, token_ids: Sequence[int]) -> None:
        if self.fallback is not None:
            self.fallback.reserve_framing_tokens(token_ids)

    def compile_framed_grammar(
        self, grammar: BaseGrammarObject, frame: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> Any:
        """A reasoning parser's answer frame is an xgrammar structural tag: a triec grammar's key is framed by xgrammar.

        xgrammar compiles the same regex or schema, which admits the same strings;
        an artifact by name has no xgrammar form, so it is not framed (None: the
        reasoner then wraps it like any other grammar).
        """
        if self.fallback is None:
            return None
        if isinstance(grammar, TriecGrammarObject):
            if grammar.compiled.artifact is not None or grammar.key_type not in ("json", "regex"):
                return None
            grammar = self._delegate(grammar.key_type, grammar.key_string)
            if isinstance(grammar, InvalidGrammarObject):
                return None
        return self.fallback.compile_framed_grammar(grammar, frame)

    # ------------------------------------------------------------- dispatch

    def _delegate(self, key_type: str, key_string: str) -> BaseGrammarObject:
        if self.fallback is None:
            return InvalidGrammarObject(
                f"triec serves no such {key_type} and xgrammar is not available for this tokenizer"
            )
        return getattr(self.fallback, f"dispatch_{key_type}")(key_string)

    def _serve(self, key_type: str, key_string: str, decide: Callable[[str], Served]) -> BaseGrammarObject:
        try:
            served = decide(key_string)
        except RequestError as exc:
            log.info("triec refused a %s constraint: %s", key_type, exc)
            return RefusedGrammar(str(exc), retry=ARTIFACT_KEYWORD in key_string)
        if isinstance(served, Delegate):
            return self._delegate(key_type, key_string)
        return TriecGrammarObject(served, key_type, key_string, GrammarStats(dispatch_type=key_type))

    def dispatch_json(self, key_string: str) -> BaseGrammarObject:
        if key_string == "$$ANY$$":  # SGLang's "any JSON": xgrammar's built-in grammar
            return self._delegate("json", key_string)
        return self._serve("json", key_string, self.constraints.json_schema)

    def dispatch_regex(self, key_string: str) -> BaseGrammarObject:
        return self._serve("regex", key_string, self.constraints.regex)

    def dispatch_ebnf(self, key_string: str) -> BaseGrammarObject:
        return self._delegate("ebnf", key_string)

    def dispatch_structural_tag(self, key_string: str) -> BaseGrammarObject:
        """Tool-call tags whose begins carry the names (vLLM-style ``tags_with_separator``) are triec's; the rest,
        SGLang's legacy ``structures``/``triggers`` (free text between tags) among them, go to xgrammar."""
        return self._serve("structural_tag", key_string, self.constraints.structural_tag)

    def reset(self) -> None:
        super().reset()
        self.constraints.clear()
        if self.fallback is not None:
            self.fallback.reset()


def xgrammar_backend(tokenizer: Any, vocab_size: int, eos_token_ids: set[int] | None) -> BaseGrammarBackend | None:
    """The backend ``create_grammar_backend`` builds for ``xgrammar`` (without the reasoner wrapping), or None."""
    from sglang.srt.constrained.xgrammar_backend import TokenizerNotSupportedError, XGrammarGrammarBackend
    from sglang.srt.runtime_context import get_serving

    serving = get_serving()
    try:
        return XGrammarGrammarBackend(
            tokenizer,
            vocab_size=vocab_size,
            model_eos_token_ids=list(eos_token_ids) if eos_token_ids else None,
            any_whitespace=not serving.constrained_json_disable_any_whitespace,
            max_whitespace_cnt=serving.constrained_json_max_whitespace_cnt,
        )
    except TokenizerNotSupportedError as exc:
        log.warning("triec: xgrammar does not support this tokenizer (%s); only triec's constraints are served", exc)
        return None


def sglang_vocabulary(tokenizer: Any, vocab_size: int, eos_ids: Sequence[int] | None) -> tuple[Any, str]:
    """triec's decoded vocabulary of the tokenizer SGLang serves (the serving core's
    :func:`~triec.integrations.serving.served_vocabulary`), and the spec it was loaded from."""
    from sglang.srt.runtime_context import get_serving

    spec = getattr(tokenizer, "name_or_path", None) or get_serving().tokenizer_path
    if not spec:
        raise TriecError(
            "triec: cannot tell where SGLang's tokenizer was loaded from (no name_or_path, no tokenizer_path)"
        )
    try:
        return served_vocabulary(spec, vocab_size, eos_ids), str(spec)
    except TriecError as exc:
        raise TriecError(f"--grammar-backend triec: cannot decode the served tokenizer {spec!r}: {exc}") from exc


STOPS_HINT = "SGLang's grammar backend stops on the model's EOS ids: compile the artifact with them"
"""What a refusal for an artifact whose EOS ids SGLang would not stop on suggests."""


def init_backend(
    server_args: Any, tokenizer: Any, vocab_size: int, eos_token_ids: set[int] | None = None
) -> BaseGrammarBackend:
    """What SGLang's ``create_grammar_backend`` calls for ``triec``: the backend, wrapped for a reasoning parser.

    The stop tokens are the model's EOS set SGLang passes (xgrammar's own
    detection when it is empty), so triec's masks and xgrammar's end alike.
    SGLang returns a registered backend before its reasoner wrapping, so it is
    done here, on the condition SGLang uses for its own backends.
    """
    from sglang.srt.runtime_context import get_serving

    fallback = xgrammar_backend(tokenizer, vocab_size, eos_token_ids)
    if eos_token_ids:
        eos: list[int] | None = sorted(int(e) for e in eos_token_ids)
    elif fallback is not None:
        eos = sorted(int(e) for e in fallback._tokenizer_info.stop_token_ids)
    else:
        eos = None if getattr(tokenizer, "eos_token_id", None) is None else [int(tokenizer.eos_token_id)]
    vocab, spec = sglang_vocabulary(tokenizer, vocab_size, eos)
    serving = get_serving()
    constraints = Constraints(
        vocab, any_whitespace=not serving.constrained_json_disable_any_whitespace, tokenizer=spec, fix_stops=STOPS_HINT
    )
    if serving.constrained_json_max_whitespace_cnt is not None:  # the schema layer's whitespace is unbounded
        constraints.schema_hook = None
    if fallback is not None:  # the schema layer's engine rows equal the fallback's, special tokens included
        from triec.schema.grammar import driver

        driver("xgrammar", vocab).use_tokenizer_info(fallback._tokenizer_info)
    vocab.automaton  # noqa: B018  # built (or read from the disk cache) now, not under the first request
    backend: BaseGrammarBackend = TriecGrammarBackend(constraints, fallback)
    log.info(
        "triec grammar backend: %s, EOS %s, xgrammar fallback %s",
        vocab,
        list(vocab.eos_token_ids),
        fallback is not None,
    )
    if serving.reasoning_parser:
        from sglang.srt.parser.reasoning_parser import ReasoningParser

        parser = ReasoningParser(model_type=serving.reasoning_parser, stream_reasoning=False, tokenizer=tokenizer)
        if parser.detector.get_think_end_token_ids(tokenizer):  # the scheduler's condition for think_end_ids
            backend = reasoner_backend_class()(
                constraints, backend, parser, tokenizer, enable_strict_thinking=serving.enable_strict_thinking
            )
    return backend


@functools.cache
def reasoner_backend_class() -> type:
    """SGLang's ``ReasonerGrammarBackend`` with triec's bound on the triec grammars it caches (its module imports
    transformers and the reasoning parsers: only built when a reasoning parser is set)."""
    from sglang.srt.constrained.reasoner_grammar_backend import ReasonerGrammarBackend

    class TriecReasonerGrammarBackend(_BoundedTriecCache, ReasonerGrammarBackend):
        def __init__(self, constraints: Constraints, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._init_bounded_cache(constraints)

    return TriecReasonerGrammarBackend


def register() -> None:
    """Register ``triec`` with SGLang (idempotent): the grammar-backend registry and ``--grammar-backend``'s choices.

    The ``sglang.srt.plugins`` entry point; SGLang's ``load_plugins`` runs it in
    every process. It only takes effect with ``--grammar-backend triec``.
    """
    from sglang.srt.server_args import GRAMMAR_BACKEND_CHOICES, add_grammar_backend_choices

    register_grammar_backend(NAME, init_backend)
    if NAME not in GRAMMAR_BACKEND_CHOICES:
        add_grammar_backend_choices([NAME])
    assert GRAMMAR_BACKEND_REGISTRY[NAME] is init_backend


__all__ = [
    "NAME",
    "STOPS_HINT",
    "RefusedGrammar",
    "TriecGrammarBackend",
    "TriecGrammarObject",
    "init_backend",
    "register",
    "sglang_vocabulary",
    "xgrammar_backend",
]

__getattr__ = renamed(__name__, {"TriecGrammar": "triec.integrations.sglang:TriecGrammarObject"})
