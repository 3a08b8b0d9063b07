"""The whole pipeline from the members' reports (service/api/pipeline_view.py): pure."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from service.api.pipeline_view import MemberReport, cluster_members, whole_pipeline_status

NOW = 1_000_000
LOST_AFTER = 10_000


def part(partition: int, stage: str = "keyed", **fields: Any) -> dict[str, Any]:
    return {"topic": "orders", "partition": partition, "stage": stage, "watermark": None, **fields}


def status(*partitions: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {
        "name": "p",
        "state": "running",
        "reason": None,
        "watermark": None,
        "records_in": 0,
        "restarts": 0,
        "loop_turns": 0,
        "partitions": list(partitions),
        **fields,
    }


def report(member: str, published_ms: int, body: dict[str, Any]) -> MemberReport:
    return MemberReport(member, f"host-{member}", 0, published_ms, body)


def owners(whole: dict[str, Any]) -> dict[int, tuple[str, bool]]:
    return {p["partition"]: (p["owner"]["member"], p["owner"]["lost"]) for p in whole["partitions"]}


def test_every_members_partitions_are_shown_once_each_with_its_owner() -> None:
    whole = whole_pipeline_status(
        "p",
        [report("a", NOW, status(part(0), part(2))), report("b", NOW - 500, status(part(1)))],
        NOW,
        LOST_AFTER,
    )
    assert whole is not None
    assert owners(whole) == {0: ("a", False), 1: ("b", False), 2: ("a", False)}
    assert whole["scope"] == "pipeline"
    assert [m["member"] for m in whole["members"]] == ["a", "b"]


def test_a_partition_two_live_members_report_is_the_newer_reports() -> None:
    whole = whole_pipeline_status(
        "p",
        [report("a", NOW - 3000, status(part(0))), report("b", NOW - 100, status(part(0)))],
        NOW,
        LOST_AFTER,
    )
    assert whole is not None
    assert owners(whole) == {0: ("b", False)}


def test_a_lost_members_partition_shows_only_where_no_live_member_has_it() -> None:
    lost = report("a", NOW - LOST_AFTER - 1, status(part(0), part(1)))
    whole = whole_pipeline_status(
        "p",
        [lost, report("b", NOW - 2 * LOST_AFTER, status()), report("c", NOW, status(part(1)))],
        NOW,
        LOST_AFTER,
    )
    assert whole is not None
    assert owners(whole) == {0: ("a", True), 1: ("c", False)}
    assert {m["member"]: m["lost"] for m in whole["members"]} == {"a": True, "b": True, "c": False}


def test_a_lost_members_numbers_do_not_count() -> None:
    whole = whole_pipeline_status(
        "p",
        [
            report("a", NOW - LOST_AFTER - 1, status(records_in=100, state="failed", reason="x")),
            report("b", NOW, status(records_in=5)),
        ],
        NOW,
        LOST_AFTER,
    )
    assert whole is not None
    assert (whole["records_in"], whole["state"], whole["reason"]) == (5, "running", None)


def test_one_failed_member_fails_the_pipeline_with_its_reason() -> None:
    whole = whole_pipeline_status(
        "p",
        [
            report("a", NOW, status(state="running")),
            report("b", NOW, status(state="failed", reason="no ACL")),
        ],
        NOW,
        LOST_AFTER,
    )
    assert whole is not None
    assert (whole["state"], whole["reason"]) == ("failed", "b: no ACL")


def test_finished_only_when_every_member_finished() -> None:
    def state(*states: str) -> str:
        reports = [report(str(i), NOW, status(state=s)) for i, s in enumerate(states)]
        whole = whole_pipeline_status("p", reports, NOW, LOST_AFTER)
        assert whole is not None
        return str(whole["state"])

    assert state("finished", "running") == "running"
    assert state("finished", "finished") == "finished"
    assert state("paused", "finished") == "paused"


def test_counters_are_summed_and_the_watermark_is_the_members_minimum() -> None:
    whole = whole_pipeline_status(
        "p",
        [
            report("a", NOW, status(watermark=500, records_in=3, restarts=1, loop_turns=10)),
            report("b", NOW, status(watermark=200, records_in=4, restarts=0, loop_turns=20)),
            report("c", NOW, status(watermark=None, records_in=1)),  # only idle partitions
        ],
        NOW,
        LOST_AFTER,
    )
    assert whole is not None
    assert (whole["watermark"], whole["records_in"], whole["restarts"], whole["loop_turns"]) == (
        200,
        8,
        1,
        30,
    )


def test_stages_merge_by_name() -> None:
    def stages(watermark: int, records: int) -> list[dict[str, Any]]:
        return [
            {"name": "route", "state": "running", "reason": None, "watermark": watermark,
             "records_in": records, "loop_turns": 1},
            {"name": "shuffled", "state": "running", "reason": None, "watermark": watermark,
             "records_in": records, "loop_turns": 1},
        ]  # fmt: skip

    whole = whole_pipeline_status(
        "p",
        [
            report("a", NOW, status(stages=stages(10, 1))),
            report("b", NOW, status(stages=stages(7, 2))),
        ],
        NOW,
        LOST_AFTER,
    )
    assert whole is not None
    assert [(s["name"], s["watermark"], s["records_in"]) for s in whole["stages"]] == [
        ("route", 7, 3),
        ("shuffled", 7, 3),
    ]


def test_every_live_members_standby_copies_are_listed_with_their_member() -> None:
    def copy(partition: int, lag: int) -> dict[str, Any]:
        return {"topic": "orders", "partition": partition, "stage": "keyed", "lag": lag}

    whole = whole_pipeline_status(
        "p",
        [
            report("b", NOW, status(part(1, standbys=["a"]), standbys=[copy(0, 3)])),
            report("a", NOW, status(part(0, standbys=["b"]), standbys=[copy(1, 0)])),
            report("c", NOW - LOST_AFTER - 1, status(standbys=[copy(2, 9)])),  # lost
        ],
        NOW,
        LOST_AFTER,
    )
    assert whole is not None
    assert whole["standbys"] == [{**copy(0, 3), "member": "b"}, {**copy(1, 0), "member": "a"}]
    assert {p["partition"]: p["standbys"] for p in whole["partitions"]} == {0: ["b"], 1: ["a"]}


def test_no_report_of_a_pipeline_gives_none() -> None:
    assert whole_pipeline_status("p", [], NOW, LOST_AFTER) is None


def test_the_cluster_lists_every_member_and_what_it_holds() -> None:
    beats = [MemberReport("a", "h", 0, NOW), MemberReport("b", "h", 1, NOW - LOST_AFTER - 1)]
    members = cluster_members(
        beats, [report("a", NOW, status(part(0), part(1, stage="route")))], NOW, LOST_AFTER
    )
    held = {"p": {"state": "running", "partitions": ["keyed:orders/0", "route:orders/1"]}}
    assert members == [
        {"member": "a", "replica": "a", "host": "h", "worker": 0, "lost": False,
         "published_ms": NOW, "pipelines": held},
        {"member": "b", "replica": "b", "host": "h", "worker": 1, "lost": True,
         "published_ms": NOW - LOST_AFTER - 1, "pipelines": {}},
    ]  # fmt: skip


claims = st.lists(
    st.tuples(
        st.sampled_from("abcd"),  # member
        st.integers(0, 3 * LOST_AFTER),  # age of its report
        st.sets(st.integers(0, 7), max_size=6),  # partitions it reports
    ),
    min_size=1,
    max_size=6,
    unique_by=lambda c: c[0],
)


@given(claims)
def test_any_reports_show_every_reported_partition_once_owned_by_a_member_that_reports_it(
    given_claims: list[tuple[str, int, set[int]]],
) -> None:
    reports = [report(m, NOW - age, status(*map(part, ps))) for m, age, ps in given_claims]
    whole = whole_pipeline_status("p", reports, NOW, LOST_AFTER)
    assert whole is not None
    shown = [p["partition"] for p in whole["partitions"]]
    assert sorted(shown) == sorted(set().union(*(ps for _, _, ps in given_claims)))
    ages = {m: age for m, age, _ in given_claims}
    for p in whole["partitions"]:
        member = p["owner"]["member"]
        assert any(m == member and p["partition"] in ps for m, _, ps in given_claims)
        assert p["owner"]["lost"] == (ages[member] > LOST_AFTER)
        # a live member's claim always beats a lost one's
        if p["owner"]["lost"]:
            assert not any(
                p["partition"] in ps and age <= LOST_AFTER for _, age, ps in given_claims
            )
