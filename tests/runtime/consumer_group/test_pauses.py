"""PauseControl: every reason to pause a partition, reconciled with the consumer.

A small stand-in for the consumer's pause API (assignment, paused, pause, resume) is
enough here: the class only computes set differences; the integration tests run it
against the real consumer.
"""

from __future__ import annotations

from aiokafka import TopicPartition
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from service.runtime.consumer_group.pauses import PauseControl

A, B, C = (TopicPartition("t", p) for p in range(3))


class Consumer:
    """The part of AIOKafkaConsumer's API PauseControl uses; forgets pauses on reassign
    as the real one does."""

    def __init__(self, *tps: TopicPartition) -> None:
        self._assignment = set(tps)
        self._paused: set[TopicPartition] = set()
        self.calls = 0

    def assign(self, *tps: TopicPartition) -> None:
        self._assignment = set(tps)
        self._paused = set()

    def assignment(self) -> set[TopicPartition]:
        return set(self._assignment)

    def paused(self) -> set[TopicPartition]:
        return set(self._paused)

    def pause(self, *tps: TopicPartition) -> None:
        self.calls += 1
        self._paused |= set(tps)

    def resume(self, *tps: TopicPartition) -> None:
        self.calls += 1
        self._paused -= set(tps)


def control(consumer: Consumer, user_paused: bool = False) -> PauseControl:
    pauses = PauseControl(user_paused)
    pauses.consumer = consumer
    return pauses


def test_alignment_does_not_resume_a_user_paused_pipeline() -> None:
    consumer = Consumer(A, B)
    pauses = control(consumer)
    pauses.aligned = {A}
    pauses.apply()
    assert consumer.paused() == {A}
    pauses.user_paused = True
    pauses.apply()
    assert consumer.paused() == {A, B}
    pauses.aligned = set()  # alignment wants A back: the user's pause wins
    pauses.apply()
    assert consumer.paused() == {A, B}


def test_user_resume_keeps_alignment_restore_and_finish_pauses() -> None:
    consumer = Consumer(A, B, C)
    pauses = control(consumer, user_paused=True)
    pauses.apply()
    assert consumer.paused() == {A, B, C}
    pauses.aligned = {A}
    pauses.restoring = {B}
    pauses.user_paused = False
    pauses.apply()
    assert consumer.paused() == {A, B}
    pauses.restoring.discard(B)
    pauses.finished.add(B)
    pauses.apply()
    assert consumer.paused() == {A, B}


def test_a_rebalance_keeps_the_user_pause_and_forgets_revoked() -> None:
    consumer = Consumer(A, B)
    pauses = control(consumer, user_paused=True)
    pauses.aligned = {A}
    pauses.apply()
    consumer.assign(B, C)  # the consumer forgot every pause
    pauses.forget(A)
    pauses.apply()
    assert consumer.paused() == {B, C}
    assert pauses.aligned == set()
    pauses.user_paused = False
    pauses.apply()
    assert consumer.paused() == set()  # newly assigned ones start unpaused


def test_nothing_to_change_calls_nothing() -> None:
    consumer = Consumer(A, B)
    pauses = control(consumer)
    pauses.apply()
    pauses.apply()
    assert consumer.calls == 0


TPS = [TopicPartition("t", p) for p in range(4)]
REASONS = ("restoring", "finished", "aligned", "draining")
steps = st.lists(
    st.one_of(
        st.tuples(st.just("set"), st.sampled_from(REASONS), st.sets(st.sampled_from(TPS))),
        st.tuples(st.just("user"), st.booleans(), st.just(frozenset())),
        st.tuples(st.just("assign"), st.just(""), st.sets(st.sampled_from(TPS))),
    ),
    max_size=25,
)


@seed(4906)
@settings(max_examples=300, deadline=None)
@given(steps=steps)
def test_after_apply_the_consumer_fetches_exactly_what_no_reason_holds(
    steps: list[tuple[str, object, frozenset[TopicPartition]]],
) -> None:
    consumer = Consumer(*TPS)
    pauses = control(consumer)
    for kind, what, tps in steps:
        if kind == "set":
            setattr(pauses, str(what), set(tps))
        elif kind == "user":
            pauses.user_paused = bool(what)
        else:  # a rebalance: the consumer forgets its pauses, the revoked are forgotten
            for tp in consumer.assignment() - set(tps):
                pauses.forget(tp)
            consumer.assign(*tps)
        pauses.apply()
        assigned = consumer.assignment()
        held = set().union(*(getattr(pauses, reason) for reason in REASONS))
        expected = assigned if pauses.user_paused else held & assigned
        assert consumer.paused() == expected
