"""The serving core's one door, without a framework: the served vocabulary loaded once, the served model's
fingerprints, and the one stack walker for vLLM's frontend (read from frames shaped as vLLM's, no vLLM needed)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import triec
from triec.errors import RequestError
from triec.integrations import serving
from triec.integrations.vllm import internals

V = 151_936


def test_the_served_vocabulary_is_loaded_once_per_tokenizer_width_and_eos_set() -> None:
    one = serving.served_vocabulary("qwen2", V, [151645, 151643, 151643])
    assert serving.served_vocabulary("qwen2", V, (151643, 151645)) is one
    assert one.eos_token_ids == (151643, 151645) and one.vocab_size == V
    model = serving.ServedModel("qwen2", V, 151643, (151643, 151645))
    assert model.vocabulary([151643, 151645]) is one
    assert model.fingerprint([151645, 151643]) == one.fingerprint
    assert serving.served_vocabulary("qwen2", V, [151643]) is not one


def test_a_served_model_without_a_tokenizer_fingerprints_only_what_it_was_given() -> None:
    vocab = triec.Vocabulary.load("qwen2", vocab_size=V, eos_token_ids=[151643])
    model = serving.ServedModel.of(vocab)
    assert model.tokenizer is None and model.name == vocab.name and model.stop_ids(None) == {151643}
    assert model.fingerprint([151643]) == vocab.fingerprint and model.vocabulary([151643]) is vocab
    assert model.fingerprint([151645]) is None  # nothing to load another EOS set from
    with pytest.raises(RequestError, match="did not say which tokenizer"):
        model.vocabulary([151645])
    other = triec.compile(["red", "green"], triec.Vocabulary.load("qwen2", vocab_size=V, eos_token_ids=[151645]))
    with pytest.raises(RequestError, match="another tokenizer"):
        serving.admit("artifact 'x'", other, other, model, {151643, 151645}, fix_stops="-")


def test_restrict_values_are_one_rule() -> None:
    assert serving.restrict_values(["b", "a", "b"]) == ("a", "b") and serving.restrict_values("a") == ("a",)
    for bad, words in (
        ([], "non-empty list"),
        ({"a": 1}, "non-empty list"),
        (["a", 2], "must be strings"),
        (["x"] * (serving.MAX_RESTRICT + 1), "at most"),
    ):
        with pytest.raises(RequestError, match=words) as info:
            serving.restrict_values(bad, "x-key")
        assert "'x-key'" in str(info.value)


def _validate_structured_outputs(
    self: object, model_config: object, structured_outputs_config: object, tokenizer: object
) -> internals.Frontend | None:
    """Shaped as vLLM's ``SamplingParams._validate_structured_outputs``: the backend's hook runs below it."""
    return _hook()


def _hook() -> internals.Frontend | None:
    return internals.frontend()


class InputProcessor:
    """Shaped as vLLM's: a logits processor's ``validate_params`` runs below its ``_validate_params``."""

    def __init__(self, model_config: object, eos: int | None) -> None:
        self.model_config = model_config
        self.structured_outputs_config = SimpleNamespace(disable_any_whitespace=True)
        self.renderer = SimpleNamespace(get_eos_token_id=lambda: eos)
        self.generation_config_fields: dict[str, object] = {}

    def _validate_params(self, params: object) -> internals.Frontend | None:
        return _hook()


def test_one_walker_reads_either_frontend_frame() -> None:
    config = SimpleNamespace(
        tokenizer="qwen2",
        get_vocab_size=lambda: V,
        try_get_generation_config=lambda: {"eos_token_id": [151643, 151645]},
    )
    so = SimpleNamespace(disable_any_whitespace=False)
    found = _validate_structured_outputs(None, config, so, SimpleNamespace(eos_token_id=151643))
    assert found == internals.Frontend(config, so, 151643)
    assert _validate_structured_outputs(None, config, so, object()).eos_token_id is None  # a tokenizer without EOS
    processor = InputProcessor(config, 151645)
    found = processor._validate_params(None)
    assert found is not None and found.model_config is config and found.eos_token_id == 151645
    assert found.structured_outputs_config is processor.structured_outputs_config
    served = found.served_model()
    assert served.tokenizer == "qwen2" and served.generation_eos_ids == (151643, 151645)
    assert served.eos_token_id == 151645
    assert found.served_model() is served  # once per model config and EOS id
    assert _hook() is None  # no frontend up this stack
