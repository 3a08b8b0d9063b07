"""Protobuf payloads in the wire format decode into what JSON would have given
(runtime/formats/protobuf.py); the schema text is compiled as the registry's would be."""

from __future__ import annotations

from typing import Any, NamedTuple

from google.protobuf import descriptor_pool, message_factory

from service.runtime.formats import protobuf
from service.runtime.formats.base import FAILED, Failure
from service.runtime.formats.wire import encode_message_indexes, frame

PROTO = """
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";

message Order {
  string user = 1;
  google.protobuf.Timestamp ts = 2;
  double amount = 3;
  google.protobuf.StringValue coupon = 4;
  map<string, int64> counts = 5;
  repeated Line lines = 6;
  Kind kind = 7;
  optional int32 priority = 8;
  bytes blob = 9;
  int64 big = 10;
  Order parent = 11;
  enum Kind { ONLINE = 0; STORE = 1; }
  message Line { string sku = 1; }
}

message Refund { string user = 1; }
"""


class Record(NamedTuple):
    value: bytes | None


def classes() -> dict[str, Any]:
    """The messages as a producer would have them (a pool of their own)."""
    pool = descriptor_pool.DescriptorPool()
    for file in protobuf.compile_proto(PROTO).file:
        pool.Add(file)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"shop.{name}"))
        for name in ("Order", "Order.Line", "Refund")
    }


def read(*values: bytes | None) -> tuple[list[Any], list[Failure]]:
    cache = protobuf.registry_schemas()
    cache.add(1, "PROTOBUF", PROTO)
    cache.add(2, "PROTOBUF", 'syntax = "proto3"; import "other.proto";')
    out: list[Any] = []
    failures: list[Failure] = []
    protobuf.FramedProtobufReader(cache).read([Record(v) for v in values], out, failures)
    return out, failures


def test_messages_read_as_json_has_them() -> None:
    found = classes()
    order = found["Order"](user="u1", amount=2.5, big=2**40, blob=b"\x00\xff", kind=1)
    order.ts.FromMilliseconds(1_700_000_000_123)
    order.coupon.value = "c"
    order.counts["x"] = 3
    order.lines.add(sku="a")
    order.parent.user = "p"
    values, failures = read(frame(1, encode_message_indexes([0]) + order.SerializeToString()))
    assert failures == []
    (value,) = values
    assert value["parent"]["parent"] is None
    value["parent"] = {k: v for k, v in value["parent"].items() if v not in (None, 0, "", [], {})}
    assert value == {
        "user": "u1",
        "ts": 1_700_000_000_123,
        "amount": 2.5,
        "coupon": "c",
        "counts": {"x": 3},
        "lines": [{"sku": "a"}],
        "kind": "STORE",
        "priority": None,
        "blob": "AP8=",
        "big": 2**40,
        "parent": {"user": "p", "kind": "ONLINE"},
    }


def test_the_message_indexes_pick_the_message() -> None:
    """Nested types count in the descriptor's order, a map's entry type included (as
    Confluent's serializers count them): Line is Order's second, after CountsEntry."""
    found = classes()
    line = found["Order.Line"](sku="s")
    refund = found["Refund"](user="r")
    values, failures = read(
        frame(1, encode_message_indexes([0, 1]) + line.SerializeToString()),
        frame(1, encode_message_indexes([1]) + refund.SerializeToString()),
        frame(1, encode_message_indexes([5]) + b""),
    )
    assert values[:2] == [{"sku": "s"}, {"user": "r"}]
    assert values[2] is FAILED and failures[0][1] == "unknown_schema"


def test_bad_records_say_why() -> None:
    values, failures = read(
        b"{}",
        frame(2, b"\x00"),
        frame(1, b"\x00\xff\xff"),
        frame(1, b""),
    )
    assert values == [FAILED] * 4
    assert [reason for _, reason, _ in failures] == [
        "bad_magic",
        "unknown_schema",
        "undecodable",
        "undecodable",
    ]
