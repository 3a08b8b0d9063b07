"""What every join emits, and what all kinds share: the sides, ``how``, ids, lateness.

A join operator instance serves one partition of key groups, like the window operator
(semantics.md section 7), but has two inputs: Flink's ``TwoInputStreamOperator``. The
runtime hands it each input's records through :meth:`process_left` and
:meth:`process_right` and one watermark, the join's ``W``: the minimum of the two
inputs' watermarks (:class:`~service.core.combiner.WatermarkCombiner` over the inputs).

An output row names the rows it was made of by their positions (the input record's
``position``), so its id is the same on every replay and replica, and a padded row's
missing side is ``none``: a replay is de-duplicated by id exactly as window results are.
"""

from __future__ import annotations

from enum import IntEnum, StrEnum
from typing import Any, Protocol

from service.core.time import MIN_TIMESTAMP
from service.operators.base import Collector, LateRecord


class Side(IntEnum):
    """Which input a row came from."""

    LEFT = 0
    RIGHT = 1


class How(StrEnum):
    """Which rows a join emits besides the matched pairs (SQL's join types)."""

    INNER = "inner"
    """Matched pairs only."""
    LEFT = "left"
    """Also every left row that never matched, with NULL for the right."""
    RIGHT = "right"
    """Also every right row that never matched, with NULL for the left."""
    FULL = "full"
    """Both of the above."""
    SEMI = "semi"
    """Each left row that has a match, once, without the right (window join only)."""
    ANTI = "anti"
    """Each left row that has no match (window join only)."""

    def pads(self, side: Side) -> bool:
        """Whether a row of ``side`` that never matched is emitted padded with NULLs."""
        if side is Side.LEFT:
            return self in (How.LEFT, How.FULL)
        return self in (How.RIGHT, How.FULL)


Window = tuple[int, int]


class Projection(Protocol):
    """``(left value or None, right value or None, window or None) -> output value``:
    the spec's ``select`` (a window join passes the row's window, the others None), or
    None for a row the spec's ``where`` drops."""

    def __call__(self, left: Any, right: Any, window: Window | None = None) -> Any: ...


def both_sides(left: Any, right: Any, window: Window | None = None) -> dict[str, Any]:
    """The output value without a ``select``."""
    return {"left": left, "right": right}


def row_id(
    pipeline: str, key: str, left: int | None, right: int | None, window: Window | None
) -> str:
    """``pipeline|key|left position|right position`` (``none`` for a missing side),
    with the window's start and end before the positions for a window join: a pair of
    rows can meet in several sliding windows."""
    lpos = "none" if left is None else str(left)
    rpos = "none" if right is None else str(right)
    if window is None:
        return f"{pipeline}|{key}|{lpos}|{rpos}"
    return f"{pipeline}|{key}|{window[0]}|{window[1]}|{lpos}|{rpos}"


def is_late(timestamp: int, watermark: int, allowed_lateness_ms: int) -> bool:
    """A row is late when ``ts + allowed_lateness <= W``: the watermark said no row at
    or below ``W`` would come, and the allowed lateness was spent (semantics.md
    section 3; the window operator judges a record the same way)."""
    return watermark != MIN_TIMESTAMP and timestamp + allowed_lateness_ms <= watermark


def send_late(
    collector: Collector,
    late_output: bool,
    source: Any,
    key: str,
    ts: int,
    watermark: int,
    input_name: str,
) -> None:
    """A late row to the late output naming its input, or counted as dropped without
    one (as the window operator does)."""
    if late_output:
        collector.late.append(LateRecord(source, key, ts, watermark, input_name))
    else:
        collector.dropped_late += 1


class JoinConfigError(ValueError):
    """A join built with settings that cannot work (the spec validates them first)."""
