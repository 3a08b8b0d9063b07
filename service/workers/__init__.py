"""Worker processes: a replica that runs its pipelines on every core it may use.

Python runs one thread of Python at a time, so a replica uses more than one core only
through processes. With ``SERVICE_WORKERS`` above 1 the process the user started serves
the API and supervises that many workers (:class:`~.pool.WorkerPool`), each a full
member of every pipeline's consumer group; the group spreads the partitions (a keyed
shuffle's two stages included) over them as over replicas. ``/metrics`` merges the
workers' expositions (:mod:`.exposition`).

A room of its own beside the API, not part of the runtime: nothing that runs a
pipeline uses it. It supervises processes (``python -m service.worker``, by name) and
reads their ``/metrics`` over HTTP, so it imports nothing else of ``service``; the API
and the settings (the default count, :mod:`.cpus`) import it.
"""
