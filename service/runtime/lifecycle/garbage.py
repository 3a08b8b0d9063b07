"""A young-generation collection on a clock, beside the raised ``gc_threshold``.

``RuntimeSettings.gc_threshold`` makes the cyclic collector count 500k net new objects
before a young collection, so that millions of long-lived window objects are not
rescanned all the time. But a pipeline's net growth is small (records come and go),
so young collections then almost never ran, and what needs one to be freed, cyclic
garbage made per fetch and per batch, stayed, holding what it referenced: W1 in process
grew ~75 MB per million records read, with no plateau through 12M (79 MB to 972 MB),
where Python's default thresholds stay flat near 200 MB at half the speed. A young
collection on a clock keeps the RSS flat (6M records: peak 278 MB, as with the default
thresholds; 3M: 254-293 MB against 360 MB without) at the raised thresholds' speed but
for its own cost: 36 ms a collection (max 66) over up to 500k young objects, measured
once a second; every ``gc_young_interval_s`` (2 s) halves that. On a loaded machine
alternated 3M runs took 15.0 and 17.3 s with it, 13.4 and 9.4 s without: that cost is
not measured closely yet.
"""

from __future__ import annotations

import asyncio
import gc


async def collect_young_garbage(interval_s: float) -> None:
    """Collect generation 0 every ``interval_s`` until cancelled."""
    while True:
        await asyncio.sleep(interval_s)
        gc.collect(0)
