"""Outlines: triec's processor for a steerable Outlines model, the way to give it a ``Literal`` of thousands of values.

::

    model = outlines.from_transformers(hf_model, hf_tokenizer)  # or from_llamacpp, from_mlxlm
    generator = outlines.Generator(model, processor=processor(model, "cities.triec"))
    city = generator("Which city hosts the Louvre?", max_new_tokens=20)

Outlines turns a ``Literal``, an ``Enum`` or ``outlines.types.Choice`` into one regex alternation that
outlines-core compiles against the whole vocabulary: seconds at a thousand values, about a minute at twenty
thousand. :func:`processor` takes the same values (a list, a ``Choice``, a ``Literal`` or an ``Enum`` of strings:
compiled by triec in milliseconds), a compiled table or an artifact path, and returns the
``OutlinesLogitsProcessor`` for the model's tensor library, built on triec's integration for its engine:

* ``Transformers`` (torch): :class:`triec.integrations.transformers.TriecLogitsProcessor`, one state per batch
  row (``generator.batch`` works);
* ``LlamaCpp`` (numpy): :class:`triec.integrations.llama_cpp.LlamaCppConstraint`'s decoding state;
* ``MLXLM`` (mlx): :class:`triec.integrations.mlx.MLXConstraint`'s processor (Outlines' own constrained path
  needs Metal there; this one runs on mlx's CPU build too).

Each is checked once for its model (the vocabulary against the loaded tokenizer, the serving core's admission:
width, fingerprint, EOS ids the engine stops on), accepts ``values=`` (a subset) and ``trigger=``
(think-then-answer), and starts a new decoding on ``reset()``, which Outlines' generator calls before each
generation.
"""

from __future__ import annotations

import enum
import os
import typing
from typing import TYPE_CHECKING, Any

from triec.errors import RequestError

try:
    from outlines.processors import OutlinesLogitsProcessor
    from outlines.types import Choice
except ImportError as exc:  # pragma: no cover - the module is only useful with it
    raise ModuleNotFoundError(
        f"triec.integrations.outlines needs Outlines: pip install 'triec[outlines]' ({exc})", name=exc.name
    ) from exc

if TYPE_CHECKING:
    from triec.runtime.kinds import Table
    from triec.tokenizer.vocabulary import Vocabulary

__all__ = ["TriecOutlinesProcessor", "processor", "values_of"]

Source = Any
"""What :func:`processor` constrains to: a table, an artifact path, or values (see :func:`values_of`)."""


def values_of(output_type: Any) -> list[str] | None:
    """The strings of a list or tuple, an ``outlines.types.Choice``, a ``typing.Literal`` or an ``Enum`` of strings
    (what Outlines writes as an alternation of literals); None for anything else (a table, a path)."""
    if isinstance(output_type, (str, bytes, os.PathLike)):
        return None
    if isinstance(output_type, (list, tuple)):
        items: list[Any] = list(output_type)
    elif typing.get_origin(output_type) is typing.Literal:
        items = list(typing.get_args(output_type))
    elif isinstance(output_type, enum.EnumMeta):
        items = [m.value for m in output_type]  # type: ignore[var-annotated]  # an Enum class: mypy cannot type its members here
    elif isinstance(output_type, Choice):
        items = list(output_type.items)
    else:
        return None
    bad = next((v for v in items if not isinstance(v, str)), None)
    if bad is not None or not items:
        raise RequestError(
            f"triec constrains to strings; this output type holds {type(bad).__name__} {bad!r:.40} "
            "(leave it to Outlines' own output types)"
            if items
            else "no values to constrain to"
        )
    return items


def _table(source: Source, vocab: Vocabulary) -> Table | str | os.PathLike[str]:
    """A table or artifact path as given; values compiled against the model's checked vocabulary."""
    values = values_of(source)
    if values is None:
        given: Table | str | os.PathLike[str] = source  # not values: a table or an artifact path
        return given
    from triec.compiler.entry import compile as compile_values

    return compile_values(values, vocab)


class TriecOutlinesProcessor(OutlinesLogitsProcessor):
    """An Outlines logits processor over one of triec's engine processors (``inner``); :func:`processor` makes it.

    ``process_logits`` gets Outlines' 2-D ``input_ids`` (rows, tokens so far, prompt included) and ``logits``
    (rows, vocabulary); ``reset()`` starts a new decoding.
    """

    def __init__(self, tensor_library_name: str, inner: Any, *, process: Any, reset: Any) -> None:
        super().__init__(tensor_library_name)
        self.inner = inner
        self._process = process
        self._reset = reset

    def reset(self) -> None:
        self._reset()

    def process_logits(self, input_ids: Any, logits: Any) -> Any:
        return self._process(input_ids, logits)


def processor(
    model: Any,
    source: Source,
    *,
    values: list[str] | None = None,
    trigger: str | list[str] | None = None,
    vocab: Vocabulary | None = None,
) -> TriecOutlinesProcessor:
    """The triec processor for an Outlines ``Transformers``, ``LlamaCpp`` or ``MLXLM`` model (see the module).

    ``source``: a table, an artifact path, or the values themselves (a list, ``Choice``, ``Literal`` or ``Enum``
    of strings, compiled against the model's vocabulary). ``values`` narrows a table to a subset; ``trigger``
    serves think-then-answer; ``vocab`` is triec's vocabulary of the model's tokenizer when already loaded.
    """
    name = getattr(model, "tensor_library_name", None)
    kind = type(model).__name__
    if kind == "MLXLM" and name == "mlx":
        return _mlx(model, source, values, trigger, vocab)
    if kind == "LlamaCpp" and name == "numpy":
        return _llama_cpp(model, source, values, trigger, vocab)
    if name == "torch" and hasattr(model, "hf_tokenizer"):
        return _transformers(model, source, values, trigger, vocab)
    raise RequestError(
        f"triec serves Outlines' Transformers, LlamaCpp and MLXLM models, not {kind} ({name or 'no tensors'})"
    )


def _mlx(model: Any, source: Source, values: Any, trigger: Any, vocab: Any) -> TriecOutlinesProcessor:
    from triec.integrations.local import tokenizer_vocabulary
    from triec.integrations.mlx import MLXConstraint, logits_width

    tok = model.mlx_tokenizer
    if vocab is None and values_of(source) is not None:
        vocab = tokenizer_vocabulary(tok, vocab_size=logits_width(model.model, tok), eos_token_ids=tok.eos_token_ids)
    c = MLXConstraint(
        model.model,
        tok,
        _table(source, vocab) if vocab is not None else source,
        values=values,
        trigger=trigger,
        vocab=vocab,
    )
    p = c.processor()

    def process(input_ids: Any, logits: Any) -> Any:
        return p(input_ids[0], logits)  # mlx-lm decodes one sequence: Outlines passes it as one row

    return TriecOutlinesProcessor("mlx", c, process=process, reset=p.reset)


def _llama_cpp(model: Any, source: Source, values: Any, trigger: Any, vocab: Any) -> TriecOutlinesProcessor:
    from triec.integrations.llama_cpp import LlamaCppConstraint, model_vocabulary

    llm = model.model
    if vocab is None and values_of(source) is not None:
        vocab = model_vocabulary(llm)
    table = _table(source, vocab) if vocab is not None else source
    c = LlamaCppConstraint(llm, table, values=values, trigger=trigger, vocab=vocab)
    d = c.decoding()

    def process(input_ids: Any, logits: Any) -> Any:
        return d.process(input_ids[0], logits[0])[None]  # llama.cpp decodes one sequence

    return TriecOutlinesProcessor("numpy", c, process=process, reset=d.reset)


def _transformers(model: Any, source: Source, values: Any, trigger: Any, vocab: Any) -> TriecOutlinesProcessor:
    from triec.integrations.local import admit_local, table_vocabulary, tokenizer_path, tokenizer_vocabulary
    from triec.integrations.serving import ServedModel
    from triec.integrations.transformers import TriecLogitsProcessor

    hf, tok = model.model, model.hf_tokenizer
    width = int(hf.get_output_embeddings().weight.shape[0])
    eos = getattr(hf.generation_config, "eos_token_id", None)
    stops = {eos} if isinstance(eos, int) else {int(e) for e in (eos or ())}
    if not stops and tok.eos_token_id is not None:
        stops = {int(tok.eos_token_id)}
    vocab = tokenizer_vocabulary(tok, vocab_size=width, eos_token_ids=stops, vocab=vocab)
    served = ServedModel(
        tokenizer=tokenizer_path(tok),
        vocab_size=width,
        eos_token_id=tok.eos_token_id,
        generation_eos_ids=tuple(sorted(stops)),
    )
    admitted = admit_local(
        _table(source, vocab),
        served,
        stops,
        vocab,
        values=values,
        fix_stops="transformers' generate stops on generation_config.eos_token_id",
    )
    if trigger is not None and admitted.table.host_matched:
        raise RequestError(f"trigger= needs a table of values, not a {admitted.table.kind} table")
    inner = TriecLogitsProcessor(
        admitted.table,  # type: ignore[arg-type]  # admitted: a kind the transformers processor serves
        trigger=trigger,
        vocab=table_vocabulary(admitted.table, vocab, served) if trigger is not None else None,
    )
    return TriecOutlinesProcessor("torch", inner, process=inner, reset=inner.reset)
