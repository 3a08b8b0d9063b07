"""What a checkpoint writes of a partition, when it skips one, and what a restore puts
back (consumer_group/checkpoint_meta.py)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, seed, settings
from hypothesis import strategies as st

from service.core.time import MIN_TIMESTAMP
from service.runtime.consumer_group.checkpoint_meta import (
    RestorePlan,
    checkpoint_meta,
    kept_in_memory,
    plan_restore,
    version_to_write,
)

SPEC = "fingerprint-1"


def meta(**changes: Any) -> dict[str, Any]:
    written = checkpoint_meta(
        offset=120,
        generator={"max": 5_000},
        watermark=4_000,
        fingerprint=SPEC,
        released=True,
        written_at=1_000_000,
        end_offset=None,
        finished=False,
    )
    return {**written, **changes}


def plan(
    m: dict[str, Any] | None,
    *,
    now_ms: int = 1_000_500,
    bounded: bool = False,
    pinned: bool = False,
    known_end: int | None = None,
) -> RestorePlan:
    return plan_restore(
        m, fingerprint=SPEC, now_ms=now_ms, bounded=bounded, pinned=pinned, known_end=known_end
    )


# -- what a checkpoint writes, and when it skips a partition ----------------------------


def test_a_partition_that_has_read_nothing_is_not_checkpointed() -> None:
    assert version_to_write(None, 0, 0, False, None) is None


def test_a_partition_unchanged_since_its_last_checkpoint_is_skipped() -> None:
    assert version_to_write(10, 5, 2, False, (10, 5, 2, False)) is None


def test_a_partition_whose_offset_watermark_timers_or_release_changed_is_written() -> None:
    last = (10, 5, 2, False)
    assert version_to_write(11, 5, 2, False, last) == (11, 5, 2, False)
    assert version_to_write(10, 6, 2, False, last) == (10, 6, 2, False)
    assert version_to_write(10, 5, 3, False, last) == (10, 5, 3, False)
    assert version_to_write(10, 5, 2, True, last) == (10, 5, 2, True)


def test_unbounded_metadata_says_nothing_of_an_end() -> None:
    assert "end_offset" not in meta() and "finished" not in meta()


def test_bounded_metadata_records_the_end_and_whether_it_was_reached() -> None:
    written = checkpoint_meta(
        offset=50,
        generator=None,
        watermark=0,
        fingerprint=SPEC,
        released=False,
        written_at=0,
        end_offset=50,
        finished=True,
    )
    assert (written["end_offset"], written["finished"]) == (50, True)


# -- what a restore puts back ------------------------------------------------------------


def test_without_a_checkpoint_a_partition_starts_afresh_at_start_from() -> None:
    assert plan(None) == RestorePlan(checkpointed=False, offset=None)


def test_a_checkpoint_puts_back_its_offset_generator_and_watermark() -> None:
    restored = plan(meta())
    assert restored.checkpointed
    assert (restored.offset, restored.generator, restored.watermark) == (120, {"max": 5_000}, 4_000)


def test_a_checkpoint_without_a_watermark_puts_back_none() -> None:
    m = meta()
    del m["watermark"]
    assert plan(m).watermark == MIN_TIMESTAMP


def test_a_checkpoint_of_another_spec_is_dropped_and_the_partition_starts_afresh() -> None:
    assert plan(meta(fingerprint="another")) == RestorePlan(
        checkpointed=False, other_spec=True, offset=None
    )


def test_a_handed_over_partition_is_not_a_takeover() -> None:
    assert plan(meta(released=True)).taken_over_after_ms is None


def test_a_partition_of_a_lost_owner_is_taken_over_after_the_time_since_its_checkpoint() -> None:
    assert plan(meta(released=False), now_ms=1_000_750).taken_over_after_ms == 750


def test_a_takeover_s_delay_is_never_negative() -> None:
    assert plan(meta(released=False), now_ms=999_000).taken_over_after_ms == 0


def test_bounded_input_resumes_toward_the_end_its_first_owner_meant() -> None:
    assert plan(meta(end_offset=80), bounded=True, known_end=95).end_offset == 80


def test_a_pinned_end_wins_over_the_checkpoint_s() -> None:
    assert plan(meta(end_offset=80), bounded=True, pinned=True, known_end=95).end_offset == 95


def test_bounded_input_without_an_end_in_its_checkpoint_takes_the_known_end() -> None:
    assert plan(None, bounded=True, known_end=95).end_offset == 95
    assert plan(meta(), bounded=True, known_end=95).end_offset == 95


def test_another_spec_s_end_is_not_taken() -> None:
    m = meta(fingerprint="another", end_offset=80)
    assert plan(m, bounded=True, known_end=95).end_offset == 95


def test_unbounded_input_has_no_end_whatever_the_checkpoint_says() -> None:
    assert plan(meta(end_offset=80), known_end=95).end_offset is None


# -- parked partitions -------------------------------------------------------------------


def test_a_parked_partition_is_kept_only_while_its_changelog_end_has_not_moved() -> None:
    candidates = [("a", 10), ("b", 20), ("c", 30)]
    partition_of = {"a": 0, "b": 1, "c": 2}.__getitem__
    assert kept_in_memory(candidates, partition_of, {0: 10, 1: 21}) == ["a"]


# -- properties --------------------------------------------------------------------------


@seed(4904)
@settings(max_examples=300, deadline=None)
@given(
    offset=st.integers(0, 2**40),
    generator=st.dictionaries(st.text(max_size=4), st.integers()),
    watermark=st.integers(MIN_TIMESTAMP, 2**50),
    released=st.booleans(),
    written_at=st.integers(0, 2**45),
    elapsed=st.integers(0, 10**7),
    end_offset=st.none() | st.integers(0, 2**40),
    finished=st.booleans(),
    known_end=st.none() | st.integers(0, 2**40),
)
def test_a_restore_puts_back_what_the_checkpoint_wrote(
    offset: int,
    generator: dict[str, int],
    watermark: int,
    released: bool,
    written_at: int,
    elapsed: int,
    end_offset: int | None,
    finished: bool,
    known_end: int | None,
) -> None:
    written = checkpoint_meta(
        offset=offset,
        generator=generator,
        watermark=watermark,
        fingerprint=SPEC,
        released=released,
        written_at=written_at,
        end_offset=end_offset,
        finished=finished,
    )
    now = written_at + elapsed
    restored = plan_restore(
        written, fingerprint=SPEC, now_ms=now, bounded=True, pinned=False, known_end=known_end
    )
    assert restored.checkpointed and not restored.other_spec
    assert (restored.offset, restored.generator, restored.watermark) == (
        offset,
        generator,
        watermark,
    )
    assert restored.end_offset == (end_offset if end_offset is not None else known_end)
    assert restored.taken_over_after_ms == (None if released else elapsed)
    other = plan_restore(
        written, fingerprint="x", now_ms=now, bounded=True, pinned=False, known_end=known_end
    )
    assert other == RestorePlan(False, other_spec=True, end_offset=known_end)


versions = st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(0, 5), st.booleans())


@seed(4905)
@settings(max_examples=300, deadline=None)
@given(now=versions, last=st.none() | versions)
def test_a_partition_is_written_exactly_when_its_version_changed(
    now: tuple[int, int, int, bool], last: tuple[int, int, int, bool] | None
) -> None:
    written = version_to_write(*now, last)
    assert written == (None if now == last else now)
    assert version_to_write(*now, written if written is not None else last) is None
