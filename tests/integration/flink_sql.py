"""Flink SQL as a reference: one PyFlink process (one JVM) answering queries for a session.

:class:`FlinkSql` starts ``python -m tests.integration.flink_sql`` once; each
:meth:`FlinkSql.query` sends it the DDL statements and one ``SELECT``, and gets back the
result's column names and rows, read with ``collect()``. The process runs Flink's local
MiniCluster in streaming mode, parallelism 1, time zone UTC, and watermarks emitted on
every advance (``pipeline.auto-watermark-interval: 0``, as Clockwork's
``watermark_interval = 0``), so a bounded input gives the same result on every run.

PyFlink lives in its own process rather than in pytest's: its import warns
(deprecations, which the suite turns into errors), py4j keeps threads and sockets open,
and one JVM serves every test of the session without holding pytest's event loop.

Protocol: one JSON line per request (``{"statements": [...], "query": "...", "config":
{...}}``, ``config`` optional: settings of the request's environment beyond those, e.g.
``pipeline.jars`` for a connector's jar), one JSON line per answer (``{"columns": [...],
"rows": [[...]], "kinds": [...]}`` or ``{"error": "..."}``). ``TIMESTAMP`` values come
back as epoch milliseconds (UTC), decimals as floats. Each request gets a fresh
``TableEnvironment`` (an empty catalog).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[2]
EPOCH = datetime(1970, 1, 1)


class FlinkError(RuntimeError):
    """Flink refused a statement or failed a job; the message is Flink's."""


class FlinkSql:
    """A client of the PyFlink process; :meth:`close` stops it (and its JVM)."""

    def __init__(self) -> None:
        self._log = tempfile.NamedTemporaryFile(  # noqa: SIM115 (closed in close())
            prefix="flink-sql-", suffix=".log", delete=False
        )
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.flink_sql"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )

    def query(
        self, statements: list[str], query: str, config: dict[str, str] | None = None
    ) -> tuple[list[str], list[list[Any]]]:
        """Run ``statements`` (DDL), then ``query``; its column names and rows, in order
        (an append-only result: any other row kind is a :class:`FlinkError`). ``config``:
        settings beyond the process's (module docstring)."""
        columns, rows, kinds = self.changelog(statements, query, config)
        if set(kinds) - {"INSERT"}:  # window aggregates and these joins only ever append
            raise FlinkError(f"Flink's result is not append-only: row kinds {sorted(set(kinds))}")
        return columns, rows

    def changelog(
        self, statements: list[str], query: str, config: dict[str, str] | None = None
    ) -> tuple[list[str], list[list[Any]], list[str]]:
        """Run ``statements`` (DDL), then ``query``; its column names, its changelog's rows
        in order and each row's kind (``INSERT``, ``UPDATE_BEFORE``, ``UPDATE_AFTER``,
        ``DELETE``): an updating result (a Top-N, a group aggregate) folds from these."""
        stdin, stdout = self._process.stdin, self._process.stdout
        if stdin is None or stdout is None:  # pragma: no cover (both are pipes)
            raise FlinkError("the Flink process has no pipes")
        request = {"statements": statements, "query": query, "config": config or {}}
        stdin.write(json.dumps(request) + "\n")
        stdin.flush()
        line = stdout.readline()
        if not line:
            raise FlinkError(f"the Flink process ended: {self.log_tail()}")
        answer = json.loads(line)
        if "error" in answer:
            raise FlinkError(answer["error"])
        return answer["columns"], answer["rows"], answer["kinds"]

    def log_tail(self, chars: int = 4000) -> str:
        self._log.flush()
        return Path(self._log.name).read_text(errors="replace")[-chars:]

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            self._process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        if self._process.stdout is not None:
            self._process.stdout.close()
        self._log.close()
        os.unlink(self._log.name)


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return (value.replace(tzinfo=None) - EPOCH) // timedelta(milliseconds=1)
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _serve(requests: IO[str], answers: IO[str]) -> None:
    from pyflink.table import EnvironmentSettings, TableEnvironment

    for line in requests:
        request = json.loads(line)
        try:
            env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
            config = env.get_config()
            config.set("parallelism.default", "1")
            config.set("table.local-time-zone", "UTC")
            config.set("pipeline.auto-watermark-interval", "0 ms")
            for key, value in request.get("config", {}).items():
                config.set(key, value)
            for statement in request["statements"]:
                env.execute_sql(statement)
            result = env.execute_sql(request["query"])
            columns = list(result.get_resolved_schema().get_column_names())
            rows, kinds = [], []
            with result.collect() as found:
                for row in found:
                    kinds.append(row.get_row_kind().name)
                    rows.append([_plain(v) for v in row])
            answer: dict[str, Any] = {"columns": columns, "rows": rows, "kinds": kinds}
        except Exception as exc:  # Flink's own message goes back to the test
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


if __name__ == "__main__":
    # Answers go to the pipe; anything else that writes to stdout (the JVM that PyFlink
    # starts inherits it) goes to the log, so it cannot break a line of the protocol.
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    _serve(sys.stdin, answers)
