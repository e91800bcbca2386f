"""GPU benchmarks: `vllm-sampling-plugin bench AREA` (each area module has main(argv)).

``harness`` runs an area (cases, candidates, stock/plugin ratios, token
checks, the report) and documents how to declare one; ``timing`` measures,
``report`` writes JSON, PNG and tables, ``tuning`` runs ``--tune`` sweeps.
``sampler``, ``topk_topp``, ``rejection`` and ``ngram`` only declare their cases.
``upstream`` is its own loop: the plugin's ops against vLLM 0.32's, paired
and interleaved in one process.
"""
