"""The e2e benchmark's checkpoint writer, on CPU with the tiny shape."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks.e2e import checkpoint

VOCAB = 128256


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("ckpt") / "tiny"
    return checkpoint.write_checkpoint(out, "tiny", VOCAB, seed=3, device="cpu")


def test_writes_config_index_and_every_tensor_with_its_shape(written):
    from safetensors import safe_open

    config = json.loads((written / "config.json").read_text())
    shape = checkpoint.SHAPES["tiny"]
    assert config["vocab_size"] == VOCAB
    assert config["hidden_size"] == shape.hidden
    assert config["num_hidden_layers"] == shape.layers
    assert config["num_key_value_heads"] == shape.kv_heads
    assert config["torch_dtype"] == "bfloat16"
    index = json.loads((written / "model.safetensors.index.json").read_text())
    expected = checkpoint.tensor_shapes(shape, VOCAB)
    assert set(index["weight_map"]) == set(expected)
    total = 0
    for name, file in index["weight_map"].items():
        with safe_open(str(written / file), "pt") as f:
            tensor = f.get_tensor(name)
        assert tensor.dtype == torch.bfloat16, name
        assert tuple(tensor.shape) == expected[name], name
        total += tensor.numel() * 2
    assert index["metadata"]["total_size"] == total
    assert checkpoint.is_written(written, "tiny", VOCAB)
    assert not checkpoint.is_written(written, "tiny", 151936)


def test_weight_scales_follow_the_design(written):
    from safetensors import safe_open

    index = json.loads((written / "model.safetensors.index.json").read_text())

    def load(name):
        with safe_open(str(written / index["weight_map"][name]), "pt") as f:
            return f.get_tensor(name).float()

    hidden = checkpoint.SHAPES["tiny"].hidden
    assert torch.equal(load("model.norm.weight"), torch.ones(hidden))
    lm_head_std = float(load("lm_head.weight").std())
    assert lm_head_std == pytest.approx(checkpoint.LOGIT_STD / hidden**0.5, rel=0.02)
    assert float(load("model.layers.0.mlp.up_proj.weight").std()) == pytest.approx(
        checkpoint.PROJECTION_STD, rel=0.05)


def test_tokenizer_has_exactly_vocab_tokens(written):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(written))
    assert len(tokenizer) == VOCAB
    assert tokenizer("t5 t17 t128255", add_special_tokens=False)["input_ids"] == [5, 17, 128255]
    assert tokenizer.eos_token_id == checkpoint.EOS_ID


def test_logits_are_peaked_like_a_trained_models(written):
    """Through transformers' Llama: the top token holds 10-90% of the mass for
    most positions (near-uniform logits would give about 1/vocab)."""
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(str(written), dtype=torch.bfloat16)
    ids = torch.randint(3, VOCAB, (16, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float()
    top1 = logits.softmax(-1).amax(-1).flatten()
    assert 0.1 <= float(top1.median()) <= 0.9
    assert float((top1 < 0.05).float().mean()) < 0.1


def test_same_seed_writes_the_same_weights(tmp_path):
    from safetensors.torch import load_file

    a = checkpoint.write_checkpoint(tmp_path / "a", "tiny", 512, seed=1, device="cpu")
    b = checkpoint.write_checkpoint(tmp_path / "b", "tiny", 512, seed=1, device="cpu")
    files = sorted(p.name for p in a.glob("*.safetensors"))
    assert files == sorted(p.name for p in b.glob("*.safetensors"))
    for name in files:
        left, right = load_file(str(a / name)), load_file(str(b / name))
        assert left.keys() == right.keys()
        assert all(torch.equal(left[k], right[k]) for k in left)


def test_cli_arguments():
    args = checkpoint.parse_args(["--shape", "8b", "--vocab", "151936", "--out", "x"])
    assert (args.shape, args.vocab, args.out, args.seed) == ("8b", 151936, "x", 0)
    with pytest.raises(SystemExit):
        checkpoint.parse_args(["--shape", "70b", "--vocab", "1", "--out", "x"])
