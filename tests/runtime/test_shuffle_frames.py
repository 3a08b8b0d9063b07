"""Stage 1's writer and stage 2's decoder through frames, without a broker: what the
writer appends to the shuffle topic is what the decoder reads, in order.

- a processed batch becomes one frame per target partition, its markers after it;
- a flush with more bytes than the bound splits into frames, every row in one of them;
- a frame replayed whole, or in part (a restarted or zombie writer whose batches were
  cut elsewhere, so that its frame spans the point where the first writer's ended), is
  applied once;
- rows routed one per record before frames, then frames of the same source: each
  applied once (a shuffle topic written by the previous version drains);
- held routing (``interval_ms: 0``): a batch routed one record at a time with an
  announcement after each reaches every shuffle partition as one frame with the
  markers inside, in the order a frame and markers per record would have.
"""

from __future__ import annotations

from typing import Any, NamedTuple, cast

from hypothesis import given, seed, settings
from hypothesis import strategies as st

from service.core.frames import decode
from service.core.partitioner import KeyPartitioner
from service.core.shuffle import ShuffleInput, position
from service.core.time import MAX_TIMESTAMP
from service.operators.base import InputRecord
from service.runtime.kafka.batch_producer import BatchProducer
from service.runtime.partition.decoding import DeadLetter
from service.runtime.shuffle.reader import ShuffleDecoder
from service.runtime.shuffle.records import FRAME, MARKER, ROUTED, pack_routed
from service.runtime.shuffle.writer import ShuffleWriter

SHUFFLE = "clockwork.p.shuffle"


class Fetched(NamedTuple):
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int | None
    headers: tuple[tuple[str, bytes], ...] = ()


class Topic:
    """The shuffle topic: what writers append, per partition, in order."""

    def __init__(self, partitions: int) -> None:
        self.partitions: list[list[Fetched]] = [[] for _ in range(partitions)]

    def append(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        timestamp: int | None,
        headers: Any = (),
    ) -> None:
        assert topic == SHUFFLE
        records = self.partitions[partition]
        records.append(Fetched(len(records), key, value, timestamp, tuple(headers)))


def writer(topic: Topic, source: int = 0, max_frame_bytes: int = 512 * 1024) -> ShuffleWriter:
    return ShuffleWriter(
        lambda: cast(BatchProducer, topic),
        SHUFFLE,
        KeyPartitioner(len(topic.partitions)),
        source,
        2,
        max_frame_bytes=max_frame_bytes,
    )


def source_records(offsets: range, source_key: str = "u") -> list[InputRecord]:
    """Decoded source records: keys ``u0``, ``u1``... (one per offset), value bytes as
    the source wrote them."""
    out: list[InputRecord] = []
    for offset in offsets:
        value = {"user": f"{source_key}{offset}", "n": offset}
        raw = f'{{"user": "{source_key}{offset}", "n": {offset}}}'.encode()
        record = Fetched(offset, b"k", raw, 1_000 + offset)
        out.append((f"{source_key}{offset}", 1_000 + offset, value, offset, record))
    return out


def read(decoder: ShuffleDecoder, records: list[Fetched]) -> list[InputRecord]:
    inputs: list[InputRecord] = []
    failed: list[DeadLetter] = []
    decoder.decode(records, inputs, failed)
    assert failed == []
    return inputs


def rows(inputs: list[InputRecord]) -> list[tuple[str, int, Any]]:
    return [(key, ts, value["n"]) for key, ts, value, _, _ in inputs]


def test_a_batch_becomes_one_frame_per_target_partition_with_its_markers_after() -> None:
    topic = Topic(2)
    w = writer(topic)
    w.process_batch(source_records(range(40)))
    w.announce(1_020, idle=False)
    for records in topic.partitions:
        assert [r.headers[-1][0] for r in records] == [FRAME, MARKER]
    assert w.frames == 2 and w.routed == 40
    decoders = [ShuffleDecoder(ShuffleInput()) for _ in topic.partitions]
    got = [
        row
        for decoder, records in zip(decoders, topic.partitions, strict=True)
        for row in rows(read(decoder, records))
    ]
    assert sorted(n for _, _, n in got) == list(range(40))
    assert [d.frames for d in decoders] == [1, 1]
    assert sum(d.frame_rows for d in decoders) == 40


def test_a_flush_above_the_byte_bound_splits_and_every_row_arrives_once_in_order() -> None:
    topic = Topic(1)
    w = writer(topic, max_frame_bytes=1_024)
    w.process_batch(source_records(range(100)))
    frames = topic.partitions[0]
    assert len(frames) > 5
    assert all(len(f.value or b"") <= 1_024 for f in frames)
    got = rows(read(ShuffleDecoder(ShuffleInput()), frames))
    assert got == [(f"u{n}", 1_000 + n, n) for n in range(100)]


def test_a_frame_replayed_whole_or_in_part_is_applied_once() -> None:
    """The first writer's frames end at offset 29; a restarted writer resumes from its
    checkpoint at 20 and cuts its batches elsewhere: its first frame spans 20-39."""
    topic = Topic(1)
    first = writer(topic)
    first.process_batch(source_records(range(0, 10)))
    first.process_batch(source_records(range(10, 30)))
    restarted = writer(topic)
    restarted.process_batch(source_records(range(20, 40)))
    restarted.process_batch(source_records(range(10, 30)))  # a zombie's frame, whole again
    shuffle_input = ShuffleInput()
    got = rows(read(ShuffleDecoder(shuffle_input), topic.partitions[0]))
    assert [n for _, _, n in got] == list(range(40))
    assert shuffle_input.replays == 10 + 20


def test_rows_routed_one_per_record_before_frames_drain_then_frames_go_on() -> None:
    """After an upgrade the shuffle topic holds the previous version's routed records,
    then the new version's frames (which resume from the same checkpoint, so they may
    repeat some): every row is applied once, in order."""
    before = [
        Fetched(
            offset,
            b"k",
            f'{{"user": "u{offset}", "n": {offset}}}'.encode(),
            1_000 + offset,
            ((ROUTED, pack_routed(1_000 + offset, 0, position(offset)) + f"u{offset}".encode()),),
        )
        for offset in range(15)
    ]
    topic = Topic(1)
    writer(topic).process_batch(source_records(range(10, 25)))
    got = rows(read(ShuffleDecoder(ShuffleInput()), [*before, *topic.partitions[0]]))
    assert [n for _, _, n in got] == list(range(25))


def test_a_frame_row_s_position_and_event_time_are_as_stage_1_found_them() -> None:
    topic = Topic(1)
    writer(topic, source=1).process_batch(source_records(range(3)))
    (frame,) = topic.partitions[0]
    inputs = read(ShuffleDecoder(ShuffleInput()), [frame])
    assert [at for _, _, _, at, _ in inputs] == [position(n) << 16 | 1 for n in range(3)]
    assert decode(frame.value or b"").source == 1


def test_the_final_marker_follows_the_last_frame() -> None:
    topic = Topic(1)
    w = writer(topic)
    w.process_batch(source_records(range(5)))
    w.advance_watermark(MAX_TIMESTAMP)
    assert [r.headers[-1][0] for r in topic.partitions[0]] == [FRAME, MARKER]


# -- held routing: interval_ms 0, markers inside frames -------------------------------------
Event = tuple[Any, ...]


def events(decoder: ShuffleDecoder, records: list[Fetched]) -> list[Event]:
    """What a shuffle partition sees, in order: rows (their ``n``) and the watermarks
    marked between them, consecutive marks merged into the newest (a watermark only
    rises, so the ones before it change nothing)."""
    inputs = read(decoder, records)
    marks = decoder.markers
    out: list[Event] = []
    at = 0
    for i in range(len(inputs) + 1):
        while at < len(marks) and marks[at][0] == i:
            _, _, watermark, idle, _ = marks[at]
            if out and out[-1][0] == "mark":
                out.pop()
            out.append(("mark", watermark, idle))
            at += 1
        if i < len(inputs):
            out.append(("row", inputs[i][2]["n"]))
    return out


@seed(5151)
@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(st.tuples(st.integers(0, 3), st.booleans()), min_size=1, max_size=60),
    partitions=st.integers(1, 4),
    max_frame_bytes=st.sampled_from([200, 512 * 1024]),
)
def test_held_routing_gives_each_partition_the_order_a_frame_and_marker_per_record_gives(
    steps: list[tuple[int, bool]], partitions: int, max_frame_bytes: int
) -> None:
    """The same records and announcements, routed one at a time with a frame and markers
    each, and held for one release: every shuffle partition sees the same rows and
    watermarks in the same order, from at most one frame (unless split by the bound)
    and one marker."""
    one_by_one, held = Topic(partitions), Topic(partitions)
    plain = writer(one_by_one, max_frame_bytes=max_frame_bytes)
    holding = writer(held, max_frame_bytes=max_frame_bytes)
    holding.hold()
    watermark = 0
    for n, (advance, idle) in enumerate(steps):
        for w in (plain, holding):
            w.process_batch(source_records(range(n, n + 1)))
        watermark += advance
        for w in (plain, holding):
            w.announce(watermark, idle)
    holding.release()
    for records_one, records_held in zip(one_by_one.partitions, held.partitions, strict=True):
        expected_events = events(ShuffleDecoder(ShuffleInput()), records_one)
        assert events(ShuffleDecoder(ShuffleInput()), records_held) == expected_events
        markers = [r for r in records_held if r.headers[-1][0] == MARKER]
        assert len(markers) <= 1 and (not markers or records_held == markers)
        if max_frame_bytes > 1024:
            assert len(records_held) <= 1


def test_a_replayed_marked_frame_gives_its_marks_from_the_first_fresh_row_on() -> None:
    topic = Topic(1)
    w = writer(topic)
    w.hold()
    for n in range(4):
        w.process_batch(source_records(range(n, n + 1)))
        w.announce(1_000 + n, False)
    w.release()
    (frame,) = topic.partitions[0]
    decoder = ShuffleDecoder(ShuffleInput())
    assert events(decoder, [frame]) == [
        ("row", 0),
        ("mark", 1_000, False),
        ("row", 1),
        ("mark", 1_001, False),
        ("row", 2),
        ("mark", 1_002, False),
        ("row", 3),
        ("mark", 1_003, False),
    ]
    decoder.apply_all()
    assert decoder.input.markers_received() == {0: 4}
    assert events(decoder, [frame]) == [("mark", 1_003, False)]  # replayed: the last only
