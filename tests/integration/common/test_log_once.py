"""One log line per decision and process (integration/common/log_once.py)."""

import logging

from vllm_sampling_plugin.integration.common.log_once import log_once


def test_a_message_is_logged_the_first_time_only(plugin_records):
    for _ in range(3):
        log_once(logging.INFO, "decision a")
    log_once(logging.INFO, "decision b")
    log_once(logging.WARNING, "decision a")
    assert [(r.levelno, r.getMessage()) for r in plugin_records] == [
        (logging.INFO, "decision a"),
        (logging.INFO, "decision b"),
        (logging.WARNING, "decision a"),
    ]
