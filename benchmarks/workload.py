"""The standard benchmark workload: seeded events, their expected windows, and the check.

Events are JSON objects ``{"user": "u42", "ts": 1700000000123, "amount": 12.34}``:
``users`` users drawn uniformly, event time advancing ``step_ms`` (1 ms) per event,
and a fraction of the events delayed by 1 to ``max_delay_ms`` (1500 ms). The task is
per user, tumbling event-time windows of 60 s, count and sum of ``amount``, with a
bounded out-of-orderness of 2 s, one final result per window.

Why no event can be late, whatever the tool: event ``i`` has nominal time
``base + i * step`` and actual time ``nominal - delay``. Every event before it has an
actual time <= its own nominal time, so the largest timestamp any clock has seen when
event ``i`` arrives (per key, per partition or global, as long as the input is read in
order per partition) is at most ``nominal_i``, and the event is at most
``max_delay_ms`` behind it. With a declared bound of 2000 ms and a delay of at most
1500 ms every event is inside the bound by 500 ms; the 500 ms margin is for Bytewax,
whose event clock also advances its watermark with the system time between events.
So every tool must produce exactly the expected windows.

Per partition, after the events, one *end marker* (user ``__end__<p>``) with a
timestamp a full window past the last window pushes every watermark beyond every
window, so tools that only close windows on newer data (Quix, Faust) emit everything.
The markers' own windows are ignored by :func:`check_results`.

Generation, expected output and the check are pure; producing to Kafka and writing the
file are at the bottom (aiokafka is imported there, lazily).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

END_MARKER_PREFIX = "__end__"
DATA_DIR = Path(__file__).resolve().parent / ".data"


@dataclass(frozen=True, slots=True)
class Workload:
    """Parameters of the standard workload; equal parameters give equal events."""

    events: int = 1_000_000
    users: int = 10_000
    seed: int = 20240601
    partitions: int = 4
    base_ts_ms: int = 1_700_000_000_000
    step_ms: int = 1
    delayed_fraction: float = 0.3
    max_delay_ms: int = 1500
    window_ms: int = 60_000
    out_of_orderness_ms: int = 2000

    def __post_init__(self) -> None:
        if self.max_delay_ms >= self.out_of_orderness_ms:
            raise ValueError("max_delay_ms must stay below the declared out-of-orderness")
        if self.events < 1 or self.users < 1 or self.partitions < 1:
            raise ValueError("events, users and partitions must be positive")

    @property
    def name(self) -> str:
        """A short stable name for files and topics made from these parameters."""
        digest = hashlib.sha1(repr(self).encode()).hexdigest()[:8]
        return f"std-{self.events}-{digest}"

    @property
    def end_marker_ts(self) -> int:
        """A timestamp one full window past the end of the last data window."""
        last = self.base_ts_ms + (self.events - 1) * self.step_ms
        last_window_end = last - last % self.window_ms + self.window_ms
        return last_window_end + self.window_ms + self.out_of_orderness_ms


class Event(NamedTuple):
    user: str
    ts: int
    cents: int
    """``amount`` in cents: sums are exact integers, whatever the order of addition."""

    @property
    def amount(self) -> float:
        return self.cents / 100

    def to_json(self) -> bytes:
        """Compact JSON; ``amount`` printed with two decimals, parsed exactly back."""
        return (
            f'{{"user":"{self.user}","ts":{self.ts},'
            f'"amount":{self.cents // 100}.{self.cents % 100:02d}}}'
        ).encode()


def generate(workload: Workload) -> Iterator[Event]:
    """The workload's events in input order (the order they are produced and read)."""
    rng = random.Random(workload.seed)
    rand = rng.random
    users = [f"u{n}" for n in range(workload.users)]
    n_users, base, step = workload.users, workload.base_ts_ms, workload.step_ms
    frac, max_delay = workload.delayed_fraction, workload.max_delay_ms
    for i in range(workload.events):
        r = rand()
        # One draw decides whether the event is delayed and by how much (1..max_delay).
        delay = int(r / frac * max_delay) + 1 if r < frac else 0
        yield Event(users[int(rand() * n_users)], base + i * step - delay, int(rand() * 50_000) + 1)


def end_markers(workload: Workload) -> list[Event]:
    """One marker per partition, produced to that partition after the events."""
    return [
        Event(f"{END_MARKER_PREFIX}{p}", workload.end_marker_ts, 0)
        for p in range(workload.partitions)
    ]


def is_end_marker(user: str) -> bool:
    return user.startswith(END_MARKER_PREFIX)


@dataclass(slots=True)
class Expected:
    """The correct final results: ``(user, window_start) -> (count, sum in cents)``."""

    windows: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    window_ms: int = 60_000

    @property
    def total_count(self) -> int:
        return sum(count for count, _ in self.windows.values())


def expected_results(workload: Workload, events: Iterable[Event] | None = None) -> Expected:
    """Per user and tumbling window: count and sum. No event is late (module docstring)."""
    size = workload.window_ms
    acc: dict[tuple[str, int], list[int]] = {}
    for ev in generate(workload) if events is None else events:
        if is_end_marker(ev.user):
            continue
        key = (ev.user, ev.ts - ev.ts % size)
        slot = acc.get(key)
        if slot is None:
            acc[key] = [1, ev.cents]
        else:
            slot[0] += 1
            slot[1] += ev.cents
    return Expected({k: (v[0], v[1]) for k, v in acc.items()}, size)


@dataclass(frozen=True, slots=True)
class ResultRow:
    """One window result, normalised from whatever format a tool writes."""

    user: str
    start: int
    count: int
    total: float


def normalise(obj: Mapping[str, Any]) -> ResultRow:
    """Accept the peers' format ``{"user","start","end","count","sum"}`` and the
    contract's result record ``{"key","window":{"start","end"},"result":{...}}``."""
    if "window" in obj:
        result = obj["result"]
        count = result.get("count", result.get("orders"))
        total = result.get("sum", result.get("revenue"))
        return ResultRow(str(obj["key"]), int(obj["window"]["start"]), int(count), float(total))
    return ResultRow(str(obj["user"]), int(obj["start"]), int(obj["count"]), float(obj["sum"]))


@dataclass(frozen=True, slots=True)
class CheckResult:
    ok: bool
    rows: int
    expected_rows: int
    total_count: int
    expected_total: int
    problems: tuple[str, ...]

    def summary(self) -> str:
        head = (
            f"rows {self.rows}/{self.expected_rows}, count {self.total_count}/{self.expected_total}"
        )
        return head if self.ok else head + "; " + "; ".join(self.problems[:5])


def check_results(rows: Iterable[ResultRow], expected: Expected) -> CheckResult:
    """Exactly one row per expected window, with the right count and sum."""
    seen: dict[tuple[str, int], ResultRow] = {}
    problems: list[str] = []
    duplicates = wrong = unexpected = 0
    total = 0
    for row in rows:
        if is_end_marker(row.user):
            continue
        key = (row.user, row.start)
        if key in seen:
            duplicates += 1
            continue
        seen[key] = row
        total += row.count
        want = expected.windows.get(key)
        if want is None:
            unexpected += 1
        elif row.count != want[0] or not math.isclose(row.total * 100, want[1], abs_tol=0.5):
            wrong += 1
    missing = sum(1 for key in expected.windows if key not in seen)
    for n, what in (
        (duplicates, "duplicate rows"),
        (wrong, "wrong count or sum"),
        (unexpected, "unexpected windows"),
        (missing, "missing windows"),
    ):
        if n:
            problems.append(f"{n} {what}")
    expected_total = expected.total_count
    if total != expected_total:
        problems.append(f"total count {total} != {expected_total}")
    return CheckResult(
        not problems, len(seen), len(expected.windows), total, expected_total, tuple(problems)
    )


def read_result_file(path: Path) -> list[ResultRow]:
    """Result rows from JSON-lines files (a file, or every non-hidden file under a dir)."""
    files = (
        [path]
        if path.is_file()
        else sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith((".", "_")))
    )
    rows: list[ResultRow] = []
    for f in files:
        with f.open("rb") as fh:
            rows.extend(normalise(json.loads(line)) for line in fh if line.strip())
    return rows


# ---------------------------------------------------------------- I/O at the edges


def write_jsonl(workload: Workload, path: Path | None = None) -> Path:
    """The events and end markers as JSON lines (cached: written once per parameters)."""
    path = path or DATA_DIR / f"{workload.name}.jsonl"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with tmp.open("wb") as fh:
        for ev in generate(workload):
            fh.write(ev.to_json() + b"\n")
        for ev in end_markers(workload):
            fh.write(ev.to_json() + b"\n")
    tmp.rename(path)
    return path


def kafka_partition(key: bytes, partitions: int) -> int:
    """Kafka's default partitioner (murmur2, as the Java client and aiokafka do)."""
    from aiokafka.partitioner import murmur2

    hashed: int = murmur2(key)
    return (hashed & 0x7FFFFFFF) % partitions


async def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create ``topic``, its retention set explicitly: Tansu reports only the configs a
    topic was created with, and Quix Streams needs ``retention.ms`` to derive its
    changelog topics' configs."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        configs = {"retention.ms": "-1", "retention.bytes": "-1"}
        await admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=configs)])
    finally:
        await admin.close()


KafkaRecord = tuple[int, bytes, bytes, int]
"""``(partition, key, value, timestamp_ms)``, ready to append to a batch."""


def kafka_records(workload: Workload) -> list[KafkaRecord]:
    """The events (key = user, Kafka's default partitioner, CreateTime = ``ts``), then
    one end marker per partition. Built once and reused for every run's produce."""
    parts: dict[str, tuple[bytes, int]] = {}
    out: list[KafkaRecord] = []
    for ev in generate(workload):
        hit = parts.get(ev.user)
        if hit is None:
            key = ev.user.encode()
            hit = parts[ev.user] = (key, kafka_partition(key, workload.partitions))
        out.append((hit[1], hit[0], ev.to_json(), ev.ts))
    for p, ev in enumerate(end_markers(workload)):
        out.append((p, ev.user.encode(), ev.to_json(), ev.ts))
    return out


def keyed_by_order(records: list[KafkaRecord], partitions: int) -> list[KafkaRecord]:
    """The same records keyed by an order id instead (``o<n>``, one per event), so a
    user's events are spread over every partition: a topic only a shuffle makes exact.
    The end markers keep their partitions."""
    out: list[KafkaRecord] = []
    for n, (partition, key, value, ts) in enumerate(records):
        if is_end_marker(key.decode()):
            out.append((partition, key, value, ts))
            continue
        order = f"o{n}".encode()
        out.append((kafka_partition(order, partitions), order, value, ts))
    return out


async def produce(records: list[KafkaRecord], bootstrap: str, topic: str, partitions: int) -> int:
    """Create ``topic`` and produce ``records`` in order, with batches built by hand
    (``create_batch``/``append``/``send_batch``: ~1M records/s on Tansu, against
    ~60k/s for ``send`` per record). Returns the number of records produced."""
    from aiokafka import AIOKafkaProducer

    await create_topic(bootstrap, topic, partitions)
    batch_bytes = 1 << 20
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        max_batch_size=batch_bytes,
        max_request_size=batch_bytes * 2,
        acks=1,
    )
    await producer.start()
    pending = []
    try:
        batches = [producer.create_batch() for _ in range(partitions)]
        for p, key, value, ts in records:
            if batches[p].append(key=key, value=value, timestamp=ts) is None:
                pending.append(await producer.send_batch(batches[p], topic, partition=p))
                batches[p] = producer.create_batch()
                batches[p].append(key=key, value=value, timestamp=ts)
        for p in range(partitions):
            if batches[p].record_count():
                pending.append(await producer.send_batch(batches[p], topic, partition=p))
        for fut in pending:
            await fut
    finally:
        await producer.stop()
    return len(records)


async def read_topic(
    bootstrap: str,
    topic: str,
    timeout_s: float = 60.0,
    isolation_level: str = "read_uncommitted",
) -> list[bytes]:
    """Every value in ``topic`` up to the fetch high watermark (Tansu's ``end_offsets``
    can be early; see embedded-broker.md), tombstones left out. Call it once the writer
    has finished (with ``read_committed``, once its transactions ended: the high
    watermark is then the last stable offset)."""
    found = await read_keyed(bootstrap, topic, timeout_s, isolation_level)
    return [value for _, value in found if value is not None]


async def read_keyed(
    bootstrap: str,
    topic: str,
    timeout_s: float = 60.0,
    isolation_level: str = "read_uncommitted",
) -> list[tuple[bytes | None, bytes | None]]:
    """Every record of ``topic`` as :func:`read_topic` reads them, as ``(key, value)``,
    tombstones (value None) included, each partition's in offset order: an upsert
    stream to fold."""
    import asyncio

    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=20,
        max_partition_fetch_bytes=4 << 20,
        isolation_level=isolation_level,
    )
    await consumer.start()
    values: list[tuple[bytes | None, bytes | None]] = []
    try:
        parts = await consumer._client._wait_on_metadata(topic)
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        deadline = asyncio.get_running_loop().time() + timeout_s
        while asyncio.get_running_loop().time() < deadline:
            batch = await consumer.getmany(timeout_ms=100, max_records=100_000)
            for records in batch.values():
                values.extend((r.key, r.value) for r in records)
            done = True
            for tp in tps:
                hw = consumer.highwater(tp)
                if hw is None or await consumer.position(tp) < hw:
                    done = False
            if done:
                break
        else:
            raise TimeoutError(f"could not read {topic} to its end within {timeout_s}s")
    finally:
        await consumer.stop()
    return values
