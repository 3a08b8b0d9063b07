"""Where a pipeline's state lives: the topic names of its state epochs."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from service.runtime.pipeline_topics.names import (
    changelog_topic,
    first_free_state_epoch,
    shuffle_topic,
)

names = st.from_regex(r"[a-z0-9._-]{1,12}", fullmatch=True)
epochs = st.sets(st.integers(min_value=0, max_value=30), max_size=5)


def test_a_name_no_pipeline_ever_used_starts_in_epoch_zero() -> None:
    assert first_free_state_epoch("orders", ["orders", "clockwork._store"]) == 0


def test_a_deleted_pipeline_s_changelog_moves_a_new_one_of_its_name_to_the_next_epoch() -> None:
    assert first_free_state_epoch("orders", ["clockwork.orders.changelog"]) == 1
    assert first_free_state_epoch("orders", ["clockwork.orders.E3.changelog"]) == 4


def test_a_shuffle_topic_alone_also_claims_its_epoch() -> None:
    assert first_free_state_epoch("orders", ["clockwork.orders.E2.shuffle"]) == 3


def test_other_pipelines_topics_do_not_count() -> None:
    """Names are lower case, so another pipeline's name cannot pass for an epoch."""
    topics = ["clockwork.orders.e1.changelog", "clockwork.orders.x.changelog"]
    assert first_free_state_epoch("orders", topics) == 0


@given(names, epochs, names, epochs)
def test_the_epoch_is_past_every_epoch_the_name_left_topics_in(
    name: str, used: set[int], other: str, other_used: set[int]
) -> None:
    topics = {changelog_topic(name, e) for e in used}
    if other != name:
        topics |= {shuffle_topic(other, e) for e in other_used}
    epoch = first_free_state_epoch(name, topics)
    assert epoch == (max(used) + 1 if used else 0)
    assert changelog_topic(name, epoch) not in topics
    assert shuffle_topic(name, epoch) not in topics
