"""A topic tail closes its consumer whatever happens to its start (no broker needed:
the failures are a refused connection and a broker that never answers), and hands out
each record with what is not readable text as hex, saying so."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator

import pytest
from aiokafka.errors import KafkaConnectionError
from aiokafka.structs import ConsumerRecord

from service.runtime.kafka.clients import KafkaCluster
from service.runtime.kafka.embedded_broker import free_port
from service.runtime.kafka.tail import TopicTail, open_tails, readable, tail_record

TOPICS = {"result": "out"}


@pytest.fixture
async def silent_listener() -> AsyncIterator[tuple[str, asyncio.Event]]:
    """An address that accepts connections and never answers a request, and an event
    set once it holds one."""
    held: list[asyncio.StreamWriter] = []
    connected = asyncio.Event()

    async def hold(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        connected.set()

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"127.0.0.1:{port}", connected
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_a_tail_whose_start_fails_closes_its_consumer() -> None:
    tail = TopicTail(KafkaCluster(f"127.0.0.1:{free_port()}"), TOPICS)
    with pytest.raises(KafkaConnectionError):
        async with tail:
            pytest.fail("a tail without a broker must not open")
    assert open_tails() == 0
    del tail
    gc.collect()  # an unclosed consumer warns here, and the warning fails the test


async def test_a_tail_cancelled_while_starting_closes_its_consumer(
    silent_listener: tuple[str, asyncio.Event],
) -> None:
    address, connected = silent_listener
    tail = TopicTail(KafkaCluster(address), TOPICS)
    entered = asyncio.create_task(tail.__aenter__())
    async with asyncio.timeout(10):
        await connected.wait()  # the start connected and waits for its first answer
    assert open_tails() == 1
    entered.cancel()
    with pytest.raises(asyncio.CancelledError):
        await entered
    assert open_tails() == 0
    del tail, entered
    gc.collect()  # an unclosed consumer warns here, and the warning fails the test


def fetched(
    key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]]
) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(
        "out.late",
        1,
        7,
        1234,
        0,
        key,
        value,
        None,
        0,
        0,
        headers,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("data", "shown"),
    [
        (b"late", ("late", "text")),
        ("zürich \u2603\ttab\nline".encode(), ("zürich \u2603\ttab\nline", "text")),
        (b"", ("", "text")),
        (b"\xff\x00\xfe", ("ff00fe", "hex")),  # not UTF-8
        (b"\x00\x00\x01\x02", ("00000102", "hex")),  # UTF-8, but control characters
        (b"\xc3", ("c3", "hex")),  # a UTF-8 sequence cut short
    ],
)
def test_a_value_is_shown_as_text_when_readable_and_as_hex_otherwise(
    data: bytes, shown: tuple[str, str]
) -> None:
    assert readable(data) == shown


def test_a_tail_record_says_of_each_header_key_and_value_whether_it_is_text_or_hex() -> None:
    record = fetched(
        b"\x81u1",
        b"\x00\x01",
        [("trace", b"t-1"), ("clockwork.shuffle", b"\x00\x00\x01\x8b\xcf\xe5h\x00")],
    )
    assert tail_record(record, "late") == {
        "kind": "late",
        "topic": "out.late",
        "partition": 1,
        "offset": 7,
        "timestamp": 1234,
        "key": "817531",
        "key_format": "hex",
        "headers": [
            {"name": "trace", "value": "t-1", "format": "text"},
            {"name": "clockwork.shuffle", "value": "0000018bcfe56800", "format": "hex"},
        ],
        "value": "0001",
        "value_format": "hex",
    }


def test_a_tail_record_parses_json_and_keeps_text_and_null_as_they_are() -> None:
    json_value = tail_record(fetched(b"u1", b'{"n": 1}', []), "result")
    assert (json_value["key"], json_value["key_format"]) == ("u1", "text")
    assert (json_value["value"], json_value["value_format"]) == ({"n": 1}, "json")
    assert json_value["headers"] == []
    text = tail_record(fetched(None, b"not json", []), "dead_letter")
    assert (text["key"], text["value"], text["value_format"]) == (None, "not json", "text")
    tombstone = tail_record(fetched(b"u1", None, []), "result")
    assert (tombstone["value"], tombstone["value_format"]) == (None, "json")
