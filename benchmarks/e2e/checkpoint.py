"""Write a Llama-shaped bf16 checkpoint with random, *peaked* weights, offline.

    python3 -m benchmarks.e2e.checkpoint --shape 8b --vocab 151936 --out DIR
    python3 -m benchmarks.e2e.checkpoint --shape 1b --vocab 128256 --kind copy --out DIR

Two kinds: ``peaked`` (below) for the sampling mixes, and ``copy``
(``copying.py``: same shapes and compute, but greedy follows fixed token
cycles) for the n-gram speculation cell.

Why not ``load_format="dummy"``: vLLM's dummy weights are uniform in
[-1e-3, 1e-3], so every logit is close to zero and the next-token distribution
is nearly uniform over the whole vocabulary. Top-k/top-p then keeps thousands
of candidates, greedy rows are decided by noise, and the sampler does work (and
takes branches) that no trained model causes. A trained model puts 10-90% of
the mass on its top token; these weights do too.

How the weights are scaled: the final RMSNorm rescales the residual stream to
unit RMS whatever the layers added to it, so with the final norm weight 1 and
``lm_head`` entries drawn from N(0, LOGIT_STD^2 / hidden) every logit is a
sum of ``hidden`` unit-variance terms and has standard deviation LOGIT_STD,
independent of depth. The residual stream itself is dominated by the layers'
outputs (projections at the usual 0.02 initialisation each add about one unit
per layer), not by the unit-variance embeddings, so the next token depends on
the whole context as in a real model (which is also why it never continues
a text by copying it: the n-gram cell uses the copy kind). For ``vocab`` independent
Gaussian logits of standard deviation 6 the top-1 probability has a median of
about 0.39 at both vocabulary sizes (10th to 90th percentile about 0.17 to
0.84; at 4.5 the median would be 0.21, at 3.5 under 0.1);
``tests/benchmarks/test_e2e_checkpoint.py`` measures it through transformers and
the benchmark prints it for the real shapes.

Weights are drawn on the GPU when there is one (bf16, one layer at a time) and
written shard by shard, so an 8B-class checkpoint (16 GB) takes about as long
as the disk needs. The tokenizer is a word-level vocabulary of exactly
``vocab`` tokens, so ``vllm serve`` can load the directory; the benchmark passes
token ids.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path

import torch

from benchmarks.e2e import copying

# Standard deviation of every logit for any input (see the module docstring).
LOGIT_STD = 6.0
# Hugging Face's Llama initialiser range for the projections.
PROJECTION_STD = 0.02
EMBEDDING_STD = 1.0
BOS_ID, EOS_ID, UNK_ID = 0, 1, 2
# Shards of about this size keep the host copy of a shard small.
SHARD_BYTES = 2 * 2**30


@dataclasses.dataclass(frozen=True)
class Shape:
    """The Llama dimensions that differ between the written checkpoints."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int


SHAPES = {
    # Llama-3.2-1B's dimensions (untied lm_head so its scale is set apart).
    "1b": Shape(hidden=2048, intermediate=8192, layers=16, heads=32, kv_heads=8, head_dim=64),
    # Llama-3.1-8B's dimensions.
    "8b": Shape(hidden=4096, intermediate=14336, layers=32, heads=32, kv_heads=8, head_dim=128),
    # CPU tests and GPU smoke runs (head_dim 32: the smallest vLLM's attention backends take).
    "tiny": Shape(hidden=64, intermediate=128, layers=2, heads=2, kv_heads=1, head_dim=32),
}
VOCABS = (128256, 151936)
KINDS = ("peaked", "copy")
# Records the kind next to the weights (the config is the same for both).
KIND_FILE = "e2e_checkpoint.json"
# The projections whose output is added to the residual stream.
RESIDUAL_OUTPUTS = ("self_attn.o_proj.weight", "mlp.down_proj.weight")


def hf_config(shape: Shape, vocab: int) -> dict:
    """The ``config.json`` of a ``LlamaForCausalLM`` with these dimensions."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab,
        "hidden_size": shape.hidden,
        "intermediate_size": shape.intermediate,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "head_dim": shape.head_dim,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "torch_dtype": "bfloat16",
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "tie_word_embeddings": False,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
    }


def tensor_shapes(shape: Shape, vocab: int) -> dict[str, tuple[int, ...]]:
    """Every tensor of the checkpoint, by Hugging Face name, in writing order."""
    d, q, kv = shape.hidden, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, d)}
    for i in range(shape.layers):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (d,),
            p + "self_attn.q_proj.weight": (q, d),
            p + "self_attn.k_proj.weight": (kv, d),
            p + "self_attn.v_proj.weight": (kv, d),
            p + "self_attn.o_proj.weight": (d, q),
            p + "post_attention_layernorm.weight": (d,),
            p + "mlp.gate_proj.weight": (shape.intermediate, d),
            p + "mlp.up_proj.weight": (shape.intermediate, d),
            p + "mlp.down_proj.weight": (d, shape.intermediate),
        })
    shapes["model.norm.weight"] = (d,)
    shapes["lm_head.weight"] = (vocab, d)
    return shapes


def weight_std(name: str, hidden: int, kind: str = "peaked") -> float | None:
    """Standard deviation of a tensor's entries; None for norm weights (all
    ones). The copy kind's ``lm_head`` is not drawn (``copying.lm_head``)."""
    if name.endswith("layernorm.weight") or name == "model.norm.weight":
        return None
    if name == "lm_head.weight":
        return LOGIT_STD / math.sqrt(hidden)
    if name == "model.embed_tokens.weight":
        return EMBEDDING_STD
    if kind == "copy" and name.endswith(RESIDUAL_OUTPUTS):
        return PROJECTION_STD * copying.RESIDUAL_SCALE
    return PROJECTION_STD


def _draw(shape: tuple[int, ...], std: float | None, generator: torch.Generator,
          device: str) -> torch.Tensor:
    if std is None:
        return torch.ones(shape, dtype=torch.bfloat16)
    values = torch.randn(shape, generator=generator, device=device, dtype=torch.bfloat16)
    return values.mul_(std).cpu()


def write_tokenizer(out: Path, vocab: int) -> None:
    """A word-level tokenizer of exactly ``vocab`` tokens: ``<s>``, ``</s>``,
    ``<unk>`` and then ``t3`` ... ``t{vocab-1}`` (token ``tN`` has id N)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = {"<s>": BOS_ID, "</s>": EOS_ID, "<unk>": UNK_ID}
    words.update({f"t{i}": i for i in range(3, vocab)})
    tokenizer = Tokenizer(models.WordLevel(vocab=words, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "model_max_length": 4096,
    }))


def write_checkpoint(out: str | Path, shape_name: str, vocab: int, seed: int = 0,
                     device: str | None = None, kind: str = "peaked") -> Path:
    """Write config, generation config, tokenizer and sharded safetensors weights.

    Args:
        out: directory, created if missing.
        shape_name: a key of ``SHAPES`` (``"1b"``, ``"8b"``, ``"tiny"``).
        vocab: vocabulary size (the logits' width).
        seed: seeds the weights; the same arguments write the same bytes.
        device: where to draw the weights; default CUDA when available.
        kind: ``"peaked"`` or ``"copy"`` (see ``KINDS``).

    Returns:
        The directory, loadable by ``LLM(model=...)`` and
        ``transformers.LlamaForCausalLM.from_pretrained``.
    """
    from safetensors.torch import save_file

    shape = SHAPES[shape_name]
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    directory = Path(out)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(hf_config(shape, vocab), indent=1))
    (directory / "generation_config.json").write_text(
        json.dumps({"bos_token_id": BOS_ID, "eos_token_id": EOS_ID}))
    write_tokenizer(directory, vocab)
    (directory / KIND_FILE).write_text(json.dumps({"kind": kind, "seed": seed}))

    generator = torch.Generator(device=device).manual_seed(seed)
    weight_map: dict[str, str] = {}
    shard: dict[str, torch.Tensor] = {}
    shard_bytes, total_bytes, shard_files = 0, 0, []

    def flush() -> None:
        nonlocal shard, shard_bytes
        name = f"model-{len(shard_files) + 1:05d}.safetensors"
        save_file(shard, str(directory / name), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(shard, name))
        shard_files.append(name)
        shard, shard_bytes = {}, 0

    embedding = None
    for name, tensor_shape in tensor_shapes(shape, vocab).items():
        if kind == "copy" and name == "lm_head.weight":
            tensor = copying.lm_head(embedding.to(device)).cpu()
        else:
            tensor = _draw(tensor_shape, weight_std(name, shape.hidden, kind), generator, device)
        if name == "model.embed_tokens.weight":
            embedding = tensor
        nbytes = tensor.numel() * tensor.element_size()
        if shard and shard_bytes + nbytes > SHARD_BYTES:
            flush()
        shard[name] = tensor
        shard_bytes += nbytes
        total_bytes += nbytes
    flush()
    index = {"metadata": {"total_size": total_bytes}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=1))
    return directory


def is_written(out: str | Path, shape_name: str, vocab: int, kind: str = "peaked") -> bool:
    """True when ``out`` holds a complete checkpoint of this shape, vocabulary
    and kind (the index is written last, so an interrupted write is not
    mistaken for one; a checkpoint without a kind file predates the copy kind)."""
    directory = Path(out)
    try:
        config = json.loads((directory / "config.json").read_text())
        index = json.loads((directory / "model.safetensors.index.json").read_text())
        kind_file = directory / KIND_FILE
        written_kind = json.loads(kind_file.read_text())["kind"] if kind_file.exists() else "peaked"
    except (OSError, ValueError, KeyError):
        return False
    expected = hf_config(SHAPES[shape_name], vocab)
    files = set(index["weight_map"].values())
    return (config == expected and written_kind == kind
            and all((directory / f).exists() for f in files))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python3 -m benchmarks.e2e.checkpoint",
        description="Write a random, peaked Llama-shaped bf16 checkpoint.")
    parser.add_argument("--shape", choices=sorted(SHAPES), required=True)
    parser.add_argument("--vocab", type=int, required=True,
                        help=f"vocabulary size; the benchmark uses {VOCABS}")
    parser.add_argument("--out", required=True, help="directory to write")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kind", choices=KINDS, default="peaked",
                        help="peaked: random peaked logits; copy: greedy follows fixed "
                             "token cycles (the n-gram cell's model)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    import time

    args = parse_args(argv)
    if is_written(args.out, args.shape, args.vocab, args.kind):
        print(f"checkpoint {args.out} already written", flush=True)
    else:
        start = time.perf_counter()
        write_checkpoint(args.out, args.shape, args.vocab, seed=args.seed, kind=args.kind)
        print(f"wrote {args.kind} {args.shape} vocab {args.vocab} to {args.out} in "
              f"{time.perf_counter() - start:.1f} s", flush=True)
    # Also when a run stopped between the weights and the check.
    if args.kind == "copy" and not (Path(args.out) / copying.CHECK_FILE).exists():
        check_copying(args.out, args.shape, args.vocab)
    return 0


def check_copying(out: str, shape_name: str, vocab: int) -> None:
    """Measure the copy checkpoint with the real forward (``copying.verify``)
    and fail unless greedy follows the cycles everywhere."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    check = copying.verify(out, device=device)
    predicted = copying.predicted_top1_probability(SHAPES[shape_name].hidden, vocab)
    print(f"copy check ({device}, {check['positions']} positions): argmax is the successor "
          f"at {100 * check['argmax_is_successor']:.1f}%, top-2 gap min "
          f"{check['gap_min']:.2f} ({check['gap_min_bf16_spacings']:.0f} bf16 spacings), "
          f"top-1 probability min {check['top1_probability_min']:.4f} median "
          f"{check['top1_probability_median']:.4f} (predicted {predicted:.4f})", flush=True)
    if check["argmax_is_successor"] < 1.0:
        raise SystemExit(f"{out}: greedy does not follow the cycles; see {copying.CHECK_FILE}")


if __name__ == "__main__":
    sys.exit(main())
