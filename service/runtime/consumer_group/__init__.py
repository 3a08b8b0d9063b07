"""One consumer-group membership of a pipeline stage (a session) and its parts.

Why a group of its own: what a membership owns changes together with the group, on a
join, a rebalance, a checkpoint or a stop; fetching, pausing, restoring and
checkpointing must agree on it at every such moment, so they live side by side. Only
:mod:`.assignment` adds partitions to a session or takes them out. Each part names what
it uses of the session in a protocol of its own, made of :mod:`.views`'s groups and its
own members (``LoopSession``, ``CheckpointSession``, ``AssignmentSession``,
``ReportSession``; ``StageSetup``, ``PartitionBuilding`` and ``EmissionSession`` for the
stages), typing the emitter, the checkpointer and the reporter as protocols of what it
calls of them, so only :mod:`.session` knows them all, and nothing here imports it
back. The :class:`~.watermark_emitter.WatermarkEmitter` alone holds the combiner.

What the parts decide is kept apart from their I/O, in pure modules with unit tests of
their own: :mod:`.pauses` (what is fetched), :mod:`.pending_input` (how much waiting
input is taken), :mod:`.bounded_end` (when bounded input is finished, what is committed
again), :mod:`.checkpoint_meta` (what a checkpoint writes, what a restore puts back) and
:mod:`.route_markers` (when a stage-1 marker says idle).
"""
