"""Protobuf payloads in Confluent's wire format, with the protobuf library.

After the 5-byte header come the message's path in the schema (Confluent's "message
indexes", :func:`.wire.message_indexes`), then the message.

The registry holds a schema as ``.proto`` text; protoc (grpcio-tools' in-process
compiler, with the well-known types it bundles) turns it into descriptors once per
schema id, in a pool of that id's own, so two versions of one message never clash. A
schema importing other files has them as registry references, each named by the path
it is imported as: they are written beside it under those paths, so protoc compiles
them first (``google/protobuf/*`` comes with protoc); an import no reference names does
not compile: its records are ``unknown_schema``.

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
import posixpath
import tempfile
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any

import orjson
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message
from grpc_tools import protoc

from service.runtime.formats.base import FAILED, Failure
from service.runtime.formats.schemas import Reference, WriterSchemas
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


def compile_proto(
    text: str, references: Sequence[Reference] = (), file: str = _FILE
) -> descriptor_pb2.FileDescriptorSet:
    """``text`` (one ``.proto`` file, named ``file``) and what it imports, as
    descriptors: each of ``references`` is a file it may import, by the reference's
    name. protoc reads files only, so the texts go through a temporary directory (once
    per schema); the set lists each file after those it imports."""
    with tempfile.TemporaryDirectory(prefix="clockwork-proto-") as directory:
        sources = {_proto_path(r.name): r.text for r in references if not _bundled(r.name)}
        sources[file] = text
        for path, source in sources.items():
            os.makedirs(os.path.dirname(os.path.join(directory, "src", path)), exist_ok=True)
            with open(os.path.join(directory, "src", path), "w", encoding="utf-8") as out:
                out.write(source)
        target = os.path.join(directory, "set.pb")
        code = protoc.main(
            [
                "protoc",
                f"-I{os.path.join(directory, 'src')}",
                f"-I{_WELL_KNOWN}",
                f"--descriptor_set_out={target}",
                "--include_imports",
                file,
            ]
        )
        if code != 0:
            raise ProtoCompileError(f"protoc refused the schema (exit code {code})")
        with open(target, "rb") as compiled:
            return descriptor_pb2.FileDescriptorSet.FromString(compiled.read())


def _bundled(name: str) -> bool:
    """A well-known type's file, which protoc has (a reference to it is redundant)."""
    return name.startswith("google/protobuf/")


def _proto_path(name: str) -> str:
    """A reference's name as a path below the compile directory; a name that would
    leave it (absolute, ``..``) raises ``ValueError``: the schema is ``unknown_schema``."""
    path = posixpath.normpath(name)
    if not name or path.startswith(("/", "../")) or path in (".", "..") or "\\" in name:
        raise ValueError(f"a reference's name is not a relative .proto path: {name!r}")
    return path


def _main_file(references: Sequence[Reference]) -> str:
    """The importing schema's own file name: one no reference has."""
    names = {r.name for r in references}
    file = _FILE
    while file in names:
        file = f"_{file}"
    return file


class MessageReader:
    """One message type: parse its bytes, and turn the message into JSON's form."""

    __slots__ = ("convert", "parse")

    def __init__(self, parse: Callable[[Any], Message], convert: Callable[[Message], Any]):
        self.parse = parse
        self.convert = convert


class ProtobufSchema:
    """A compiled schema: its messages by Confluent's index path."""

    __slots__ = ("_converters", "_file", "_readers")

    def __init__(self, files: descriptor_pb2.FileDescriptorSet, file: str = _FILE) -> None:
        pool = descriptor_pool.DescriptorPool()
        for proto in files.file:  # each after its imports: protoc's order
            pool.Add(proto)
        self._file = pool.FindFileByName(file)
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
        if special is None and _result_union(descriptor):
            special = _union
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


_WRAPPERS = frozenset(
    f"google.protobuf.{kind}Value"
    for kind in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String")
)


def _union(message: Any) -> Any:
    """A result schema's ``Number`` or ``Scalar``: the value of its set branch, null for
    none (as an Avro union reads)."""
    branch = message.WhichOneof("value")
    return None if branch is None else getattr(message, branch)


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


def parse(text: str, references: Sequence[Reference] = ()) -> ProtobufSchema:
    """A registry schema's text with the files it imports (its references), compiled;
    the message indexes count the messages of ``text``'s own file."""
    file = _main_file(references)
    return ProtobufSchema(compile_proto(text, references, file), file)


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


def _result_union(descriptor: Descriptor) -> bool:
    """Whether ``descriptor`` is a Clockwork result schema's ``Number`` or ``Scalar``
    (``clockwork.<pipeline>.WindowResult.Number``), read as the value it holds."""
    parent = descriptor.containing_type
    return (
        descriptor.name in ("Number", "Scalar")
        and parent is not None
        and parent.name == "WindowResult"
        and descriptor.full_name.startswith("clockwork.")
        and [o.name for o in descriptor.oneofs] == ["value"]
    )


def _repeated(field: FieldDescriptor) -> bool:
    """``field.is_repeated`` where protobuf has it (newer releases), else the label: the
    protobuf a resolver picks varies (PyFlink, in the dev extras, pins an older one)."""
    repeated = getattr(field, "is_repeated", None)
    if repeated is not None:
        return bool(repeated)
    return bool(field.label == FieldDescriptor.LABEL_REPEATED)


def framed_encoder(schema_text: str, schema_id: int) -> Callable[[dict[str, Any]], bytes]:
    """Encode one result value per call in the wire format with schema ``schema_id``:
    message ``WindowResult`` of ``schema_text`` (message index ``0``;
    :func:`service.pipeline_spec.sink_schemas.window_result_proto`), each field set
    directly, each aggregation by its type: an integer in a ``Number`` or ``Scalar`` as
    its ``int64`` (exact), a float as its ``double``, a JSON object or array as its JSON
    text (as the Avro sink writes them). Raises ``ValueError`` or ``TypeError`` for a
    value the schema does not take."""
    schema = ProtobufSchema(compile_proto(schema_text))
    descriptor = next(iter(schema._file.message_types_by_name.values()))
    cls = message_factory.GetMessageClass(descriptor)
    result_type = descriptor.fields_by_name["result"].message_type
    setters = [(f.name, _result_setter(f)) for f in result_type.fields]
    prefix = frame(schema_id, encode_message_indexes([0]))

    def encode(value: dict[str, Any]) -> bytes:
        message = cls(
            pipeline=value["pipeline"],
            key=value["key"],
            fire=value["fire"],
            seq=value["seq"],
            watermark=value["watermark"],
            id=value["id"],
        )
        window = value["window"]
        message.window.start = window["start"]
        message.window.end = window["end"]
        result = message.result
        result.SetInParent()
        aggregates = value["result"]
        for name, put in setters:
            item = aggregates.get(name)
            if item is not None:
                put(result, name, item)
        encoded: bytes = message.SerializeToString()
        return prefix + encoded

    return encode


_INT64 = range(-(2**63), 2**63)


def _set_scalar(message: Any, item: Any) -> None:
    """``item`` into a ``Scalar`` (bool, int64, double or string); an integer beyond
    int64 as a double, an object or array as its JSON text, as the Avro sink does."""
    kind = type(item)
    if kind is bool:
        message.bool_value = item
    elif kind is int:
        if item in _INT64:
            message.long_value = item
        else:
            message.double_value = item
    elif kind is float:
        message.double_value = item
    elif isinstance(item, str):
        message.string_value = item
    elif isinstance(item, int | float):
        _set_scalar(message, int(item) if isinstance(item, int) else float(item))
    else:
        message.string_value = orjson.dumps(item).decode()


def _set_number(message: Any, item: Any) -> None:
    """``item`` into a ``Number``: an integer (in int64) as its ``long_value``, exact."""
    if isinstance(item, int) and item in _INT64:
        message.long_value = item
    else:
        message.double_value = item


def _result_setter(field: FieldDescriptor) -> Callable[[Any, str, Any], None]:
    """How one aggregation's value goes into its field of ``Result`` (never None: an
    absent value leaves the field unset, null)."""
    kind = field.message_type.full_name if field.message_type is not None else None
    if kind is None:

        def put_plain(result: Any, name: str, item: Any) -> None:
            setattr(result, name, item)

        return put_plain
    if kind.endswith(".WindowResult.Scalar"):
        if _repeated(field):

            def put_scalars(result: Any, name: str, items: Any) -> None:
                add = getattr(result, name).add
                for item in items:
                    element = add()
                    if item is not None:
                        _set_scalar(element, item)

            return put_scalars

        def put_scalar(result: Any, name: str, item: Any) -> None:
            _set_scalar(getattr(result, name), item)

        return put_scalar
    if kind.endswith(".WindowResult.Number"):

        def put_number(result: Any, name: str, item: Any) -> None:
            _set_number(getattr(result, name), item)

        return put_number
    if kind in _WRAPPERS:

        def put_wrapped(result: Any, name: str, item: Any) -> None:
            getattr(result, name).value = item

        return put_wrapped

    def put_json(result: Any, name: str, item: Any) -> None:  # Value, ListValue...
        json_format.ParseDict(item, getattr(result, name))

    return put_json
