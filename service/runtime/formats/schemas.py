"""Writer schemas by registry id, as a format's reader uses them; no I/O.

The runtime's registry client fills a :class:`WriterSchemas` (``missing()`` -> fetch ->
``add()``) before the batch that names the ids is decoded; a reader only looks up, each
framed reader through :meth:`WriterSchemas.heads`: the one place the wire format's head
is checked and its id looked up.

A schema may name others the registry holds (Confluent's schema references: an Avro
named type, a Protobuf import, a JSON Schema ``$ref``); the client fetches them all and
hands them to ``add()`` as :class:`Reference` s, each before the schemas naming it, and
each format's ``parse`` reads them before the schema itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from service.runtime.formats.base import FAILED, Failure, SchemaNotResolved
from service.runtime.formats.wire import (
    HEADER_SIZE,
    MAGIC,
    REASON_BAD_MAGIC,
    REASON_UNKNOWN_SCHEMA,
    bad_magic,
    header,
)

S = TypeVar("S")


class SchemaProblem(str):
    """What is wrong with a schema the registry has (the text did not parse as the
    format's schema); records naming it are ``unknown_schema``."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Reference:
    """A schema another one names, as the registry has it (``subject``, ``version``).

    ``name`` is what the naming schema calls it: an Avro type's full name, the path a
    Protobuf file imports, the URL of a JSON Schema ``$ref``."""

    name: str
    subject: str
    version: int
    schema_type: str
    text: str


Parse = Callable[[str, Sequence[Reference]], S]
"""A format's parser: the schema's text and its references, each before those naming
it, into the format's schema; raises whatever its library raises for a bad one."""


class WriterSchemas(Generic[S]):
    """The parsed writer schema of each registry id seen, or why there is none.

    ``parse`` turns the registry's schema text and its references into the format's
    schema; an id the registry does not have, or one whose references it lacks, maps to
    a :class:`SchemaProblem`."""

    __slots__ = ("_parse", "by_id", "schema_type")

    def __init__(self, schema_type: str, parse: Parse[S]) -> None:
        self.schema_type = schema_type
        """The registry's name of the format: ``AVRO``, ``PROTOBUF``, ``JSON``."""
        self._parse = parse
        self.by_id: dict[int, S | SchemaProblem] = {}

    def missing(self, records: Sequence[Any]) -> set[int]:
        """The ids named by ``records`` (framed values only) that are not known yet."""
        known = self.by_id
        found: set[int] = set()
        last = -1  # most batches name one id: skip the set for runs of it
        for record in records:
            value = record.value
            if value is None or len(value) < HEADER_SIZE or value[0] != MAGIC:
                continue
            schema_id = header(value)[1]
            if schema_id != last:
                last = schema_id
                if schema_id not in known:
                    found.add(schema_id)
        return found

    def heads(
        self, records: Sequence[Any], values: list[Any], failures: list[Failure]
    ) -> Iterator[tuple[int, bytes, S]]:
        """``(index, value, writer schema)`` of each of ``records`` whose value is framed
        with an id that has a schema, in order; the caller appends one value per item.

        Each other record gets its :data:`FAILED` in ``values`` and its failure
        (``bad_magic``, ``unknown_schema``) here before the next item is yielded (and
        after the last), so ``values`` stays one per record. Raises
        :class:`SchemaNotResolved` for an id nobody asked the registry for.

        A generator, not a function called per record: one resume per record is the
        cheapest way to share this loop (docs/formats.md, "Bad records")."""
        by_id = self.by_id
        last = -1
        schema: Any = None
        index = -1
        for record in records:
            index += 1
            raw = record.value
            if raw is None or len(raw) < HEADER_SIZE or raw[0] != MAGIC:
                values.append(FAILED)
                failures.append((record, REASON_BAD_MAGIC, bad_magic(raw)))
                continue
            schema_id = header(raw)[1]
            if schema_id != last:  # most batches name one id: one look-up a run
                try:
                    found = by_id[schema_id]
                except KeyError:
                    raise SchemaNotResolved(schema_id) from None
                if type(found) is SchemaProblem:
                    values.append(FAILED)
                    failures.append((record, REASON_UNKNOWN_SCHEMA, found))
                    continue
                schema = found
                last = schema_id
            yield index, raw, schema

    def add(
        self,
        schema_id: int,
        schema_type: str,
        text: str,
        references: Sequence[Reference] = (),
    ) -> None:
        """The registry's schema of ``schema_id`` and every schema it names, directly
        or not (each before those naming it); one of another format, or that does not
        parse, is kept as the problem records naming it are dead-lettered with."""
        for kind, what in [(schema_type, "is"), *((r.schema_type, _of(r)) for r in references)]:
            if kind != self.schema_type:
                self.unresolved(schema_id, f"{what} {kind}, not {self.schema_type}")
                return
        try:
            self.by_id[schema_id] = self._parse(text, references)
        except Exception as exc:  # any parse error of the library: a bad schema
            self.by_id[schema_id] = SchemaProblem(f"schema {schema_id} does not parse: {exc}")

    def absent(self, schema_id: int) -> None:
        """The registry has no schema ``schema_id``."""
        self.by_id[schema_id] = SchemaProblem(f"the registry has no schema with id {schema_id}")

    def unresolved(self, schema_id: int, why: str) -> None:
        """The registry has schema ``schema_id`` but it cannot be read: ``why`` (a
        reference the registry lacks, say)."""
        self.by_id[schema_id] = SchemaProblem(f"schema {schema_id} {why}")

    def known(self, ids: Iterable[int]) -> bool:
        return all(i in self.by_id for i in ids)


def _of(reference: Reference) -> str:
    return (
        f"references {reference.name!r} (subject {reference.subject!r}, version "
        f"{reference.version}), which is"
    )
