"""Write the tokens a real vLLM engine with the plugin generates, greedy and
seeded, with and without n-gram speculation, for fixed prompts.

    python3 scripts/dump_engine_tokens.py MODEL OUT.json     # one revision
    PYTHONPATH=OLD:$PYTHONPATH python3 scripts/dump_engine_tokens.py MODEL OLD.json

MODEL is a checkpoint directory loaded with dummy weights (vLLM seeds them),
so two runs of the same engine see the same logits; put an older revision of
the package first on ``PYTHONPATH`` and compare the two files to see whether
a change moved a single engine token. Needs a CUDA GPU.
"""

from __future__ import annotations

import json
import os
import sys

PROMPTS = [f"{i} {i + 1} {i + 2} {i} {i + 1}" * (1 + i % 3) for i in range(16)]


def generate(model: str, speculative: bool) -> dict[str, list[list[int]]]:
    from vllm import LLM, SamplingParams

    spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2,
            "prompt_lookup_max": 3} if speculative else None
    llm = LLM(model=model, load_format="dummy", max_model_len=256, max_num_seqs=16,
              gpu_memory_utilization=0.3, seed=0, speculative_config=spec)
    mixes = {
        "greedy": [SamplingParams(temperature=0.0, max_tokens=48)] * len(PROMPTS),
        "seeded_topp": [SamplingParams(temperature=0.8, top_p=0.9, seed=100 + i, max_tokens=48)
                        for i in range(len(PROMPTS))],
    }
    tokens = {name: [list(out.outputs[0].token_ids) for out in llm.generate(PROMPTS, params)]
              for name, params in mixes.items()}
    del llm
    return tokens


def main() -> None:
    model, out = sys.argv[1], sys.argv[2]
    os.environ.setdefault("VLLM_USE_V2_MODEL_RUNNER", "1")
    result = {"package": __import__("vllm_sampling_plugin").__file__}
    for speculative in (False, True):
        label = "ngram" if speculative else "none"
        for mix, rows in generate(model, speculative).items():
            result[f"{label}/{mix}"] = rows
    with open(out, "w") as f:
        json.dump(result, f)
    print(f"wrote {out} from {result['package']}")


if __name__ == "__main__":
    main()
