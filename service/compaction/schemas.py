"""Result schemas: how the ``result`` column of a pipeline is typed.

``--result-schema PIPELINE=SPEC`` where SPEC is a Spark DDL (``orders long, revenue
double``), a Spark JSON schema (``StructType.json()``) or a JSON Schema object
(``{"type": "object", "properties": {"orders": {"type": "integer"}}}``).
"""

from __future__ import annotations

import json

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from service.compaction.errors import ResultSchemaError


def parse_result_schema(spec: str) -> StructType:
    """A result schema from its text (see the module docstring). DDL parsing needs an
    active SparkSession (Spark's parser runs in the JVM)."""
    text = spec.strip()
    if text.startswith("{"):
        try:
            body = json.loads(text)
        except ValueError as exc:
            raise ResultSchemaError(f"result schema is not valid JSON: {exc}") from exc
        if body.get("type") == "struct" and "fields" in body:
            parsed: DataType = StructType.fromJson(body)
        else:
            parsed = json_schema_to_spark(body)
    else:
        try:
            parsed = StructType.fromDDL(text)
        except Exception as exc:  # pyspark raises its ParseException family
            raise ResultSchemaError(f"result schema is not a valid DDL: {exc}") from exc
    if not isinstance(parsed, StructType):
        raise ResultSchemaError(f"a result schema must be a struct, not {parsed.simpleString()}")
    return parsed


def parse_result_schemas(specs: list[str]) -> dict[str, str]:
    """``["pipeline=SPEC", ...]`` -> ``{pipeline: SPEC}`` (parsed later, on the session)."""
    schemas = {}
    for item in specs:
        pipeline, sep, spec = item.partition("=")
        if not sep or not pipeline.strip() or not spec.strip():
            raise ResultSchemaError(f"expected PIPELINE=SCHEMA, got {item!r}")
        schemas[pipeline.strip()] = spec
    return schemas


_JSON_SCHEMA_TYPES: dict[str, DataType] = {
    "integer": LongType(),
    "number": DoubleType(),
    "string": StringType(),
    "boolean": BooleanType(),
}


def json_schema_to_spark(schema: dict[str, object]) -> DataType:
    """A JSON Schema (``{"type": "object", "properties": {...}}``) as a Spark type."""
    kind = schema.get("type")
    if isinstance(kind, list):  # ["number", "null"]: nullable anyway
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "object":
        properties = schema.get("properties")
        if not isinstance(properties, dict):
            raise ResultSchemaError("a JSON Schema object needs 'properties'")
        return StructType(
            [StructField(str(name), json_schema_to_spark(sub)) for name, sub in properties.items()]
        )
    if kind == "array":
        items = schema.get("items")
        if not isinstance(items, dict):
            raise ResultSchemaError("a JSON Schema array needs 'items'")
        return ArrayType(json_schema_to_spark(items))
    if isinstance(kind, str) and kind in _JSON_SCHEMA_TYPES:
        return _JSON_SCHEMA_TYPES[kind]
    raise ResultSchemaError(f"unsupported JSON Schema type {kind!r}")


def widen_struct(held: StructType | None, incoming: StructType, *, strict: bool) -> StructType:
    """``held`` with the fields of ``incoming`` it lacks appended (nested structs too):
    how a table's ``result`` type grows when a pipeline brings new fields.

    A field both have keeps ``held``'s type. When the types differ, ``strict`` (the
    incoming type was configured) raises :class:`ResultSchemaError`; otherwise (it was
    inferred from a few records) the held type wins and the values are read as that.
    """
    if held is None:
        return incoming
    fields = list(held.fields)
    index = {f.name: i for i, f in enumerate(fields)}
    for new in incoming.fields:
        if new.name not in index:
            fields.append(StructField(new.name, new.dataType, True))
            continue
        old = fields[index[new.name]]
        if isinstance(old.dataType, StructType) and isinstance(new.dataType, StructType):
            merged = widen_struct(old.dataType, new.dataType, strict=strict)
            fields[index[new.name]] = StructField(old.name, merged, True)
        elif old.dataType != new.dataType and strict:
            raise ResultSchemaError(
                f"result field {new.name!r} is {old.dataType.simpleString()} in the table "
                f"and {new.dataType.simpleString()} in the schema given: one Delta table "
                "holds one type per field"
            )
    return StructType(fields)
