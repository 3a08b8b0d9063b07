"""Nexmark, the field's benchmark: its generator, its queries in Clockwork's SQL and in
Flink SQL, a Python reference of each, and the side-by-side run (``bench.py``)."""
