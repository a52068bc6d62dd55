"""The tokenizer's own encoder, for canonical tokenization (``tokenization="canonical"``).

Canonical means what the encoder produces for the whole output string, so it needs the
tokenizer's model, normalizer and pre-tokenizer, not just its token bytes: a tokenizer.json
has them; a vocabulary built from token bytes, or a GGUF's vocabulary (triec reads its tokens,
not its merges and llama.cpp's pre-tokenizer), does not. ``tokenizers`` is imported on use.
"""

from __future__ import annotations

import json
from typing import Any

from triec.errors import TokenizerError
from triec.tokenizer.source import decompress

_ENCODERS: dict[str, Any] = {}
_KEEP = 4  # encoders kept per process (a Qwen2 one holds about 100 MB)


def encoder_for(src: Any) -> Any:
    """:func:`encoder_from_json` of a :class:`~triec.tokenizer.source.TokenizerSource`, memoized by its content digest."""
    key = src.content_digest
    found = _ENCODERS.get(key)
    if found is None:
        raw = decompress(src.raw, src.label) if src.compressed else src.raw
        if b'"Prepend"' in raw or b'"Metaspace"' in raw or b'"gguf-' in raw:
            found = encoder_from_json(src.tokenizer_json, src.label)  # rewritten first
        else:  # the file as it is: no Python JSON round trip (0.3 s for Qwen2's)
            found = _from_str(raw.decode("utf-8"), src.label)
        while len(_ENCODERS) >= _KEEP:
            _ENCODERS.pop(next(iter(_ENCODERS)))
        _ENCODERS[key] = found
    return found


def encoder_from_json(doc: dict[str, Any], label: str) -> Any:
    """A ``tokenizers.Tokenizer`` for ``doc``, the value spelled without SentencePiece's dummy prefix.

    A SentencePiece tokenizer prepends a space ("▁") to the text it encodes, as if it started a
    document; an answer the model writes is a continuation, and the prefixed space would be a
    different string. The ``Prepend`` normalizer is dropped and a ``Metaspace`` pre-tokenizer set to
    ``prepend_scheme="never"``: the encoder's split of the value itself. The text of a special token
    inside a value is encoded as text (``encode_special_tokens``). Anything else is the tokenizer's own
    (its normalizer, pre-tokenizer, merges and added tokens).
    """
    model = str((doc.get("model") or {}).get("type", ""))
    if model.startswith("gguf-"):
        raise TokenizerError(
            f"{label}: a GGUF vocabulary has no encoder here (triec reads its tokens, not its merges and llama.cpp's "
            "pre-tokenizer), so canonical tokenization is not defined for it; use the model's tokenizer.json "
            "(for a GGUF, the directory `triec eval` builds from it)"
        )
    return _from_str(json.dumps(_without_dummy_prefix(doc)), label)


def _from_str(text: str, label: str) -> Any:
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_str(text)
    except Exception as exc:  # noqa: BLE001 - tokenizers raises plain Exception on bad JSON
        raise TokenizerError(f"{label}: the tokenizers library cannot build this tokenizer's encoder ({exc})") from None
    # A value's text that spells a special token ("<|endoftext|>") is text: the model cannot write the special
    # id inside a value (it ends the output or is dropped from it), so it is encoded as the ordinary text it is.
    tok.encode_special_tokens = True
    return tok


def _without_dummy_prefix(doc: dict[str, Any]) -> dict[str, Any]:
    norm = doc.get("normalizer")
    if isinstance(norm, dict):
        if norm.get("type") == "Prepend":
            norm = None
        elif norm.get("type") == "Sequence":
            norm = {**norm, "normalizers": [n for n in norm.get("normalizers", []) if n.get("type") != "Prepend"]}
    pre = _never_prepend(doc.get("pre_tokenizer"))
    return {**doc, "normalizer": norm, "pre_tokenizer": pre}


def _never_prepend(pre: Any) -> Any:
    if not isinstance(pre, dict):
        return pre
    if pre.get("type") == "Metaspace":
        return {**pre, "prepend_scheme": "never", "add_prefix_space": False}
    if pre.get("type") == "Sequence":
        return {**pre, "pretokenizers": [_never_prepend(p) for p in pre.get("pretokenizers", [])]}
    return pre
