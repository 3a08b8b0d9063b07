"""The standard workload on the peers (Quix Streams, Bytewax, Faust, Flink SQL)."""
