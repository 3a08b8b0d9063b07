"""The hold a checkpoint's snapshot puts on a session's state (runtime/partition/state_hold.py):
what is deferred runs when it ends, in order, once; a nested hold ends with the outer one."""

from __future__ import annotations

import pytest

from service.runtime.partition.state_hold import StateHold


def test_deferred_callbacks_run_when_the_hold_ends_in_the_order_deferred() -> None:
    hold = StateHold()
    ran: list[str] = []
    with hold.holding():
        assert hold.held
        hold.defer(lambda: ran.append("a"))
        hold.defer(lambda: ran.append("b"))
        assert ran == []
    assert not hold.held
    assert ran == ["a", "b"]
    with hold.holding():
        pass
    assert ran == ["a", "b"]  # each once


def test_a_nested_hold_ends_with_the_outer_one() -> None:
    hold = StateHold()
    ran: list[str] = []
    with hold.holding():
        with hold.holding():
            hold.defer(lambda: ran.append("inner"))
        assert hold.held and ran == []
    assert not hold.held and ran == ["inner"]


def test_a_hold_cut_short_by_an_error_still_ends_and_runs_what_waits() -> None:
    hold = StateHold()
    ran: list[str] = []
    with pytest.raises(RuntimeError), hold.holding():
        hold.defer(lambda: ran.append("rearmed"))
        raise RuntimeError("snapshot failed")
    assert not hold.held and ran == ["rearmed"]
