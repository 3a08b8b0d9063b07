"""A join behind the keyed shuffle, as stage 2 runs it, against the reference join.

Both inputs come from several source partitions each; every source partition's writer
(stage 1) writes its records in order, each followed by a marker with its
bounded-out-of-orderness watermark, and ``MAX`` at its end. The shuffle partition holds
every writer's stream interleaved at random (each writer's own order kept). Stage 2
applies records and markers in that order (:class:`ShuffleInput` for the watermark and
the replay filter, :class:`SidedJoin` to split the sides), is handed the watermark at
random points (the periodic emission), checkpoints at random points (incremental
changes, the shuffle's state and the position, outputs up to there acknowledged), and
may crash at random points: everything emitted since the last checkpoint is then lost,
and a new instance restores the changelog and reads again from the checkpoint.

Whatever the interleaving, the emission points, the checkpoints and the crashes, the
rows after de-duplication by id are exactly the reference's: no padded row is lost,
none is emitted for a row that had a partner, and no row is late.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from service.core.shuffle import ShuffleInput, position
from service.core.time import MAX_TIMESTAMP
from service.core.watermarks import BoundedOutOfOrderness
from service.operators.base import JoinRow
from service.operators.join.base import JoinOperator
from service.operators.join.inputs import SidedJoin
from service.operators.join.interval import IntervalJoinOperator
from service.operators.join.rows import How, Side
from service.operators.join.window import WindowJoinOperator
from service.operators.window.assigners import SlidingAssigner, TumblingAssigner

from .reference import PIPELINE, Event, in_bound

Row = tuple[str, int | None, int | None, tuple[int, int] | None]
"""``(key, left n, right n, window)``: a row as compared."""

Written = tuple[str, int, Any]
"""What one writer put into the shuffle partition: ``("record", source, (offset, event))``
or ``("marker", source, watermark)``."""


def writer_stream(source: int, events: Sequence[Event], bound: int) -> list[Written]:
    """Stage 1 for one source partition: each record, then its watermark; MAX at the end."""
    generator = BoundedOutOfOrderness(bound)
    stream: list[Written] = []
    for offset, event in enumerate(events):
        stream.append(("record", source, (offset, event)))
        generator.on_event(event[1], None)
        stream.append(("marker", source, generator.current_watermark))
    stream.append(("marker", source, MAX_TIMESTAMP))
    return stream


def interleave(streams: Sequence[list[Written]], rng: random.Random) -> list[Written]:
    cursors = [0] * len(streams)
    merged: list[Written] = []
    while True:
        live = [s for s, stream in enumerate(streams) if cursors[s] < len(stream)]
        if not live:
            return merged
        s = rng.choice(live)
        merged.append(streams[s][cursors[s]])
        cursors[s] += 1


def as_row(row: JoinRow) -> Row:
    left, right = row.value["left"], row.value["right"]
    return (
        row.key,
        None if left is None else left["n"],
        None if right is None else right["n"],
        row.window,
    )


class Stage2:
    """One shuffle partition of stage 2 with its checkpoints and crashes."""

    def __init__(self, make: Callable[[], JoinOperator], sides: list[Side], sources: int) -> None:
        self.make = make
        self.sides = sides
        self.sources = sources
        self.changelog: list[tuple[str, Any]] = []
        self.checkpoint: tuple[int, dict[str, Any]] = (0, ShuffleInput().snapshot())
        self.durable: dict[str, Row] = {}
        self.pending: dict[str, Row] = {}
        self.late = 0
        self.start()

    def start(self) -> None:
        """A new instance from the last checkpoint."""
        self.join = self.make()
        self.join.restore_changes(self.changelog)
        self.operator = SidedJoin(self.join, self.sides)
        self.input = ShuffleInput()
        self.input.restore(self.checkpoint[1])
        self.at = self.checkpoint[0]
        self.pending = {}

    def step(self, event: Written) -> None:
        kind, source, payload = event
        if kind == "marker":
            self.input.marker(source, payload, idle=False, count=self.sources)
        else:
            offset, (key, ts, value) = payload
            at = position(offset)
            if self.input.fresh(source, at):
                self.operator.process_batch([(key, ts, value, at << 16 | source, None)])
        self.at += 1
        self.drain()

    def emit_watermark(self) -> None:
        self.join.advance_watermark(self.input.current_watermark)
        self.drain()

    def take_checkpoint(self) -> None:
        self.changelog.extend(self.join.snapshot_changes().items())
        self.checkpoint = (self.at, self.input.snapshot())
        self.durable.update(self.pending)
        self.pending = {}

    def drain(self) -> None:
        results, late, _ = self.join.collector.drain()
        self.late += len(late) + self.join.collector.dropped_late
        self.join.collector.dropped_late = 0
        for row in results:
            assert isinstance(row, JoinRow)
            self.pending[row.id] = as_row(row)


def run(
    make: Callable[[], JoinOperator],
    left: list[list[Event]],
    right: list[list[Event]],
    bound: int,
    seed: int,
    emit_every: int,
    checkpoint_every: int,
    crash_chance: float,
) -> Stage2:
    rng = random.Random(seed)
    streams = [writer_stream(s, events, bound) for s, events in enumerate(left + right)]
    sides = [Side.LEFT] * len(left) + [Side.RIGHT] * len(right)
    merged = interleave(streams, rng)
    stage = Stage2(make, sides, len(streams))
    crashes = 0
    while stage.at < len(merged):
        stage.step(merged[stage.at])
        if rng.randrange(emit_every) == 0:
            stage.emit_watermark()
        if rng.randrange(checkpoint_every) == 0:
            stage.take_checkpoint()
        if crashes < 3 and rng.random() < crash_chance:
            crashes += 1
            stage.start()
    assert stage.input.finished
    stage.emit_watermark()  # MAX: the bounded input's end fires everything
    stage.take_checkpoint()
    return stage


def numbered(side: str, sources: list[list[tuple[str, int, int]]], bound: int) -> list[list[Event]]:
    """Each source partition's in-bound events, numbered across the input."""
    count = 0
    partitions: list[list[Event]] = []
    for steps in sources:
        events = []
        for key, ts, value in in_bound(steps, bound):
            events.append((key, ts, {"side": side, "n": count, "k": value["k"]}))
            count += 1
        partitions.append(events)
    return partitions


def reference_window(
    left: list[list[Event]], right: list[list[Event]], how: How, assign: Any
) -> set[Row]:
    groups: dict[tuple[tuple[int, int], str], tuple[list[int], list[int]]] = {}
    for side, partitions in enumerate((left, right)):
        for events in partitions:
            for key, ts, value in events:
                for window in assign(ts):
                    groups.setdefault((window, key), ([], []))[side].append(value["n"])
    rows: set[Row] = set()
    for (window, key), (lefts, rights) in groups.items():
        rows |= {(key, i, j, window) for i in lefts for j in rights}
        if not rights and how.pads(Side.LEFT):
            rows |= {(key, i, None, window) for i in lefts}
        if not lefts and how.pads(Side.RIGHT):
            rows |= {(key, None, j, window) for j in rights}
    return rows


def reference_interval(
    left: list[list[Event]], right: list[list[Event]], how: How, lower: int, upper: int
) -> set[Row]:
    lefts = [e for events in left for e in events]
    rights = [e for events in right for e in events]
    rows: set[Row] = set()
    matched_right: set[int] = set()
    for lkey, lts, lvalue in lefts:
        matched = False
        for rkey, rts, rvalue in rights:
            if lkey == rkey and lts + lower <= rts <= lts + upper:
                matched = True
                matched_right.add(rvalue["n"])
                rows.add((lkey, lvalue["n"], rvalue["n"], None))
        if not matched and how.pads(Side.LEFT):
            rows.add((lkey, lvalue["n"], None, None))
    if how.pads(Side.RIGHT):
        rows |= {(k, None, v["n"], None) for k, _, v in rights if v["n"] not in matched_right}
    return rows


partition_steps = st.lists(
    st.tuples(st.sampled_from("abc"), st.integers(0, 6), st.integers(0, 8)), max_size=12
)
input_partitions = st.lists(partition_steps, min_size=1, max_size=3)
schedule = {
    "bound": st.integers(0, 8),
    "seed": st.integers(0, 2**32 - 1),
    "emit_every": st.integers(1, 4),
    "checkpoint_every": st.integers(1, 8),
    "crash_chance": st.sampled_from([0.0, 0.02, 0.1]),
}


@settings(max_examples=400, deadline=None)
@given(
    left=input_partitions,
    right=input_partitions,
    how=st.sampled_from([How.INNER, How.LEFT, How.RIGHT, How.FULL]),
    size=st.integers(1, 12),
    slide=st.one_of(st.none(), st.integers(1, 12)),
    **schedule,
)
def test_a_window_join_behind_the_shuffle_gives_the_reference_rows_through_crashes(
    left: list[list[tuple[str, int, int]]],
    right: list[list[tuple[str, int, int]]],
    how: How,
    size: int,
    slide: int | None,
    bound: int,
    seed: int,
    emit_every: int,
    checkpoint_every: int,
    crash_chance: float,
) -> None:
    assigner = TumblingAssigner(size) if slide is None else SlidingAssigner(size, slide)
    lefts, rights = numbered("l", left, bound), numbered("r", right, bound)

    def make() -> JoinOperator:
        return WindowJoinOperator(PIPELINE, how, assigner, inputs=("orders", "payments"))

    stage = run(make, lefts, rights, bound, seed, emit_every, checkpoint_every, crash_chance)
    assert set(stage.durable.values()) == reference_window(lefts, rights, how, assigner.assign)
    assert stage.late == 0
    assert stage.join.rows_held(Side.LEFT) == stage.join.rows_held(Side.RIGHT) == 0


@settings(max_examples=400, deadline=None)
@given(
    left=input_partitions,
    right=input_partitions,
    how=st.sampled_from([How.INNER, How.LEFT, How.RIGHT, How.FULL]),
    lower=st.integers(-6, 6),
    width=st.integers(0, 12),
    **schedule,
)
def test_an_interval_join_behind_the_shuffle_gives_the_reference_rows_through_crashes(
    left: list[list[tuple[str, int, int]]],
    right: list[list[tuple[str, int, int]]],
    how: How,
    lower: int,
    width: int,
    bound: int,
    seed: int,
    emit_every: int,
    checkpoint_every: int,
    crash_chance: float,
) -> None:
    lefts, rights = numbered("l", left, bound), numbered("r", right, bound)

    def make() -> JoinOperator:
        return IntervalJoinOperator(
            PIPELINE, how, lower, lower + width, inputs=("orders", "payments")
        )

    stage = run(make, lefts, rights, bound, seed, emit_every, checkpoint_every, crash_chance)
    want = reference_interval(lefts, rights, how, lower, lower + width)
    assert set(stage.durable.values()) == want
    assert stage.late == 0
    assert stage.join.rows_held(Side.LEFT) == stage.join.rows_held(Side.RIGHT) == 0
