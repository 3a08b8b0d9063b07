"""A pipeline spec run bounded on the runtime in this process, to its finish: the seconds
and CPU seconds from its start to its finish, and how many records it wrote to its sink
topic (the sum of its partitions' end offsets, not the records read back: the bench
measures this process's peak RSS, which holding them would raise)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from benchmarks.workload import create_topic


@dataclass(frozen=True, slots=True)
class SpecRun:
    seconds: float
    cpu_s: float
    """This process's CPU time (every thread) over the same span as ``seconds``."""
    rows: int


async def run_spec(bootstrap: str, spec: dict[str, Any]) -> SpecRun:
    from service.pipeline_spec.build import build_definition
    from service.pipeline_spec.models import validate_spec
    from service.runtime.kafka.clients import KafkaCluster
    from service.runtime.kafka.end_offsets import probe_end_offsets
    from service.runtime.lifecycle.manager import Runtime
    from service.runtime.observability.status import PipelineState
    from service.runtime.settings import RuntimeSettings

    definition = build_definition(validate_spec(spec, ()), ())
    await create_topic(bootstrap, spec["sink"]["topic"], 4)
    runtime = Runtime(RuntimeSettings(bootstrap_servers=bootstrap, session_timeout_ms=2000))
    await runtime.start()
    try:
        started, cpu_started = time.perf_counter(), time.process_time()
        runtime.start_pipeline(definition)
        state = await runtime.runner(definition.name).wait_for_state(
            PipelineState.FINISHED, PipelineState.FAILED, timeout_s=900
        )
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        if state != PipelineState.FINISHED:
            raise RuntimeError(f"{definition.name}: {runtime.status(definition.name).reason}")
    finally:
        await runtime.shutdown()
    ends = await probe_end_offsets(KafkaCluster(bootstrap), [spec["sink"]["topic"]])
    return SpecRun(elapsed, cpu, sum(ends.values()))
