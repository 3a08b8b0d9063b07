"""A record that crossed the shuffle reaches the late and dead-letter topics as its
producer wrote it: its own headers, then the sink's ``clockwork.*`` ones, never the
shuffle's ``clockwork.shuffle``; ``clockwork.source`` names the source record and a
join's ``clockwork.input`` its input. Stage 1's writer and stage 2's decoder and sink,
without a broker."""

from __future__ import annotations

from typing import Any, NamedTuple, cast

from aiokafka import TopicPartition

from service.core.partitioner import KeyPartitioner
from service.core.shuffle import ShuffleInput, position
from service.operators.base import FailedRecord, InputRecord, LateRecord
from service.runtime.definition import InputSettings, PipelineDefinition, SinkSettings
from service.runtime.kafka.batch_producer import BatchProducer
from service.runtime.partition.decoding import DeadLetter
from service.runtime.partition.sinks import OutputSink
from service.runtime.shuffle.reader import RoutedOrigin, ShuffleDecoder
from service.runtime.shuffle.records import FRAME, ROUTED, pack_routed
from service.runtime.shuffle.writer import ShuffleWriter

SHUFFLE = "clockwork.p.shuffle"
SOURCES = [TopicPartition("a", 0), TopicPartition("b", 0), TopicPartition("b", 1)]
OWN = (("trace", b"t1"), ("blob", b"\xff\x00"))


class Fetched(NamedTuple):
    """A fetched record, as the runtime reads it."""

    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes], ...] = ()


class Appended(NamedTuple):
    topic: str
    partition: int
    key: bytes | None
    value: bytes | None
    timestamp: int | None
    headers: tuple[tuple[str, bytes], ...]


class Batches:
    """What the writer and the sink append, kept."""

    def __init__(self) -> None:
        self.records: list[Appended] = []

    def append(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        timestamp: int | None,
        headers: Any = (),
    ) -> None:
        self.records.append(Appended(topic, partition, key, value, timestamp, tuple(headers)))


def definition(inputs: tuple[InputSettings, ...] | None = None) -> PipelineDefinition:
    return PipelineDefinition(
        name="p",
        topics=("a", "b"),
        sink=SinkSettings("p.out", "p.dlq", "p.late"),
        operator_factory=cast(Any, None),
        inputs=inputs,
    )


def route(source: int, offset: int, positioned: int | None = None) -> Fetched:
    """A source record with :data:`OWN` headers through stage 1, fetched in stage 2."""
    out = Batches()
    writer = ShuffleWriter(
        lambda: cast(BatchProducer, out),
        SHUFFLE,
        KeyPartitioner(1),
        source,
        len(SOURCES),
        positioned=positioned is not None,
    )
    record = Fetched(offset, b"k", b'{"user": "u1"}', 1_000, OWN)
    at = offset if positioned is None else position(offset, positioned)
    writer.process_batch([("u1", 1_000, {"user": "u1"}, at, record)])
    (frame,) = out.records
    assert frame.topic == SHUFFLE and frame.headers == ((FRAME, b""),)
    return Fetched(77, frame.key, frame.value, cast(int, frame.timestamp), frame.headers)


def routed_before_frames(source: int, offset: int) -> Fetched:
    """A source record with :data:`OWN` headers as the shuffle wrote it before frames:
    a record of its own, the routing in a last ``clockwork.shuffle`` header."""
    meta = pack_routed(1_000, source, position(offset)) + b"u1"
    return Fetched(78, b"k", b'{"user": "u1"}', 1_000, (*OWN, (ROUTED, meta)))


def decoded(record: Fetched) -> InputRecord:
    inputs: list[InputRecord] = []
    failed: list[DeadLetter] = []
    ShuffleDecoder(ShuffleInput()).decode([record], inputs, failed)
    assert failed == []
    (found,) = inputs
    return found


def sink_of(definition: PipelineDefinition) -> tuple[OutputSink, Batches]:
    out = Batches()
    counts = {"p.out": 1, "p.dlq": 1, "p.late": 1}
    sink = OutputSink(definition, cast(BatchProducer, out), counts, origin=RoutedOrigin(SOURCES))
    return sink, out


def names(headers: tuple[tuple[str, bytes], ...]) -> list[str]:
    return [name for name, _ in headers]


def test_a_late_record_after_the_shuffle_has_its_own_headers_and_the_sink_s() -> None:
    key, timestamp, _, _, source = decoded(route(source=2, offset=41))
    sink, out = sink_of(definition())
    sink.late(TopicPartition(SHUFFLE, 0), [LateRecord(source, key, timestamp, 5_000)])
    (late,) = out.records
    assert (late.topic, late.key, late.value) == ("p.late", b"k", b'{"user": "u1"}')
    assert late.headers[:2] == OWN
    assert late.headers[2:] == (
        ("clockwork.pipeline", b"p"),
        ("clockwork.reason", b"late"),
        ("clockwork.watermark", b"5000"),
        ("clockwork.timestamp", b"1000"),
    )


def test_a_dead_letter_after_the_shuffle_names_the_source_record_not_the_shuffle_s() -> None:
    key, _, _, _, source = decoded(route(source=2, offset=41))
    sink, out = sink_of(definition())
    failure = FailedRecord(source, key, "bad_value", "sum(amount)", (("clockwork.field", b"x"),))
    sink.failures(TopicPartition(SHUFFLE, 0), [failure])
    (dead,) = out.records
    assert dead.headers[:2] == OWN
    assert dead.headers[2:] == (
        ("clockwork.source", b"b/1/41"),
        ("clockwork.pipeline", b"p"),
        ("clockwork.reason", b"bad_value"),
        ("clockwork.error", b"sum(amount)"),
        ("clockwork.field", b"x"),
    )


def test_an_unnested_element_names_the_offset_of_its_source_record() -> None:
    key, _, _, _, source = decoded(route(source=0, offset=9, positioned=3))
    sink, out = sink_of(definition())
    sink.failures(TopicPartition(SHUFFLE, 0), [FailedRecord(source, key, "r", "e")])
    (dead,) = out.records
    assert dict(dead.headers)["clockwork.source"] == b"a/0/9"


def test_a_join_s_dead_letter_after_the_shuffle_names_its_input() -> None:
    inputs = (
        InputSettings(name="orders", topics=("a",)),
        InputSettings(name="payments", topics=("b",)),
    )
    key, _, _, _, source = decoded(route(source=1, offset=5))
    sink, out = sink_of(definition(inputs))
    sink.failures(
        TopicPartition(SHUFFLE, 0),
        [FailedRecord(source, key, "r", "e"), FailedRecord(None, key, "select_failed", "e")],
    )
    routed, select_failed = out.records
    assert routed.headers[:2] == OWN
    assert dict(routed.headers)["clockwork.input"] == b"payments"
    assert dict(routed.headers)["clockwork.source"] == b"b/0/5"
    # a failure of the join's own has no input record: described, naming no input
    assert names(select_failed.headers) == [
        "clockwork.pipeline",
        "clockwork.reason",
        "clockwork.error",
    ]


def test_a_record_of_the_shuffle_topic_stage_1_did_not_write_is_its_own_origin() -> None:
    stray = Fetched(12, b"k", b"{}", 1_000, OWN)
    inputs: list[InputRecord] = []
    failed: list[DeadLetter] = []
    ShuffleDecoder(ShuffleInput()).decode([stray], inputs, failed)
    sink, out = sink_of(definition())
    sink.dead_letters(TopicPartition(SHUFFLE, 3), failed)
    (dead,) = out.records
    assert dead.headers[:2] == OWN
    assert dict(dead.headers)["clockwork.source"] == f"{SHUFFLE}/3/12".encode()
    assert dict(dead.headers)["clockwork.reason"] == b"not_routed"


def test_a_row_routed_before_frames_is_still_read_and_names_its_source_record() -> None:
    """A shuffle topic written by the version before frames drains after an upgrade."""
    key, timestamp, value, at, source = decoded(routed_before_frames(source=2, offset=41))
    assert (key, timestamp, value, at) == ("u1", 1_000, {"user": "u1"}, position(41) << 16 | 2)
    sink, out = sink_of(definition())
    sink.failures(TopicPartition(SHUFFLE, 0), [FailedRecord(source, key, "r", "e")])
    sink.late(TopicPartition(SHUFFLE, 0), [LateRecord(source, key, timestamp, 5_000)])
    dead, late = out.records
    assert dead.headers[:2] == late.headers[:2] == OWN
    assert dict(dead.headers)["clockwork.source"] == b"b/1/41"
    assert (late.key, late.value) == (b"k", b'{"user": "u1"}')
    assert "clockwork.shuffle" not in names(dead.headers) + names(late.headers)
