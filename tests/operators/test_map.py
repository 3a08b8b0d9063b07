"""The stateless map operator (service/operators/map.py)."""

from __future__ import annotations

from service.core.time import MIN_TIMESTAMP
from service.operators.base import KeyedOutput
from service.operators.map import MapOperator


def test_every_record_is_a_result_at_once_with_its_key_timestamp_and_value() -> None:
    operator = MapOperator("p", "orders/3")
    operator.process_batch([("u1", 100, {"a": 1}, 7, None), ("u2", 50, {"a": 2}, 8, None)])
    assert operator.collector.results == [
        KeyedOutput("p|orders/3|7|0", "u1", 100, {"a": 1}),
        KeyedOutput("p|orders/3|8|0", "u2", 50, {"a": 2}),
    ]


def test_the_records_one_input_record_became_get_one_id_each_across_batches() -> None:
    operator = MapOperator("p", "orders/0")
    operator.process_batch([("k", 1, 1, 5, None), ("k", 1, 2, 5, None)])
    operator.process_batch([("k", 1, 3, 5, None), ("k", 2, 4, 6, None)])
    ids = [r.id for r in operator.collector.results]
    assert ids == ["p|orders/0|5|0", "p|orders/0|5|1", "p|orders/0|5|2", "p|orders/0|6|0"]


def test_a_replay_from_a_restored_operator_gives_the_same_ids() -> None:
    records = [("k", 1, 1, 5, None), ("k", 1, 2, 5, None), ("k", 2, 3, 6, None)]
    first, replay = MapOperator("p", "t/1"), MapOperator("p", "t/1")
    first.process_batch(records)
    replay.restore_changes(first.snapshot_changes().items())
    replay.process_batch(records)
    assert [r.id for r in replay.collector.results] == [r.id for r in first.collector.results]


def test_nothing_is_late_and_the_watermark_only_moves_forward() -> None:
    operator = MapOperator("p", "t/0")
    assert operator.current_watermark == MIN_TIMESTAMP
    operator.advance_watermark(1000)
    operator.advance_watermark(10)
    operator.process_batch([("k", 5, "old", 1, None)])
    assert operator.current_watermark == 1000
    assert [r.value for r in operator.collector.results] == ["old"]
    assert operator.collector.late == [] and operator.snapshot() == {}


def test_the_listed_fields_are_kept_in_their_order_and_a_missing_one_is_null() -> None:
    operator = MapOperator("p", "t/0", fields=("b", "a", "gone"))
    operator.process_batch([("k", 1, {"a": 1, "b": 2, "ts": 9}, 0, None)])
    value = operator.collector.results[0].value
    assert list(value.items()) == [("b", 2), ("a", 1), ("gone", None)]
