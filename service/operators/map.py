"""The stateless operator: every record, after its steps, is a result at once.

What a SQL ``SELECT ... FROM src WHERE ...`` without a window or a join is (Flink's
plain select, a Kafka Streams ``mapValues``/``filter``): the steps do the work (filter,
set, select, drop, unnest); this operator only emits, keeping the ``fields`` the spec
lists (a projection after the key and timestamp are read: a SQL select list may leave
out the time column the timestamp comes from). It keeps no state and no timers,
so nothing is ever late and the watermark changes nothing; a checkpoint holds only the
input position (the runtime's metadata).

Each output's ``id`` is made from the partition it was read from, the record's offset
and its index among the records one input record became (an ``unnest`` makes several),
so a replay after a crash writes the same ids and readers deduplicate by id, as for
windows and joins.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from service.core.time import MIN_TIMESTAMP
from service.operators.base import Collector, InputRecord, KeyedOutput, OperatorGauges

__all__ = ["MapOperator"]

_NO_TIMERS = {"event": (0, 0, 0), "processing": (0, 0, 0)}


def _nothing(_: str) -> None:
    return None


class MapOperator:
    """Emits every input record as a :class:`KeyedOutput` (``value``: the record)."""

    __slots__ = ("_fields", "_last", "_prefix", "_watermark", "collector")

    def __init__(self, pipeline: str, partition: str, fields: Sequence[str] | None = None) -> None:
        self.collector = Collector()
        self._fields = tuple(fields) if fields is not None else None
        """Keep only these top-level fields of each record (None: the whole record)."""
        self._prefix = f"{pipeline}|{partition}|"
        self._watermark = MIN_TIMESTAMP
        self._last: tuple[int, int] = (-1, 0)
        """The last output's input position and its index there (unnest: several)."""

    @property
    def current_watermark(self) -> int:
        return self._watermark

    def process_batch(self, records: Sequence[InputRecord]) -> None:
        results = self.collector.results
        prefix = self._prefix
        fields = self._fields
        last_position, n = self._last
        for key, timestamp, value, position, _ in records:
            n = n + 1 if position == last_position else 0
            last_position = position
            if fields is not None:
                get = value.get if isinstance(value, dict) else _nothing
                value = {name: get(name) for name in fields}
            results.append(KeyedOutput(f"{prefix}{position}|{n}", key, timestamp, value))
        self._last = (last_position, n)

    def advance_watermark(self, watermark: int) -> None:
        if watermark > self._watermark:
            self._watermark = watermark

    def advance_processing_time(self, now: int) -> None:
        return None

    def next_processing_time(self) -> int | None:
        return None

    def gauges(self) -> OperatorGauges:
        return OperatorGauges(event_timers=0, processing_timers=0, windows_open=0, keys=0)

    def timer_counts(self) -> dict[str, tuple[int, int, int]]:
        return dict(_NO_TIMERS)

    def snapshot(self) -> dict[str, Any]:
        return {}

    def restore(self, snapshot: dict[str, Any]) -> None:
        return None

    def snapshot_changes(self) -> dict[str, Any]:
        return {}

    def restore_changes(self, entries: Iterable[tuple[str, Any]]) -> None:
        return None
