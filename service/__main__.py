"""``python -m service`` / ``clockwork``: the REST API and the runtime.

With ``SERVICE_WORKERS=1`` one event loop (``asyncio.run``) runs uvicorn's server, the
pipelines and the store follower. With more (the default: one per CPU this process may
use), this process serves the API and supervises the workers (``python -m
service.worker``), which run the pipelines. uvicorn handles SIGINT/SIGTERM: it stops
accepting requests and runs the app's lifespan shutdown, which stops every pipeline (or
every worker) gracefully (checkpoint, commit, leave the group) before the process exits.
Invalid configuration exits with status 2 and a message naming each bad variable.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any

import uvicorn

from service.runtime.observability.logs import RepeatFilter
from service.settings import Settings, SettingsError

logger = logging.getLogger("service")


def configure_logging(settings: Settings, process: str = "") -> None:
    """Log lines to stderr; ``process`` tags a worker's lines (they share the stream)."""
    tag = f"[{process}] " if process else ""
    logging.basicConfig(
        level=settings.log_level_number,
        format=f"%(asctime)s %(levelname)s {tag}%(name)s: %(message)s",
        stream=sys.stderr,
    )
    # aiokafka is chatty at INFO about every group join; keep it at WARNING unless debugging.
    if settings.log_level != "DEBUG":
        logging.getLogger("aiokafka").setLevel(logging.WARNING)
    # ... and logs a refused connection at every retry: each distinct one once per 5 min.
    for handler in logging.getLogger().handlers:
        handler.addFilter(RepeatFilter())


def server_config(settings: Settings, app: Any) -> uvicorn.Config:
    """uvicorn's configuration: address, logging, graceful shutdown, and HTTPS when
    ``SERVICE_HTTP_TLS_CERT_FILE``/``KEY_FILE`` are set."""
    return uvicorn.Config(
        app,
        host=settings.http_host,
        port=settings.http_port,
        log_level=settings.log_level.lower(),
        lifespan="on",
        timeout_graceful_shutdown=max(1, settings.shutdown_timeout_ms // 1000),
        log_config=None,  # keep the logging configured above
        access_log=settings.log_level == "DEBUG",
        ssl_certfile=settings.http_tls_cert_file,
        ssl_keyfile=settings.http_tls_key_file,
    )


async def serve(settings: Settings) -> None:
    """Run the service until a signal stops it."""
    from service.api.app import create_app  # after logging is configured

    await uvicorn.Server(server_config(settings, create_app(settings))).serve()


def main() -> None:
    """Entry point of ``python -m service`` and the ``clockwork`` console script."""
    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        print(f"clockwork: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    configure_logging(settings)
    logger.info("starting clockwork with %s", settings.describe())
    asyncio.run(serve(settings))


if __name__ == "__main__":
    main()
