"""Entry point: ``python -m service.compaction``, or ``spark-submit`` this file."""

from __future__ import annotations

import sys

from service.compaction.cli import main

if __name__ == "__main__":
    sys.exit(main())
