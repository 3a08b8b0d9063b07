"""A pipeline's topics on the cluster, and its state epochs: one room for all of it.

- ``names``: what every topic and consumer group of a pipeline is called, per state
  epoch, and the keys of its changelog records (pure).
- ``creation``: creating the output, shuffle and changelog topics a pipeline needs, and
  growing a changelog narrower than its sources.
- ``trim``: deleting the shuffle records the keyed stage has checkpointed past.
- ``cleanup``: dropping old epochs' topics, a deleted pipeline's shuffle topics, and a
  reset's checkpointed positions.
- ``admin``: :class:`~service.runtime.pipeline_topics.admin.PipelineTopics`, the one
  entry the API (creating, replacing, deleting a pipeline) and the runtime (a replace
  that resets) call.

Nothing here is imported by this ``__init__``: ``runtime/definition.py`` reads the
names, and ``admin`` reads the definition.
"""
