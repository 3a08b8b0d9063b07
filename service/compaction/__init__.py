"""The compaction job: result topics -> a Delta Lake table, or a Parquet dataset (PySpark).

A separate batch job, run by ``python -m service.compaction`` or ``spark-submit``; it
does not import the service's runtime or API, only :mod:`service.contract` (the Kafka
security variables and the result record's fields, which the service reads too). See
``README.md`` in this folder.

Modules, one job each: :mod:`.ranges` (offset ranges, pure), :mod:`.kafka_client`
(confluent-kafka: watermarks, reading a range), :mod:`.kafka_source` (the Spark Python
data source, or Spark's ``kafka`` source), :mod:`.offsets` (the offset store),
:mod:`.job` (the DataFrame transforms), :mod:`.schemas` (result schemas),
:mod:`.compactor` (one run), :mod:`.cli`.
"""

from service.compaction.compactor import CompactionConfig, Compactor, Summary

__all__ = ["CompactionConfig", "Compactor", "Summary"]
