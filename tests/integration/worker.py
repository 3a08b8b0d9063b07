"""A worker process for the crash test: runs one tumbling pipeline until SIGTERM.

``python -m tests.integration.worker BOOTSTRAP NAME TOPIC`` runs the pipeline that
``tests/integration/test_crash_recovery.py`` checks; SIGTERM stops it gracefully
(checkpoint, commit, leave the group), SIGKILL is the crash.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from service.runtime.manager import Runtime
from tests.integration.kafka_utils import runtime_settings, window_definition

OPERATOR = {
    "type": "window",
    "assigner": {"type": "tumbling", "size_ms": 60_000},
    "aggregations": {"n": {"fn": "count"}, "total": {"fn": "sum", "field": "amount"}},
}


async def main(bootstrap: str, name: str, topic: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    runtime = Runtime(runtime_settings(bootstrap, checkpoint_interval_ms=200, max_records=500))
    await runtime.start()
    runtime.start_pipeline(window_definition(name, [topic], OPERATOR, bounded=False))
    await stop.wait()
    await runtime.shutdown()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="worker %(levelname)s %(name)s: %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    asyncio.run(main(*sys.argv[1:4]))
