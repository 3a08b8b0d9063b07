"""Pause, stop and reset against the embedded broker: the API engineer's bug reports.

- a user pause survives a rebalance (partitions assigned later are not consumed);
- stopping a pipeline that is still joining its group does not wait for the join;
- a reset moves the pipeline to a fresh group and changelog (state epoch), so no
  replica's older checkpoint can come back.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from service.runtime.lifecycle.manager import Runtime
from service.runtime.observability.metrics import build_metrics
from service.runtime.observability.status import PipelineState
from tests.integration.kafka_utils import (
    create_topic,
    join_held,
    json_record,
    produce,
    read_json,
    runtime_settings,
    unique,
    wait_until,
    window_definition,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

BASE = 1_700_000_000_000
TUMBLING = {
    "type": "window",
    "assigner": {"type": "tumbling", "size_ms": 10_000},
    "aggregations": {"n": {"fn": "count"}},
}


def records(count: int, partitions: int) -> list[Any]:
    return [
        json_record(
            i % partitions, f"u{i % partitions}", {"user": f"u{i % partitions}", "ts": BASE + i}
        )
        for i in range(count)
    ]


async def polls_after(runtime: Runtime, name: str, more: int) -> None:
    """Wait until the pipeline's consumer loop fetched ``more`` more times."""
    session = runtime.runner(name)._session
    assert session is not None
    target = session.polls + more

    async def turned() -> bool:
        current = runtime.runner(name)._session
        return current is session and session.polls >= target

    await wait_until(turned, timeout_s=20, interval_s=0.02)


async def test_a_user_pause_survives_a_rebalance(bootstrap_servers: str) -> None:
    """A is paused; B joins (paused too, as a replica would be) and leaves again, so A's
    partitions are revoked and assigned back. Nothing is consumed until A resumes."""
    name = unique("pauserebal")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 4)
    await produce(bootstrap_servers, topic, records(40, 4))
    definition = window_definition(name, [topic], TUMBLING, bounded=False)
    a = Runtime(runtime_settings(bootstrap_servers))
    b_metrics = CollectorRegistry()
    b = Runtime(runtime_settings(bootstrap_servers), metrics=build_metrics(b_metrics))
    await a.start()
    await b.start()
    try:
        a.start_pipeline(definition)
        a.pause_pipeline(name)

        async def a_has(count: int) -> bool:
            return len(a.status(name).partitions) == count

        await wait_until(lambda: a_has(4), timeout_s=20)
        b.start_pipeline(definition)
        b.pause_pipeline(name)
        await wait_until(lambda: a_has(2), timeout_s=20)
        await b.stop_pipeline(name)
        await wait_until(lambda: a_has(4), timeout_s=20)
        await polls_after(a, name, 20)
        status = a.status(name)
        assert status.state is PipelineState.PAUSED
        assert status.records_in == 0
        assert all(p.offset == 0 for p in status.partitions)
        a.resume_pipeline(name)

        async def consumed() -> bool:
            return a.status(name).records_in == 40

        await wait_until(consumed, timeout_s=20)
    finally:
        await b.shutdown()
        await a.shutdown()


async def test_a_pause_while_running_survives_a_rebalance(bootstrap_servers: str) -> None:
    """The replicas scenario: A and B share the partitions and consume; both are paused
    (through the store); B leaves and A takes its partitions, still paused."""
    name = unique("pauserun")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 4)
    await produce(bootstrap_servers, topic, records(40, 4))
    definition = window_definition(name, [topic], TUMBLING, bounded=False)
    a = Runtime(runtime_settings(bootstrap_servers))
    b_metrics = CollectorRegistry()
    b = Runtime(runtime_settings(bootstrap_servers), metrics=build_metrics(b_metrics))
    await a.start()
    await b.start()
    try:
        a.start_pipeline(definition)

        async def a_consumed() -> bool:
            return a.status(name).records_in == 40

        await wait_until(a_consumed, timeout_s=20)
        b.start_pipeline(definition)

        async def split() -> bool:
            return len(a.status(name).partitions) == 2 and len(b.status(name).partitions) == 2

        await wait_until(split, timeout_s=20)
        a.pause_pipeline(name)
        b.pause_pipeline(name)
        await b.stop_pipeline(name)
        await produce(bootstrap_servers, topic, records(40, 4))

        async def a_has_all() -> bool:
            return len(a.status(name).partitions) == 4

        await wait_until(a_has_all, timeout_s=20)
        await polls_after(a, name, 20)
        status = a.status(name)
        assert status.state is PipelineState.PAUSED
        assert status.records_in == 40  # only the first 40, before the pause
        assert sorted(p.offset for p in status.partitions) == [10, 10, 10, 10]
        a.resume_pipeline(name)

        async def consumed() -> bool:
            return sorted(p.offset for p in a.status(name).partitions) == [20, 20, 20, 20]

        await wait_until(consumed, timeout_s=20)
    finally:
        await b.shutdown()
        await a.shutdown()


async def test_stop_interrupts_a_group_join(bootstrap_servers: str) -> None:
    """A stop while the consumer is still joining must not wait for the join (one can
    take the whole rebalance timeout): it ends the session before the group ever
    assigns it a partition. The join is held by another member of the group."""
    name = unique("joinstop")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 2)
    registry = CollectorRegistry()
    runtime = Runtime(
        runtime_settings(bootstrap_servers, session_timeout_ms=30_000),
        metrics=build_metrics(registry),
    )
    definition = window_definition(name, [topic], TUMBLING, bounded=False)
    await runtime.start()
    try:
        async with join_held(bootstrap_servers, definition.group_id, f"{name}.other"):
            runtime.start_pipeline(definition)
            runner = runtime.runner(name)

            async def joining() -> bool:
                # past the consumer's bootstrap, in the join (aiokafka's coordinator exists)
                session = runner._session
                consumer = session.consumer if session is not None else None
                return consumer is not None and consumer._coordinator is not None

            await wait_until(joining, timeout_s=20, interval_s=0.01)
            assert runner.state is PipelineState.STARTING
            await runtime.stop_pipeline(name)
            assert runner.state is PipelineState.STOPPED
            assert runner.done
        # A stop that waited for the join would have been assigned the partitions and
        # restored them before closing.
        restored = registry.get_sample_value(
            "clockwork_partitions_restored_total", {"pipeline": name, "source": "changelog"}
        )
        assert restored is None
    finally:
        await runtime.shutdown()


async def test_a_reset_with_two_replicas_starts_afresh_everywhere(bootstrap_servers: str) -> None:
    """A takes the reset (state epoch 1) while B still runs epoch 0 and checkpoints, as
    a replica that has not seen the store update yet does; then B follows. Every
    partition must start from the beginning with empty state: all input is consumed
    again and each window counts its records once."""
    name = unique("reset")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 4)
    await produce(bootstrap_servers, topic, records(40, 4))
    epoch0 = window_definition(name, [topic], TUMBLING, bounded=False)
    epoch1 = replace(epoch0, state_epoch=1)
    assert epoch1.changelog_topic == f"clockwork.{name}.E1.changelog"
    a = Runtime(runtime_settings(bootstrap_servers))
    b_metrics = CollectorRegistry()
    b = Runtime(runtime_settings(bootstrap_servers), metrics=build_metrics(b_metrics))
    await a.start()
    await b.start()
    try:
        a.start_pipeline(epoch0)
        b.start_pipeline(epoch0)

        async def consumed_by_both() -> bool:
            parts = [*a.status(name).partitions, *b.status(name).partitions]
            return len(parts) == 4 and sum(p.records_in for p in parts) == 40

        await wait_until(consumed_by_both, timeout_s=30)
        await a.replace_pipeline(epoch1, reset_state_=True)

        async def a_runs() -> bool:
            return len(a.status(name).partitions) > 0  # all 4: it is alone in its group

        await wait_until(a_runs, timeout_s=30)
        await b.replace_pipeline(epoch1)  # B's last epoch-0 checkpoint lands now

        async def reconsumed() -> bool:
            parts = [*a.status(name).partitions, *b.status(name).partitions]
            return len(parts) == 4 and sum(p.records_in for p in parts) == 40

        await wait_until(reconsumed, timeout_s=30)
        closing = [
            json_record(p, f"u{p}", {"user": f"u{p}", "ts": BASE + 100_000}) for p in range(4)
        ]
        await produce(bootstrap_servers, topic, closing)

        async def fired() -> bool:
            return len(await read_json(bootstrap_servers, f"{name}.out")) >= 4

        await wait_until(fired, timeout_s=30)
    finally:
        await b.shutdown()
        await a.shutdown()
    results = await read_json(bootstrap_servers, f"{name}.out")
    assert sorted((r["key"], r["result"]["n"]) for r in results) == [
        (f"u{p}", 10) for p in range(4)
    ]
    # B's epoch-0 checkpoints after A's reset found their changelog: it is deleted only
    # at the reset after (without auto-creation they failed, each after ~30 s)
    failures = b_metrics.get_sample_value("clockwork_checkpoint_failures_total", {"pipeline": name})
    assert not failures
