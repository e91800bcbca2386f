"""vllm-sampling-plugin: faster, more capable sampling for vLLM 0.20's V2 runner.

``vllm_sampling_plugin.ops`` holds the kernels (usable without vLLM);
``register`` is the ``vllm.general_plugins`` entry point.
"""

__version__ = "0.1.0"


def register() -> None:
    """Entry point for ``vllm.general_plugins`` (see integration/register.py)."""
    from vllm_sampling_plugin.integration.register import register as _register

    _register()
