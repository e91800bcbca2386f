"""What every seam shares, at the bottom of integration/: the seams' and
shapes' names, what an adapter found, one log line per decision, and which
batch sizes reach a kernel's compile key. Nothing here imports vLLM."""
