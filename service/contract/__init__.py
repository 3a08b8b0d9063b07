"""What the service and its stand-alone compaction job agree on, written once.

The compaction job (``service/compaction``) is a PySpark batch job that imports nothing
of the service, yet it reads the service's Kafka security variables and the records the
service writes. So the definitions both need live here, in a room that imports nothing
(not even the rest of ``service``; the standard library only), which both may import:
:mod:`.kafka_security` (the ``KAFKA_SECURITY_PROTOCOL``, ``KAFKA_SASL_*`` and
``KAFKA_SSL_*`` variables: their values and how a few are read) and
:mod:`.result_record` (a window result record's fields). ``tests/test_architecture.py``
holds both sides to it.
"""
