"""A tiny random-weight Llama with the real Qwen2 tokenizer, written to a directory vLLM can serve.

Hidden size 128 with 2 heads (head_dim 64: vLLM's CPU attention refuses
head_dim 16), one layer, vocabulary 151,936 (Qwen2.5's logits width), EOS ids
151643 and 151645 in config.json and generation_config.json. Nothing is
downloaded: the tokenizer is the one bundled in triec. Used by the vLLM tests
and benchmarks/vllm_processors.py.
"""

from __future__ import annotations

import json
from pathlib import Path

VOCAB_SIZE = 151_936
EOS_IDS = [151643, 151645]


def make_tiny_llama(directory: str | Path, seed: int = 0) -> Path:
    """Write the model and its tokenizer into ``directory`` (created) and return it."""
    import tokenizers
    import torch
    import transformers

    from triec.tokenizer.source import locate

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    if (out / "config.json").is_file() and (out / "tokenizer.json").is_file():
        return out
    backend = tokenizers.Tokenizer.from_str(json.dumps(locate("qwen2").tokenizer_json))
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="<|endoftext|>", pad_token="<|endoftext|>"
    )
    config = transformers.LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=EOS_IDS,
        pad_token_id=EOS_IDS[0],
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config)
    model.generation_config = transformers.GenerationConfig(eos_token_id=EOS_IDS, pad_token_id=EOS_IDS[0])
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out
