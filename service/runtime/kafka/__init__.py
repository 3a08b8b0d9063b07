"""Talking to the broker, below any pipeline: reading and producing record batches fast,
transactions, topics, offsets, and the brokers the service and its tests start.

Why a layer of its own: aiokafka's per-record paths are too slow for the hot path and a
few of its internals need working around, so the runtime reaches into them; keeping
every such reach here means an aiokafka upgrade is checked in one place, and the
pipeline code above talks in batches and partitions, never in client internals.
"""
