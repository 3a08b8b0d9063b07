"""When a stage-1 source partition's marker says idle (consumer_group/route_markers.py)."""

from __future__ import annotations

from service.runtime.consumer_group.route_markers import announces_idle


def test_a_partition_idle_with_nothing_left_to_read_says_idle() -> None:
    assert announces_idle(True, 0)


def test_a_partition_silent_but_behind_does_not_say_idle() -> None:
    assert not announces_idle(True, 7)


def test_a_partition_not_fetched_yet_says_idle_once_the_combiner_finds_it_idle() -> None:
    assert announces_idle(True, None)


def test_a_partition_with_recent_records_never_says_idle() -> None:
    assert not announces_idle(False, 0)
    assert not announces_idle(False, None)
