"""The work of one assigned partition: decode, operate, time, write; the hot path.

Why together: a partition is the shard of state, and everything per record happens
for one partition at a time, synchronously, with no I/O awaited. Keeping that work in
one place keeps the per-record rules (no logging, no allocation per record, no
dispatch on settings) in sight, and the asynchronous parts above call in per batch.
"""
