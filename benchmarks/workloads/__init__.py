"""Trace-replay workloads from real text (issue 63): requests whose prompts and
traces are the standard library's own sources and documentation, tokenised by a
BPE tokenizer trained on them, for vLLM's trace replay to emit while the
speculative proposers see how real text repeats. Built on CPU, without vLLM."""
