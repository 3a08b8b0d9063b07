"""The embedded broker starts on a free port and never outlives what started it."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

from service.runtime.kafka.embedded_broker import EmbeddedBroker

_STARTER = """
import time
from service.runtime.kafka.embedded_broker import EmbeddedBroker
broker = EmbeddedBroker().start()
print(broker.port, flush=True)
time.sleep(120)
"""


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def test_started_broker_accepts_connections_and_stop_closes_it() -> None:
    broker = EmbeddedBroker().start()
    try:
        assert broker.running and _accepts(broker.port)
    finally:
        broker.stop()
    assert not broker.running
    assert not _accepts(broker.port)


def test_broker_dies_with_a_parent_that_was_killed() -> None:
    with subprocess.Popen(
        [sys.executable, "-c", _STARTER], stdout=subprocess.PIPE, text=True
    ) as parent:
        assert parent.stdout is not None
        port = int(parent.stdout.readline())
        assert _accepts(port)
        parent.kill()
    deadline = time.monotonic() + 10
    while _accepts(port) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _accepts(port)
