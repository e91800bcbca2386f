"""One log line per decision and process.

Some of the plugin's decisions are reached again and again: vLLM runs
``VllmConfig.__post_init__`` once more for each config it rebuilds (0.32's
engine core twice more), and a request check runs
for every request. The user reads each decision once.
"""

from __future__ import annotations

import functools
import logging

logger = logging.getLogger("vllm.vllm_sampling_plugin")


@functools.cache
def log_once(level: int, message: str) -> None:
    """Log ``message`` at ``level`` the first time this process asks for it."""
    logger.log(level, message)
