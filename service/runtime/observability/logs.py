"""Log hygiene: aiokafka's repeated connection errors once, not at every retry.

aiokafka logs ``Unable connect to "host:port": <cause>`` at ERROR at every attempt: with
a rejected password or an untrusted certificate, every client's every retry. The
service names the cause itself, once (the health check, the store, a pipeline's
status); :class:`RepeatFilter` lets the same aiokafka message through once per window.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

__all__ = ["RepeatFilter"]


class RepeatFilter(logging.Filter):
    """Drops a WARNING-or-worse record of ``prefix``'s loggers whose text was let through
    less than ``window_s`` ago. Everything else passes."""

    def __init__(
        self,
        prefix: str = "aiokafka",
        window_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        max_kept: int = 1000,
    ) -> None:
        super().__init__()
        self._prefix = prefix
        self._window_s = window_s
        self._clock = clock
        self._max_kept = max_kept
        self._last: dict[tuple[str, str], float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or not (
            record.name == self._prefix or record.name.startswith(f"{self._prefix}.")
        ):
            return True
        key = (record.name, record.getMessage())
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self._window_s:
            return False
        if len(self._last) >= self._max_kept:
            self._last.clear()
        self._last[key] = now
        return True
