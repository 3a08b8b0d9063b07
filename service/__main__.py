"""``python -m service`` / ``clockwork``: the REST API and the runtime in one process.

One event loop (``asyncio.run``) runs uvicorn's server, the pipelines and the store
follower. uvicorn handles SIGINT/SIGTERM: it stops accepting requests and runs the app's
lifespan shutdown, which stops every pipeline gracefully (checkpoint, commit, leave the
group) before the process exits. Invalid configuration exits with status 2 and a message
naming each bad variable.
"""

from __future__ import annotations

import asyncio
import logging
import sys

import uvicorn

from service.settings import Settings, SettingsError

logger = logging.getLogger("service")


def _configure_logging(settings: Settings) -> None:
    logging.basicConfig(
        level=settings.log_level_number,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # aiokafka is chatty at INFO about every group join; keep it at WARNING unless debugging.
    if settings.log_level != "DEBUG":
        logging.getLogger("aiokafka").setLevel(logging.WARNING)


async def serve(settings: Settings) -> None:
    """Run the service until a signal stops it."""
    from service.api.app import create_app  # after logging is configured

    app = create_app(settings)
    config = uvicorn.Config(
        app,
        host=settings.http_host,
        port=settings.http_port,
        log_level=settings.log_level.lower(),
        lifespan="on",
        timeout_graceful_shutdown=max(1, settings.shutdown_timeout_ms // 1000),
        log_config=None,  # keep the logging configured above
        access_log=settings.log_level == "DEBUG",
    )
    await uvicorn.Server(config).serve()


def main() -> None:
    """Entry point of ``python -m service`` and the ``clockwork`` console script."""
    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        print(f"clockwork: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    _configure_logging(settings)
    logger.info("starting clockwork with %s", settings.describe())
    asyncio.run(serve(settings))


if __name__ == "__main__":
    main()
