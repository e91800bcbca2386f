#!/usr/bin/env bash
# Run GPU test groups and benchmarks, logging each under OUT (default ./gpu-results).
# Usage: scripts/gpu-check.sh STEP...   STEP: ops | ngram | rejection | topk | e2e | cold-start |
#        bench-sampler | bench-topk | bench-rejection | bench-ngram | info |
#        tokens-before-after | ops-before-after | before-after-AREA | e2e-smoke | e2e-1b | e2e-ngram | e2e-8b |
#        e2e-8b-all | e2e-8b-fp64 | e2e-spec-1b | e2e-spec-8b | allowed-tokens | robust | soak | upstream |
#        ops-upstream | e2e-upstream | e2e-spec-stock | e2e-verify | e2e-vs-stock | e2e-draft |
#        line-check | spec-step-breakdown | compile-ahead | verification-dtype | spec-features |
#        verify-ops | e2e-spec-methods | e2e-trace
#        (upstream ... e2e-vs-stock, spec-features, verify-ops: vLLM 0.32/0.33; e2e-draft: 0.33;
#        e2e-spec-methods, e2e-trace: 0.34; line-check: a line
#        between 0.21 and 0.31)
# Each step is bounded by STEP_TIMEOUT seconds (default 420) and never stops the others;
# the script exits 1 after the last step if any failed or timed out, naming them.
# Before/after steps compare this checkout with an older package in $BEFORE
# (mkdir B && git archive REV vllm_sampling_plugin benchmarks | tar -x -C B); BENCH_ARGS
# narrows the benchmark (e.g. "--batch-sizes 64 256 1024"); E2E_ARGS comes after an e2e
# step's own options, so it overrides them (e.g. "--max-num-seqs 64").
# vLLM 0.32/0.33 on the lent GPU machine (torch 2.13/2.14): stage it first, docs/gpu-staging.md says how.
set -uo pipefail
out=${OUT:-gpu-results}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
# The test steps start each engine snippet in a plain new process, not forked
# from the tests' zygote (tests/fresh_interpreter.py): its 17 s of imports are
# small beside an engine's start, and a fork is one more thing between a test
# and the GPU (on the H200 with vLLM 0.33, 2026-11-29, every forked engine
# died with "Cannot re-initialize CUDA in forked subprocess"; test runs
# outside this script rely on the zygote detecting that case itself).
export PLUGIN_TESTS_NEW_PROCESSES=1
limit=${STEP_TIMEOUT:-420}
# Steps that failed, one line each; a file, since some steps run in parallel subshells.
failed="$out/failed-steps"
: > "$failed"
run() {
  local name=$1; shift
  echo "=== $name: $*"
  local t0=$SECONDS
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "=== $name rc=$rc in $((SECONDS - t0)) s"
  tail -n "${TAIL:-25}" "$out/$name.log"
  if [ "$rc" -ne 0 ]; then
    echo "$name rc=$rc$([ "$rc" -eq 124 ] && echo " (STEP_TIMEOUT=$limit s)")" >> "$failed"
  fi
}
# Stock vLLM 0.32/0.33 samples top-k/top-p with FlashInfer, whose sampling
# module a fresh lent machine compiles with nvcc on first use: a stock engine's
# first top-k/top-p request was still compiling it 174 s in when its step ran
# out of time (H200, vLLM 0.33, 2026-11-28). Steps that start stock engines
# on those lines build it in the background from the step's start, beside the
# first engine's start-up; an engine that needs it meanwhile waits on
# FlashInfer's build lock, so no timed run overlaps the build. Once per
# machine: FlashInfer keeps the module under ~/.cache/flashinfer. Where the
# staging sent it prebuilt (scripts/build_flashinfer_sampling.py) this only
# loads it, in seconds.
flashinfer_build_started=
build_flashinfer_sampling_in_background() {
  [ -n "$flashinfer_build_started" ] && return
  flashinfer_build_started=1
  ( t0=$SECONDS
    MAX_JOBS=$(nproc) python3 -c \
      'from flashinfer.sampling import get_sampling_module; get_sampling_module()' \
      > "$out/flashinfer-sampling-build.log" 2>&1
    echo "FlashInfer sampling module built or loaded (rc=$?) in $((SECONDS - t0)) s" \
      >> "$out/flashinfer-sampling-build.log" ) &
}
for step in "$@"; do
  case $step in
    info) run info vllm-sampling-plugin info ;;
    ops) run ops python3 -m pytest -q -p no:cacheprovider tests/ops/test_gumbel.py tests/ops/test_sample.py tests/ops/test_masking.py tests/ops/test_flashinfer.py ;;
    ngram) run ngram python3 -m pytest -q -p no:cacheprovider tests/ops/test_ngram.py tests/integration/speculator/test_ngram_proposer_0_20.py ;;
    rejection) run rejection python3 -m pytest -q -p no:cacheprovider tests/ops/test_rejection.py ;;
    topk) run topk python3 -m pytest -q -p no:cacheprovider tests/ops/test_topk_topp.py ;;
    e2e) run e2e python3 -m pytest -q -s -p no:cacheprovider tests/e2e ;;
    allowed-tokens)
      run allowed-tokens-op python3 -m pytest -q -p no:cacheprovider tests/ops/test_logit_bias.py
      VLLM_USE_V2_MODEL_RUNNER=1 run allowed-tokens-e2e python3 -m pytest -q -s -p no:cacheprovider \
        tests/e2e/test_allowed_tokens.py ;;
    cold-start) run cold-start python3 -m pytest -q -s -p no:cacheprovider tests/e2e/test_cold_start.py ;;
    spec-features)
      # Speculation with the line's default verification and policy (0.32 and
      # 0.33: the plugin's, adaptive) keeps what upstream's
      # offers: greedy and seeded tokens, the batches that stay upstream's,
      # logprobs, structured outputs; the default n-gram engine (async
      # scheduling, the line's policy) keeps greedy tokens; the standard
      # method verifies with allowed ids. Three rounds of tiny engines: 208-292 s
      # on an H200 with vLLM 0.33, 199 s with 0.32 (2026-11-29, all passed);
      # STEP_TIMEOUT=480 leaves room for a slower start. The other policies
      # and methods are in the e2e step.
      policy=$(python3 -c 'from vllm_sampling_plugin.integration.settings.defaults import defaults
from vllm_sampling_plugin.integration.version import LINE_SEAMS, installed_vllm_version, release_line
print(defaults(LINE_SEAMS[release_line(installed_vllm_version())]).get("speculation_policy", "fixed"))')
      run spec-features python3 -m pytest -q -s -p no:cacheprovider \
        tests/e2e/test_engine_upstream_sampler_lines.py \
        -k "plugins_verification_keeps or async_on-$policy or (accepts_ngram_drafts and standard)" ;;
    tokens-before-after)
      PYTHONPATH="$BEFORE:${PYTHONPATH:-}" run tokens-before python3 scripts/dump_op_tokens.py "$out/tokens-before.pt"
      run tokens-after python3 scripts/dump_op_tokens.py "$out/tokens-after.pt"
      run tokens-compare python3 scripts/bench_compare.py tokens "$out/tokens-before.pt" "$out/tokens-after.pt" ;;
    ops-before-after)
      # Both revisions in one process, interleaved; needs no vLLM. OPS_ARGS narrows it.
      # shellcheck disable=SC2086
      run ops-before-after python3 scripts/op_before_after.py "$BEFORE" --out "$out/ops-before-after.json" ${OPS_ARGS:-} ;;
    before-after-*)
      # shellcheck disable=SC2086
      run "$step" bash scripts/bench_before_after.sh "$BEFORE" "$out/before-after" "${step#before-after-}" ${BENCH_ARGS:-} ;;
    e2e-smoke) run e2e-smoke python3 -m benchmarks e2e --models tiny:128256 \
        --pairs 1 --num-requests 64 --output-len 32 --max-num-seqs 16,64 --identity-requests 64 \
        --gpu-memory-utilization 0.2 --time-budget $((limit - 60)) --out "$out/e2e-smoke" ;;
    e2e-1b) run e2e-1b python3 -m benchmarks e2e --models 1b:128256 \
        --mixes greedy,t1,topk_topp,seeded_topp,mixed --max-num-seqs 64,256 --pairs 3 \
        --num-requests 512 --output-len 128 --breakdown-mixes topk_topp ${E2E_ARGS:-} \
        --time-budget $((limit - 90)) --out "$out/e2e-1b" ;;
    e2e-ngram) run e2e-ngram python3 -m benchmarks e2e --models 1b:128256 \
        --mixes ngram --max-num-seqs 64,256 --pairs 3 --num-requests 512 --output-len 256 \
        --identity-requests 256 --breakdown-mixes ngram ${E2E_ARGS:-} --time-budget $((limit - 90)) --out "$out/e2e-ngram" ;;
    e2e-spec-1b | e2e-spec-8b)
      # n-gram speculation, adaptive against none and against fixed k, on the
      # four workloads of the copy checkpoint (benchmarks/e2e/copying.py), on any
      # line the policy runs on (0.20: the plugin's proposer; 0.32/0.33:
      # upstream's). The 1B run takes about 8 minutes on an H100:
      # STEP_TIMEOUT=540; the 8B one narrows --spec-workloads through E2E_ARGS.
      # A 1B cell whose runs spread more than its effect: add "--control
      # --control-alongside --gpu-memory-utilization 0.28" (the A/A twin in
      # the same window, three engines up), and "--start-together
      # --kv-cache-gib 6" to start the three at once.
      if [ "$step" = e2e-spec-1b ]; then model=1b:128256; else model=8b:151936; fi
      run "$step" python3 -m benchmarks e2e --models "$model" \
        --mixes ngram --max-num-seqs 64,256 --pairs 2 --num-requests 256 --output-len 256 \
        --identity-requests 64 --breakdown-mixes none --gpu-memory-utilization 0.42 \
        ${E2E_ARGS:-} --time-budget $((limit - 60)) --out "$out/$step" ;;
    e2e-spec-stock)
      # Upstream's own n-gram speculation (vLLM >= 0.32) against none, every
      # engine stock: issue 25's baseline, 8B, the workloads that matter for
      # it. One k per call fits the 10-minute limit: SPEC_K=3, then SPEC_K=7
      # (the copy checkpoint stays in /tmp/e2e-checkpoints between calls).
      build_flashinfer_sampling_in_background
      run "$step-k${SPEC_K:-3}" python3 -m benchmarks e2e --models 8b:151936 \
        --mixes ngram --spec-engines stock --ngram-k "${SPEC_K:-3}" --max-num-seqs 64,256 \
        --spec-workloads nonrepeating,mixed,accepting --pairs 2 --num-requests 256 \
        --output-len 256 --identity-requests 32 --breakdown-mixes none \
        --gpu-memory-utilization 0.42 ${E2E_ARGS:-} --time-budget $((limit - 60)) \
        --out "$out/$step-k${SPEC_K:-3}" ;;
    e2e-verify)
      # Issue 25: the plugin's verification (--plugin-verification plugin)
      # against upstream's and against no speculation, 8B, k = 3, fixed k,
      # accepting and non-repeating text, max_num_seqs 64 and 256. One
      # sampling mix per call fits the 10-minute limit: SPEC_MIXES=topk_topp,
      # then SPEC_MIXES=seeded_topp (the copy checkpoint stays in
      # /tmp/e2e-checkpoints between calls). Three engines, two at a time.
      run "$step-${SPEC_MIXES:-topk_topp}" python3 -m benchmarks e2e \
        --models 8b:151936 --mixes ngram --spec-engines plugin --spec-policies fixed \
        --spec-verification both --spec-mixes "${SPEC_MIXES:-topk_topp}" --ngram-k 3 \
        --max-num-seqs 64,256 --spec-workloads accepting,nonrepeating --pairs 2 \
        --num-requests 256 --output-len 128 --identity-requests 32 --breakdown-mixes none \
        --gpu-memory-utilization 0.42 ${E2E_ARGS:-} --time-budget $((limit - 60)) \
        --out "$out/$step-${SPEC_MIXES:-topk_topp}" ;;
    compile-ahead)
      # The warm-up's kernel variants compiled one after another against
      # compiled ahead in parallel (ops/compile_ahead.py), each in a fresh
      # interpreter and Triton cache; needs no vLLM. About 2 minutes.
      run "$step" python3 scripts/compile_ahead_check.py --out "$out/$step.json" ;;
    verification-dtype)
      # The plugin's verification op on float32 and on bfloat16 logits (what
      # vLLM 0.33 hands it), with draft logits and with point drafts,
      # unfiltered and top-k/top-p, at a draft engine's shapes (256 requests,
      # k = 3 and 7, vocabulary 128256); needs no vLLM. A few minutes.
      for dtype in float32 bfloat16; do
        run "$step-$dtype" python3 -m benchmarks rejection \
          --columns plugin_fp32 plugin_fp32_point plugin_fp32_topk_topp --batch-sizes 256 \
          --num-spec 3 7 --vocab-size 128256 --temperature 0.7 --logits-dtype "$dtype" \
          --out "$out/$step-$dtype"
      done ;;
    spec-step-breakdown)
      # Where an adaptive engine's time goes against a baseline, per step, in
      # continuous batching (scripts/spec_step_breakdown.py): 1B copy
      # checkpoint, k = 3. Default: non-repeating text against no
      # speculation; E2E_ARGS="--workload accepting --baseline fixed" asks
      # why adaptive ran below fixed k on 0.33 at 1B. About 5 minutes.
      run "$step" python3 scripts/spec_step_breakdown.py --out "$out/$step" ${E2E_ARGS:-} ;;
    e2e-vs-stock)
      # Issue 25's criterion: the plugin (adaptive policy, its verification
      # and draw) against stock vLLM speculating with the same k
      # (VLLM_PLUGINS=none), 8B, accepting text, top-k/top-p, seeded top-p,
      # then greedy, max_num_seqs 64 and 256. One k per call: SPEC_K=3 or 7
      # (about 8-9 minutes on an H100: STEP_TIMEOUT=575). A 1B engine runs
      # these 256 requests in under a second, which the host's noise
      # swamps: add --models 1b:128256 --min-run-s 8 through E2E_ARGS. With
      # the A/A twin (--control --control-alongside) three engine starts took
      # 320-390 s of a call one after another (1B, H200, 2026-12-02):
      # "--start-together --kv-cache-gib 6" starts them at once (three 8B
      # engines with --kv-cache-gib 12: up in 99-162 s, H200, 0.32).
      # Batches with logits processors (the plugin's verification on
      # upstream's canvas where they use top-k/top-p): E2E_ARGS="--spec-mixes
      # penalties_topk,topk_topp".
      build_flashinfer_sampling_in_background
      run "$step-k${SPEC_K:-3}" python3 -m benchmarks e2e \
        --models 8b:151936 --mixes ngram --spec-policies adaptive --spec-verification plugin \
        --no-spec-against-none --spec-against-stock --ngram-k "${SPEC_K:-3}" \
        --spec-workloads accepting --spec-mixes topk_topp,seeded_topp,ngram \
        --max-num-seqs 64,256 --pairs 3 --num-requests 256 --output-len 128 \
        --identity-requests 32 --breakdown-mixes none --gpu-memory-utilization 0.42 \
        ${E2E_ARGS:-} --time-budget $((limit - 60)) --out "$out/$step-k${SPEC_K:-3}" ;;
    e2e-spec-methods)
      # vLLM 0.34: the plugin's adaptive policy over SPEC_METHOD (suffix or
      # ngram) against stock speculating with the same k (VLLM_PLUGINS=none)
      # and against no speculation, on text that does not repeat and text
      # that accepts, 8B, greedy, three engines started together with 5.5 GiB
      # of KV cache each (with 7 GiB, 25-27.6 GiB an engine, stock's ran out of
      # memory on an H100, 2026-12-06).
      build_flashinfer_sampling_in_background
      run "$step-${SPEC_METHOD:-suffix}-k${SPEC_K:-3}" python3 -m benchmarks e2e \
        --models 8b:151936 --mixes ngram --spec-policies adaptive --spec-verification plugin \
        --spec-against-stock --ngram-method "${SPEC_METHOD:-suffix}" --ngram-k "${SPEC_K:-3}" \
        --spec-workloads nonrepeating,accepting --spec-mixes ngram --max-num-seqs 256 \
        --pairs 2 --num-requests 512 --output-len 128 --identity-requests 32 \
        --breakdown-mixes none --gpu-memory-utilization 0.28 --start-together \
        --kv-cache-gib 5.5 ${E2E_ARGS:-} --time-budget $((limit - 60)) \
        --out "$out/$step-${SPEC_METHOD:-suffix}-k${SPEC_K:-3}" ;;
    e2e-trace)
      # Issue 63's cells: the workloads of python -m benchmarks.workloads
      # build (real text; built once into $out/workloads, seed 0) replayed by
      # vLLM 0.34's trace replay, 8B with a 151936-id vocabulary (the
      # workloads' tokenizer has 32768 ids), for each of TRACE_METHODS
      # (default both): the plugin's adaptive policy against no speculation,
      # upstream's fixed k and, for suffix, upstream's adaptive verification,
      # at 64 and 256 sequences; every run's tokens must equal the traces.
      # TRACE_WORKLOADS narrows the workloads (e.g. ":code-edit,agentic").
      # Four 8B engines, two at a time, start one after another, so a whole
      # method fits a call only with STEP_TIMEOUT=590 and one workload
      # (TRACE_WORKLOADS=":chat"). Suffix decoding replays requests no engine
      # has seen in every run (bench e2e's CORPUS_METHODS): 2 batch sizes x 3
      # cells x 3 runs x 256, so the build holds TRACE_REQUESTS (default 4608)
      # a workload; a larger build repeats more across requests (chat: 83% of
      # a trace's 3-grams in earlier requests at 4608, 30% at 768), so narrow
      # the cells and build fewer (docs/gpu-staging.md). A folder already in
      # $out/workloads is used as it is.
      build_flashinfer_sampling_in_background
      [ -f "$out/workloads/stats.json" ] || python3 -m benchmarks.workloads build \
        --out "$out/workloads" --seed 0 --requests "${TRACE_REQUESTS:-4608}" \
        > "$out/workloads-build.log" 2>&1
      for method in ${TRACE_METHODS:-ngram suffix}; do
        run "$step-$method-k${SPEC_K:-3}" python3 -m benchmarks e2e \
          --models 8b:151936 --mixes ngram --spec-policies adaptive --spec-verification plugin \
          --trace-workloads "$out/workloads${TRACE_WORKLOADS:-}" --ngram-method "$method" \
          --ngram-k "${SPEC_K:-3}" --max-num-seqs 64,256 --pairs 2 --num-requests 256 \
          --gpu-memory-utilization 0.42 ${E2E_ARGS:-} --time-budget $((limit - 60)) \
          --out "$out/$step-$method-k${SPEC_K:-3}"
      done ;;
    e2e-draft)
      # Issue 25 for drafts with draft probabilities: a 1B copy checkpoint
      # speculating with a tiny copy checkpoint of the same vocabulary and
      # token cycles (vLLM 0.33's draft_model method; every draft accepted),
      # the plugin (its verification and draw) against stock vLLM with the
      # same draft model and k, 256 sequences, with the plugin's A/A twin
      # alongside (1B cells move with start order), and each engine of the
      # pair broken down per step in the cell's regime (at 1B the per-step
      # period resolves what whole runs, which follow the host, do not;
      # docs/benchmarks.md, 2026-11-28 fifth run). One mix per call:
      # SPEC_MIXES=t1 (default), topk_topp, seeded_topp; about 7 minutes on
      # an H200 (two engines took 300 s, 2026-11-28): STEP_TIMEOUT=590. An 8B
      # target (two 8B engines start in 5-7 minutes one after another) does
      # not fit a call unless they start at once: E2E_ARGS="--start-together
      # --kv-cache-gib 12" (run on a GPU in e2e-vs-stock only, not in this step).
      build_flashinfer_sampling_in_background
      run "$step-${SPEC_MIXES:-t1}" python3 -m benchmarks e2e \
        --models 1b:128256 --mixes ngram --spec-draft tiny --spec-policies fixed \
        --spec-verification plugin --no-spec-against-none --spec-against-stock \
        --ngram-k "${SPEC_K:-3}" --spec-workloads accepting --spec-mixes "${SPEC_MIXES:-t1}" \
        --max-num-seqs 256 --pairs 2 --num-requests 1024 --output-len 256 \
        --identity-requests 32 --breakdown-mixes ngram --control --control-alongside \
        --gpu-memory-utilization 0.28 ${E2E_ARGS:-} --time-budget $((limit - 60)) \
        --out "$out/$step-${SPEC_MIXES:-t1}" ;;
    line-check)
      # Issue 23 on a line between 0.21 and 0.31 (docs/compatibility.md): the
      # seams' engine test (seeded repeat, batch invariance, valid tokens,
      # the runner's sampler), then the 8B top-k/top-p and seeded top-p mixes
      # against stock with the cold-start table. About 4 + 6 minutes on an
      # H100/H200: STEP_TIMEOUT=420 each.
      run line-check-e2e python3 -m pytest -q -s -p no:cacheprovider \
        tests/e2e/test_engine_upstream_sampler_lines.py -k "seeded_request or valid_tokens or runner_holds"
      run line-check-8b python3 -m benchmarks e2e --models 8b:151936 \
        --mixes topk_topp,seeded_topp --max-num-seqs 64,256 --pairs 3 --num-requests 256 \
        --output-len 128 --breakdown-mixes none --gpu-memory-utilization 0.45 ${E2E_ARGS:-} \
        --time-budget $((limit - 60)) --out "$out/line-check-8b" ;;
    e2e-8b) run e2e-8b python3 -m benchmarks e2e --models 8b:151936 \
        --mixes topk_topp --max-num-seqs 256 --pairs 5 --num-requests 512 --output-len 256 \
        --breakdown-mixes topk_topp --gpu-memory-utilization 0.45 ${E2E_ARGS:-} \
        --time-budget $((limit - 90)) --out "$out/e2e-8b" ;;
    e2e-8b-all)
      # Every mix at both batch sizes where the GPU, not the host, sets the
      # pace; the capture size avoids vLLM 0.20's capture crash at 256
      # (docs/troubleshooting.md). About 8 minutes on an H100: STEP_TIMEOUT=570.
      run e2e-8b-all python3 -m benchmarks e2e --models 8b:151936 \
        --mixes greedy,t1,topk_topp,seeded_topp,mixed --max-num-seqs 64,256 --pairs 4 \
        --num-requests 256 --output-len 128 --breakdown-mixes topk_topp \
        --attention-backend FLASH_ATTN --max-cudagraph-capture-size 256 \
        --gpu-memory-utilization 0.45 ${E2E_ARGS:-} --time-budget $((limit - 90)) \
        --out "$out/e2e-8b-all" ;;
    e2e-8b-fp64)
      # --use-fp64-gumbel in both engines (stock 0.20 has no flag: it always
      # draws FP64), the mixes whose rows the plugin draws on 0.32/0.33.
      run e2e-8b-fp64 python3 -m benchmarks e2e --models 8b:151936 \
        --mixes t1,seeded_topp,mixed --max-num-seqs 256 --pairs 4 --use-fp64-gumbel \
        --num-requests 256 --output-len 128 --breakdown-mixes t1 \
        --attention-backend FLASH_ATTN --max-cudagraph-capture-size 256 \
        --gpu-memory-utilization 0.45 ${E2E_ARGS:-} --time-budget $((limit - 90)) \
        --out "$out/e2e-8b-fp64" ;;
    robust)
      # Issue 14's engine checks (every sampling field with n-gram, structured
      # outputs FP32/FP64 with and without n-gram, preemption, slot reuse; TP=2
      # where two GPUs are visible) and the bad-words alignment test.
      run robust python3 -m pytest -v -s -p no:cacheprovider tests/integration/draw/test_sample_bad_words.py \
        tests/e2e/test_serving_robustness.py ;;
    soak)
      # A bounded load against vllm serve (docs/troubleshooting.md, "Soak run")
      # on the tiny test checkpoint, FP64 Gumbel and n-gram speculation on.
      python3 -c "from tests.tiny_model import write_tiny_llama; write_tiny_llama('/tmp/soak-model', 2048)"
      VLLM_USE_V2_MODEL_RUNNER=1 run soak python3 -m benchmarks soak --launch /tmp/soak-model \
        --requests "${SOAK_REQUESTS:-2000}" --concurrency 64 -- --load-format dummy \
        --max-model-len 512 --use-fp64-gumbel \
        --speculative-config '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 3}' \
        --structured-outputs-config '{"backend": "xgrammar", "disable_any_whitespace": true}' ;;
    e2e-parallel)
      # The tiny engines take ~12% of the GPU each: run the groups side by side.
      for group in "ngram_speculation and False" "ngram_speculation and True" \
                   "rejection_methods"; do
        name="e2e-${group// /_}"
        run "$name" python3 -m pytest -q -s -p no:cacheprovider tests/e2e -k "$group" &
      done
      wait
      # vLLM's memory profiling fails when other engines free memory meanwhile;
      # the sampler engines run after the others.
      run e2e-sampler python3 -m pytest -q -s -p no:cacheprovider tests/e2e -k sampler ;;
    upstream)
      # The plugin's ops against the installed 0.32 line's own code, one process.
      run upstream python3 -m benchmarks.upstream --out "$out/upstream" ;;
    verify-ops)
      # The verification op at 1024-4096 rows, V = 151936 (0.32/0.33): the
      # plugin's folded verification, and its canvas route for batches with
      # logits processors, each against upstream's whole verification path
      # (opt-in parts of bench upstream; 18 cases, up to 2.5 GB of logits each).
      run verify-ops python3 -m benchmarks.upstream \
        --parts verify_filtered verify_processed --budget-s $((limit - 60)) \
        --out "$out/verify-ops" ;;
    ops-upstream)
      # The GPU op tests, among them FP64 murmur3 noise against the installed
      # line's own gumbel_sample and the fused top-k/top-p kernel in every noise.
      run ops-upstream python3 -m pytest -q -p no:cacheprovider -m gpu \
        tests/ops/test_gumbel.py tests/ops/test_topk_topp.py ;;
    e2e-upstream)
      # The 0.32/0.33 engine tests in six parallel groups (about 4 minutes on an H100).
      for group in "fp32" "fp64 or watermark" "ngram_speculation and async_off" \
                   "ngram_speculation and async_on" "rejection_method" "upstream_feature"; do
        run "e2e-upstream-${group// /_}" python3 -m pytest -q -s -p no:cacheprovider \
          tests/e2e/test_engine_upstream_sampler_lines.py -k "$group" &
      done
      wait ;;
    bench-sampler) run bench-sampler python3 -m benchmarks.sampler --out "$out/sampler" ;;
    bench-topk) run bench-topk python3 -m benchmarks.topk_topp --out "$out/topk_topp" ;;
    bench-rejection) run bench-rejection python3 -m benchmarks.rejection --out "$out/rejection" ;;
    bench-ngram) run bench-ngram python3 -m benchmarks.ngram --out "$out/ngram" ;;
    *) echo "unknown step $step"; echo "$step: unknown step" >> "$failed" ;;
  esac
done
if [ -s "$failed" ]; then
  echo "=== failed: $(paste -sd ';' "$failed" | sed 's/;/; /g') (logs in $out)"
  exit 1
fi
