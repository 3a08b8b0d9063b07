"""The payload formats by name: the one list that the spec's model and JSON Schema, SQL's
``format`` option, the runtime's definition and the sink's result schemas read.

This is the formats room's pure half (names, no readers): the runtime's definition and
the pipeline spec import it, and nothing here imports anything of the service, so the
arrows stay one way (``tests/test_architecture.py`` says so). Each format's reader is
its own module beside this one (``avro.py``, ``protobuf.py``, ``json_schema.py``); JSON
is read inline by the decoder.

Adding a format: its entry here, its reader (and ``payloads.py``'s choice of it), the
encoder and result schema of a sink in it (``results.py``,
``pipeline_spec/sink_schemas.py``), and its rows in the docs (docs/architecture.md,
"Recipe: add a source format"); ``tests/pipeline_spec/test_registries.py`` fails until
SQL, the schema and the docs know it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

__all__ = ["FORMATS", "FORMAT_NAMES", "Format", "FormatName", "schema_type"]


@dataclass(frozen=True, slots=True)
class Format:
    """One payload format: its name in a spec and SQL, and how the schema registry names
    the type of its schemas."""

    name: str
    schema_type: str | None
    """The registry's schema type (``AVRO``, ``PROTOBUF``, ``JSON``); None: the format
    has no schema (``json``)."""


FORMATS: tuple[Format, ...] = (
    Format("json", None),
    Format("avro", "AVRO"),
    Format("protobuf", "PROTOBUF"),
    Format("json_schema", "JSON"),
)
"""Every format a source reads and a sink writes (docs/formats.md), ``json`` first: the
default."""

FORMAT_NAMES: tuple[str, ...] = tuple(f.name for f in FORMATS)

if TYPE_CHECKING:
    FormatName = str
else:
    FormatName = Literal[FORMAT_NAMES]
    """One of :data:`FORMAT_NAMES`, as a type: pydantic reads it as the ``Literal`` it is
    (its JSON Schema ``enum`` and its ``literal_error``), while mypy, which cannot build a
    ``Literal`` from a tuple, sees a ``str``."""

_BY_NAME = {f.name: f for f in FORMATS}


def schema_type(name: str) -> str:
    """The registry's schema type of format ``name`` (``AVRO`` for one without a schema,
    as Confluent's clients default to)."""
    found = _BY_NAME.get(name)
    return found.schema_type if found is not None and found.schema_type else "AVRO"
