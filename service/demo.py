"""The demo behind ``make run``: broker, service, events, pipelines, results, live status.

The first line it prints is the web console's address (``/ui/`` on the service).

On a fresh machine with no Docker and no Kafka it starts the embedded broker and the
service in this process, creates three pipelines through the REST API (exactly as a user
would with curl), streams realistic orders with out-of-order and late events, and prints
the results as they arrive with a status line, until Ctrl-C. In docker-compose it runs
with ``--no-service`` against the real Kafka and a service replica.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import random
import signal
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from typing import Any

import uvicorn
from aiokafka.admin import NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from service.runtime.kafka.clients import KafkaCluster

logger = logging.getLogger("service.demo")

ORDERS_TOPIC = "demo-orders"


def demo_pipelines(window_ms: int = 10_000) -> list[dict[str, Any]]:
    """The three pipelines the demo creates: what a newcomer would write first."""
    watermark = {
        "strategy": "bounded_out_of_orderness",
        "max_out_of_orderness_ms": 2000,
        "interval_ms": 200,
        "idle_timeout_ms": 10000,
    }
    source = {"topics": [ORDERS_TOPIC], "format": "json", "start_from": "earliest"}
    return [
        {
            "name": "demo-orders-per-user",
            "source": source,
            "key": {"field": "user"},
            "timestamp": {"field": "ts", "format": "epoch_millis"},
            "watermark": watermark,
            "operator": {
                "type": "window",
                "assigner": {"type": "tumbling", "size_ms": window_ms},
                "time": "event",
                "allowed_lateness_ms": 5000,
                "trigger": {"type": "event_time"},
                "aggregations": {
                    "orders": {"fn": "count"},
                    "revenue": {"fn": "sum", "field": "amount"},
                },
            },
            "sink": {
                "topic": "demo-orders-per-user",
                "late_topic": "demo-orders-per-user.late",
                "dead_letter_topic": "demo-orders-per-user.dlq",
            },
        },
        {
            "name": "demo-sessions",
            "source": source,
            "key": {"field": "user"},
            "timestamp": {"field": "ts", "format": "epoch_millis"},
            "watermark": watermark,
            "operator": {
                "type": "window",
                "assigner": {"type": "session", "gap_ms": 4000},
                "time": "event",
                "aggregations": {
                    "orders": {"fn": "count"},
                    "items": {"fn": "collect", "field": "item"},
                },
            },
            "sink": {"topic": "demo-sessions", "dead_letter_topic": "demo-sessions.dlq"},
        },
        {
            "name": "demo-inactive-users",
            "source": source,
            "key": {"field": "user"},
            "timestamp": {"field": "ts", "format": "epoch_millis"},
            "watermark": watermark,
            "operator": {
                "type": "keyed_process",
                "function": "inactivity_timeout",
                "params": {"timeout_ms": 15000, "time": "event"},
            },
            "sink": {
                "topic": "demo-inactive-users",
                "dead_letter_topic": "demo-inactive-users.dlq",
            },
        },
    ]


class OrderGenerator:
    """Orders from a few dozen users: mostly in order, some out of order, a few late.

    Roughly 10% arrive up to 1.5 s out of order (within the 2 s bound), 2% arrive 6-9 s
    late (within the 5 s allowed lateness of most windows: late firings), and 1% arrive
    20 s late (past every window's cleanup: the late topic). Some users go quiet for a
    while, which the inactivity pipeline reports.
    """

    def __init__(self, seed: int = 7, users: int = 40) -> None:
        self.users = users
        self._rng = random.Random(seed)
        self._quiet_until: dict[str, float] = {}

    def next_order(self, now_ms: int) -> dict[str, Any]:
        rng = self._rng
        user = f"u{rng.randrange(self.users):02d}"
        if self._quiet_until.get(user, 0) > now_ms:
            active = [
                f"u{i:02d}"
                for i in range(self.users)
                if self._quiet_until.get(f"u{i:02d}", 0) <= now_ms
            ]
            if not active:  # everyone went quiet at once: wake them all
                self._quiet_until.clear()
                active = [user]
            user = rng.choice(active)
        if rng.random() < 0.01:
            self._quiet_until[user] = now_ms + rng.randrange(20_000, 40_000)
        roll = rng.random()
        if roll < 0.01:
            ts = now_ms - 20_000
        elif roll < 0.03:
            ts = now_ms - rng.randrange(6_000, 9_000)
        elif roll < 0.13:
            ts = now_ms - rng.randrange(0, 1_500)
        else:
            ts = now_ms
        item = rng.choice(["book", "lamp", "tea", "pen", "mug", "desk", "chair"])
        return {"user": user, "ts": ts, "amount": round(rng.uniform(2, 120), 2), "item": item}


class ApiClient:
    """The REST calls a user would make with curl (stdlib only: `make run` needs no extras)."""

    def __init__(self, base_url: str, token: str | None) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token

    def _call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base_url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                raw = response.read()
                return response.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as error:
            raw = error.read()
            return error.code, json.loads(raw) if raw else None

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return await asyncio.to_thread(self._call, method, path, body)

    async def wait_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                status, _ = await self.call("GET", "/readyz")
                if status == 200:
                    return
            await asyncio.sleep(0.2)
        raise TimeoutError(f"the service at {self.base_url} did not become ready")

    async def ensure_pipeline(self, spec: dict[str, Any]) -> None:
        status, body = await self.call("POST", "/pipelines", spec)
        if status == 409:
            status, body = await self.call("PUT", f"/pipelines/{spec['name']}", spec)
        if status not in (200, 201):
            raise RuntimeError(f"creating pipeline {spec['name']!r} failed: {status} {body}")


async def ensure_topic(cluster: KafkaCluster, topic: str, partitions: int) -> None:
    admin = cluster.admin()
    await admin.start()
    try:
        with contextlib.suppress(TopicAlreadyExistsError):
            await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()


async def produce_orders(
    cluster: KafkaCluster, rate_per_s: float, stop: asyncio.Event, seed: int = 7
) -> None:
    generator = OrderGenerator(seed=seed)
    producer = cluster.producer(linger_ms=20)
    await producer.start()
    try:
        interval = 1.0 / rate_per_s
        while not stop.is_set():
            order = generator.next_order(time.time_ns() // 1_000_000)
            await producer.send(
                ORDERS_TOPIC, json.dumps(order).encode(), key=order["user"].encode()
            )
            await asyncio.sleep(interval)
    finally:
        await producer.stop()


async def result_lines(cluster: KafkaCluster, topics: list[str]) -> AsyncIterator[str]:
    """Every record on the result and late topics, as one readable line each."""
    consumer = cluster.consumer(
        *topics,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        fetch_max_wait_ms=50,
        metadata_max_age_ms=2000,
    )
    await consumer.start()
    try:
        async for record in consumer:
            yield format_record(record.topic, record.value)
    finally:
        await consumer.stop()


def format_record(topic: str, raw: bytes | None) -> str:
    try:
        value = json.loads(raw or b"null")
    except ValueError:
        return f"{topic}: {raw!r}"
    if topic.endswith(".late"):
        return f"LATE   {topic:<24} {value}"
    if isinstance(value, dict) and "window" in value:
        start = time.strftime("%H:%M:%S", time.gmtime(value["window"]["start"] / 1000))
        end = time.strftime("%H:%M:%S", time.gmtime(value["window"]["end"] / 1000))
        return (
            f"RESULT {value['pipeline']:<24} {value['key']:<4} [{start}-{end}) "
            f"{value['fire']:<7} seq={value['seq']} {_readable(value['result'])}"
        )
    if isinstance(value, dict) and "value" in value:
        return f"ALERT  {value.get('pipeline', topic):<24} {value['key']:<4} {value['value']}"
    return f"{topic}: {value}"


def _readable(result: Any) -> str:
    """Results as a person reads them: floats rounded, long lists cut."""
    if isinstance(result, dict):
        return " ".join(f"{name}={_readable(value)}" for name, value in result.items())
    if isinstance(result, float):
        return f"{result:.2f}"
    if isinstance(result, list) and len(result) > 4:
        return "[" + ", ".join(map(str, result[:4])) + f", ... {len(result)} in all]"
    return str(result)


def status_line(statuses: dict[str, Any]) -> str:
    parts = []
    for name, status in statuses.items():
        partitions = status.get("partitions", []) if isinstance(status, dict) else []
        lag = sum(p.get("lag") or 0 for p in partitions)
        timers = sum(
            (p.get("event_timers") or 0) + (p.get("processing_timers") or 0) for p in partitions
        )
        windows = sum(p.get("windows_open") or 0 for p in partitions)
        watermark = status.get("watermark") if isinstance(status, dict) else None
        if isinstance(watermark, int) and watermark > 0:
            shown = time.strftime("%H:%M:%S", time.gmtime(watermark / 1000))
        else:
            shown = "-"
        state = status.get("state", "?") if isinstance(status, dict) else "?"
        parts.append(
            f"{name.removeprefix('demo-')}: {state} wm={shown} lag={lag} "
            f"timers={timers} windows={windows}"
        )
    return " | ".join(parts)


async def run_demo(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)

    async with contextlib.AsyncExitStack() as stack:
        bootstrap = args.bootstrap_servers
        started_broker = None
        if not bootstrap:
            from service.runtime.kafka.embedded_broker import EmbeddedBroker

            broker = stack.enter_context(EmbeddedBroker())
            bootstrap = broker.bootstrap_servers
            started_broker = f"Started the embedded Kafka broker (Tansu) at {bootstrap}"
        api_url = args.api_url
        if not args.no_service:
            api_url = await stack.enter_async_context(
                _in_process_service(bootstrap, args, embedded=not args.bootstrap_servers)
            )
        if api_url is None:
            raise SystemExit("--no-service needs --api-url")
        api = ApiClient(api_url, args.api_token)
        await api.wait_ready()
        # The console first: it is where a person looks; the rest scrolls by.
        print(f"Console: {api_url.rstrip('/')}/ui/", flush=True)
        if started_broker is not None:
            print(started_broker)
        print(f"API and docs: {api_url}/docs   metrics: {api_url}/metrics")

        # The demo's own clients talk PLAINTEXT: it is for the embedded or a local broker.
        cluster = KafkaCluster(bootstrap)
        await ensure_topic(cluster, ORDERS_TOPIC, partitions=4)
        pipelines = demo_pipelines(window_ms=int(args.window_seconds * 1000))
        for spec in pipelines:
            await api.ensure_pipeline(spec)
            print(f"Created pipeline {spec['name']} ({spec['operator']['type']})")

        tasks = [asyncio.create_task(produce_orders(cluster, args.rate, stop))]
        if not args.quiet:
            topics = [p["sink"]["topic"] for p in pipelines] + ["demo-orders-per-user.late"]
            tasks.append(asyncio.create_task(_print_results(cluster, topics)))
            tasks.append(asyncio.create_task(_print_status(api, pipelines, stop)))
        if args.duration:
            loop.call_later(args.duration, stop.set)
        await stop.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        print("\nStopping.")


async def _print_results(cluster: KafkaCluster, topics: list[str]) -> None:
    async for line in result_lines(cluster, topics):
        print(line, flush=True)


async def _print_status(
    api: ApiClient, pipelines: list[dict[str, Any]], stop: asyncio.Event
) -> None:
    while not stop.is_set():
        statuses = {}
        for spec in pipelines:
            code, body = await api.call("GET", f"/pipelines/{spec['name']}/status")
            statuses[spec["name"]] = body if code == 200 else {"state": f"http {code}"}
        print(f"STATUS {status_line(statuses)}", flush=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=2.0)


class _InProcessServer(uvicorn.Server):
    """uvicorn without its own signal handling: the demo's Ctrl-C handler stops it."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def _in_process_service(
    bootstrap: str, args: argparse.Namespace, *, embedded: bool
) -> AsyncIterator[str]:
    """The service (API + runtime) on a free loopback port in this event loop; against the
    embedded broker the demo started, with that broker's session timeout."""
    from service.api.app import create_app
    from service.runtime.kafka.embedded_broker import free_port
    from service.settings import EMBEDDED_SESSION_TIMEOUT_MS, Settings

    port = args.port or free_port()
    settings = Settings.from_env(
        {
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            **({"KAFKA_SESSION_TIMEOUT_MS": str(EMBEDDED_SESSION_TIMEOUT_MS)} if embedded else {}),
            "SERVICE_HTTP_HOST": "127.0.0.1",
            "SERVICE_HTTP_PORT": str(port),
            # one process: the demo's service runs in this event loop (workers would read
            # their configuration from the environment, which this dict is not)
            "SERVICE_WORKERS": "1",
            **({"SERVICE_API_TOKEN": args.api_token} if args.api_token else {}),
        }
    )
    config = uvicorn.Config(
        create_app(settings),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="on",
        # An open console keeps its live tail streaming: Ctrl-C must not wait for the tab.
        timeout_graceful_shutdown=3,
    )
    server = _InProcessServer(config)
    task = asyncio.create_task(server.serve())
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m service.demo", description=__doc__)
    parser.add_argument(
        "--bootstrap-servers", help="Kafka to use (default: start the embedded broker)"
    )
    parser.add_argument("--api-url", help="a running service (with --no-service)")
    parser.add_argument("--api-token", help="bearer token for mutating REST calls")
    parser.add_argument("--no-service", action="store_true", help="use the service at --api-url")
    parser.add_argument(
        "--port", type=int, default=8000, help="HTTP port of the in-process service"
    )
    parser.add_argument("--rate", type=float, default=100.0, help="orders per second")
    parser.add_argument(
        "--window-seconds", type=float, default=10.0, help="size of the tumbling windows"
    )
    parser.add_argument("--duration", type=float, default=0.0, help="stop after N seconds")
    parser.add_argument("--quiet", action="store_true", help="produce only; print no results")
    args = parser.parse_args(argv)
    if args.no_service and not args.api_url:
        parser.error("--no-service needs --api-url")
    return args


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(run_demo(parse_args(argv)))
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
