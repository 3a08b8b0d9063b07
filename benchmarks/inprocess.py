"""What the in-process operator benchmarks (windows, process) share: input and GC set-up."""

from __future__ import annotations

import gc
import random

from service.operators.base import InputRecord
from service.runtime.settings import RuntimeSettings

BOUND_MS = 2000
KEYS = 10_000


def gc_like_the_service() -> None:
    """The cyclic collector as the service runs it (``RuntimeSettings.gc_threshold``), with
    the input frozen out of collections: here it is 1M long-lived dicts, in the service
    each batch is garbage after use. With Python's default thresholds the collector
    rescans the input so often that it costs a third of the run (``--default-gc``)."""
    gc.freeze()
    threshold = RuntimeSettings(bootstrap_servers="").gc_threshold  # its default
    if threshold is not None:
        gc.set_threshold(*threshold)


def make_records(count: int, seed: int = 7, *, amounts: bool = False) -> list[InputRecord]:
    """``count`` records of ``KEYS`` users, ~1 ms apart, up to ``BOUND_MS`` out of order;
    with ``amounts`` each value also carries an ``amount`` (drawn from the same stream).

    Every record's key is a string object of its own, as the runtime's decoder produces
    them (``orjson`` makes a new string for every value it decodes). Records sharing one
    key object would flatter the operators: each keyed lookup would then end at the
    identity test, where a decoded key is compared with the stored key's text (measured
    with 5 interleaved runs of each: the keyed process user function 6-16% and a
    tumbling window ~15% faster on shared key objects than on fresh ones)."""
    rng = random.Random(seed)
    base = 1_700_000_000_000
    records: list[InputRecord] = []
    for i in range(count):
        user = f"user-{rng.randrange(KEYS)}"
        ts = base + i - rng.randrange(BOUND_MS)
        value = {"user": user, "ts": ts}
        if amounts:
            value["amount"] = rng.randrange(1, 10_000) / 100
        records.append((user, ts, value, i, None))
    return records
