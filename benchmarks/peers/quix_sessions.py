"""Quix Streams runner for the state-at-scale benchmark (``benchmarks/state_scale.py``):
``session_window(gap, grace 0).agg(count, sum).final(closing_strategy="partition")``.

Event time comes from the payload's ``ts`` (``timestamp_extractor``); sessions are per
Kafka key (the producer keys each record by its session key). ``closing_strategy=
"partition"``: the newest timestamp of the partition closes the sessions of every key
in it, as Clockwork's watermark does (the workload's event times never close one, so
nothing is emitted). State: Quix's RocksDB (rocksdict) with its changelog topics, every
setting Quix's default. Stops once ``--records`` records went through the window.
"""

from __future__ import annotations

import sys
from typing import Any

from _common import parse_args
from quix import run

GAP_MS = 30 * 60 * 1000


def main() -> int:
    def windowed(sdf: Any, count: Any, total: Any) -> Any:
        return (
            sdf.session_window(inactivity_gap_ms=GAP_MS)
            .agg(count=count(), sum=total("amount"))
            .final(closing_strategy="partition")
        )

    return run(parse_args(__doc__ or ""), windowed)


if __name__ == "__main__":
    sys.exit(main())
