"""Clockwork: event-time stream processing with Flink semantics on Kafka."""
