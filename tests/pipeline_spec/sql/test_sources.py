"""CREATE SOURCE compiles to the source, timestamp and watermark sections it declares."""

from __future__ import annotations

from .scripts import compiled, problems

QUERY = (
    "INSERT INTO out SELECT window_start, window_end, COUNT(*) AS n "
    "FROM TUMBLE(s, ts, INTERVAL '1' MINUTE) GROUP BY window_start, window_end"
)


def test_source_options_compile_to_source_and_watermark_settings() -> None:
    spec = compiled(
        "CREATE SOURCE s (ts BIGINT, WATERMARK FOR ts AS ts - INTERVAL '500' MILLISECOND) WITH ("
        "topic = 'a,b', start_from = 'latest', bounded = true, "
        "idle_timeout = INTERVAL '30' SECOND, "
        "idle_advance = true, max_drift = '1 minute', watermark_interval = 0, "
        "timestamp_format = 'epoch_seconds');\n" + QUERY
    )
    assert spec["source"] == {
        "topics": ["a", "b"],
        "format": "json",
        "start_from": "latest",
        "bounded": True,
    }
    assert spec["timestamp"] == {"field": "ts", "format": "epoch_seconds"}
    assert spec["watermark"] == {
        "strategy": "bounded_out_of_orderness",
        "max_out_of_orderness_ms": 499,
        "idle_timeout_ms": 30000,
        "idle_advance": True,
        "max_drift_ms": 60000,
        "interval_ms": 0,
    }


def test_a_watermark_delay_of_n_is_flink_sqls_max_minus_n_a_bound_of_n_minus_1() -> None:
    """Flink SQL's watermark is ``max_ts - n``; the spec's bound B gives ``max_ts - B - 1``
    (Flink's DataStream bounded out-of-orderness), so the script's n is B = n - 1."""
    for delay, bound in (("INTERVAL '2' SECOND", 1999), ("INTERVAL '1' MILLISECOND", 0)):
        spec = compiled(
            f"CREATE SOURCE s (ts BIGINT, WATERMARK FOR ts AS ts - {delay}) "
            "WITH (topic = 'a');\n" + QUERY
        )
        assert spec["watermark"] == {
            "strategy": "bounded_out_of_orderness",
            "max_out_of_orderness_ms": bound,
        }


def test_watermark_as_the_column_itself_is_strictly_ascending_as_in_flink_sql() -> None:
    """``AS ts`` is ``W = max_ts`` in Flink SQL: a tie with the newest record is late."""
    spec = compiled(
        "CREATE SOURCE s (ts BIGINT, WATERMARK FOR ts AS ts) WITH (topic = 'a');\n" + QUERY
    )
    assert spec["watermark"] == {"strategy": "strictly_ascending"}


def test_a_timestamp_column_is_read_as_iso8601() -> None:
    spec = compiled(
        "CREATE SOURCE s (ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) "
        "WITH (topic = 'a');\n" + QUERY
    )
    assert spec["timestamp"] == {"field": "ts", "format": "iso8601"}


def test_flink_create_table_with_quoted_options_is_a_source() -> None:
    spec = compiled(
        "CREATE TABLE s (ts BIGINT, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) WITH ("
        "'connector' = 'kafka', 'topic' = 'a', 'format' = 'json', "
        "'scan.startup.mode' = 'earliest-offset', 'properties.bootstrap.servers' = 'k:9092');\n"
        + QUERY
    )
    assert spec["source"] == {"topics": ["a"], "format": "json", "start_from": "earliest"}


def test_shuffle_partitions_go_to_the_key() -> None:
    spec = compiled(
        "CREATE SOURCE s (k VARCHAR, ts BIGINT, WATERMARK FOR ts AS ts) "
        "WITH (topic = 'a', shuffle_partitions = 8);\n"
        "INSERT INTO out SELECT k, window_start, window_end, COUNT(*) AS n "
        "FROM TUMBLE(s, ts, INTERVAL '1' MINUTE) GROUP BY k, window_start, window_end"
    )
    assert spec["key"] == {"field": "k", "shuffle_partitions": 8}


def test_a_source_format_compiles_to_the_sources_format() -> None:
    for written, fmt in (
        ("avro", "avro"),
        ("avro-confluent", "avro"),
        ("protobuf", "protobuf"),
        ("json-schema", "json_schema"),
    ):
        spec = compiled(
            f"CREATE SOURCE s (ts BIGINT, WATERMARK FOR ts AS ts) WITH (topic = 't', "
            f"format = '{written}');\n" + QUERY
        )
        assert spec["source"]["format"] == fmt


def test_a_sink_format_compiles_to_the_sinks_format() -> None:
    spec = compiled(
        "CREATE SOURCE s (ts BIGINT, WATERMARK FOR ts AS ts) WITH (topic = 't', format = 'avro');\n"
        "CREATE SINK out WITH (topic = 'out', format = 'protobuf');\n" + QUERY
    )
    assert spec["sink"] == {"topic": "out", "format": "protobuf"}


RESULTS = (
    'CREATE SOURCE counts (key VARCHAR, "window" STRUCT<start BIGINT, "end" BIGINT>, '
    "result STRUCT<num BIGINT>, {watermark}) WITH (topic = 'counts');\n"
)
"""Another pipeline's result topic: ``{key, window: {start, end}, result: {...}}``."""


def test_a_result_topics_window_end_is_a_sources_event_time() -> None:
    spec = compiled(
        RESULTS.format(watermark='WATERMARK FOR "window"."end" AS "window"."end"')
        + "INSERT INTO top SELECT MAX_BY(key, result.num) AS auction, MAX(result.num) AS num, "
        'window_start, window_end FROM TUMBLE(counts, "window"."end", INTERVAL \'2\' SECOND) '
        "GROUP BY window_start, window_end"
    )
    assert spec["timestamp"] == {"field": "window.end", "format": "epoch_millis"}
    assert spec["watermark"] == {"strategy": "strictly_ascending"}
    assert spec["operator"]["aggregations"]["auction"] == {
        "fn": "max_by",
        "field": "key",
        "by": "result.num",
    }


def test_a_watermark_on_a_field_of_a_column_without_fields_is_refused() -> None:
    found = problems(
        RESULTS.format(watermark="WATERMARK FOR key.x AS key.x")
        + "INSERT INTO top SELECT key FROM counts"
    )
    assert [p.type for p in found] == ["sql_type_mismatch"]
    assert "has no fields" in found[0].message


def test_a_window_over_a_nested_time_names_that_field() -> None:
    found = problems(
        RESULTS.format(watermark='WATERMARK FOR "window"."end" AS "window"."end"')
        + "INSERT INTO top SELECT COUNT(*) AS n, window_start, window_end "
        "FROM TUMBLE(counts, \"window\".start, INTERVAL '2' SECOND) "
        "GROUP BY window_start, window_end"
    )
    assert len(found) == 1 and "'window.end'" in found[0].message
