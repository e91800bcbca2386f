"""GPU benchmarks: `python3 -m benchmarks AREA` (each area module has main(argv)).

``harness`` runs an area (cases, candidates, stock/plugin ratios, token
checks, the report) and documents how to declare one; ``timing`` measures,
``report`` writes JSON, PNG and tables, ``tuning`` runs ``--tune`` sweeps.
``sampler``, ``topk_topp``, ``rejection`` and ``ngram`` only declare their cases.
``upstream`` times the plugin's ops against vLLM 0.32's and 0.33's, one
part at a time, interleaved (``harness.measure_interleaved``, tabled by
``report.paired_markdown_table``).
"""
