"""Schemathesis hooks for the run against the service (tests/integration/test_api_schemathesis.py).

They teach the generator the rules of the pipeline spec that no JSON Schema can state
(docs/pipeline-spec.md, "What the schema says, and what it cannot", steps' SQL
expressions included), for *positive* cases
only: a schema-valid spec that breaks one of them is rightly refused with 422, which is not the
"valid data rejected" that ``positive_data_acceptance`` looks for. Negative cases are left
as generated (the schema already refuses them, and so must the service). Nothing here asks
the service: the rules are written out again, so a service that refuses more than they
say still fails the check.
"""

from __future__ import annotations

import json
import os
from typing import Any

import schemathesis
from schemathesis import Case
from schemathesis.hooks import HookContext

_SPEC_BODIES = {("POST", "/pipelines"), ("PUT", "/pipelines/{name}"), ("POST", "/sql/compile")}

VALID_SQL = """CREATE SOURCE orders (
  "user" VARCHAR, amount DOUBLE, ts BIGINT, WATERMARK FOR ts AS ts - INTERVAL '2' SECOND
) WITH (topic = 'schemathesis-sql-orders');
INSERT INTO "schemathesis-sql-revenue"
SELECT "user", window_start, window_end, COUNT(*) AS orders, SUM(amount) AS revenue
FROM TUMBLE(orders, ts, INTERVAL '1' MINUTE)
GROUP BY "user", window_start, window_end;
"""
"""What a positive SQL body says: the schema says "a string", the language no schema can
(docs/sql.md); negative and random scripts are the fuzz tests' (tests/pipeline_spec/sql)."""


VALID_PULL_QUERY = """SELECT * FROM "schemathesis-pull" WHERE key = 'k'"""
"""What a positive ``POST /query`` body says: the schema says "a string", the pull
query's SQL no schema can (docs/pull-queries.md); refusals are
tests/pipeline_spec/sql/test_pull_query.py's."""


def _positive_pull_query(case: Case) -> bool:
    meta = case.meta
    return (
        (case.operation.method.upper(), case.operation.path) == ("POST", "/query")
        and isinstance(case.body, dict)
        and meta is not None
        and meta.generation.mode.is_positive
    )


def _positive_spec(case: Case) -> bool:
    operation = (case.operation.method.upper(), case.operation.path)
    if operation not in _SPEC_BODIES or not isinstance(case.body, dict):
        return False
    meta = case.meta
    return meta is not None and meta.generation.mode.is_positive


def _sql_body(case: Case) -> bool:
    """A SQL body (``{"name", "sql"}``) rather than a JSON spec."""
    return isinstance(case.body, dict) and "sql" in case.body


def _number(value: Any, default: float | None = None) -> float | None:
    """Integers may come as 5.0 (JSON does not tell them apart; the service reads both)."""
    return value if isinstance(value, int | float) and not isinstance(value, bool) else default


_SHARED = (
    ("source", "bounded", False),
    ("source", "start_from", "earliest"),
    ("watermark", "idle_timeout_ms", None),
    ("watermark", "idle_advance", False),
    ("watermark", "max_drift_ms", None),
)
"""What a join's two inputs must agree on, with the defaults."""


def _source_topics(spec: dict[str, Any]) -> list[Any] | None:
    """Every topic the spec reads (its source's, its inputs'); None where they overlap
    between inputs."""
    sections = [spec]
    inputs = spec.get("inputs")
    if isinstance(inputs, dict):
        sections += [s for s in inputs.values() if isinstance(s, dict)]
    topics: list[Any] = []
    for section in sections:
        source = section.get("source")
        own = source.get("topics") if isinstance(source, dict) else None
        own = [t for t in own or () if isinstance(t, str)] if isinstance(own, list) else []
        if section is not spec and set(own) & set(topics):
            return None  # a topic read by both inputs
        topics += own
    return topics


def meets_the_join_rules_no_schema_states(spec: dict[str, Any]) -> bool:
    """``left`` and ``right`` name two different inputs; ``lower_ms <= upper_ms``; the
    inputs agree on what they share; a lookup join's table is neither bounded nor read
    from ``latest``. (``select`` and the inputs' topics: see the caller
    and :func:`with_valid_expressions`.)"""
    operator, inputs = spec.get("operator"), spec.get("inputs")
    if not isinstance(operator, dict) or operator.get("type") != "join":
        return True
    if isinstance(inputs, dict):
        left, right = operator.get("left"), operator.get("right")
        if left not in inputs or right not in inputs or left == right:
            return False
        sections = [s for s in inputs.values() if isinstance(s, dict)]
        for section, name, default in _SHARED:
            values = {
                json.dumps(part.get(name, default))
                for part in (s.get(section, {}) for s in sections)
                if isinstance(part, dict)
            }
            if len(values) > 1:
                return False
        table = inputs[right] if operator.get("kind") == "lookup" else None
        source = table.get("source") if isinstance(table, dict) else None
        if isinstance(source, dict) and (
            source.get("bounded") is True or source.get("start_from") == "latest"
        ):
            return False  # a lookup table is followed live, from its beginning
    between = operator.get("between")
    if isinstance(between, dict):
        lower, upper = _number(between.get("lower_ms")), _number(between.get("upper_ms"))
        if lower is not None and upper is not None and lower > upper:
            return False
    return True


def meets_the_table_rules_no_schema_states(operator: Any, key: Any) -> bool:
    """A running aggregate's ``state_ttl_ms`` is at least its ``emit_interval_ms``
    (default 1000); a Top-N's ``row_key`` is not the pipeline's key field."""
    if not isinstance(operator, dict):
        return True
    if operator.get("type") == "aggregate":
        ttl = _number(operator.get("state_ttl_ms"))
        interval = _number(operator.get("emit_interval_ms"), 1000)
        if ttl is not None and interval is not None and 0 < ttl < interval:
            return False
    if operator.get("type") == "top_n" and isinstance(key, dict):
        row_key = operator.get("row_key")
        if isinstance(row_key, str) and row_key == key.get("field"):
            return False
    return True


def meets_the_rules_no_schema_states(spec: dict[str, Any]) -> bool:
    """slide <= size; |offset| < size (tumbling) or slide (sliding); every output topic
    (the default dead-letter topic ``<topic>.dlq`` included) is none of the source topics
    (of every input) and none of the other outputs; a join's inputs read different
    topics, and :func:`meets_the_join_rules_no_schema_states` and
    :func:`meets_the_table_rules_no_schema_states`. (User functions: this run allows no
    module, so the schema refuses every reference already.)"""
    if not meets_the_join_rules_no_schema_states(spec):
        return False
    operator = spec.get("operator")
    if not meets_the_table_rules_no_schema_states(operator, spec.get("key")):
        return False
    assigner = operator.get("assigner") if isinstance(operator, dict) else None
    if isinstance(assigner, dict):
        kind = assigner.get("type")
        size, slide = _number(assigner.get("size_ms")), _number(assigner.get("slide_ms"))
        offset = _number(assigner.get("offset_ms"), 0) or 0
        if kind == "sliding" and size is not None and slide is not None and slide > size:
            return False
        period = size if kind == "tumbling" else slide if kind == "sliding" else None
        if period is not None and abs(offset) >= period:
            return False
    topics = _source_topics(spec)
    if topics is None:
        return False
    sink = spec.get("sink")
    if not isinstance(sink, dict):
        return True
    sources = set(topics)
    outputs = [sink.get(name) for name in ("topic", "late_topic", "dead_letter_topic")]
    if sink.get("dead_letter_topic") is None and isinstance(sink.get("topic"), str):
        outputs.append(f"{sink['topic']}.dlq")
    named = [t for t in outputs if isinstance(t, str)]
    return not (set(named) & sources) and len(named) == len(set(named))


BROKER_LACKS = frozenset(os.environ.get("CLOCKWORK_SCHEMATHESIS_BROKER_LACKS", "").split(","))
"""The features the broker under test lacks (tests/conftest.py's ``MISSING_FEATURES``)."""


def the_broker_can_run(spec: dict[str, Any]) -> bool:
    """Exactly-once needs a broker with transactions; the service asks the broker, and
    refuses the spec where it has none (``broker_unsupported``), as it should."""
    return not (spec.get("delivery") == "exactly_once" and "transactions" in BROKER_LACKS)


def needs_no_schema_registry(spec: dict[str, Any]) -> bool:
    """The service under test has no schema registry, and refuses a format that needs
    one (``schema_registry_unconfigured``), as it should: a source in Confluent's wire
    format (the top level's or a join input's), or results in Avro."""
    inputs = spec.get("inputs")
    for section in [spec, *(inputs.values() if isinstance(inputs, dict) else ())]:
        source = section.get("source") if isinstance(section, dict) else None
        if isinstance(source, dict):
            fmt = source.get("format", "json")
            raw_avro = fmt == "avro" and isinstance(source.get("avro_schema"), dict)
            if fmt != "json" and not raw_avro:
                return False
    sink = spec.get("sink")
    return not (isinstance(sink, dict) and sink.get("format", "json") != "json")


@schemathesis.hook
def filter_case(context: HookContext, case: Case) -> bool:
    """Positive specs meet the rules no schema states, and ask only for what the broker
    (and the service, without a schema registry) under test can do."""
    if not _positive_spec(case) or _sql_body(case):
        return True
    return (
        meets_the_rules_no_schema_states(case.body)
        and the_broker_can_run(case.body)
        and needs_no_schema_registry(case.body)
    )


def with_valid_expressions(spec: dict[str, Any]) -> None:
    """A step's expression, each of a join's ``select`` and its ``where``, is SQL, which
    no JSON Schema can state (the schema says "a string"): in a positive spec, each
    becomes a valid one of the same place (every input's steps included)."""
    inputs = spec.get("inputs")
    for section in [spec, *(inputs.values() if isinstance(inputs, dict) else ())]:
        if isinstance(section, dict):
            _valid_steps(section.get("steps"))
    operator = spec.get("operator")
    select = operator.get("select") if isinstance(operator, dict) else None
    if isinstance(select, dict):
        for field in select:
            if isinstance(select[field], str):
                select[field] = "1 + 1"
    if isinstance(operator, dict) and isinstance(operator.get("where"), str):
        operator["where"] = "1 = 1"


VALID_AVRO_SCHEMA = {
    "type": "record",
    "name": "Order",
    "fields": [{"name": "user", "type": "string"}, {"name": "ts", "type": "long"}],
}


def with_valid_avro_schemas(spec: dict[str, Any]) -> None:
    """An ``avro_schema`` is an Avro schema, which no JSON Schema states (the schema says
    "an object"): in a positive spec, each becomes a valid one (every input's too)."""
    inputs = spec.get("inputs")
    sections = [spec, *(inputs.values() if isinstance(inputs, dict) else ())]
    for section in sections:
        source = section.get("source") if isinstance(section, dict) else None
        if isinstance(source, dict) and isinstance(source.get("avro_schema"), dict):
            source["avro_schema"] = dict(VALID_AVRO_SCHEMA)


def _valid_steps(steps: Any) -> None:
    if not isinstance(steps, list):
        return
    for step in steps:
        if not isinstance(step, dict):
            continue
        if isinstance(step.get("filter"), str):
            step["filter"] = "TRUE"
        assignments = step.get("set")
        if isinstance(assignments, dict):
            for field in assignments:
                if isinstance(assignments[field], str):
                    assignments[field] = "1 + 1"


@schemathesis.hook
def before_call(context: HookContext, case: Case, kwargs: dict[str, Any]) -> None:
    """A positive replacement names the pipeline of its path, and a positive spec's
    expressions are valid SQL. Here, just before the call, because a stateful step fills
    the path from a link after the case was generated. A positive pull query is a valid
    one (of a pipeline that may not exist: a 404 is an answer)."""
    if _positive_pull_query(case):
        case.body["sql"] = VALID_PULL_QUERY
        return
    if not _positive_spec(case):
        return
    if _sql_body(case):
        case.body["sql"] = VALID_SQL
    else:
        with_valid_expressions(case.body)
        with_valid_avro_schemas(case.body)
    name = (case.path_parameters or {}).get("name")
    if name is not None and "name" in case.body:
        case.body["name"] = name
