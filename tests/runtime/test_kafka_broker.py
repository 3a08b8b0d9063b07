"""The Apache Kafka test broker answers once started, and leaves nothing behind: not its
process, not its port, not its data (even when what started it is killed)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.kafka.kafka_broker import (
    DIR_PREFIX,
    KafkaBroker,
    _alive,
    _remove_stale_dirs,
    answers_api_versions,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

_STARTER = """
import time
from tests.kafka.kafka_broker import KafkaBroker
broker = KafkaBroker().start()
print(broker.port, broker.log_file.parent, flush=True)
time.sleep(120)
"""


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def test_a_started_broker_answers_and_stop_removes_its_process_port_and_data() -> None:
    broker = KafkaBroker().start()
    try:
        assert broker.running and answers_api_versions(broker.host, broker.port)
        assert broker.log_file is not None
        directory = broker.log_file.parent
        assert (directory / "data" / "meta.properties").is_file()  # formatted KRaft storage
    finally:
        broker.stop()
    assert not broker.running
    assert not _accepts(broker.port) and not _accepts(broker.controller_port)
    assert not directory.exists()


def test_a_broker_dies_with_a_killed_parent_and_its_data_is_swept_later() -> None:
    with subprocess.Popen(
        [sys.executable, "-c", _STARTER], stdout=subprocess.PIPE, text=True
    ) as parent:
        assert parent.stdout is not None
        port_text, directory_text = parent.stdout.readline().split()
        port, directory = int(port_text), Path(directory_text)
        assert answers_api_versions("127.0.0.1", port)
        parent.kill()
    broker_pid = int((directory / "broker.pid").read_text())
    deadline = time.monotonic() + 60
    while _alive(broker_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(broker_pid) and not _accepts(port)
    assert directory.name.startswith(DIR_PREFIX) and directory.exists()  # no one removed it
    _remove_stale_dirs(directory.parent)  # what the next start does
    assert not directory.exists()
