"""``python -m service.worker``: one worker of a replica, started by its API process.

Not a command for users: the process started with ``SERVICE_WORKERS`` above 1 runs
one per worker (:mod:`service.workers.pool`) with the replica's configuration,
the worker's number (``SERVICE_WORKER_INDEX``), its member name
(``SERVICE_INSTANCE_ID``), the replica's name (``SERVICE_REPLICA_ID``) and the
descriptor of the loopback socket it serves its probes and ``/metrics`` on
(``SERVICE_WORKER_FD``). It runs the pipelines as a replica of one process does; it
serves no REST API and no console. SIGTERM stops it gracefully (checkpoint, commit,
leave the groups), as it stops a replica.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
import sys

import uvicorn

from service.__main__ import configure_logging, server_config
from service.settings import Settings, SettingsError


def main() -> None:
    try:
        settings = Settings.from_env()
        index = int(os.environ["SERVICE_WORKER_INDEX"])
        fd = int(os.environ["SERVICE_WORKER_FD"])
        replica = os.environ["SERVICE_REPLICA_ID"]
    except (SettingsError, KeyError, ValueError) as exc:
        print(f"clockwork worker: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    # the socket is the API process's loopback one: plain HTTP, whatever the API serves
    # (its pull queries come through its replica's API: that is the address it publishes)
    settings = dataclasses.replace(
        settings,
        http_tls_cert_file=None,
        http_tls_key_file=None,
        query_address=settings.advertised_query_address(),
    )
    configure_logging(settings, f"worker {index}")
    from service.api.app import WorkerRole, create_app  # after logging is configured

    app = create_app(settings, worker=WorkerRole(index, replica))
    sock = socket.socket(fileno=fd)
    asyncio.run(uvicorn.Server(server_config(settings, app)).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
