"""The keyed shuffle's runtime side: the shuffle topic's records, and both ends of it.

Stage 1 (:class:`~service.runtime.consumer_group.stages.RouteStage`) writes through
:class:`~service.runtime.shuffle.writer.ShuffleWriter`; stage 2
(:class:`~service.runtime.consumer_group.stages.ShuffledStage`) reads through
:class:`~service.runtime.shuffle.reader.ShuffleDecoder`; the record layout both agree on
is :mod:`~service.runtime.shuffle.records`. The pure logic (markers' minimum, the replay
filter, the partitioner) is in :mod:`service.core.shuffle` and
:mod:`service.core.partitioner`.
"""
