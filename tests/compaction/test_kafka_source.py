"""The Kafka side against the embedded broker: end offsets and the Python data source."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from service.compaction.kafka_client import watermarks
from service.compaction.kafka_source import read_kafka
from service.compaction.ranges import OffsetRange, split_ranges

from .conftest import T0, create_topic, produce, record


@pytest.mark.integration
def test_high_watermark_counts_every_record_of_several_batches(
    bootstrap_servers: str, topic_name: str
) -> None:
    create_topic(bootstrap_servers, topic_name, 3)
    counts = {0: 137, 1: 0, 2: 45}
    for partition, n in counts.items():
        values = [record("p", f"k{i}", T0, 0, {"n": i}) for i in range(n)]
        produce(bootstrap_servers, topic_name, values, partition=partition, batch=20)
    marks = watermarks(bootstrap_servers, [topic_name])
    assert {tp[1]: m.high for tp, m in marks.items()} == counts
    assert all(m.low == 0 for m in marks.values())


@pytest.mark.spark
@pytest.mark.integration
def test_python_source_reads_exactly_the_planned_ranges(
    spark: SparkSession, bootstrap_servers: str, topic_name: str
) -> None:
    create_topic(bootstrap_servers, topic_name, 3)
    produced = {}
    for partition, n in {0: 61, 1: 7, 2: 30}.items():
        values = [record("p", f"k{partition}-{i}", T0, i, {"n": i}) for i in range(n)]
        produce(bootstrap_servers, topic_name, values, partition=partition, batch=13)
        produced[partition] = values
    ranges = [
        OffsetRange(topic_name, 0, 5, 61),
        OffsetRange(topic_name, 1, 0, 7),
        OffsetRange(topic_name, 2, 10, 20),
    ]
    frame = read_kafka(spark, bootstrap_servers, ranges, max_records_per_split=20)
    assert frame.rdd.getNumPartitions() == len(split_ranges(ranges, 20)) == 5
    assert [f.simpleString() for f in frame.schema.fields] == [
        "topic:string",
        "partition:int",
        "offset:bigint",
        "key:binary",
        "value:binary",
        "timestamp:timestamp",
    ]
    rows = frame.collect()
    got = sorted((r["partition"], r["offset"]) for r in rows)
    expected = sorted((r.partition, o) for r in ranges for o in range(r.start, r.end))
    assert got == expected
    for row in rows:
        value = produced[row["partition"]][row["offset"]]
        assert row["topic"] == topic_name
        assert bytes(row["key"]) == value["key"].encode()
        assert b'"seq":%d' % value["seq"] in bytes(row["value"])
        assert row["timestamp"].timestamp() * 1000 >= T0
