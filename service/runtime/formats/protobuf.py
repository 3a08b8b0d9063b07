"""Protobuf payloads in Confluent's wire format, with the protobuf library.

After the 5-byte header come the message's path in the schema (Confluent's "message
indexes", :func:`.wire.message_indexes`), then the message.

The registry holds a schema as ``.proto`` text; protoc (grpcio-tools' in-process
compiler, with the well-known types it bundles) turns it into descriptors once per
schema id, in a pool of that id's own, so two versions of one message never clash. A
schema importing anything but ``google/protobuf/*`` (registry references) does not
compile yet: its records are ``unknown_schema``.

A decoded message is what JSON would have given (docs/formats.md): field names as in
the ``.proto``; 64-bit integers as numbers; enums by name; ``bytes`` as base64 text;
``google.protobuf.Timestamp`` as epoch milliseconds; the wrappers (``Int64Value``,
``StringValue``...) as their value; ``Value``, ``Struct`` and ``ListValue`` as the JSON
they hold; a message field that is not set, and a scalar with
presence (``optional``, a oneof member) that is not set, as null; other unset scalars as
their default (proto3 has no other way to tell).
"""

from __future__ import annotations

import base64
import os
import tempfile
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message
from grpc_tools import protoc

from service.runtime.formats.base import FAILED, Failure
from service.runtime.formats.schemas import WriterSchemas
from service.runtime.formats.wire import (
    REASON_UNDECODABLE,
    REASON_UNKNOWN_SCHEMA,
    encode_message_indexes,
    frame,
    header,
    message_indexes,
)

SCHEMA_TYPE = "PROTOBUF"

_WELL_KNOWN = str(resources.files("grpc_tools") / "_proto")
_FILE = "schema.proto"


class ProtoCompileError(ValueError):
    """protoc refused the schema (it printed why to the service's stderr)."""


def compile_proto(text: str) -> descriptor_pb2.FileDescriptorSet:
    """``text`` (one ``.proto`` file) and what it imports, as descriptors. protoc reads
    files only, so the text goes through a temporary directory (once per schema)."""
    with tempfile.TemporaryDirectory(prefix="clockwork-proto-") as directory:
        with open(os.path.join(directory, _FILE), "w", encoding="utf-8") as out:
            out.write(text)
        target = os.path.join(directory, "set.pb")
        code = protoc.main(
            [
                "protoc",
                f"-I{directory}",
                f"-I{_WELL_KNOWN}",
                f"--descriptor_set_out={target}",
                "--include_imports",
                _FILE,
            ]
        )
        if code != 0:
            raise ProtoCompileError(f"protoc refused the schema (exit code {code})")
        with open(target, "rb") as compiled:
            return descriptor_pb2.FileDescriptorSet.FromString(compiled.read())


class MessageReader:
    """One message type: parse its bytes, and turn the message into JSON's form."""

    __slots__ = ("convert", "parse")

    def __init__(self, parse: Callable[[Any], Message], convert: Callable[[Message], Any]):
        self.parse = parse
        self.convert = convert


class ProtobufSchema:
    """A compiled schema: its messages by Confluent's index path."""

    __slots__ = ("_converters", "_file", "_readers")

    def __init__(self, files: descriptor_pb2.FileDescriptorSet) -> None:
        pool = descriptor_pool.DescriptorPool()
        for file in files.file:
            pool.Add(file)
        self._file = pool.FindFileByName(_FILE)
        self._readers: dict[tuple[int, ...], MessageReader | None] = {}
        self._converters: dict[str, Callable[[Message], Any]] = {}

    def reader(self, path: tuple[int, ...]) -> MessageReader | None:
        """The message at ``path`` (None: the schema has none there)."""
        try:
            return self._readers[path]
        except KeyError:
            pass
        found: MessageReader | None = None
        types = self._file.message_types_by_name.values()
        descriptor: Descriptor | None = None
        for index in path:
            listed = list(types)
            if not 0 <= index < len(listed):
                descriptor = None
                break
            descriptor = listed[index]
            types = descriptor.nested_types
        if descriptor is not None:
            cls = message_factory.GetMessageClass(descriptor)
            found = MessageReader(cls.FromString, self._converter(descriptor))
        self._readers[path] = found
        return found

    def _converter(self, descriptor: Descriptor) -> Callable[[Message], Any]:
        name = descriptor.full_name
        known = self._converters.get(name)
        if known is not None:
            return known
        special = _SPECIAL.get(name)
        if special is not None:
            self._converters[name] = special
            return special
        converters = self._converters
        fields: list[tuple[str, Callable[[Message], Any]]] = []

        def convert(message: Message) -> dict[str, Any]:
            return {name: get(message) for name, get in fields}

        converters[name] = convert  # before the fields: a message may contain itself
        fields.extend((f.name, self._field(f)) for f in descriptor.fields)
        return convert

    def _field(self, field: FieldDescriptor) -> Callable[[Message], Any]:
        name = field.name
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            value = self._value(value_field)

            def get_map(message: Message) -> Any:
                return {k: value(v) for k, v in getattr(message, name).items()}

            return get_map
        value = self._value(field)
        if _repeated(field):

            def get_list(message: Message) -> Any:
                return [value(v) for v in getattr(message, name)]

            return get_list
        if field.has_presence:

            def get_present(message: Message) -> Any:
                return value(getattr(message, name)) if message.HasField(name) else None

            return get_present

        def get(message: Message) -> Any:
            return value(getattr(message, name))

        return get

    def _value(self, field: FieldDescriptor) -> Callable[[Any], Any]:
        """One value of ``field`` (an element, for a repeated one) in JSON's form."""
        if field.message_type is not None:
            converters = self._converters
            self._converter(field.message_type)
            full_name = field.message_type.full_name
            return lambda message: converters[full_name](message)
        if field.enum_type is not None:
            names = {v.number: v.name for v in field.enum_type.values}
            return lambda number: names.get(number, number)
        if field.type == FieldDescriptor.TYPE_BYTES:
            return _base64
        return _same


def _same(value: Any) -> Any:
    return value


def _base64(value: bytes) -> str:
    return base64.b64encode(value).decode()


def _timestamp(message: Any) -> int:
    return int(message.seconds) * 1000 + int(message.nanos) // 1_000_000


def _wrapped(message: Any) -> Any:
    return message.value


_SPECIAL: dict[str, Callable[[Any], Any]] = {
    "google.protobuf.Timestamp": _timestamp,
    **{
        f"google.protobuf.{kind}Value": _wrapped
        for kind in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String")
    },
    "google.protobuf.BytesValue": lambda message: _base64(message.value),
    **{
        f"google.protobuf.{kind}": json_format.MessageToDict
        for kind in ("Value", "Struct", "ListValue")
    },
}
"""Well-known types in their JSON form (a Timestamp as epoch milliseconds)."""


def parse(text: str) -> ProtobufSchema:
    return ProtobufSchema(compile_proto(text))


def registry_schemas() -> WriterSchemas[ProtobufSchema]:
    return WriterSchemas(SCHEMA_TYPE, parse)


class FramedProtobufReader:
    """Confluent-framed Protobuf values, each with the schema and message it names."""

    __slots__ = ("schemas",)

    def __init__(self, schemas: WriterSchemas[ProtobufSchema]) -> None:
        self.schemas = schemas

    def read(self, records: Sequence[Any], values: list[Any], failures: list[Failure]) -> None:
        append = values.append
        for index, raw, schema in self.schemas.heads(records, values, failures):
            try:
                path, start = message_indexes(raw)
            except (IndexError, ValueError) as exc:
                append(FAILED)
                failures.append((records[index], REASON_UNDECODABLE, f"bad message indexes: {exc}"))
                continue
            reader = schema.reader(path)
            if reader is None:
                append(FAILED)
                detail = f"schema {header(raw)[1]} has no message at {list(path)}"
                failures.append((records[index], REASON_UNKNOWN_SCHEMA, detail))
                continue
            try:
                message = reader.parse(memoryview(raw)[start:])
            except DecodeError as exc:
                append(FAILED)
                failures.append((records[index], REASON_UNDECODABLE, f"DecodeError: {exc}"))
                continue
            append(reader.convert(message))


def _repeated(field: FieldDescriptor) -> bool:
    """``field.is_repeated`` where protobuf has it (newer releases), else the label: the
    protobuf a resolver picks varies (PyFlink, in the dev extras, pins an older one)."""
    repeated = getattr(field, "is_repeated", None)
    if repeated is not None:
        return bool(repeated)
    return bool(field.label == FieldDescriptor.LABEL_REPEATED)


def framed_encoder(schema_text: str, schema_id: int) -> Callable[[dict[str, Any]], bytes]:
    """Encode one result value per call in the wire format with schema ``schema_id``:
    the first message of ``schema_text`` (message index ``0``), filled from the value by
    protobuf's JSON mapping (a ``google.protobuf.Value`` takes any JSON value); raises
    ``ValueError`` (protobuf's ``ParseError``) for a value the schema does not take."""
    schema = ProtobufSchema(compile_proto(schema_text))
    descriptor = next(iter(schema._file.message_types_by_name.values()))
    cls = message_factory.GetMessageClass(descriptor)
    prefix = frame(schema_id, encode_message_indexes([0]))
    parse = json_format.ParseDict

    def encode(value: dict[str, Any]) -> bytes:
        encoded: bytes = parse(value, cls()).SerializeToString()
        return prefix + encoded

    return encode
