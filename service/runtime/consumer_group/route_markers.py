"""What a stage-1 source partition tells every shuffle partition after a watermark
emission: its watermark, and whether it is idle. Pure; :class:`~.stages.RouteStage`
writes the marker (``ShuffleWriter.announce``, which writes only a change).

Stage 2 takes a shuffle partition's watermark as the minimum over the markers of every
source partition that is not idle (:class:`~service.core.shuffle.ShuffleInput`). So a
source partition says idle only when the combiner finds it idle (no record for
``idle_timeout_ms``) *and* it has nothing left to read: a partition that is silent only
because it is behind (its records still wait in Kafka) must hold stage 2 back, not let
it run ahead of records still to come. While event time follows the wall clock
(``idle_advance``, every partition idle), every source partition says the combined
watermark instead, not idle: stage 2 then follows the same clock (the stage says so
itself; this module is the rule outside idle advance, :func:`announces_idle`).
"""

from __future__ import annotations


def announces_idle(idle: bool, lag: int | None) -> bool:
    """Whether a source partition's marker says idle (outside idle advance): ``idle`` is
    the combiner's verdict, ``lag`` the records it has left to read (None: not known
    yet, before its first fetch, which counts as none)."""
    return idle and not lag
