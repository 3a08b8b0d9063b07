"""Print the values of TOPIC, one a line, from its start to its end as of now: run inside
a service container (``python - TOPIC < read_topic.py``), where Kafka's name resolves and
aiokafka is installed."""

import asyncio
import sys
from typing import Any

from aiokafka import AIOKafkaConsumer


def show(batches: dict[Any, list[Any]]) -> None:
    for records in batches.values():
        for record in records:
            print(record.value.decode() if record.value is not None else "null")


async def main(topic: str) -> None:
    # No group: a subscription without one is given every partition of the topic.
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers="kafka:9092", auto_offset_reset="earliest", group_id=None
    )
    await consumer.start()
    try:
        while not consumer.assignment():
            show(await consumer.getmany(timeout_ms=1000))
        ends = await consumer.end_offsets(list(consumer.assignment()))
        while any([await consumer.position(tp) < end for tp, end in ends.items()]):
            show(await consumer.getmany(timeout_ms=1000))
    finally:
        await consumer.stop()


asyncio.run(main(sys.argv[1]))
