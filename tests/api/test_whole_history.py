"""The whole pipeline's rates: each member's from its own reports, summed."""

from __future__ import annotations

from typing import Any

from service.api.pipeline_view import MemberReport
from service.api.whole_history import MemberRates


def report(member: str, at_ms: int, records_in: int, records_out: int = 0) -> MemberReport:
    status: dict[str, Any] = {"name": "p", "records_in": records_in, "records_out": records_out}
    return MemberReport(member, "h", 0, at_ms, status)


def test_a_member_s_rate_is_measured_between_two_of_its_reports() -> None:
    rates = MemberRates()
    assert rates.update("p", [report("a", 1000, 0)]) == (None, None)
    assert rates.update("p", [report("a", 3000, 200, 20)]) == (100.0, 10.0)


def test_the_rate_stands_until_the_member_publishes_again() -> None:
    rates = MemberRates()
    rates.update("p", [report("a", 1000, 0)])
    rates.update("p", [report("a", 3000, 200)])
    # sampled again before a's next report: the same report, the same rate (not zero)
    assert rates.update("p", [report("a", 3000, 200)]) == (100.0, 0.0)


def test_the_pipeline_s_rate_is_the_sum_over_its_members() -> None:
    rates = MemberRates()
    rates.update("p", [report("a", 1000, 0), report("b", 1500, 0)])
    both = rates.update("p", [report("a", 2000, 100), report("b", 3500, 400)])
    assert both == (300.0, 0.0)


def test_a_restarted_member_has_no_rate_until_its_second_report() -> None:
    rates = MemberRates()
    rates.update("p", [report("a", 1000, 0)])
    rates.update("p", [report("a", 2000, 500)])
    assert rates.update("p", [report("a", 3000, 10)]) == (None, None)
    assert rates.update("p", [report("a", 4000, 110)]) == (100.0, 0.0)


def test_a_member_gone_from_the_reports_no_longer_counts() -> None:
    rates = MemberRates()
    rates.update("p", [report("a", 1000, 0), report("b", 1000, 0)])
    rates.update("p", [report("a", 2000, 100), report("b", 2000, 100)])
    assert rates.update("p", [report("a", 3000, 200)]) == (100.0, 0.0)
