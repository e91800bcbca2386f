"""Everything that touches vLLM internals, kept as thin as possible.

Each module patches one concern, at the names where vLLM 0.20 looks them up
(see docs/architecture.md for the hook points and why each is needed).
"""
