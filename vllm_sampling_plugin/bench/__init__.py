"""GPU benchmarks: `vllm-sampling-plugin bench AREA` (each module has main(argv))."""
