"""A schema's references resolved recursively (runtime/schema_registry/references.py):
no registry, a dict of subjects' versions stands for one; the registry itself is in
tests/integration/test_formats.py."""

from __future__ import annotations

from typing import NamedTuple

import pytest

from service.runtime.schema_registry.references import (
    UnresolvedReference,
    Version,
    resolve_references,
)


class Ref(NamedTuple):
    name: str | None
    subject: str | None
    version: int | None


class Registry:
    """Subjects' versions by ``(subject, version)``; counts what was asked."""

    def __init__(self, versions: dict[tuple[str, int], Version]) -> None:
        self.versions = versions
        self.asked: list[tuple[str, int]] = []

    async def fetch(self, subject: str, version: int) -> Version | None:
        self.asked.append((subject, version))
        return self.versions.get((subject, version))


def version(text: str, *references: Ref) -> Version:
    return Version("AVRO", text, references)


async def test_each_schema_comes_before_the_schemas_naming_it() -> None:
    registry = Registry(
        {
            ("money", 1): version("Money", Ref("shop.Currency", "currency", 2)),
            ("currency", 2): version("Currency"),
            ("user", 1): version("User"),
        }
    )
    found = await resolve_references(
        [Ref("shop.Money", "money", 1), Ref("shop.User", "user", 1)], registry.fetch
    )
    assert [(r.name, r.subject, r.version, r.text) for r in found] == [
        ("shop.Currency", "currency", 2, "Currency"),
        ("shop.Money", "money", 1, "Money"),
        ("shop.User", "user", 1, "User"),
    ]


async def test_a_schema_two_references_share_is_fetched_and_given_once() -> None:
    shared = Ref("shop.Currency", "currency", 1)
    registry = Registry(
        {
            ("money", 1): version("Money", shared),
            ("price", 1): version("Price", shared),
            ("currency", 1): version("Currency"),
        }
    )
    found = await resolve_references(
        [Ref("shop.Money", "money", 1), Ref("shop.Price", "price", 1)], registry.fetch
    )
    assert [r.name for r in found] == ["shop.Currency", "shop.Money", "shop.Price"]
    assert registry.asked.count(("currency", 1)) == 1


async def test_a_cycle_of_references_ends_where_it_comes_back() -> None:
    registry = Registry(
        {
            ("a.json", 1): Version("JSON", "{}", (Ref("b.json", "b", 1),)),
            ("b", 1): Version("JSON", "{}", (Ref("a.json", "a.json", 1),)),
        }
    )
    found = await resolve_references([Ref("a.json", "a.json", 1)], registry.fetch)
    assert [r.name for r in found] == ["b.json", "a.json"]


async def test_a_reference_the_registry_lacks_is_named_with_the_way_to_it() -> None:
    registry = Registry({("money", 1): version("Money", Ref("shop.Currency", "currency", 3))})
    with pytest.raises(UnresolvedReference) as raised:
        await resolve_references([Ref("shop.Money", "money", 1)], registry.fetch)
    assert str(raised.value) == (
        "references 'shop.Currency' (subject 'currency', version 3) through 'shop.Money', "
        "which the registry does not have"
    )


async def test_one_name_for_two_schemas_is_unresolved() -> None:
    registry = Registry({("money", 1): version("Money"), ("money", 2): version("Money2")})
    with pytest.raises(UnresolvedReference, match="as two schemas"):
        await resolve_references(
            [Ref("shop.Money", "money", 1), Ref("shop.Money", "money", 2)], registry.fetch
        )


async def test_a_reference_without_a_subject_is_unresolved() -> None:
    with pytest.raises(UnresolvedReference, match="without a name, subject or version"):
        await resolve_references([Ref("shop.Money", None, 1)], Registry({}).fetch)


async def test_a_registry_that_cannot_be_asked_is_not_an_unresolved_reference() -> None:
    """The fetch's own error goes up as it is (the client's RegistryUnavailable: the
    pipeline pauses) and nothing is returned to be kept."""

    async def down(subject: str, version: int) -> Version | None:
        raise ConnectionError("no answer")

    with pytest.raises(ConnectionError, match="no answer"):
        await resolve_references([Ref("shop.Money", "money", 1)], down)
