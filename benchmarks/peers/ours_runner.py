"""Our service as a contender: the bounded standard pipeline on the runtime, started
as its own process by the harness (main venv). Built like ``benchmarks/e2e.py`` builds
it (its ``OPERATOR``, the same watermark and checkpoint settings), but writing to the
harness's output topic and timed from the partitions' assignment (see below).

``first_record``: the first moment the runtime's status shows the partitions assigned
(polled every 5 ms); ``finished``: the pipeline reported ``finished`` (bounded mode: read to the
end offsets, final watermark, every window fired and flushed).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from _common import OUT_OF_ORDERNESS_MS, Report, parse_args

CHECKPOINT_INTERVAL_MS = 5000


async def run(args: argparse.Namespace, report: Report) -> int:
    from benchmarks.e2e import OPERATOR
    from service.runtime.definition import (
        PipelineDefinition,
        SinkSettings,
        TimestampSettings,
        WatermarkSettings,
    )
    from service.runtime.factories import window_operator_factory
    from service.runtime.lifecycle.manager import Runtime
    from service.runtime.observability.status import PipelineState
    from service.runtime.settings import RuntimeSettings

    name = "bench"
    definition = PipelineDefinition(
        name=name,
        topics=(args.input_topic,),
        sink=SinkSettings(topic=args.output_topic, dead_letter_topic=f"{name}.dlq"),
        operator_factory=window_operator_factory(name, OPERATOR, late_output=False),
        key_field="user",
        timestamp=TimestampSettings(source="field", field="ts"),
        watermark=WatermarkSettings(max_out_of_orderness_ms=OUT_OF_ORDERNESS_MS, interval_ms=200),
        bounded=True,
    )
    settings = RuntimeSettings(
        bootstrap_servers=args.bootstrap,
        session_timeout_ms=2000,  # the group join on Tansu waits half of it
        checkpoint_interval_ms=CHECKPOINT_INTERVAL_MS,
        # Off: our clock starts when the join is done (below), so records read and
        # decoded during the join (prefetch.py) would be work done outside the clock.
        prefetch_max_records=0,
    )
    runtime = Runtime(settings)
    await runtime.start()

    async def watch_assignment() -> None:
        # The runtime counts records after processing a whole fetched batch (up to
        # 20k records), so "first record counted" would start the clock late. Start it
        # when the partitions are assigned instead (group join done, before the first
        # fetch): stricter on us than the peers' clock, which starts at their first
        # record, after their first fetch.
        while not runtime.status(name).partitions:  # noqa: ASYNC110 (no event to wait on)
            await asyncio.sleep(0.005)
        report.first_record = time.time()

    try:
        report.started = time.time()
        runtime.start_pipeline(definition)
        watcher = asyncio.create_task(watch_assignment())
        await runtime.runner(name).wait_for_state(PipelineState.FINISHED, timeout_s=900)
        report.finished = time.time()
        watcher.cancel()
        report.records_in = runtime.status(name).records_in
    finally:
        await runtime.shutdown()
    return report.records_in


def main() -> int:
    args = parse_args(__doc__ or "")
    from importlib.metadata import version

    report = Report("Clockwork (ours)", version("clockwork"))
    records = asyncio.run(run(args, report))
    report.write(args.report)
    return 0 if records == args.records else 1


if __name__ == "__main__":
    sys.exit(main())
