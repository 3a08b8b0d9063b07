"""A worker process for the crash and replica tests: one tumbling pipeline, a replica.

``python -m tests.integration.worker BOOTSTRAP NAME TOPIC[,TOPIC...] [OPTIONS JSON]`` runs the
pipeline the crash and replica tests check; SIGTERM stops it gracefully (checkpoint,
commit, leave the group), SIGKILL is the crash. OPTIONS (all optional):

- ``"bounded": [[topic, partition, end], ...]``: bounded input with these end offsets
  pinned (as the API pins them when it creates a pipeline); the worker exits once the
  pipeline is finished;
- ``"status": PATH``: the pipeline's status (and the takeover counter) is written to
  PATH as JSON every 50 ms and at the end: the test's view of the replica;
- ``"shuffle": true``: the pipeline routes by its key through a shuffle topic;
- ``"join": OPERATOR``: test_joins.py's join of ``NAME.orders`` and ``NAME.payments``
  with this operator object instead (TOPIC is then only a label);
- ``"delivery": "exactly_once"``: Kafka transactions (the broker must have them);
- ``"operator": OPERATOR``: this window operator object instead of the tumbling window
  (test_rocksdb_state.py: the same window through the general operator);
- ``"running": OPERATOR``: a running aggregate (``"type": "aggregate"``) instead of the
  tumbling window (test_running_aggregates.py);
- ``"top_n": OPERATOR``: a Top-N (``"type": "top_n"``) instead (test_top_n.py);
- ``"state": {"backend": B, "cache_bytes": N, "dir": PATH, "standby_replicas": R}``: the
  state backend (the rocksdb stores under PATH: the same PATH is the same disk across
  restarts) and its standby replicas (default: none);
- ``"spec": SPEC``: the pipeline this spec builds (as the API builds it) instead, its
  ``name`` replaced by NAME and, with a ``source``, its ``source.topics`` by TOPIC
  (test_table_sources.py; a join's ``inputs`` keep theirs, TOPIC is then only a label:
  test_outer_regular_joins.py's join of a table);
- ``"crash": {"stage": S, "point": P, "at": N}``: the process kills itself (SIGKILL) at
  the N-th checkpoint of stage S (``keyed``, ``route`` or ``shuffled``) that writes
  something: ``before_flush`` (nothing of it done), ``after_outputs`` (its outputs
  acknowledged, its changelog not committed -- at-least-once its entries may be
  written, not the metadata records that commit them --, its offsets not committed) or
  ``after_commit`` (all done); with exactly-once, ``after_outputs`` counts only the
  checkpoints whose transactions hold outputs; with ``"armed_by": PATH``, only the
  checkpoints that start once PATH exists count (the test arms the crash mid-stream).
  Fault injection in the worker process itself; the broker and the runtime are real.
- ``"session_timeout_ms": N``: the group session timeout (default 2000, the tests'
  quick one; a benchmark of much state takes the service's 10 s).
- ``"slow_revoke_ms": N``: a revoke of partitions this worker holds takes N ms longer
  before it checkpoints and closes them (as a revoke's checkpoint of much state does),
  the event loop running meanwhile (its heartbeats go on).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from dataclasses import replace
from typing import Any

from service.runtime.lifecycle.manager import Runtime
from service.runtime.observability.metrics import REGISTRY
from service.runtime.observability.status import PipelineState
from tests.integration.kafka_utils import runtime_settings, window_definition

OPERATOR = {
    "type": "window",
    "assigner": {"type": "tumbling", "size_ms": 60_000},
    "aggregations": {"n": {"fn": "count"}, "total": {"fn": "sum", "field": "amount"}},
}
REPLICA_OPERATOR = {
    "type": "window",
    "assigner": {"type": "tumbling", "size_ms": 10_000},
    "aggregations": {"n": {"fn": "count"}, "total": {"fn": "sum", "field": "amount"}},
}


def write_status(runtime: Runtime, name: str, path: str) -> None:
    status = runtime.status(name).to_dict()
    status["taken_over"] = REGISTRY.get_sample_value(
        "clockwork_partitions_taken_over_total", {"pipeline": name}
    )
    status["pid"] = os.getpid()
    status["restored"] = {  # the rocksdb backend's restores, by where from
        f"{metric}/{source}": REGISTRY.get_sample_value(
            f"clockwork_{metric}_total", {"pipeline": name, "source": source}
        )
        for metric in ("partitions_restored", "state_restored")
        for source in ("local", "changelog")
    }
    status["restore_seconds"] = REGISTRY.get_sample_value(
        "clockwork_restore_duration_seconds_sum", {"pipeline": name}
    )
    status["standby_lag"] = {  # clockwork_standby_lag_records, by partition
        sample.labels["partition"]: sample.value
        for family in REGISTRY.collect()
        if family.name == "clockwork_standby_lag_records"
        for sample in family.samples
        if sample.labels.get("pipeline") == name
    }
    temporary = f"{path}.tmp"
    with open(temporary, "w") as out:
        json.dump(status, out)
    os.replace(temporary, path)  # readers never see half a file


def inject_crash(stage: str, point: str, at: int, armed_by: str | None = None) -> None:
    """Wrap the checkpointer so that the process dies where the options say."""
    from service.runtime.consumer_group import checkpointing

    original = checkpointing.Checkpointer._complete
    hits = 0
    marks: dict[Any, int] = {}  # exactly-once: each partition's last checkpoint's mark

    def armed() -> bool:
        return armed_by is None or os.path.exists(armed_by)

    def hit() -> None:
        nonlocal hits
        hits += 1
        if hits >= at:
            os.kill(os.getpid(), signal.SIGKILL)

    async def complete(
        self: checkpointing.Checkpointer,
        encoded: Any,
        batches: Any,
        outputs: int | dict[Any, int],
        *rest: Any,
    ) -> None:
        if self.session.stage.name != stage or not encoded:
            await original(self, encoded, batches, outputs, *rest)
            return
        # exactly-once: a transaction holds outputs when its mark moved since the last
        fresh = isinstance(outputs, dict) and any(
            mark > marks.get(tp, 0) for tp, mark in outputs.items()
        )
        if isinstance(outputs, dict):
            marks.update(outputs)
        if not armed():
            await original(self, encoded, batches, outputs, *rest)
            return
        if point == "before_flush":
            hit()
        elif point == "after_outputs" and isinstance(outputs, dict):
            # exactly-once: counted when some partition's transaction holds outputs
            transactions = self.session.transactions
            assert transactions is not None
            for tp, mark in outputs.items():
                await transactions.batches(tp).wait_delivered(mark)
            if fresh:
                hit()
        elif point == "after_outputs":
            await batches.wait_delivered(outputs)
            hit()
        await original(self, encoded, batches, outputs, *rest)
        if point == "after_commit":
            hit()

    checkpointing.Checkpointer._complete = complete  # type: ignore[method-assign]


def inject_slow_revoke(delay_ms: int) -> None:
    """Wrap the revoke so that it takes ``delay_ms`` longer where it holds partitions."""
    from service.runtime.consumer_group import assignment

    original = assignment.Assignment.revoke

    async def revoke(self: assignment.Assignment, revoked: list[Any]) -> None:
        if any(tp in self._session.partitions for tp in revoked):
            await asyncio.sleep(delay_ms / 1000)
        await original(self, revoked)

    assignment.Assignment.revoke = revoke  # type: ignore[method-assign]


async def main(bootstrap: str, name: str, topic: str, options: dict[str, Any]) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    status_path: str | None = options.get("status")
    ends = options.get("bounded")
    replica = status_path is not None
    definition = window_definition(
        name,
        topic.split(","),
        options.get("operator", REPLICA_OPERATOR if replica else OPERATOR),
        bounded=ends is not None,
        max_out_of_orderness_ms=2_000 if replica else 0,
        shuffle=bool(options.get("shuffle", False)),
    )
    if "join" in options:  # tests/integration/test_joins.py's pipeline instead
        from tests.integration.test_joins import join_definition

        definition = replace(join_definition(name, options["join"]), bounded=ends is not None)
    if "spec" in options:  # any pipeline a spec states, built as the API builds it
        from service.pipeline_spec.build import build_definition
        from service.pipeline_spec.models import validate_spec

        spec = dict(options["spec"])
        spec["name"] = name
        if "source" in spec:  # a join's spec keeps its inputs' topics
            spec["source"] = {**spec["source"], "topics": topic.split(",")}
        definition = build_definition(validate_spec(spec, ()), ())
    crash = options.get("crash")
    if crash is not None:
        inject_crash(crash["stage"], crash["point"], int(crash["at"]), crash.get("armed_by"))
    if "slow_revoke_ms" in options:
        inject_slow_revoke(int(options["slow_revoke_ms"]))
    if ends is not None:
        definition = replace(definition, end_offsets=tuple(tuple(e) for e in ends))
    if "delivery" in options:
        definition = replace(definition, delivery=options["delivery"])
    if "running" in options:  # test_running_aggregates.py's operator instead
        from service.runtime.factories import running_aggregate_factory

        factory = running_aggregate_factory(
            name, options["running"], emit_at_checkpoint=definition.delivery == "exactly_once"
        )
        definition = replace(definition, operator_factory=factory)
    if "top_n" in options:  # test_top_n.py's operator instead
        from service.runtime.factories import top_n_factory

        factory = top_n_factory(
            name, options["top_n"], emit_at_checkpoint=definition.delivery == "exactly_once"
        )
        definition = replace(definition, operator_factory=factory)
    state = options.get("state")
    state_dir = ""
    if state is not None:
        from service.runtime.definition import StateSettings

        state_dir = state["dir"]
        backend = StateSettings(
            state["backend"],
            state.get("cache_bytes", 64 * 1024 * 1024),
            state.get("standby_replicas"),
        )
        definition = replace(definition, state=backend)
    runtime = Runtime(
        runtime_settings(
            bootstrap,
            checkpoint_interval_ms=200,
            max_records=500,
            state_dir=state_dir,
            session_timeout_ms=int(options.get("session_timeout_ms", 2000)),
        )
    )
    await runtime.start()
    runtime.start_pipeline(definition)
    runner = runtime.runner(name)
    finished = asyncio.ensure_future(runner.wait_for_state(PipelineState.FINISHED, timeout_s=3600))
    stopped = asyncio.ensure_future(stop.wait())
    try:
        while not (stop.is_set() or finished.done()):
            if status_path is not None:
                write_status(runtime, name, status_path)
            await asyncio.wait({finished, stopped}, timeout=0.05)
    finally:
        for waiter in (finished, stopped):
            waiter.cancel()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await waiter
        if status_path is not None:  # the finished state, as the pipeline ended
            write_status(runtime, name, status_path)
        await runtime.shutdown()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="worker %(levelname)s %(name)s: %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    extra = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    asyncio.run(main(*sys.argv[1:4], extra))
