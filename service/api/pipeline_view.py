"""The whole pipeline, from the reports of every member that runs a part of it.

Each replica (a member of every pipeline's consumer group) publishes its own status of
each pipeline (:mod:`service.api.members`); any replica answers for the whole pipeline by
merging the newest report of every member with its own live status. Pure: the merge is
property-tested without a broker.

The rules:
- A partition is shown once, with its ``owner``. Reports of a partition by two members
  (a rebalance moved it between their reports) resolve to a member that is alive, then
  to the newest report. A member whose last report is older than ``lost_after_ms`` (the
  group's session timeout and a publish interval: by then the group has moved its
  partitions) is **lost**: its partitions are shown (``owner.lost``) only where no live
  member reports them.
- The state is the most telling state of a live member: ``failed`` (with that member's
  reason) over ``running`` over ``starting`` over ``paused``; ``finished`` only when
  every live member finished.
- Standby copies (``standbys``: the warm copies each member keeps of partitions others
  own, with their lag) are listed per live member, each naming its member; a
  partition's own ``standbys`` names the members the last rebalance placed them on.
- Counters (records in and out, late records, dead letters, restarts, loop turns: each
  as counted since its member started) are summed over live members; the
  watermark is the minimum of the members' combined watermarks (a member holding only
  idle or finished partitions has none and holds nothing back), as the group's would be.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["MemberReport", "cluster_members", "whole_pipeline_status"]

_STATE_ORDER = ("failed", "running", "starting", "paused", "stopped")
"""Which state of a live member the whole pipeline shows: the first any member is in
(``finished`` only when every member is)."""

_SUMMED = (
    "records_in",
    "records_out",
    "late_records",
    "dead_letters",
    "restarts",
    "loop_turns",
)


@dataclass(frozen=True, slots=True)
class MemberReport:
    """One member's newest report of one pipeline (``status`` is its local status), or
    of itself (``status`` None: the member's heartbeat)."""

    member: str
    host: str
    worker: int
    published_ms: int
    status: Mapping[str, Any] | None = None
    replica: str = ""
    """The replica (``SERVICE_INSTANCE_ID``) the member is a worker of; the member itself
    when it runs alone (one worker: the replica's process is the member)."""
    address: str = ""
    """Where pull queries of the partitions it holds go (its replica's API: a worker is
    reached through it); empty in a report of a version without pull queries."""

    def owner(self, lost: bool) -> dict[str, Any]:
        return {
            "member": self.member,
            "replica": self.replica or self.member,
            "host": self.host,
            "worker": self.worker,
            "lost": lost,
        }


def _alive(report: MemberReport, now_ms: int, lost_after_ms: int) -> bool:
    return now_ms - report.published_ms <= lost_after_ms


def _partition_key(partition: Mapping[str, Any]) -> tuple[str, str, int]:
    return (
        str(partition.get("stage", "keyed")),
        str(partition["topic"]),
        int(partition["partition"]),
    )


def _state(states: Iterable[str]) -> str:
    found = set(states)
    if not found:
        return "starting"
    if found == {"finished"}:
        return "finished"
    return next((s for s in _STATE_ORDER if s in found), sorted(found - {"finished"})[0])


def _min_watermark(values: Iterable[Any]) -> int | None:
    known = [int(v) for v in values if v is not None]
    return min(known) if known else None


def _max(values: Iterable[Any]) -> int | None:
    known = [int(v) for v in values if v is not None]
    return max(known) if known else None


def whole_pipeline_status(
    name: str, reports: Iterable[MemberReport], now_ms: int, lost_after_ms: int
) -> dict[str, Any] | None:
    """The status of pipeline ``name`` over every member's report of it (this replica's
    own included, as a report published ``now_ms``); None when no member reports it."""
    ranked = sorted(
        (r for r in reports if r.status is not None),
        key=lambda r: (_alive(r, now_ms, lost_after_ms), r.published_ms),
        reverse=True,
    )
    if not ranked:
        return None
    live = [r for r in ranked if _alive(r, now_ms, lost_after_ms)]
    counted = live or ranked[:1]
    partitions: dict[tuple[str, str, int], dict[str, Any]] = {}
    for report in ranked:  # best first: the first claim of a partition wins
        assert report.status is not None
        lost = not _alive(report, now_ms, lost_after_ms)
        for partition in report.status.get("partitions", ()):
            key = _partition_key(partition)
            if key not in partitions:
                partitions[key] = {**partition, "owner": report.owner(lost)}
    statuses = [r.status for r in counted if r.status is not None]
    failed = next((r for r in counted if r.status and r.status.get("state") == "failed"), None)
    state = _state(str(s.get("state")) for s in statuses)
    reason = None
    if failed is not None and failed.status is not None:
        reason = f"{failed.member}: {failed.status.get('reason')}"
    elif state != "running":
        reason = next((s.get("reason") for s in statuses if s.get("reason")), None)
    first = statuses[0]
    whole: dict[str, Any] = {
        **{k: v for k, v in first.items() if k not in ("partitions", "stages")},
        "name": name,
        "scope": "pipeline",
        "state": state,
        "reason": reason,
        "watermark": _min_watermark(s.get("watermark") for s in statuses),
        **{k: sum(int(s.get(k) or 0) for s in statuses) for k in _SUMMED},
        "idle_advancing": all(bool(s.get("idle_advancing")) for s in statuses),
        "finished_here": sorted({p for s in statuses for p in s.get("finished_here", ())}),
        "partitions_finished": _max(s.get("partitions_finished") for s in statuses),
        "partitions_total": _max(s.get("partitions_total") for s in statuses),
        "partitions": [partitions[k] for k in sorted(partitions)],
        "members": [_member_line(r, now_ms, lost_after_ms) for r in ranked],
        "standbys": sorted(
            (
                {**copy, "member": report.member}
                for report in counted
                if report.status is not None
                for copy in report.status.get("standbys", ())
            ),
            key=lambda c: (
                str(c.get("stage")),
                str(c.get("topic")),
                c.get("partition"),
                c["member"],
            ),
        ),
    }
    stages = _stages(statuses)
    if stages:
        whole["stages"] = stages
    return whole


def _member_line(report: MemberReport, now_ms: int, lost_after_ms: int) -> dict[str, Any]:
    status = report.status or {}
    return {
        **report.owner(not _alive(report, now_ms, lost_after_ms)),
        "published_ms": report.published_ms,
        "state": status.get("state"),
        "partitions": len(status.get("partitions", ())),
    }


def _stages(statuses: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    by_name: dict[str, list[Mapping[str, Any]]] = {}
    for status in statuses:
        for stage in status.get("stages", ()):
            by_name.setdefault(str(stage["name"]), []).append(stage)
    merged = []
    for parts in by_name.values():
        failed = next((p for p in parts if p.get("state") == "failed"), None)
        merged.append(
            {
                **parts[0],
                "state": _state(str(p.get("state")) for p in parts),
                "reason": failed.get("reason") if failed is not None else parts[0].get("reason"),
                "watermark": _min_watermark(p.get("watermark") for p in parts),
                "records_in": sum(int(p.get("records_in") or 0) for p in parts),
                "loop_turns": sum(int(p.get("loop_turns") or 0) for p in parts),
                "partitions_finished": _max(p.get("partitions_finished") for p in parts),
                "partitions_total": _max(p.get("partitions_total") for p in parts),
            }
        )
    return merged


def cluster_members(
    heartbeats: Iterable[MemberReport],
    reports: Iterable[MemberReport],
    now_ms: int,
    lost_after_ms: int,
) -> list[dict[str, Any]]:
    """Every member, alive or lost, and what it holds of each pipeline."""
    held: dict[str, dict[str, dict[str, Any]]] = {}
    for report in reports:
        if report.status is None:
            continue
        held.setdefault(report.member, {})[str(report.status.get("name"))] = {
            "state": report.status.get("state"),
            "partitions": [
                f"{p.get('stage', 'keyed')}:{p['topic']}/{p['partition']}"
                for p in report.status.get("partitions", ())
            ],
        }
    return [
        {
            **beat.owner(not _alive(beat, now_ms, lost_after_ms)),
            "published_ms": beat.published_ms,
            "pipelines": held.get(beat.member, {}),
        }
        for beat in sorted(heartbeats, key=lambda b: b.member)
    ]
