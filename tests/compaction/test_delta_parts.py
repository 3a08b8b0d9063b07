"""The Delta path's pure parts, no Spark session: how the result type grows, the offsets in
a commit's metadata, the jar coordinates, the options that need ``--format delta``."""

from __future__ import annotations

import pytest
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from service.compaction import CompactionConfig
from service.compaction.cli import parser
from service.compaction.delta_session import lists_delta_jar, with_package
from service.compaction.delta_table import commit_metadata, metadata_attempt, parse_metadata
from service.compaction.errors import CompactionError, OffsetStoreError, ResultSchemaError
from service.compaction.offsets import StoredOffsets
from service.compaction.schemas import widen_struct


def struct(**fields: object) -> StructType:
    return StructType([StructField(name, kind, True) for name, kind in fields.items()])


def test_new_fields_are_appended_and_held_fields_keep_their_place_and_type() -> None:
    held = struct(orders=LongType(), inner=struct(a=LongType()))
    incoming = struct(revenue=DoubleType(), inner=struct(b=StringType()), orders=LongType())
    assert widen_struct(held, incoming, strict=True) == struct(
        orders=LongType(), inner=struct(a=LongType(), b=StringType()), revenue=DoubleType()
    )
    assert widen_struct(None, incoming, strict=True) == incoming


def test_a_configured_type_conflict_is_refused_and_an_inferred_one_keeps_the_table_s() -> None:
    held = struct(orders=LongType())
    with pytest.raises(ResultSchemaError, match="'orders' is bigint in the table and double"):
        widen_struct(held, struct(orders=DoubleType()), strict=True)
    assert widen_struct(held, struct(orders=DoubleType()), strict=False) == held


def test_offsets_round_trip_through_a_commit_s_metadata() -> None:
    stored = StoredOffsets(run=7, offsets={("t", 0): 10, ("t", 1): 3, ("u", 0): 1}, written_at_ms=5)
    text = commit_metadata(stored, "abc")
    assert parse_metadata(text) == stored
    assert metadata_attempt(text) == "abc"
    assert metadata_attempt(commit_metadata(stored)) is None


@pytest.mark.parametrize("text", [None, "", "not json", '"a string"', '{"other": 1}'])
def test_other_writers_metadata_is_not_ours(text: str | None) -> None:
    assert parse_metadata(text) is None


def test_our_metadata_damaged_is_an_error() -> None:
    with pytest.raises(OffsetStoreError):
        parse_metadata('{"clockwork_compaction": {"run": 1}}')


def test_the_delta_package_is_added_unless_some_version_is_listed() -> None:
    delta = "io.delta:delta-spark_4.2_2.13:4.4.0"
    assert with_package(None, delta) == delta
    assert with_package("a:b:1", delta) == f"a:b:1,{delta}"
    assert with_package("io.delta:delta-spark_4.2_2.13:9.9", delta) == (
        "io.delta:delta-spark_4.2_2.13:9.9"
    )


def test_a_delta_jar_on_spark_jars_means_no_package_is_resolved() -> None:
    assert lists_delta_jar("/j/a.jar,/j/io.delta_delta-spark_4.2_2.13-4.4.0.jar")
    assert lists_delta_jar("file:///opt/delta-spark_4.2_2.13-4.4.0.jar")
    assert not lists_delta_jar("/j/io.delta_delta-storage-4.4.0.jar")
    assert not lists_delta_jar(None)


@pytest.mark.parametrize(
    "options",
    [{"optimize": True}, {"zorder": True}, {"vacuum_hours": 1.0}],
)
def test_maintenance_needs_the_delta_format(options: dict[str, object]) -> None:
    with pytest.raises(CompactionError, match="need --format delta"):
        CompactionConfig("b:9092", ("t",), "/tmp/x", format="parquet", **options)


def test_deletion_vectors_are_on_by_default_and_the_cli_can_turn_them_off() -> None:
    assert CompactionConfig("b:9092", ("t",), "/tmp/x").deletion_vectors
    assert parser().parse_args(["--topics", "t", "--output", "o"]).deletion_vectors is None
    off = parser().parse_args(["--topics", "t", "--output", "o", "--no-deletion-vectors"])
    assert off.deletion_vectors is False


def test_unknown_formats_and_negative_vacuum_hours_are_refused() -> None:
    with pytest.raises(CompactionError, match="format must be one of"):
        CompactionConfig("b:9092", ("t",), "/tmp/x", format="orc")
    with pytest.raises(CompactionError, match="must be >= 0"):
        CompactionConfig("b:9092", ("t",), "/tmp/x", vacuum_hours=-1)
