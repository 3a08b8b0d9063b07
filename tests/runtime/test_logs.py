"""RepeatFilter: aiokafka's repeated connection errors once per window."""

from __future__ import annotations

import logging

from service.runtime.observability.logs import RepeatFilter


def record(name: str, level: int, message: str) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, message, None, None)


def test_the_same_aiokafka_error_passes_once_per_window() -> None:
    now = [0.0]
    repeat = RepeatFilter(window_s=300.0, clock=lambda: now[0])
    refused = 'Unable connect to "k:9093": certificate verify failed'
    assert repeat.filter(record("aiokafka", logging.ERROR, refused))
    now[0] = 299.0
    assert not repeat.filter(record("aiokafka", logging.ERROR, refused))
    assert repeat.filter(record("aiokafka", logging.ERROR, refused + " (other)"))
    assert repeat.filter(record("aiokafka.conn", logging.ERROR, refused))
    now[0] = 300.0
    assert repeat.filter(record("aiokafka", logging.ERROR, refused))


def test_other_loggers_and_lower_levels_always_pass() -> None:
    repeat = RepeatFilter(clock=lambda: 0.0)
    for _ in range(3):
        assert repeat.filter(record("service.api.store", logging.ERROR, "same"))
        assert repeat.filter(record("aiokafka", logging.INFO, "same"))
        assert repeat.filter(record("aiokafkaish", logging.ERROR, "same"))
