"""Kafka records as a DataFrame: the Python data source, or Spark's built-in ``kafka``.

Both give Spark's Kafka source columns (:data:`KAFKA_COLUMNS`) for exactly the offset
ranges the driver planned, so the rest of the job cannot tell them apart.

The Python data source (Spark 4 ``pyspark.sql.datasource``, format
``clockwork_kafka``) makes one Spark input partition per range piece: one per Kafka
partition, cut into pieces of at most ``max_records_per_split`` offsets. Each piece is
read by :func:`~service.compaction.kafka_client.read_range` and handed over as Arrow
record batches.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from service.compaction.ranges import OffsetRange
from service.compaction.security import ClientSecurity

KAFKA_COLUMNS = (
    "topic string, partition int, offset long, key binary, value binary, timestamp timestamp"
)
"""The columns of Spark's Kafka source that the job uses, in its types."""

FORMAT = "clockwork_kafka"
KAFKA_OPTION_PREFIX = "kafka."
"""Options with this prefix are passed to the client without it (as Spark's source does)."""


def _encode_ranges(ranges: Sequence[OffsetRange]) -> str:
    return json.dumps([[r.topic, r.partition, r.start, r.end] for r in ranges])


def _decode_ranges(text: str) -> list[OffsetRange]:
    return [OffsetRange(str(t), int(p), int(s), int(e)) for t, p, s, e in json.loads(text)]


class KafkaRangePartition(InputPartition):
    """One Spark input partition: one piece of one Kafka partition's offset range."""

    def __init__(self, offsets: OffsetRange) -> None:
        super().__init__(offsets)


class KafkaRangeReader(DataSourceReader):
    """Reads the planned offset ranges, one Spark task per range piece."""

    def __init__(self, schema: StructType, options: Mapping[str, str]) -> None:
        self.schema = schema
        self.bootstrap_servers = options["kafka.bootstrap.servers"]
        self.ranges = _decode_ranges(options["ranges"])
        self.max_records_per_split = int(options.get("max_records_per_split", "1000000"))
        self.chunk_records = int(options.get("chunk_records", "65536"))
        self.client_options = {
            k[len(KAFKA_OPTION_PREFIX) :]: v
            for k, v in options.items()
            if k.startswith(KAFKA_OPTION_PREFIX) and k != "kafka.bootstrap.servers"
        }

    def partitions(self) -> list[KafkaRangePartition]:
        from service.compaction.ranges import split_ranges

        pieces = split_ranges(self.ranges, self.max_records_per_split)
        return [KafkaRangePartition(piece) for piece in pieces]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        from service.compaction.kafka_client import read_range

        arrow_schema = to_arrow_schema(self.schema, timezone="UTC")
        for chunk in read_range(
            self.bootstrap_servers,
            partition.value,
            extra=self.client_options,
            chunk_records=self.chunk_records,
        ):
            micros = [None if ms is None else ms * 1000 for ms in chunk.timestamp_ms]
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array(chunk.topic, pa.string()),
                    pa.array(chunk.partition, pa.int32()),
                    pa.array(chunk.offset, pa.int64()),
                    pa.array(chunk.key, pa.binary()),
                    pa.array(chunk.value, pa.binary()),
                    pa.array(micros, pa.timestamp("us", tz="UTC")),
                ],
                schema=arrow_schema,
            )


class KafkaRangeDataSource(DataSource):
    """``spark.read.format("clockwork_kafka")`` with options ``kafka.bootstrap.servers``,
    ``ranges`` (JSON ``[[topic, partition, start, end], ...]``), optionally
    ``max_records_per_split``, ``chunk_records`` and ``kafka.<librdkafka property>``."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return KAFKA_COLUMNS

    def reader(self, schema: StructType) -> KafkaRangeReader:
        return KafkaRangeReader(schema, self.options)


def read_kafka(
    spark: SparkSession,
    bootstrap_servers: str,
    ranges: Sequence[OffsetRange],
    *,
    source: str = "python",
    max_records_per_split: int = 1_000_000,
    client_options: Mapping[str, str] | None = None,
    security: ClientSecurity | None = None,
) -> DataFrame:
    """The records of ``ranges`` with :data:`KAFKA_COLUMNS`.

    ``source="python"`` uses :class:`KafkaRangeDataSource`; ``source="kafka"`` uses Spark's
    built-in source (needs ``spark-sql-kafka-0-10`` on the classpath, e.g. by
    ``--packages``), given the same ranges as ``startingOffsets`` / ``endingOffsets``.
    ``client_options`` are client properties without the ``kafka.`` prefix; ``security``
    adds TLS and SASL in each client's own property names (librdkafka for the Python
    source, Java for Spark's).
    """
    ranges = [r for r in ranges if r.size > 0]
    if not ranges:
        return spark.createDataFrame([], KAFKA_COLUMNS)
    security = security or ClientSecurity()
    secured = security.librdkafka() if source == "python" else security.java()
    merged = {**secured, **(client_options or {})}
    options = {f"{KAFKA_OPTION_PREFIX}{k}": v for k, v in merged.items()}
    options["kafka.bootstrap.servers"] = bootstrap_servers
    if source == "python":
        spark.dataSource.register(KafkaRangeDataSource)
        reader = spark.read.format(FORMAT).options(**options)
        reader = reader.option("ranges", _encode_ranges(ranges))
        return reader.option("max_records_per_split", str(max_records_per_split)).load()
    if source == "kafka":
        return _read_builtin(spark, ranges, options, max_records_per_split)
    raise ValueError(f"source must be 'python' or 'kafka', not {source!r}")


def _read_builtin(
    spark: SparkSession,
    ranges: Sequence[OffsetRange],
    options: Mapping[str, str],
    max_records_per_split: int,
) -> DataFrame:
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for r in ranges:
        starting.setdefault(r.topic, {})[str(r.partition)] = r.start
        ending.setdefault(r.topic, {})[str(r.partition)] = r.end
    total = sum(r.size for r in ranges)
    min_partitions = max(len(ranges), -(-total // max_records_per_split))
    frame = (
        spark.read.format("kafka")
        .options(**options)
        .option("assign", json.dumps({t: sorted(int(p) for p in ps) for t, ps in starting.items()}))
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending))
        .option("minPartitions", str(min_partitions))
        .option("failOnDataLoss", "true")
        .option("kafka.isolation.level", "read_committed")  # as the Python source reads
        .load()
    )
    return frame.selectExpr(
        "topic", "partition", "offset", "key", "value", "cast(timestamp as timestamp) as timestamp"
    )
