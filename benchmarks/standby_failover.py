"""Failover of a rocksdb partition: restored from a standby's copy, or from the changelog
(#53, standby replicas).

Two replicas (worker processes, ``tests/integration/worker.py``, each its own state
directory) run a running aggregate (count and sum per user) with the rocksdb backend
over a 2-partition topic, ``--keys`` keys per partition, each written ``--writes`` times.
Once both are quiet (every record read and checkpointed, their copies caught up), one
is killed (SIGKILL) and the survivor takes its partition over (then both its partitions
must hold every key, each once: else it stops, saying what they hold). Run twice: with
``standby_replicas: 1`` and with 0. Printed for each: the survivor's restore of the
takeover's assignment (``clockwork_restore_duration_seconds``; both partitions, its own
restored locally either way), the changelog records it read, the keys it found locally,
the partitions it restored (2: one rebalance; more, the group rebalanced again), and the
wall time from the kill to the survivor holding and having checkpointed both partitions
(this includes the group's session timeout, ``--session-timeout-ms``, the same in both
runs: by default the service's 10 s; the tests' 2 s let a loop held by a large
checkpoint drop a member from the group, and the runs restored again and again).

Run: ``python -m benchmarks.standby_failover [--keys N] [--writes W] [--broker tansu|kafka]
[--session-timeout-ms MS]``
(Apache Kafka needs ``make kafka``'s jars). On Tansu the survivor's own partition reads
back its last checkpoint's records either way (Tansu reports a changelog's end late, and
the checkpoint file names the end before them), so compare the two runs' differences.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import tempfile
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from tests.integration.kafka_utils import create_topic, json_record, produce, unique, wait_until
from tests.integration.replicas import Replica
from tests.integration.test_running_aggregates import RUNNING

PARTITIONS = 2
PRODUCE_CHUNK = 100_000
"""Keys per partition produced at a time."""


def broker(name: str) -> AbstractContextManager[Any]:
    if name == "tansu":
        from service.runtime.kafka.embedded_broker import EmbeddedBroker

        return EmbeddedBroker()
    from tests.kafka.kafka_broker import KafkaBroker

    return KafkaBroker()


def restored(status: dict[str, Any], what: str) -> float:
    return float(status["restored"].get(what) or 0)


async def failover(
    bootstrap: str, keys: int, writes: int, standbys: int, session_timeout_ms: int
) -> dict[str, float]:
    name = unique("standbybench")
    topic = f"{name}.in"
    await create_topic(bootstrap, topic, PARTITIONS)
    with tempfile.TemporaryDirectory(prefix="standby-bench-") as tmp:
        root = Path(tmp)
        state = {"backend": "rocksdb", "cache_bytes": 16 << 20, "standby_replicas": standbys}
        pair = [
            Replica(
                bootstrap,
                name,
                topic,
                root / f"r{i}.json",
                running=RUNNING,
                state={**state, "dir": str(root / f"state{i}")},
                session_timeout_ms=session_timeout_ms,
            )
            for i in range(PARTITIONS)
        ]
        try:

            async def balanced() -> bool:
                return all(len(r.holds()) == 1 for r in pair)

            try:  # a fresh broker's group coordinator can take a while
                await wait_until(balanced, timeout_s=180)
            except TimeoutError:
                print((root / "r0.log").read_text()[-3000:])  # why
                raise
            for w in range(writes):  # in chunks: 5M keys' records at once took 24 GB
                for start in range(0, keys, PRODUCE_CHUNK):
                    records = [
                        json_record(p, f"u{p}-{k}", {"user": f"u{p}-{k}", "ts": w, "amount": 1})
                        for k in range(start, min(start + PRODUCE_CHUNK, keys))
                        for p in range(PARTITIONS)
                    ]
                    await produce(bootstrap, topic, records, max_batch_size=256 * 1024)
            end = keys * writes

            async def quiet() -> bool:
                for r in pair:
                    status = r.status()
                    parts = status["partitions"]
                    if len(parts) != 1 or parts[0]["offset"] != end:
                        return False
                    if parts[0]["processing_timers"] or parts[0]["keys"] != keys:
                        return False
                    if standbys and [(c["offset"], c["lag"]) for c in status["standbys"]] != [
                        (end, 0)
                    ]:
                        return False
                return True

            await wait_until(quiet, timeout_s=900, interval_s=0.5)
            turns = [r.status()["loop_turns"] for r in pair]

            async def settled() -> bool:  # a checkpoint the last tick asked for is done
                return all(
                    r.status()["loop_turns"] > t + 30 for r, t in zip(pair, turns, strict=True)
                )

            await wait_until(settled, timeout_s=60)
            await wait_until(quiet, timeout_s=60, interval_s=0.5)
            dead, survivor = pair
            before = survivor.status()
            killed = time.monotonic()
            dead.stop(signal.SIGKILL)

            async def took_over() -> bool:
                return survivor.checkpointed(PARTITIONS, processed=False)

            await wait_until(took_over, timeout_s=600, interval_s=0.05)
            wall = time.monotonic() - killed
            after = survivor.status()

            async def every_key_held_once() -> bool:
                parts = survivor.status()["partitions"]
                return [p["keys"] for p in parts] == [keys] * PARTITIONS

            try:  # the restored partitions hold every key, each once
                await wait_until(every_key_held_once, timeout_s=60, interval_s=0.5)
            except TimeoutError:
                held = [p["keys"] for p in survivor.status()["partitions"]]
                raise SystemExit(f"keys held after the takeover: {held}, not {keys} each") from None
        finally:
            for r in pair:
                r.stop(signal.SIGTERM)

    def during(what: str) -> float:
        """What the survivor's ``restored`` counter ``what`` gained from before the kill."""
        return restored(after, what) - restored(before, what)

    return {
        "restore_s": float(after["restore_seconds"] or 0) - float(before["restore_seconds"] or 0),
        "changelog_records": during("state_restored/changelog"),
        "local_keys": during("state_restored/local"),
        "kill_to_checkpointed_s": wall,
        # 2 for one takeover (both partitions); more: the group rebalanced again
        "partitions_restored": sum(
            during(f"partitions_restored/{way}") for way in ("memory", "local", "changelog")
        ),
    }


async def main(args: argparse.Namespace) -> None:
    with broker(args.broker) as running:
        bootstrap = running.bootstrap_servers
        for standbys in (1, 0):
            result = await failover(
                bootstrap, args.keys, args.writes, standbys, args.session_timeout_ms
            )
            print(
                f"standby_replicas={standbys}: restore {result['restore_s']:.2f} s, "
                f"{result['changelog_records']:.0f} changelog records read, "
                f"{result['local_keys']:.0f} keys found locally, "
                f"kill to both partitions checkpointed {result['kill_to_checkpointed_s']:.2f} s, "
                f"{result['partitions_restored']:.0f} partitions restored",
                flush=True,
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=200_000, help="keys per partition")
    parser.add_argument("--writes", type=int, default=1, help="records per key")
    parser.add_argument("--broker", choices=("kafka", "tansu"), default="tansu")
    parser.add_argument(
        "--session-timeout-ms", type=int, default=10_000, help="the group session timeout"
    )
    asyncio.run(main(parser.parse_args()))
