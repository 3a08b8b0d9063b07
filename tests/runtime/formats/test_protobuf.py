"""Protobuf payloads in the wire format decode into what JSON would have given
(runtime/formats/protobuf.py); the schema text is compiled as the registry's would be."""

from __future__ import annotations

from typing import Any, NamedTuple

from google.protobuf import descriptor_pool, message_factory

from service.runtime.formats import protobuf
from service.runtime.formats.base import FAILED, Failure
from service.runtime.formats.schemas import Reference, SchemaProblem
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


MONEY_PROTO = """
syntax = "proto3";
package shop.common;
import "shop/currency.proto";
message Money { Currency currency = 1; int64 cents = 2; }
"""
CURRENCY_PROTO = 'syntax = "proto3";\npackage shop.common;\nenum Currency { EUR = 0; USD = 1; }\n'
PRICED_PROTO = """
syntax = "proto3";
package shop;
import "shop/money.proto";
import "google/protobuf/timestamp.proto";
message Priced { string user = 1; shop.common.Money price = 2; google.protobuf.Timestamp at = 3; }
"""


def proto_reference(name: str, text: str) -> Reference:
    return Reference(name, name.replace("/", "-"), 1, "PROTOBUF", text)


PROTO_REFERENCES = [
    proto_reference("shop/currency.proto", CURRENCY_PROTO),
    proto_reference("shop/money.proto", MONEY_PROTO),
    proto_reference("google/protobuf/timestamp.proto", "not read: protoc has its own"),
]


def test_imports_from_references_compile_and_the_indexes_count_the_schemas_own_file() -> None:
    """Message index 0 is ``Priced``, the schema's first message, not one of an import."""
    schema = protobuf.parse(PRICED_PROTO, PROTO_REFERENCES)
    pool = descriptor_pool.DescriptorPool()
    for file in protobuf.compile_proto(PRICED_PROTO, PROTO_REFERENCES).file:
        pool.Add(file)
    priced = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Priced"))
    message = priced(user="u")
    message.price.currency = 1
    message.price.cents = 1234
    message.at.FromMilliseconds(5)
    reader = schema.reader((0,))
    assert reader is not None
    assert reader.convert(reader.parse(message.SerializeToString())) == {
        "user": "u",
        "price": {"currency": "USD", "cents": 1234},
        "at": 5,
    }


def test_a_reference_named_as_the_schemas_own_file_does_not_hide_it() -> None:
    references = [proto_reference("schema.proto", 'syntax = "proto3"; message Other {}')]
    text = 'syntax = "proto3"; import "schema.proto"; message Mine { Other other = 1; }'
    reader = protobuf.parse(text, references).reader((0,))
    assert reader is not None
    assert reader.convert(reader.parse(b"")) == {"other": None}


def test_an_import_no_reference_names_is_an_unknown_schema() -> None:
    cache = protobuf.registry_schemas()
    cache.add(1, "PROTOBUF", PRICED_PROTO, PROTO_REFERENCES[:1])
    assert type(cache.by_id[1]) is SchemaProblem
    assert "does not parse" in cache.by_id[1]


def test_a_reference_named_outside_the_compile_directory_is_an_unknown_schema() -> None:
    cache = protobuf.registry_schemas()
    text = 'syntax = "proto3"; import "../evil.proto";'
    cache.add(1, "PROTOBUF", text, [proto_reference("../evil.proto", 'syntax = "proto3";')])
    assert "not a relative .proto path: '../evil.proto'" in str(cache.by_id[1])
