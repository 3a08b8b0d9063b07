"""Waiting out an unreachable registry (runtime/schema_registry/waiting.py): a stand-in
that fails a given number of times stands for the registry; the registry itself, frozen
and thawed, is in tests/integration/test_formats.py."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from service.runtime.formats.schemas import WriterSchemas
from service.runtime.schema_registry.client import RegistryUnavailable
from service.runtime.schema_registry.waiting import resolve_waiting


class Flaky:
    """Unreachable for its first ``failures`` calls, each after fetching its first id
    (at the second); then fetches every id asked. Records each call's ids."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.asked: list[list[int]] = []
        self.fetched: list[int] = []

    async def resolve(self, schemas: WriterSchemas[Any], ids: Iterable[int]) -> None:
        wanted = sorted(ids)
        self.asked.append(wanted)
        for index, schema_id in enumerate(wanted):
            if index == 1 and self.failures:
                self.failures -= 1
                raise RegistryUnavailable("no answer")
            schemas.absent(schema_id)
            self.fetched.append(schema_id)


def cache() -> WriterSchemas[str]:
    return WriterSchemas("AVRO", lambda text, references: text)


async def resolved(registry: Flaky, ids: set[int]) -> tuple[WriterSchemas[str], list[str | None]]:
    schemas, said = cache(), []
    await resolve_waiting(
        registry,
        [(schemas, ids)],
        pipeline="p",
        what=" (lookup table 't')",
        backoff_s=(0.001, 0.002),
        say=said.append,
    )
    return schemas, said


async def test_an_answering_registry_is_asked_once_and_nothing_is_said() -> None:
    registry = Flaky(failures=0)
    schemas, said = await resolved(registry, {1, 2})
    assert registry.asked == [[1, 2]] and said == []
    assert set(schemas.by_id) == {1, 2}


async def test_an_unreachable_registry_is_asked_again_for_the_ids_still_missing() -> None:
    registry = Flaky(failures=2)
    schemas, said = await resolved(registry, {1, 2, 3})
    assert registry.asked == [[1, 2, 3], [2, 3], [3]]
    assert set(schemas.by_id) == {1, 2, 3}
    assert said[-1] is None  # the wait is over once it answers


async def test_each_wait_says_the_reader_the_reason_and_the_backoff_doubling_to_its_cap() -> None:
    _, said = await resolved(Flaky(failures=3), {1, 2, 3, 4})
    assert said == [
        "waiting for the schema registry (lookup table 't'): no answer (retrying in 0.0s)",
    ] * 3 + [None]


async def test_nothing_is_asked_when_no_id_is_missing() -> None:
    registry = Flaky(failures=1)
    _, said = await resolved(registry, set())
    assert registry.asked == [] and said == []


@pytest.mark.parametrize("failures", [1, 5])
async def test_the_ids_fetched_before_a_failure_are_never_asked_again(failures: int) -> None:
    registry = Flaky(failures=failures)
    await resolved(registry, set(range(10)))
    assert sorted(registry.fetched) == list(range(10))  # each once
