"""The event-time core: clocks, timestamps, watermarks and timers (semantics.md 1-4).

Pure and synchronous: nothing here does I/O, imports asyncio or Kafka clients, or
imports the rest of ``service``. Everything the runtime and the operators need from the
core is importable from this module.
"""

from service.core.alignment import WatermarkAlignment
from service.core.combiner import WatermarkCombiner
from service.core.errors import ConfigError, CoreError, PartitionError, TimestampError
from service.core.paths import MISSING, PathGetter, compile_path, get_path, split_path
from service.core.time import (
    MAX_TIMESTAMP,
    MIN_TIMESTAMP,
    Clock,
    ManualClock,
    SystemClock,
    TimeDomain,
    saturating_add,
)
from service.core.timers import TimerCallback, TimerQueue, TimerService
from service.core.timestamps import KAFKA_SOURCE, TimestampExtractor, TimestampFormat, to_millis
from service.core.watermarks import (
    STRATEGIES,
    Ascending,
    BoundedOutOfOrderness,
    Punctuated,
    WatermarkGenerator,
    make_generator,
)

# Grouped by concept rather than sorted, so the list reads as a table of contents.
__all__ = [  # noqa: RUF022
    # time
    "MAX_TIMESTAMP",
    "MIN_TIMESTAMP",
    "Clock",
    "ManualClock",
    "SystemClock",
    "TimeDomain",
    "saturating_add",
    # errors
    "ConfigError",
    "CoreError",
    "PartitionError",
    "TimestampError",
    # field paths
    "MISSING",
    "PathGetter",
    "compile_path",
    "get_path",
    "split_path",
    # timestamps
    "KAFKA_SOURCE",
    "TimestampExtractor",
    "TimestampFormat",
    "to_millis",
    # watermarks
    "STRATEGIES",
    "Ascending",
    "BoundedOutOfOrderness",
    "Punctuated",
    "WatermarkGenerator",
    "make_generator",
    "WatermarkCombiner",
    "WatermarkAlignment",
    # timers
    "TimerCallback",
    "TimerQueue",
    "TimerService",
]
