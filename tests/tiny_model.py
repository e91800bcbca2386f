"""A tiny random Llama written to a local directory, offline.

Two layers, hidden size 256, head_dim 64 (TRITON_ATTN needs head_size >= 32),
and a byte-level BPE tokenizer trained on a small synthetic corpus. Load it
with ``load_format="dummy"``: the weights are random, the shapes real.
"""

from __future__ import annotations

import json
from pathlib import Path


def _corpus() -> list[str]:
    words = ["alpha", "beta", "gamma", "delta", "sample", "token", "kernel", "gumbel"]
    return [
        " ".join(words[(i + j) % len(words)] for j in range(12)) + f" {i}\n"
        for i in range(2000)
    ]


def write_tiny_llama(directory: str | Path, vocab_size: int = 1024) -> Path:
    """Write config, tokenizer and generation config; return the directory."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    specials = ["<s>", "</s>", "<pad>"]
    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(
        _corpus(),
        trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=specials,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    tokenizer.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>",
        "model_max_length": 2048,
    }))
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": tokenizer.get_vocab_size(),
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "torch_dtype": "bfloat16",
        "bos_token_id": 0,
        "eos_token_id": 1,
        "tie_word_embeddings": False,
        "hidden_act": "silu",
    }
    (out / "config.json").write_text(json.dumps(config))
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": 0, "eos_token_id": 1}))
    return out
