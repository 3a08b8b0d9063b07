"""Print up to LIMIT values of TOPIC, one a line, from its start: run inside a service
container (``python - TOPIC LIMIT < read_topic.py``), where Kafka's name resolves and
aiokafka is installed. Stops after 20 s without a new record."""

import asyncio
import sys

from aiokafka import AIOKafkaConsumer


async def main(topic: str, limit: int) -> None:
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers="kafka:9092", auto_offset_reset="earliest", group_id=None
    )
    await consumer.start()
    try:
        printed = 0
        while printed < limit:
            batches = await consumer.getmany(timeout_ms=20_000, max_records=limit - printed)
            if not batches:
                return
            for records in batches.values():
                for record in records:
                    print(record.value.decode() if record.value is not None else "null")
                    printed += 1
    finally:
        await consumer.stop()


asyncio.run(main(sys.argv[1], int(sys.argv[2])))
