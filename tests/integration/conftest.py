"""Fixtures of the integration tests."""

import logging

import pytest

from vllm_sampling_plugin.integration.common.log_once import log_once


@pytest.fixture
def plugin_records():
    """The plugin logger's records. vLLM's own logging setup stops "vllm.*"
    records from reaching the root logger, where pytest's caplog listens."""
    records = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append
    logger = logging.getLogger("vllm.vllm_sampling_plugin")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    log_once.cache_clear()
    yield records
    logger.removeHandler(handler)
    logger.setLevel(level)
