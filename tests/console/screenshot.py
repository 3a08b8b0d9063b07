"""``make screenshot``: the README's picture of the console, taken as the tests take theirs.

Runs the embedded broker and the service, creates the demo's pipelines (``make run``'s),
streams the demo's orders, opens the console's page of ``demo-orders-per-user`` in
Debian's Chromium once its charts have ``--points`` samples and its tail has results, and
saves the page to the given PNG. Everything it starts is stopped at the end.

    python -m tests.console.screenshot docs/console.png [--points 40]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from pathlib import Path

import httpx

from service.demo import ORDERS_TOPIC, demo_pipelines, produce_orders
from service.runtime.kafka.clients import KafkaCluster
from service.runtime.kafka.embedded_broker import EmbeddedBroker
from tests.api.server import app_settings, create_topic, running_app, wait_ready
from tests.console.browser import chromium

PIPELINE = "demo-orders-per-user"


async def take(target: Path, points: int) -> None:
    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        async with (
            running_app(app_settings(bootstrap)) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as client,
        ):
            await wait_ready(client)
            await create_topic(bootstrap, ORDERS_TOPIC, partitions=4)
            for spec in demo_pipelines(window_ms=5000):
                response = await client.post("/pipelines", json=spec)
                response.raise_for_status()
            stop = asyncio.Event()
            orders = asyncio.create_task(produce_orders(KafkaCluster(bootstrap), 150.0, stop))
            try:
                async with chromium(width=1360, height=1150) as browser:
                    page = await browser.new_page()
                    await page.goto(f"{url}/ui/#/pipelines/{PIPELINE}")
                    await page.wait_for_function(
                        f"""() => Number(document.querySelector('svg[data-chart="throughput"]')
                                         ?.dataset.points) >= {points}
                               && document.querySelectorAll('#tail article').length >= 3""",
                        timeout=(points + 60) * 1000,
                    )
                    target.parent.mkdir(parents=True, exist_ok=True)
                    await page.screenshot(path=target)
            finally:
                stop.set()
                with contextlib.suppress(asyncio.CancelledError):
                    await orders
    print(f"wrote {target}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("target", type=Path)
    parser.add_argument("--points", type=int, default=40, help="chart samples to wait for")
    args = parser.parse_args()
    asyncio.run(take(args.target, args.points))


if __name__ == "__main__":
    main()
