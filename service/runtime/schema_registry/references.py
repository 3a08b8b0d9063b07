"""A schema's references (Confluent's ``"references"``: name, subject, version), resolved
through whatever fetches a subject's version: every schema they name, directly or
through others, in the order a format reads them (each before the schemas naming it).

No I/O of its own: the registry client passes its fetch, a test a dict's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from service.runtime.formats.schemas import Reference


class Named(Protocol):
    """One entry of a schema's ``references`` (confluent-kafka's ``SchemaReference``)."""

    @property
    def name(self) -> str | None: ...

    @property
    def subject(self) -> str | None: ...

    @property
    def version(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class Version:
    """A subject's version as the registry has it."""

    schema_type: str
    text: str
    references: Sequence[Named]


Fetch = Callable[[str, int], Awaitable[Version | None]]
"""``(subject, version)`` -> the registry's schema there, None where it has none; raises
where the registry cannot be asked (the caller's to wait out)."""


class UnresolvedReference(LookupError):
    """A reference that cannot be followed: the registry lacks it, it names no subject
    or version, or one name stands for two schemas. The message says which, read after
    "schema <id> " (``WriterSchemas.unresolved``)."""


async def resolve_references(references: Sequence[Named], fetch: Fetch) -> list[Reference]:
    """Every schema ``references`` names, directly or through the schemas it names,
    depth first, each before those naming it. Each ``(name, subject, version)`` is
    fetched once (so a cycle ends where it comes back, and a schema two others share
    comes once); a name is one schema throughout."""
    out: list[Reference] = []
    seen: set[tuple[str, str, int]] = set()
    by_name: dict[str, tuple[str, int]] = {}

    async def visit(reference: Named, via: tuple[str, ...]) -> None:
        name, subject, version = reference.name, reference.subject, reference.version
        if name is None or subject is None or version is None:
            raise UnresolvedReference(
                f"has a reference without a name, subject or version{_through(via)}: "
                f"name {name!r}, subject {subject!r}, version {version!r}"
            )
        where = (subject, version)
        if by_name.setdefault(name, where) != where:
            first = by_name[name]
            raise UnresolvedReference(
                f"references {name!r} as two schemas: subject {first[0]!r} version "
                f"{first[1]} and subject {subject!r} version {version}{_through(via)}"
            )
        key = (name, subject, version)
        if key in seen:
            return
        seen.add(key)  # before what it names: a cycle back to it stops here
        found = await fetch(subject, version)
        if found is None:
            raise UnresolvedReference(
                f"references {name!r} (subject {subject!r}, version {version}){_through(via)}, "
                "which the registry does not have"
            )
        for inner in found.references:
            await visit(inner, (*via, name))
        out.append(Reference(name, subject, version, found.schema_type, found.text))

    for reference in references:
        await visit(reference, ())
    return out


def _through(via: tuple[str, ...]) -> str:
    return f" through {' -> '.join(repr(n) for n in via)}" if via else ""
