"""The pipelines of the service as the REST API sees them: validate, write, describe.

Writes go through the :class:`~service.api.store.PipelineStore` (so every replica sees
them); the processes that run pipelines apply the store to their runtime
(:class:`~service.api.local_pipelines.LocalPipelines`, the store's change handler). So a
replica runs exactly what the store says, whichever replica took the request.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from pydantic import ValidationError

from service.api.local_pipelines import LocalPipelines, SpecUnusable
from service.api.store import PipelineStore, StoredPipeline, StoreError
from service.pipeline_spec.build import BuildError, build_definition
from service.pipeline_spec.models import PipelineSpec, validate_spec
from service.pipeline_spec.sql import SqlError, validate_sql
from service.runtime.definition import PipelineDefinition
from service.runtime.kafka.clients import KafkaCluster
from service.runtime.kafka.transactions import transactions_unsupported
from service.runtime.pipeline_topics.admin import PinnedEnds, PipelineTopics
from service.runtime.schema_registry.client import RegistryUnavailable, SchemaRegistry
from service.settings import Settings

__all__ = [
    "PipelineExists",
    "PipelineNotFound",
    "PipelineRegistry",
    "SpecInvalid",
    "StateIncompatible",
]

logger = logging.getLogger(__name__)


class PipelineNotFound(LookupError):
    """No pipeline of that name in the store."""


class PipelineExists(Exception):
    """A pipeline of that name is already in the store."""


class StateIncompatible(Exception):
    """The replacement changes what the state is; it needs ``reset_state=true``."""


class SpecInvalid(ValueError):
    """Every problem of a spec, FastAPI-style: ``[{"loc", "msg", "type", "input"}]``."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        self.errors = errors
        super().__init__(f"{len(errors)} problem(s) in the pipeline spec")


StatusHere = Callable[[str], dict[str, Any]]
"""A pipeline's status on this replica (its part of the whole), by name."""


class PipelineRegistry:
    """Create, replace, delete, pause and resume pipelines; describe them."""

    def __init__(
        self,
        store: PipelineStore,
        cluster: KafkaCluster,
        settings: Settings,
        status_here: StatusHere,
        local: LocalPipelines | None = None,
    ) -> None:
        """``local``: the pipelines this process runs, when it runs any (it is told of
        the resets this process writes); ``status_here``: the replica's part of a
        pipeline (this process's, or its workers')."""
        self._store = store
        self._cluster = cluster
        self._topics = PipelineTopics(self._cluster)
        self._settings = settings
        self._status_here = status_here
        self._local = local
        self._timeout_s = settings.store_apply_timeout_ms / 1000
        self._transactions_work = False
        """The broker ran a transaction once: exactly-once specs need not ask again."""

    # -- validation ------------------------------------------------------------------

    def parse(self, raw: Any, *, sent: bool = False) -> tuple[PipelineSpec, PipelineDefinition]:
        """Validate and build; raises :class:`SpecInvalid` with every problem.

        ``sent``: a spec a user sends (create, replace, compile), held to this service's
        settings too (a format that needs the schema registry it lacks); a stored one
        (``sent=False``) was held to them when it was written."""
        try:
            spec = validate_spec(raw, self._settings.udf_modules, **self._asked(sent))
        except ValidationError as exc:
            raise SpecInvalid(_errors(exc)) from exc
        try:
            return spec, build_definition(spec, self._settings.udf_modules)
        except BuildError as exc:
            raise SpecInvalid(
                [{"loc": list(exc.loc), "msg": exc.msg, "type": "build_failed", "input": None}]
            ) from exc

    def parse_body(
        self, raw: Any, path_name: str | None = None
    ) -> tuple[PipelineSpec, PipelineDefinition, str | None]:
        """A request body, JSON spec or ``{"name", "sql"}``: validated and built, with the
        script (None for a JSON spec). :class:`SpecInvalid` lists every problem, a
        script's each at its statement, line and column."""
        if not is_sql_body(raw):
            return (*self.parse(raw, sent=True), None)
        name, sql = sql_body(raw, path_name)
        try:
            spec, compiled = validate_sql(
                name, sql, self._settings.udf_modules, **self._asked(sent=True)
            )
        except SqlError as exc:
            raise SpecInvalid([p.to_json() for p in exc.problems]) from exc
        try:
            return spec, build_definition(spec, self._settings.udf_modules), sql
        except BuildError as exc:
            problem = compiled.problem(exc.loc, exc.msg, "build_failed")
            raise SpecInvalid([problem.to_json()]) from exc

    def _asked(self, sent: bool) -> dict[str, bool | None]:
        """What the rules are told of this service beyond its modules
        (:class:`service.pipeline_spec.rules.Service`): for a sent spec, whether it has
        a schema registry; for a stored one, nothing."""
        return {"schema_registry": self._settings.schema_registry is not None if sent else None}

    def compile(self, raw: Any) -> dict[str, Any]:
        """``POST /sql/compile``: the spec a script compiles to, validated and built as
        for a create, and nothing created."""
        if not is_sql_body(raw):
            raise SpecInvalid(
                [
                    {
                        "loc": ["sql"],
                        "msg": "a JSON object with sql (and optionally name)",
                        "type": "missing",
                        "input": None,
                    }
                ]
            )
        if isinstance(raw, Mapping) and "name" not in raw:
            raw = {**raw, "name": "compiled"}
        spec, _, sql = self.parse_body(raw)
        return {"name": spec.name, "spec": spec.to_json(), "sql": sql}

    async def check_broker(self, spec: PipelineSpec) -> None:
        """What the spec needs of the broker: transactions for exactly-once (asked of
        the broker once; a refusal is asked again next time, it may have been an
        outage)."""
        if spec.delivery != "exactly_once" or self._transactions_work:
            return
        reason = await transactions_unsupported(self._cluster)
        if reason is None:
            self._transactions_work = True
            return
        raise SpecInvalid(
            [
                {
                    "loc": ["delivery"],
                    "msg": f"exactly_once needs Kafka transactions, and {reason}",
                    "type": "broker_unsupported",
                    "input": spec.delivery,
                }
            ]
        )

    async def check_schema_registry(self, definition: PipelineDefinition) -> None:
        """A result schema the registry would refuse under ``<topic>-value`` (its
        compatibility rules against the versions there) is a 422 now, not a failure when
        the pipeline starts: the one check of a spec that asks the registry, so not a
        rule (a rule is pure). A registry that cannot be asked lets the spec through: the
        pipeline registers the schema when it starts, and fails with the registry's
        reason then if it is refused. (A format that needs a registry on a service
        without one is a rule's: ``source_format_has_a_registry``,
        ``sink_format_has_a_registry``, told by :meth:`parse`.)"""
        if self._settings.schema_registry is None:
            return  # the rules refused a format that needs one
        sink = definition.sink
        if sink.value_schema is None:
            return
        registry = SchemaRegistry(self._settings.schema_registry)
        try:
            compatible = await registry.compatible(
                sink.subject, sink.schema_type, sink.value_schema
            )
        except RegistryUnavailable as exc:
            logger.warning(
                "pipeline %s: the result schema was not checked (%s)", definition.name, exc
            )
            return
        finally:
            await registry.close()
        if not compatible:
            raise SpecInvalid(
                [
                    {
                        "loc": ["sink", "format"],
                        "msg": f"the schema registry refuses the results' new schema under "
                        f"{sink.subject!r} as incompatible with the versions there (its "
                        "compatibility rules): keep the aggregations' names and types, or "
                        "write to another topic",
                        "type": "sink_schema_incompatible",
                        "input": sink.format,
                    }
                ]
            )

    # -- operations (any replica) ----------------------------------------------------

    async def create(self, raw: Any) -> dict[str, Any]:
        spec, definition, sql = self.parse_body(raw)
        await self.check_broker(spec)
        await self.check_schema_registry(definition)
        async with self._store.write_lock:
            await self._store.sync(self._timeout_s)
            if self._store.get(spec.name) is not None:
                raise PipelineExists(f"pipeline {spec.name!r} exists")
            epoch = await self._first_epoch(spec.name)
            stored = await self._store.put(
                StoredPipeline(
                    name=spec.name,
                    spec=spec.to_json(),
                    state_epoch=epoch,
                    end_offsets=await self._ends(spec),
                    sql=sql,
                ),
                self._timeout_s,
            )
        await self._topics.created(replace(definition, state_epoch=epoch))
        return self.describe(stored)

    async def _first_epoch(self, name: str) -> int:
        try:
            return await self._topics.first_free_epoch(name)
        except Exception as exc:  # an answer without the topics could reuse an epoch
            raise StoreError(f"listing the broker's topics for pipeline {name!r}: {exc!r}") from exc

    async def _ends(self, spec: PipelineSpec) -> PinnedEnds | None:
        """Bounded input (a join's: every input's topics; a lookup join's table is never
        bounded): where it ends, pinned in the store for every replica; None for
        unbounded input."""
        if not spec.bounded:
            return None
        return await self._topics.bounded_ends(spec.name, spec.stream_topics())

    async def replace(self, name: str, raw: Any, *, reset_state: bool) -> dict[str, Any]:
        if isinstance(raw, Mapping) and "name" not in raw:
            raw = {**raw, "name": name}
        # The body's name against the path's: a fact of the request, not of the spec
        # (no rule can know the path), named in the one 422 with the spec's problems.
        given = raw.get("name") if isinstance(raw, Mapping) else None
        mismatch: list[dict[str, Any]] = []
        if isinstance(given, str) and given != name:
            mismatch.append(
                {
                    "loc": ["name"],
                    "msg": f"the name in the spec must be the one in the path ({name!r})",
                    "type": "name_mismatch",
                    "input": given,
                }
            )
        try:
            spec, definition, sql = self.parse_body(raw)
        except SpecInvalid as exc:
            raise SpecInvalid([*mismatch, *exc.errors]) from exc
        if mismatch:
            raise SpecInvalid(mismatch)
        await self.check_broker(spec)
        await self.check_schema_registry(definition)
        async with self._store.write_lock:
            await self._store.sync(self._timeout_s)
            current = self._require(name)
            if not reset_state:
                old_fingerprint = self._fingerprint(current)
                if old_fingerprint is not None and old_fingerprint != definition.state_fingerprint:
                    raise StateIncompatible(
                        "the new spec changes what the pipeline's state is (source topics, "
                        "key, timestamp, watermark strategy or operator): replace it with "
                        "?reset_state=true to start with empty state"
                    )
            if reset_state and self._local is not None:
                self._local.resetting.add(name)
            try:
                stored = await self._store.put(
                    replace(
                        current,
                        spec=spec.to_json(),
                        state_epoch=current.state_epoch + (1 if reset_state else 0),
                        end_offsets=await self._ends(spec),
                        sql=sql,
                    ),
                    self._timeout_s,
                )
            finally:
                if self._local is not None:
                    self._local.resetting.discard(name)
        return self.describe(stored)

    async def delete(self, name: str) -> None:
        """Write the tombstone; once this replica stopped the pipeline, null its
        checkpointed positions and delete its shuffle topics.

        The changelog stays: a replica that has not followed the delete yet may still
        checkpoint to it. A new pipeline of the same name starts in the next state epoch
        (:meth:`create`), with its own group, changelog and shuffle topic.
        """
        async with self._store.write_lock:
            await self._store.sync(self._timeout_s)
            current = self._require(name)
            await self._store.delete(name, self._timeout_s)
        try:
            _, definition = self.parse(current.spec)
        except SpecInvalid:
            return  # it never ran here; nothing of ours to drop
        await self._topics.deleted(definition, current.state_epoch)

    async def set_paused(self, name: str, paused: bool) -> dict[str, Any]:
        async with self._store.write_lock:
            await self._store.sync(self._timeout_s)
            current = self._require(name)
            if current.paused != paused:
                current = await self._store.put(replace(current, paused=paused), self._timeout_s)
        return self.describe(current)

    # -- reading ---------------------------------------------------------------------

    def get(self, name: str) -> dict[str, Any]:
        return self.describe(self._require(name))

    def list(self) -> list[dict[str, Any]]:
        return [self.describe(p) for p in self._store.all()]

    def status(self, name: str) -> dict[str, Any]:
        """The pipeline on this replica (its part of the whole)."""
        self._require(name)
        return self._status_here(name)

    def statuses_here(self) -> dict[str, dict[str, Any]]:
        """This replica's status of every stored pipeline."""
        return {p.name: self._status_here(p.name) for p in self._store.all()}

    def describe(self, stored: StoredPipeline) -> dict[str, Any]:
        """The pipeline as the API shows it: the stored spec and its status here."""
        return {
            "name": stored.name,
            "spec": stored.spec,
            "sql": stored.sql,
            "paused": stored.paused,
            "state_epoch": stored.state_epoch,
            "end_offsets": None
            if stored.end_offsets is None
            else [list(end) for end in stored.end_offsets],
            "updated_by": stored.updated_by,
            "updated_at_ms": stored.updated_at_ms,
            "status": self._status_here(stored.name),
        }

    def _require(self, name: str) -> StoredPipeline:
        stored = self._store.get(name)
        if stored is None:
            raise PipelineNotFound(f"no pipeline {name!r}")
        return stored

    def _fingerprint(self, stored: StoredPipeline) -> str | None:
        try:
            _, definition = self.parse(stored.spec)
        except SpecInvalid:
            return None  # the stored spec does not build here: nothing to keep
        return definition.state_fingerprint

    def parse_stored(self, raw: Any) -> PipelineDefinition:
        """A stored spec's definition (the store's change handler builds with it);
        :class:`SpecUnusable` says every problem in one line."""
        try:
            return self.parse(raw)[1]
        except SpecInvalid as exc:
            raise SpecUnusable(
                "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors)
            ) from exc


SQL_BODY_KEYS = frozenset({"name", "sql"})


def is_sql_body(raw: Any) -> bool:
    """Whether a body is the SQL form (``{"name", "sql"}``) rather than a JSON spec."""
    return isinstance(raw, Mapping) and "sql" in raw


def sql_body(raw: Mapping[str, Any], path_name: str | None = None) -> tuple[str, str]:
    """The name and script of a SQL body; :class:`SpecInvalid` for a malformed one."""
    problems = [
        {
            "loc": [key],
            "msg": "a SQL body has only name and sql",
            "type": "extra_forbidden",
            "input": None,
        }
        for key in raw
        if key not in SQL_BODY_KEYS
    ]
    name, sql = raw.get("name", path_name), raw.get("sql")
    if not isinstance(name, str):
        problems.append(
            {
                "loc": ["name"],
                "msg": "the pipeline's name, a string",
                "type": "string_type",
                "input": None,
            }
        )
    if not isinstance(sql, str):
        problems.append(
            {
                "loc": ["sql"],
                "msg": "the pipeline's SQL script, a string",
                "type": "string_type",
                "input": None,
            }
        )
    if problems or not isinstance(name, str) or not isinstance(sql, str):
        raise SpecInvalid(problems)
    return name, sql


def _errors(exc: ValidationError) -> list[dict[str, Any]]:
    return [
        {"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"], "input": e.get("input")}
        for e in exc.errors(include_url=False, include_context=False)
    ]
