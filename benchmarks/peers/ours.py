"""Our service in the peers' table: ours_runner.py in the main venv, once the runtime
and ``benchmarks/e2e.py`` (which defines the pipeline's operator) are in the tree."""

from __future__ import annotations

import sys

from benchmarks.peers.contenders import runner_args
from benchmarks.peers.harness import Contender, Paths, Prepared
from benchmarks.peers.venvs import HERE


def ours_contender() -> Contender | str:
    """The contender for our service, or why it cannot run yet."""
    try:
        import benchmarks.e2e  # noqa: F401
        import service.runtime.manager  # noqa: F401
    except ImportError as exc:
        return f"our service cannot run yet: {exc}"

    def command(prep: Prepared, paths: Paths) -> list[str]:
        return [sys.executable, str(HERE / "ours_runner.py"), *runner_args(prep, paths)]

    return Contender(
        "ours",
        "Clockwork (ours)",
        command,
        note="bounded pipeline (tumbling 60s count+sum, watermark every 200 ms, "
        "checkpoint every 5 s) on the runtime, as benchmarks/e2e.py builds it; 1 process",
        timeout_s=300.0,  # ~25 s at 40k/s on a loaded machine: a run this long has hung
    )
