"""A partition's checkpoint metadata: what a checkpoint writes, when it may skip a
partition, and what a restore puts back. Pure: plain values in and out; the
:class:`~service.runtime.consumer_group.checkpointing.Checkpointer` reads the partitions,
writes the changelog and rebuilds the operators.

The metadata record is written last of a partition's checkpoint (changelog.py); a
restore that finds it puts back:

- the input's position: the checkpoint's next offset, or ``start_from`` without one;
- the watermark generator's state and the watermark its operator was delivered;
- bounded input's end: the pipeline's pinned end if it has one, else where the first
  owner meant to stop, else the end read at this session's start;
- nothing of a checkpoint written by another spec (another state fingerprint): the
  partition starts afresh;
- whether the previous owner handed the partition over (``released``) or was lost (a
  takeover), and how long ago it checkpointed.

A partition revoked from this member and assigned straight back is kept in memory
instead of read back, but only if its changelog partition's end has not moved since the
revoke's checkpoint: then nobody wrote to it, and reading it would rebuild the same state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from service.core.time import MIN_TIMESTAMP

T = TypeVar("T")

Version = tuple[int, int, int, bool]
"""What a partition's checkpoint covers: its next offset, its operator's watermark, the
timers it fired, and whether it was handed over. The same version twice: nothing to write."""


def version_to_write(
    next_offset: int | None,
    watermark: int,
    timers_fired: int,
    release: bool,
    last: Version | None,
) -> Version | None:
    """The version a checkpoint of a partition writes now; None: the partition is
    skipped (it has read nothing yet, or nothing happened since ``last``)."""
    if next_offset is None:
        return None
    version = (next_offset, watermark, timers_fired, release)
    return None if version == last else version


def checkpoint_meta(
    *,
    offset: int | None,
    generator: Any,
    watermark: int,
    fingerprint: str,
    released: bool,
    written_at: int,
    end_offset: int | None,
    finished: bool,
) -> dict[str, Any]:
    """A partition's checkpoint metadata: where its input resumes, its generator's
    state, the watermark its operator was delivered, the spec's state fingerprint;
    bounded input's end and whether it was reached; whether the owner handed it over,
    and when it was written (wall clock, ms)."""
    meta: dict[str, Any] = {
        "offset": offset,
        "generator": generator,
        "watermark": watermark,
        "fingerprint": fingerprint,
        "released": released,
        "written_at": written_at,
    }
    if end_offset is not None:
        meta["end_offset"] = end_offset
        meta["finished"] = finished
    return meta


@dataclass(frozen=True, slots=True)
class RestorePlan:
    """What a restore puts back of one partition from its checkpoint's metadata."""

    checkpointed: bool
    """A checkpoint of this spec was found: its state, generator, watermark and offset
    are put back. Else the partition starts afresh, at ``start_from``."""
    other_spec: bool = False
    """A checkpoint was found but of another spec (its state is dropped)."""
    offset: int | None = None
    """The next offset to read (None: ``start_from``'s)."""
    generator: Any = None
    """The generator's snapshot to restore (only if ``checkpointed``)."""
    watermark: int = MIN_TIMESTAMP
    """The watermark the operator was delivered."""
    end_offset: int | None = None
    """Bounded input's end (None: unbounded, or not known)."""
    taken_over_after_ms: int | None = None
    """The previous owner was lost, not handing it over: the time since its checkpoint
    (never negative). None: handed over, or no checkpoint."""


def plan_restore(
    meta: Mapping[str, Any] | None,
    *,
    fingerprint: str,
    now_ms: int,
    bounded: bool,
    pinned: bool,
    known_end: int | None,
) -> RestorePlan:
    """What to put back of a partition whose changelog's last metadata is ``meta``
    (None: none). ``bounded``: bounded input read from the source (not a shuffle);
    ``pinned``: the pipeline's ends are pinned in its definition; ``known_end``: the end
    this session read or was given for the partition."""
    other_spec = meta is not None and meta.get("fingerprint", "") != fingerprint
    if other_spec:
        meta = None
    end: Any = None
    if bounded:
        # the pipeline's pinned end; unpinned, where the first owner meant to stop
        # (another replica may have seen the topic end elsewhere)
        end = meta.get("end_offset") if meta is not None else None
        if end is None or pinned:
            end = known_end
    end_offset = None if end is None else int(end)
    if meta is None:
        return RestorePlan(False, other_spec=other_spec, end_offset=end_offset)
    taken_over = None
    if meta.get("released") is False:  # its owner was lost, not handing it over
        taken_over = max(0, now_ms - int(meta.get("written_at", now_ms)))
    return RestorePlan(
        True,
        offset=int(meta["offset"]),
        generator=meta["generator"],
        watermark=int(meta.get("watermark", MIN_TIMESTAMP)),
        end_offset=end_offset,
        taken_over_after_ms=taken_over,
    )


def kept_in_memory(
    candidates: Sequence[tuple[T, int]],
    changelog_partition: Callable[[T], int],
    changelog_ends: Mapping[int, int],
) -> list[T]:
    """The parked partitions (each with its changelog partition's end right after the
    revoke's checkpoint) whose changelog partition still ends there: nobody wrote to it
    since, so the state in memory is what reading it back would rebuild."""
    return [
        part for part, end in candidates if changelog_ends.get(changelog_partition(part)) == end
    ]
