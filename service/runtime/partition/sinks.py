"""What a pipeline writes: results, late records and dead letters, as contract.md says.

- Results go to the result topic, keyed by the pipeline key (UTF-8), timestamped at the
  window's ``max_ts`` (``end - 1``) or the process function's output timestamp, with the
  contract's JSON value (``pipeline``, ``key``, ``window``, ``result``, ``fire``,
  ``seq``, ``watermark``, ``id``; or ``timestamp``, ``value`` for keyed process output).
  A running aggregate's upserts are ``pipeline``, ``key``, ``result``, ``op``, ``seq``,
  ``id``, timestamped at the key's largest event timestamp; its delete is a tombstone
  (the key, no value). A Top-N's rank rows are the same upserts, keyed ``<key>|<rank>``,
  and so are an outer regular join's rows, keyed ``<join key>|<left row>|<right row>``.
- Late records and dead letters carry the original Kafka key, value and headers
  unchanged, plus ``clockwork.*`` headers saying the pipeline and the reason (and, for
  late data, the watermark): the ones pipeline-spec.md lists, and no other. What the
  input record was is the stage's to say (its :data:`OriginOf`): the record fetched, or
  behind a shuffle record the source record it carries, without the shuffle's header.

Output partition: the source partition number modulo the output topic's partition
count. The input is partitioned by the pipeline key (semantics.md section 7), so every
result of one key lands in one output partition, in order, without hashing each key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import orjson
from aiokafka import TopicPartition

from service.contract.result_record import UPSERT_OP
from service.operators.base import (
    FailedRecord,
    FireKind,
    JoinRow,
    KeyedOutput,
    LateRecord,
    Upsert,
    WindowResult,
)
from service.runtime.definition import PipelineDefinition
from service.runtime.kafka.batch_producer import BatchProducer
from service.runtime.partition.decoding import DeadLetter

HEADER_PIPELINE = "clockwork.pipeline"
HEADER_REASON = "clockwork.reason"
HEADER_ERROR = "clockwork.error"
HEADER_WATERMARK = "clockwork.watermark"
HEADER_TIMESTAMP = "clockwork.timestamp"
HEADER_SOURCE = "clockwork.source"
HEADER_INPUT = "clockwork.input"
"""A join's late row or dead letter: the input it came to (a dead letter of a
join's own, say a ``select`` that failed on a pair, belongs to both and names none)."""

REASON_LATE = "late"
_ERROR_LIMIT = 1000
_DUMPS_OPTIONS = orjson.OPT_NON_STR_KEYS


class Origin(NamedTuple):
    """The input record behind a late record or a dead letter, as its producer wrote it."""

    topic: str
    partition: int
    offset: int
    headers: Sequence[tuple[str, bytes]]
    """The producer's headers, none of the service's own added on the way."""
    key: bytes | None
    value: bytes | None
    timestamp: int | None


OriginOf = Callable[[TopicPartition, Any], "Origin | None"]
"""``(partition fetched from, an input record's source) -> Origin``, None where the
source is no record (a timer's failure); asked only on the late and dead-letter paths,
never per record processed."""


def fetched_origin(tp: TopicPartition, record: Any) -> Origin | None:
    """A record read from the topic its producer wrote it to: it is its own origin."""
    if not hasattr(record, "offset"):
        return None
    return Origin(
        tp.topic,
        tp.partition,
        record.offset,
        record.headers or (),
        record.key,
        record.value,
        record.timestamp,
    )


def _json_default(value: Any) -> Any:
    """Values orjson cannot write natively: sets as sorted lists, the rest as text."""
    if isinstance(value, set | frozenset):
        try:
            return sorted(value)
        except TypeError:
            return [str(v) for v in value]
    if isinstance(value, tuple):
        return list(value)
    return str(value)


def dumps(value: Any) -> bytes:
    return orjson.dumps(value, default=_json_default, option=_DUMPS_OPTIONS)


class OutputSink:
    """Formats one pipeline's outputs and appends them to the batch producer."""

    __slots__ = (
        "_batches",
        "_dead_letter_parts",
        "_dead_letter_topic",
        "_encode",
        "_inputs",
        "_late_parts",
        "_late_topic",
        "_name",
        "_name_header",
        "_origin",
        "_partitions",
        "_result_parts",
        "_result_topic",
        "dead_lettered",
        "late_sent",
        "results_sent",
    )

    def __init__(
        self,
        definition: PipelineDefinition,
        batches: BatchProducer,
        partition_counts: dict[str, int],
        partitions: Mapping[TopicPartition, BatchProducer] | None = None,
        encode: Callable[[dict[str, Any]], bytes] | None = None,
        origin: OriginOf = fetched_origin,
    ) -> None:
        """``partitions``: with exactly-once delivery, each input partition's own
        batches (its transaction); else everything goes to ``batches``. ``encode``: a
        result's value in the sink's format (None: JSON). ``origin``: the input record
        behind a record fetched (a shuffled stage's records carry it)."""
        self._encode = encode
        self._origin = origin
        sink = definition.sink
        self._name = definition.name
        self._name_header = definition.name.encode()
        self._batches = batches
        self._partitions = partitions
        self._result_topic = sink.topic
        self._result_parts = partition_counts[sink.topic]
        self._dead_letter_topic = sink.dead_letter_topic
        self._dead_letter_parts = partition_counts[sink.dead_letter_topic]
        self._late_topic = sink.late_topic
        self._late_parts = partition_counts[sink.late_topic] if sink.late_topic else 0
        self.results_sent = 0
        self.late_sent = 0
        self.dead_lettered: dict[str, int] = {}
        self._inputs: dict[str, bytes] = {
            topic: settings.name.encode()
            for settings in definition.inputs or ()
            for topic in settings.topics
        }
        """A join's: the input each source topic belongs to."""

    def send_open(self) -> None:
        """Queue the open batches for sending now (after a timer wake-up)."""
        self._batches.send_open()
        if self._partitions is not None:
            for batches in self._partitions.values():
                batches.send_open()

    def _batches_of(self, source: TopicPartition) -> BatchProducer:
        partitions = self._partitions
        return self._batches if partitions is None else partitions[source]

    # -- results ---------------------------------------------------------------------
    def results(
        self,
        source: TopicPartition,
        results: Iterable[WindowResult | KeyedOutput | JoinRow | Upsert],
        firings: dict[str, int],
    ) -> None:
        """Append results in emission order, counting window firings by kind into ``firings``.

        Per result: one dict, one ``orjson.dumps`` without options (the options and the
        ``default`` hook cost ~0.4 us per call), and only a value plain orjson rejects (a
        set, a non-string dict key) goes through :func:`dumps`: where plain orjson
        succeeds, both write the same bytes.
        """
        topic = self._result_topic
        partition = source.partition % self._result_parts
        append = self._batches_of(source).append
        name = self._name
        fast_dumps = orjson.dumps
        encode_error = orjson.JSONEncodeError
        encode = self._encode
        on_time_kind = FireKind.ON_TIME
        on_time = 0
        count = 0
        for result in results:
            if type(result) is WindowResult:
                fire = result.fire
                end = result.end
                value = {
                    "pipeline": name,
                    "key": result.key,
                    "window": {"start": result.start, "end": end},
                    "result": result.result,
                    "fire": fire,
                    "seq": result.seq,
                    "watermark": result.watermark,
                    "id": result.id,
                }
                timestamp: int | None = end - 1
                if fire is on_time_kind:
                    on_time += 1
                else:
                    firings[fire.value] = firings.get(fire.value, 0) + 1
            elif type(result) is JoinRow:
                value = {
                    "pipeline": name,
                    "key": result.key,
                    "kind": result.kind,
                    "value": result.value,
                    "ts": result.timestamp,
                    "id": result.id,
                }
                if result.window is not None:
                    value["window"] = {"start": result.window[0], "end": result.window[1]}
                timestamp = result.timestamp
            elif type(result) is Upsert:
                if result.result is None:  # a delete: the tombstone of the key
                    append(topic, partition, result.key.encode(), None, result.timestamp)
                    count += 1
                    continue
                value = {
                    "pipeline": name,
                    "key": result.key,
                    "result": result.result,
                    "op": UPSERT_OP,
                    "seq": result.seq,
                    "id": result.id,
                }
                timestamp = result.timestamp
            else:
                value = {
                    "pipeline": name,
                    "key": result.key,
                    "timestamp": result.timestamp,
                    "value": result.value,  # type: ignore[union-attr]
                    "id": result.id,
                }
                timestamp = result.timestamp
            if encode is not None:
                payload = encode(value)
            else:
                try:
                    payload = fast_dumps(value)
                except encode_error:
                    payload = dumps(value)
            append(topic, partition, result.key.encode(), payload, timestamp)
            count += 1
        if on_time:
            kind = on_time_kind.value
            firings[kind] = firings.get(kind, 0) + on_time
        self.results_sent += count

    # -- late data -------------------------------------------------------------------
    def late(self, source: TopicPartition, records: Iterable[LateRecord]) -> None:
        """Forward late records to the late topic (the caller counts drops otherwise)."""
        topic = self._late_topic
        if topic is None:
            return
        partition = source.partition % self._late_parts
        append = self._batches_of(source).append
        origin = self._origin
        for late in records:
            record = origin(source, late.source)
            if record is None:  # not an input record: nothing to forward
                continue
            headers: list[tuple[str, bytes]] = [
                *record.headers,
                (HEADER_PIPELINE, self._name_header),
                (HEADER_REASON, REASON_LATE.encode()),
                (HEADER_WATERMARK, str(late.watermark).encode()),
                (HEADER_TIMESTAMP, str(late.timestamp).encode()),
            ]
            if late.input is not None:
                headers.append((HEADER_INPUT, late.input.encode()))
            append(topic, partition, record.key, record.value, record.timestamp, headers)
            self.late_sent += 1

    # -- failures --------------------------------------------------------------------
    def dead_letters(self, source: TopicPartition, records: Iterable[DeadLetter]) -> None:
        """Records of ``source`` that could not be decoded, keyed or timestamped."""
        for record in records:
            self._dead_letter(
                source, record.source, record.key, record.reason, record.error, record.headers
            )

    def failures(self, source: TopicPartition, records: Iterable[FailedRecord]) -> None:
        """Records of ``source`` (or its timers) the operator or user code failed on."""
        for record in records:
            self._dead_letter(
                source, record.source, record.key, record.reason, record.detail, record.headers
            )

    def _dead_letter(
        self,
        tp: TopicPartition,
        source: Any,
        key: str | None,
        reason: str,
        error: str,
        extra: tuple[tuple[str, bytes], ...] = (),
    ) -> None:
        """``source`` is the input record's source (the fetched Kafka record, or a
        frame's row), which the stage's :data:`OriginOf` reads; ``tp`` says where it was
        fetched."""
        source_partition = tp.partition
        headers: list[tuple[str, bytes]] = []
        topic = tp.topic
        origin = None if source is None else self._origin(tp, source)
        if origin is not None:
            topic = origin.topic
            headers.extend(origin.headers)
            raw_key, raw_value, timestamp = origin.key, origin.value, origin.timestamp
            where = f"{topic}/{origin.partition}/{origin.offset}"
            headers.append((HEADER_SOURCE, where.encode()))
        else:  # a timer's failure has no input record: describe it
            raw_key = key.encode() if key is not None else None
            raw_value = dumps({"pipeline": self._name, "key": key, "reason": reason})
            timestamp = None
        headers.append((HEADER_PIPELINE, self._name_header))
        headers.append((HEADER_REASON, reason.encode()))
        headers.append((HEADER_ERROR, error[:_ERROR_LIMIT].encode("utf-8", "replace")))
        headers.extend(extra)
        input_name = self._inputs.get(topic)
        if input_name is not None:
            headers.append((HEADER_INPUT, input_name))
        if raw_key is None and raw_value is None:
            raw_value = b""
        self._batches_of(tp).append(
            self._dead_letter_topic,
            source_partition % self._dead_letter_parts,
            raw_key,
            raw_value,
            timestamp,
            headers,
        )
        self.dead_lettered[reason] = self.dead_lettered.get(reason, 0) + 1
