"""A filter over a table source (#50): the table decoder turns a version the filter drops
into its primary key's delete, so a running aggregate over the filtered table takes the
row's previous version back. Seeded property: any sequence of upserts and tombstones,
decoded through the filter and aggregated (across checkpoints and restores), folds to the
aggregate recomputed from the filtered final table."""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from service.core.time import MAX_TIMESTAMP, ManualClock
from service.operators.base import Upsert
from service.operators.steps import StepProgram
from service.operators.table import TableAggregateOperator
from service.operators.table.running import RunningAggregateConfig
from service.runtime.definition import PipelineDefinition, SinkSettings, TimestampSettings
from service.runtime.partition.decoding import DeadLetter, RecordDecoder, TableDecoder

AGGS = {
    "n": {"fn": "count"},
    "total": {"fn": "sum", "field": "amount"},
    "lo": {"fn": "min", "field": "amount"},
    "hi": {"fn": "max", "field": "amount"},
}
FILTER = "amount > 0 AND g <> 'z'"


class Record(NamedTuple):
    key: bytes | None
    value: bytes | None
    offset: int
    timestamp: int = 0
    headers: tuple[Any, ...] = ()


def decoder() -> TableDecoder:
    definition = PipelineDefinition(
        name="p",
        topics=("in",),
        sink=SinkSettings(topic="out", dead_letter_topic="out.dlq"),
        operator_factory=lambda clock: None,  # type: ignore[arg-type,return-value]
        timestamp=TimestampSettings(source="kafka"),
        steps=StepProgram([{"filter": FILTER}]),
        table=True,
    )
    return TableDecoder(RecordDecoder(definition), positioned=False)


def aggregate(clock: ManualClock) -> TableAggregateOperator:
    config = RunningAggregateConfig(
        pipeline="p", aggregations=AGGS, emit_interval_ms=1000, clock=clock
    )
    return TableAggregateOperator(config, group_field="g")


PKS = ["k1", "k2", "k3", "k4", "k5"]
versions = st.lists(
    st.tuples(
        st.sampled_from(PKS),
        st.one_of(
            st.none(),  # a tombstone
            st.tuples(st.sampled_from(["a", "b", "z"]), st.integers(-3, 5)),
        ),
    ),
    max_size=8,
)


@seed(5054)
@settings(max_examples=300, deadline=None)
@given(batches=st.lists(st.tuples(versions, st.booleans()), min_size=1, max_size=25))
def test_an_aggregate_over_a_filtered_table_equals_its_recomputation(
    batches: list[tuple[list[Any], bool]],
) -> None:
    """Each batch is decoded through the filter and aggregated; after some, a checkpoint
    and a restore from the changelog. Folding the upserts by group equals the aggregate
    of the final table's rows that pass the filter."""
    clock = ManualClock(0)
    decode = decoder()
    op = aggregate(clock)
    log: list[tuple[str, Any]] = []
    table: dict[str, dict[str, Any]] = {}
    folded: dict[str, Any] = {}
    offset = 0

    def take() -> None:
        results, _, _ = op.collector.drain()
        for u in results:
            assert type(u) is Upsert
            if u.result is None:
                folded.pop(u.key, None)
            else:
                folded[u.key] = u.result

    for batch, restart in batches:
        records = []
        for pk, version in batch:
            value = None if version is None else {"g": version[0], "amount": version[1]}
            encoded = None if value is None else orjson.dumps(value)
            records.append(Record(pk.encode(), encoded, offset, offset))
            offset += 1
            if value is None:
                table.pop(pk, None)
            else:
                table[pk] = value
        inputs: list[Any] = []
        failed: list[DeadLetter] = []
        decode.decode(records, inputs, failed)
        assert failed == []
        assert len(inputs) == len(records)  # every version: a row or a delete
        op.process_batch(inputs)
        clock.advance(1000)
        op.advance_processing_time(clock.now_ms())
        take()
        if restart:
            op.before_checkpoint()
            take()
            log.extend(orjson.loads(orjson.dumps(list(op.snapshot_changes().items()))))
            op = aggregate(clock)
            op.restore_changes(log)
    op.advance_watermark(MAX_TIMESTAMP)
    op.before_checkpoint()
    op._emit_pending()
    take()
    want: dict[str, dict[str, Any]] = {}
    for row in table.values():
        if not (row["amount"] > 0 and row["g"] != "z"):
            continue
        acc = want.setdefault(row["g"], {"n": 0, "total": 0, "lo": None, "hi": None})
        acc["n"] += 1
        acc["total"] += row["amount"]
        acc["lo"] = row["amount"] if acc["lo"] is None else min(acc["lo"], row["amount"])
        acc["hi"] = row["amount"] if acc["hi"] is None else max(acc["hi"], row["amount"])
    assert folded == want
