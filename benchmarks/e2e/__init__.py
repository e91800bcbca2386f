"""``python3 -m benchmarks e2e``: stock vLLM 0.20 against the plugin, end to end.

What it measures, on one GPU in one run: generated tokens per second of real
V2-runner engines (async scheduling and CUDA graphs, vLLM's defaults) for
each sampling mix and batch size, stock (``VLLM_PLUGINS=none``) against the
plugin; the per-step GPU time of the sampling step and of the whole step and
the host time per step, inside both engines; n-gram speculation's speed-up,
acceptance and output identity; and the time to first token of a fresh
engine's first requests.

How, and why so:

- Checkpoints (``checkpoint.py``) are written on the benchmark machine with
  random weights scaled so the logits are peaked like a trained model's;
  vLLM's dummy weights give near-uniform logits, which changes what top-k/
  top-p and greedy sampling cost and do.
- Run-to-run spread of one engine reaches tens of percent on the lent
  machines, far above the few percent to be shown. So a stock and a plugin
  engine live side by side on the GPU (``engine.py``, each with
  ``--gpu-memory-utilization`` of the memory, started one after the other)
  and each cell runs ``--pairs`` stock/plugin pairs back to back, the first
  engine alternating (``workload.pair_orders``). The report gives each
  engine's median and spread and the ratio of medians.
- Batch size is the number of requests in flight: requests go in waves of
  ``max_num_seqs`` to an engine built for the largest one. Every request
  generates exactly ``--output-len`` tokens (``ignore_eos``), so a wave runs in
  lock step, as an engine limited to that many sequences would; one engine
  per role serves every batch size, which is what makes interleaving
  affordable (an engine starts in about a minute).
- Throughput is measured with nothing installed in the engine. The step
  breakdown is a separate instrumented pass (``hooks.py``: CUDA events
  around the runner's sampler / rejection sampler and around each step, host
  timers), installed alike in both engines through ``collective_rpc``: one
  short wave, or for a speculation cell its requests at full length in
  continuous batching, the regime its pairs time.
- N-gram speculation exists only with the plugin (0.20's V2 runner has no
  n-gram proposer), so that cell compares the plugin engine without and with
  speculation. A random model never continues by copying, so nothing would be
  accepted: the cell runs on the copy checkpoint (``copying.py``: same shapes
  and compute, greedy follows fixed token cycles) with prompts that repeat a
  cycle (``copying.prompts``), a best case for acceptance. It reports vLLM's
  spec-decode counters, and compares greedy outputs token by token; at each
  request's first differing position it measures the top-2 raw logits of
  that context in both engines to show whether it is a near tie.
- ``--trace-workloads`` (vLLM 0.34, ``traces.py``): the speculation cells
  replay the traces of ``python -m benchmarks.workloads build``'s real-text
  requests on the peaked checkpoint instead of the copy checkpoint's
  prompts, every run's tokens checked against the traces; the plugin's
  policy against no speculation and upstream's options (docs/workloads.md).
- Cold start: every fresh engine times its first greedy, top-k/top-p and
  seeded top-p requests (``engine.COLD_START_MIXES``); the copy checkpoint's
  engine without speculation sends top-k/top-p first, the others greedy, so
  the run separates the engine's first-request cost from a sampling route's.
- Results go to ``--out``/e2e.json after every cell (schema in ``report.py``),
  then e2e.png and markdown tables; ``--render e2e.json`` prints the tables.
  ``--ratios e2e.json`` prints the plugin/stock cells as integration/parts.py's
  ratio strings (``report.parts_ratios``); ``--record`` (with ``--ratios`` or
  a run) writes them into data/measurements.json under the run's vLLM line.

Options whose reasons do not fit a help line:

- ``--min-run-s``: a small model's runs of a second or two spread more than
  the effects measured; one untimed run of ``--num-requests`` per engine
  gives the faster engine's throughput, from which a timed run is lengthened.
- ``--control-alongside``: each pair becomes a rotation of three runs
  (baseline, variant, twin), so the cell against the twin comes from the same
  runs as the cell against the baseline; three 1B engines fit at
  ``--gpu-memory-utilization`` 0.31 or less.
- ``--start-together``: start-up seconds and first-request TTFTs then include
  the other engines' start-up; vLLM sizes a KV cache from the memory left
  after its profiling, which engines starting beside it change, hence
  ``--kv-cache-gib``.
- ``--max-cudagraph-capture-size``: an n-gram engine's is at least
  ``max_num_seqs * (k + 1)``, its verification step's tokens.
- ``--spec-verification default`` passes nothing: the release's default
  (integration/settings/defaults.py).
"""


def main(argv: list[str] | None = None) -> int:
    from benchmarks.e2e.run import main as run_main

    return run_main(argv)
