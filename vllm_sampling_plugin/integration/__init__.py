"""Everything that touches vLLM internals, kept as thin as possible.

One folder per seam (settings/, draw/, verification/, speculator/, warmup/),
applied in order by seams.py; common/ holds what they share (see
docs/architecture.md for the hook points and why each is needed).
"""
