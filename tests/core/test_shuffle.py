"""The receiving side of the keyed shuffle: markers, their minimum, and the replay filter."""

from __future__ import annotations

import json
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from service.core.shuffle import ShuffleInput, position
from service.core.time import MAX_TIMESTAMP, MIN_TIMESTAMP
from service.core.watermarks import BoundedOutOfOrderness


def test_the_watermark_stays_at_its_start_until_every_source_has_spoken() -> None:
    s = ShuffleInput()
    s.marker(0, 100, idle=False, count=3)
    s.marker(1, 200, idle=False, count=3)
    assert s.current_watermark == MIN_TIMESTAMP
    s.marker(2, 150, idle=False, count=3)
    assert s.current_watermark == 100


def test_the_watermark_is_the_minimum_over_the_sources_not_idle() -> None:
    s = ShuffleInput()
    s.marker(0, 100, idle=False, count=2)
    s.marker(1, 500, idle=False, count=2)
    assert s.current_watermark == 100
    s.marker(0, 100, idle=True, count=2)
    assert s.current_watermark == 500
    assert s.idle_sources() == [0]


def test_a_join_input_s_watermark_is_the_same_rule_over_its_own_sources() -> None:
    s = ShuffleInput()
    s.marker(0, 100, idle=False, count=4)  # left: sources 0 and 1
    s.marker(2, 300, idle=False, count=4)  # right: sources 2 and 3
    s.marker(3, 400, idle=False, count=4)
    assert s.watermark_of([0, 1]) == MIN_TIMESTAMP  # source 1 has not spoken
    assert s.watermark_of([2, 3]) == 300
    s.marker(1, 50, idle=False, count=4)
    assert (s.watermark_of([0, 1]), s.current_watermark) == (50, 50)
    s.marker(1, 50, idle=True, count=4)
    assert s.watermark_of([0, 1]) == 100
    s.marker(0, 100, idle=True, count=4)
    assert s.watermark_of([0, 1]) == 100  # all idle: the maximum


def test_when_every_source_is_idle_the_watermark_flushes_to_their_maximum() -> None:
    s = ShuffleInput()
    s.marker(0, 500, idle=False, count=2)
    s.marker(1, 200, idle=False, count=2)
    s.marker(0, 500, idle=True, count=2)
    assert s.current_watermark == 200  # source 1 still holds it
    s.marker(1, 200, idle=True, count=2)
    assert s.current_watermark == 500  # nothing holds it: Flink's flush


def test_a_last_source_speaking_idle_after_the_others_went_idle_flushes_too() -> None:
    """The others read everything and went idle before the empty source's first marker
    arrived: the same watermark as when it spoke first."""
    early, late = ShuffleInput(), ShuffleInput()
    early.marker(2, MIN_TIMESTAMP, idle=True, count=3)
    for s in (early, late):
        s.marker(0, 400, idle=False, count=3)
        s.marker(1, 700, idle=False, count=3)
        s.marker(0, 400, idle=True, count=3)
        s.marker(1, 700, idle=True, count=3)
    assert late.current_watermark == MIN_TIMESTAMP  # source 2 has not spoken
    late.marker(2, MIN_TIMESTAMP, idle=True, count=3)
    assert early.current_watermark == late.current_watermark == 700


@settings(max_examples=300, deadline=None)
@given(
    markers=st.lists(
        st.lists(st.tuples(st.integers(0, 1000), st.booleans()), max_size=6),
        min_size=1,
        max_size=4,
    ),
    seeds=st.lists(st.integers(0, 2**32), min_size=2, max_size=4),
)
def test_once_every_source_is_idle_the_watermark_is_the_same_whatever_the_interleaving(
    markers: list[list[tuple[int, bool]]], seeds: list[int]
) -> None:
    """Each source sends its markers in order and ends idle (an empty source only says
    it is idle); read in any interleaving, a shuffle partition ends at the maximum of
    the sources' watermarks, never having gone back on the way."""
    count = len(markers)
    streams = [
        [(source, wm, idle) for wm, idle in ours]
        + [(source, max((wm for wm, _ in ours), default=MIN_TIMESTAMP), True)]
        for source, ours in enumerate(markers)
    ]
    finals = set()
    for seed in seeds:
        rng = random.Random(seed)
        cursors = [0] * count
        shuffle = ShuffleInput()
        seen = MIN_TIMESTAMP
        while live := [s for s in range(count) if cursors[s] < len(streams[s])]:
            s = rng.choice(live)
            source, wm, idle = streams[s][cursors[s]]
            cursors[s] += 1
            shuffle.marker(source, wm, idle=idle, count=count)
            assert shuffle.current_watermark >= seen
            seen = shuffle.current_watermark
        finals.add(shuffle.current_watermark)
    highest = max(max((wm for wm, _ in ours), default=MIN_TIMESTAMP) for ours in markers)
    assert finals == {highest}


def test_an_older_marker_from_a_replaying_writer_changes_nothing() -> None:
    s = ShuffleInput()
    s.marker(0, 500, idle=False, count=1)
    s.marker(0, 200, idle=False, count=1)
    assert s.current_watermark == 500


def test_a_source_becoming_active_behind_does_not_wind_the_watermark_back() -> None:
    s = ShuffleInput()
    s.marker(0, 100, idle=True, count=2)
    s.marker(1, 900, idle=False, count=2)
    assert s.current_watermark == 900
    s.marker(0, 100, idle=False, count=2)
    assert s.current_watermark == 900
    s.marker(0, 1000, idle=False, count=2)
    assert s.current_watermark == 900


def test_finished_once_every_source_said_max() -> None:
    s = ShuffleInput()
    s.marker(0, MAX_TIMESTAMP, idle=False, count=2)
    assert not s.finished
    s.marker(1, MAX_TIMESTAMP, idle=True, count=2)  # a final marker is never idle
    assert s.finished and s.current_watermark == MAX_TIMESTAMP


def test_an_idle_source_keeps_the_partition_unfinished_when_the_others_ended() -> None:
    """The flush of every idle source may raise the watermark to MAX (a finished source
    is among them), but the partition's input has not ended: the idle source may still
    send records, which must reach the operator (as late rows), not be skipped."""
    s = ShuffleInput()
    s.marker(0, MAX_TIMESTAMP, idle=False, count=2)
    s.marker(1, 300, idle=True, count=2)
    assert s.current_watermark == MAX_TIMESTAMP
    assert not s.finished
    s.marker(1, MAX_TIMESTAMP, idle=False, count=2)
    assert s.finished


def test_a_record_at_or_below_the_highest_applied_position_of_its_source_is_a_replay() -> None:
    s = ShuffleInput()
    assert s.fresh(0, position(10))
    assert s.fresh(0, position(10, 1))
    assert s.fresh(1, position(3))  # another source has its own positions
    assert not s.fresh(0, position(10, 1))
    assert not s.fresh(0, position(9))
    assert s.fresh(0, position(11))
    assert s.replays == 2


def test_snapshot_restores_markers_and_the_replay_filter() -> None:
    s = ShuffleInput()
    s.marker(0, 100, idle=False, count=2)
    s.marker(1, 50, idle=True, count=2)
    s.fresh(0, position(7))
    twin = ShuffleInput()
    twin.restore(json.loads(json.dumps(s.snapshot())))
    assert twin.current_watermark == s.current_watermark == 100
    assert not twin.fresh(0, position(7))
    assert twin.fresh(0, position(8))
    twin.marker(1, 80, idle=False, count=2)
    assert twin.current_watermark == 100  # 80 < 100: never back


@settings(max_examples=300, deadline=None)
@given(
    sources=st.lists(st.lists(st.integers(0, 60), min_size=1, max_size=25), min_size=1, max_size=4),
    shuffle_partitions=st.integers(1, 3),
    bound=st.integers(0, 10),
    seed=st.integers(0, 2**32),
    replay_from=st.one_of(st.none(), st.integers(0, 25)),
)
def test_no_record_crosses_the_shuffle_late_and_none_twice(
    sources: list[list[int]],
    shuffle_partitions: int,
    bound: int,
    seed: int,
    replay_from: int | None,
) -> None:
    """A direct simulation of both stages over a random interleaving. Each source
    partition's writer runs a bounded-out-of-orderness generator, writes each record to
    the shuffle partition of its key and then a marker to every shuffle partition; with
    ``replay_from``, each source has a second writer (a restarted owner, or a zombie
    still running) that writes again from that offset, its generator restored there.
    Stage 2 reads each shuffle partition with all writers' records interleaved at random
    (each writer's own order kept). Then in every shuffle partition: every record routed
    there is applied exactly once; one that was not late at its source is never behind
    the watermark when applied; and after every final marker it is finished."""
    rng = random.Random(seed)

    def write(
        s: int, offsets: range, generator: BoundedOutOfOrderness, first: bool = True
    ) -> list[list[Any]]:
        out: list[list[Any]] = [[] for _ in range(shuffle_partitions)]
        for offset in offsets:
            if first and offset == replay_from:  # where the second writer starts
                for p in range(shuffle_partitions):
                    checkpoints[(s, p)] = len(out[p])
            ts = sources[s][offset]
            generator.on_event(ts, None)
            out[(offset * 7 + s) % shuffle_partitions].append(("record", s, offset, ts))
            for p in range(shuffle_partitions):
                out[p].append(("marker", s, generator.current_watermark, 0))
        for p in range(shuffle_partitions):
            out[p].append(("marker", s, MAX_TIMESTAMP, 0))
        return out

    writers: list[list[list[Any]]] = []
    # A second writer starts from a checkpoint at ``replay_from``, which stage 1 takes
    # only once the first writer's outputs before it are acknowledged (in the log): per
    # shuffle partition, how much of the first writer's stream precedes its first write.
    checkpoints: dict[tuple[int, int], int] = {}
    after: dict[int, tuple[int, int]] = {}  # second writer -> (first writer, source)
    late_at_source: set[tuple[int, int]] = set()
    for s, timestamps in enumerate(sources):
        seen = BoundedOutOfOrderness(bound)
        for offset, ts in enumerate(timestamps):
            if ts <= seen.current_watermark:
                late_at_source.add((s, offset))
            seen.on_event(ts, None)
        writers.append(write(s, range(len(timestamps)), BoundedOutOfOrderness(bound)))
        if replay_from is not None and replay_from < len(timestamps):
            restored = BoundedOutOfOrderness(bound)  # the checkpoint at replay_from
            for ts in timestamps[:replay_from]:
                restored.on_event(ts, None)
            after[len(writers)] = (len(writers) - 1, s)
            writers.append(write(s, range(replay_from, len(timestamps)), restored, first=False))
    for p in range(shuffle_partitions):
        shuffle = ShuffleInput()
        cursors = [0] * len(writers)
        applied: list[tuple[int, int]] = []
        while True:
            live = [
                w
                for w in range(len(writers))
                if cursors[w] < len(writers[w][p])
                and (w not in after or cursors[after[w][0]] >= checkpoints[(after[w][1], p)])
            ]
            if not live:
                break
            w = rng.choice(live)
            kind, source, value, ts = writers[w][p][cursors[w]]
            cursors[w] += 1
            if kind == "marker":
                shuffle.marker(source, value, idle=False, count=len(sources))
            elif shuffle.fresh(source, position(value)):
                applied.append((source, value))
                if (source, value) not in late_at_source:
                    assert ts > shuffle.current_watermark
        routed = [
            (s, o)
            for s in range(len(sources))
            for o in range(len(sources[s]))
            if (o * 7 + s) % shuffle_partitions == p
        ]
        assert sorted(applied) == routed
        assert shuffle.finished
