"""The demo behind `make run` works on a machine with nothing but this repo."""

from __future__ import annotations

import subprocess
import sys

import pytest

from service.demo import OrderGenerator, format_record


def test_demo_creates_pipelines_and_streams_window_results() -> None:
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "service.demo",
            "--port",
            "0",
            "--duration",
            "14",
            "--window-seconds",
            "2",
            "--rate",
            "200",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = completed.stdout
    assert completed.returncode == 0, completed.stderr[-2000:]
    first = out.splitlines()[0]
    assert first.startswith("Console: http://127.0.0.1:") and first.endswith("/ui/"), first
    assert "Started the embedded Kafka broker" in out
    assert "/docs" in out and "/metrics" in out
    for name in ("demo-orders-per-user", "demo-sessions", "demo-inactive-users"):
        assert f"Created pipeline {name}" in out
    assert "RESULT demo-orders-per-user" in out
    assert " on_time " in out
    assert "STATUS orders-per-user: running" in out


def test_order_generator_is_deterministic_for_a_seed() -> None:
    first = [OrderGenerator(seed=3).next_order(1_000_000 + i) for i in range(5)]
    second = [OrderGenerator(seed=3).next_order(1_000_000 + i) for i in range(5)]
    assert first == second


def test_order_generator_mixes_in_out_of_order_and_late_events() -> None:
    generator = OrderGenerator(seed=1)
    now = 10_000_000
    lags = [now - generator.next_order(now)["ts"] for _ in range(5000)]
    assert sum(1 for lag in lags if 0 < lag < 2000) > 100  # out of order, within the bound
    assert sum(1 for lag in lags if 6000 <= lag < 9000) > 20  # late, within allowed lateness
    assert sum(1 for lag in lags if lag >= 20000) > 10  # past every window: the late topic


@pytest.mark.parametrize(
    ("topic", "value", "expected"),
    [
        (
            "demo-orders-per-user",
            b'{"pipeline":"p","key":"u1","window":{"start":0,"end":10000},'
            b'"result":{"orders":2,"revenue":3.456},"fire":"on_time","seq":0}',
            "RESULT p",
        ),
        ("demo-orders-per-user.late", b'{"user":"u1"}', "LATE"),
        ("x", b"not json", "x: b'not json'"),
    ],
)
def test_format_record_makes_one_readable_line(topic: str, value: bytes, expected: str) -> None:
    assert format_record(topic, value).startswith(expected)
