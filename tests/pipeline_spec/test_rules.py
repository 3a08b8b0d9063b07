"""Each rule of ``service/pipeline_spec/rules/`` is one declaration: its check and its JSON
Schema fragment. Here: every fragment is in the served schema (and nothing else is added
to the models' schema), and each rule's check and fragment agree, on examples of each
rule and on edited specs.

How a fragment is held against its check: the models' schema with that one fragment
(``schema.assemble(allowed, [rule])``) judges specs the models' schema alone accepts, so
its verdict is the fragment's. The fragment refuses a spec only when the check reports a
problem, and the check reports a problem the fragment states (``rule.stated``) only when
the fragment refuses it; problem types ``beyond_schema`` may be reported on specs the
fragment accepts.
"""

from __future__ import annotations

import copy
import importlib
import pkgutil
from collections.abc import Callable
from functools import cache
from typing import Any

import jsonschema_rs
import pytest
from hypothesis import HealthCheck, given, settings

from service.pipeline_spec import rules as rules_package
from service.pipeline_spec.models import PipelineSpec
from service.pipeline_spec.rules import RULES, Fragment, Rule, Service, check, rule
from service.pipeline_spec.schema import assemble, pipeline_schema
from tests.pipeline_spec.test_spec_schema import edited_specs

ALLOWED = ("examples",)
SERVICE = Service(ALLOWED, schema_registry=True)
BY_NAME = {r.name: r for r in RULES}
WITHOUT_REGISTRY = frozenset({"source_format_has_a_registry", "sink_format_has_a_registry"})
"""The rules whose examples are a service's without a schema registry (the others' are
one's with it: their examples may read or write any format)."""


def service_for(rule_name: str) -> Service:
    """The service a rule's examples are validated by."""
    return Service(ALLOWED, schema_registry=rule_name not in WITHOUT_REGISTRY)


def window(**operator: Any) -> dict[str, Any]:
    return {
        "name": "w",
        "source": {"topics": ["in"]},
        "timestamp": {"field": "ts"},
        "operator": {
            "type": "window",
            "assigner": {"type": "tumbling", "size_ms": 1000},
            "aggregations": {"n": {"fn": "count"}},
            **operator,
        },
        "sink": {"topic": "out"},
    }


def running(**operator: Any) -> dict[str, Any]:
    """A running aggregate (no window), with ``operator`` changed."""
    return {
        "name": "r",
        "source": {"topics": ["in"]},
        "key": {"field": "user"},
        "operator": {"type": "aggregate", "aggregations": {"n": {"fn": "count"}}, **operator},
        "sink": {"topic": "out"},
    }


def top_n(**operator: Any) -> dict[str, Any]:
    """A Top-N of each user's rows by ``x``, with ``operator`` changed."""
    return {
        "name": "r",
        "source": {"topics": ["in"]},
        "key": {"field": "user"},
        "operator": {"type": "top_n", "order_by": {"field": "x"}, "n": 3, **operator},
        "sink": {"topic": "out"},
    }


def table(spec: dict[str, Any] | None = None, **values: Any) -> dict[str, Any]:
    """``spec`` (a running aggregate's by default) over a table source, with ``values``
    at the top level."""
    out = edit(spec or running(), lambda s: s["source"].update(changelog="upsert"))
    out.update(values)
    return out


def process(function: str = "dedupe", **params: Any) -> dict[str, Any]:
    return {
        "name": "p",
        "source": {"topics": ["in"]},
        "operator": {"type": "keyed_process", "function": function, "params": params},
        "sink": {"topic": "out"},
    }


def edit(spec: dict[str, Any], change: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    spec = copy.deepcopy(spec)
    change(spec)
    return spec


def join(**operator: Any) -> dict[str, Any]:
    """An interval left join of two inputs (``a`` and ``b``), with ``operator`` changed."""
    return {
        "name": "j",
        "inputs": {
            "a": {"source": {"topics": ["in.a"]}, "key": {"field": "k"}},
            "b": {"source": {"topics": ["in.b"]}, "timestamp": {"field": "ts"}},
        },
        "operator": {
            "type": "join",
            "kind": "interval",
            "how": "left",
            "left": "a",
            "right": "b",
            "between": {"lower_ms": -5, "upper_ms": 5},
            **operator,
        },
        "sink": {"topic": "out"},
    }


def window_join(**operator: Any) -> dict[str, Any]:
    """A tumbling window join of ``a`` and ``b``, with ``operator`` changed."""
    spec = join(kind="window", how="inner")
    del spec["operator"]["between"]
    spec["operator"].update({"assigner": {"type": "tumbling", "size_ms": 10}, **operator})
    return spec


def lookup_join(**operator: Any) -> dict[str, Any]:
    """A lookup join of ``a`` with the table ``b``, with ``operator`` changed."""
    spec = join(kind="lookup", how="inner")
    del spec["operator"]["between"]
    spec["operator"].update({"max_rows": 10, **operator})
    return spec


def regular_join(**operator: Any) -> dict[str, Any]:
    """A regular join of ``a`` and ``b``, with ``operator`` changed."""
    spec = join(kind="regular", how="inner")
    del spec["operator"]["between"]
    spec["operator"].update(operator)
    return spec


def input_(name: str, **values: Any) -> Callable[[dict[str, Any]], Any]:
    """An edit of input ``name``: its sections updated with ``values``."""
    return lambda s: s["inputs"][name].update(values)


def with_(section: str, **values: Any) -> dict[str, Any]:
    return edit(window(), lambda s: s.update({section: values}))


def sink(**values: Any) -> dict[str, Any]:
    return edit(window(), lambda s: s["sink"].update(values))


def no_aggregations(spec: dict[str, Any]) -> dict[str, Any]:
    return edit(spec, lambda s: s["operator"].pop("aggregations"))


FN = "examples.udf.quiet:CountUntilQuiet"

# rule -> (specs it refuses, specs it accepts). Every rule has both.
AVRO_ORDER = {
    "type": "record",
    "name": "Order",
    "fields": [{"name": "user", "type": "string"}, {"name": "ts", "type": "long"}],
}

EXAMPLES: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {
    "source_or_inputs": (
        [
            edit(window(), lambda s: s.pop("source")),
            edit(join(), lambda s: s.update(source={"topics": ["in"]})),
            edit(join(), lambda s: s.update(inputs=None)),
        ],
        [window(), join()],
    ),
    "stream_settings_in_inputs": (
        [
            edit(join(), lambda s: s.update(timestamp={"field": "ts"})),
            edit(join(), lambda s: s.update(steps=[], key=None)),
            edit(join(), lambda s: s.update(watermark={})),
        ],
        [join(), window()],
    ),
    "inputs_need_a_join": (
        [
            edit(join(), lambda s: s.update(inputs=None, source={"topics": ["in"]})),
            edit(window(), lambda s: s.pop("source") and s.update(inputs=join()["inputs"])),
        ],
        [join(), window(), edit(window(), lambda s: s.update(inputs=None))],
    ),
    "avro_schema_is_avro": (
        [
            edit(window(), lambda s: s["source"].update(avro_schema=AVRO_ORDER)),
            edit(window(), lambda s: s["source"].update(format="json", avro_schema=AVRO_ORDER)),
        ],
        [
            edit(window(), lambda s: s["source"].update(format="avro", avro_schema=AVRO_ORDER)),
            edit(window(), lambda s: s["source"].update(format="avro")),
        ],
    ),
    "avro_schema_parses": (
        [
            edit(
                window(),
                lambda s: s["source"].update(format="avro", avro_schema={"type": "nonsense"}),
            ),
            edit(
                window(),
                lambda s: s["source"].update(
                    format="avro",
                    avro_schema={"type": "record", "name": "R", "fields": [{"name": "x"}]},
                ),
            ),
        ],
        [edit(window(), lambda s: s["source"].update(format="avro", avro_schema=AVRO_ORDER))],
    ),
    "source_format_has_a_registry": (
        [
            edit(window(), lambda s: s["source"].update(format="avro")),
            edit(join(), input_("b", source={"topics": ["in.b"], "format": "protobuf"})),
        ],
        [
            window(),
            edit(
                window(),
                lambda s: s["source"].update(
                    format="avro",
                    avro_schema={
                        "type": "record",
                        "name": "r",
                        "fields": [{"name": "ts", "type": "long"}],
                    },
                ),
            ),
        ],
    ),
    "sink_format_has_a_registry": (
        [
            edit(window(), lambda s: s["sink"].update(format="avro")),
            edit(window(), lambda s: s["sink"].update(format="json_schema")),
        ],
        [window(), join()],
    ),
    "sink_format_has_a_schema": (
        [
            edit(process(), lambda s: s["sink"].update(format="avro")),
            edit(join(), lambda s: s.update(sink={"topic": "out", "format": "avro"})),
            edit(
                window(),
                lambda s: (
                    s["operator"].update(aggregations={"n-1": {"fn": "count"}})
                    or s["sink"].update(format="avro")
                ),
            ),
        ],
        [
            edit(window(), lambda s: s["sink"].update(format="avro")),
            edit(window(), lambda s: s["sink"].update(format="json")),
            edit(window(), lambda s: s["operator"].update(aggregations={"n-1": {"fn": "count"}})),
        ],
    ),
    "protobuf_result_names_apart": (
        [
            edit(
                window(aggregations={"a_b": {"fn": "count"}, "aB": {"fn": "count"}}),
                lambda s: s["sink"].update(format="protobuf"),
            )
        ],
        [
            window(aggregations={"a_b": {"fn": "count"}, "aB": {"fn": "count"}}),
            edit(
                window(aggregations={"ab": {"fn": "count"}, "aB": {"fn": "count"}}),
                lambda s: s["sink"].update(format="protobuf"),
            ),
            edit(
                window(aggregations={"a_b": {"fn": "count"}, "aB": {"fn": "count"}}),
                lambda s: s["sink"].update(format="avro"),
            ),
        ],
    ),
    "inputs_agree": (
        [
            edit(join(), input_("a", source={"topics": ["in.a"], "bounded": True})),
            edit(join(), input_("b", source={"topics": ["in.b"], "start_from": "latest"})),
            edit(join(), input_("a", watermark={"idle_timeout_ms": 5})),
            edit(join(), input_("b", watermark={"max_drift_ms": 0})),
        ],
        [
            edit(
                edit(join(), input_("a", source={"topics": ["in.a"], "bounded": True})),
                input_("b", source={"topics": ["in.b"], "bounded": True}),
            ),
            edit(
                edit(join(), input_("a", watermark={"idle_timeout_ms": 5, "interval_ms": 0})),
                input_("b", watermark={"idle_timeout_ms": 5}),
            ),
            edit(lookup_join(), input_("a", source={"topics": ["in.a"], "bounded": True})),
        ],
    ),
    "inputs_are_shuffled": (
        [edit(join(), input_("a", key={"field": "k", "partitioned": True}))],
        [
            edit(join(), input_("a", key={"field": "k", "partitioned": False})),
            edit(join(), input_("b", key={"field": "k", "shuffle_partitions": 3})),
        ],
    ),
    "step_expressions": (
        [
            edit(window(), lambda s: s.update(steps=[{"filter": "a >"}])),
            edit(join(), input_("b", steps=[{"set": {"x": "1 +"}}])),
        ],
        [
            edit(window(), lambda s: s.update(steps=[{"filter": "a > 1"}])),
            edit(join(), input_("b", steps=[{"set": {"x": "1 + 1"}}])),
        ],
    ),
    "partitioned_key_is_not_shuffled": (
        [with_("key", field="u", partitioned=True, shuffle_partitions=4)],
        [with_("key", field="u", shuffle_partitions=4), with_("key", field="u", partitioned=True)],
    ),
    "join_inputs_named": (
        [join(left="c"), join(right="a"), join(left="b", right="b")],
        [join(left="b", right="a")],
    ),
    "join_how_fits_kind": (
        [
            join(how="semi"),
            edit(join(kind="temporal", how="right"), lambda s: s["operator"].pop("between")),
            regular_join(how="semi"),
        ],
        [
            window_join(how="anti"),
            regular_join(how="full"),
            edit(join(kind="temporal"), lambda s: s["operator"].pop("between")),
            edit(join(), lambda s: s["operator"].pop("how")),
        ],
    ),
    "interval_between": (
        [
            edit(join(), lambda s: s["operator"].pop("between")),
            join(between=None),
            window_join(between={"lower_ms": 0, "upper_ms": 1}),
        ],
        [join(), window_join()],
    ),
    "between_in_order": (
        [join(between={"lower_ms": 1, "upper_ms": 0})],
        [join(between={"lower_ms": -3, "upper_ms": -3})],
    ),
    "window_join_assigner": (
        [
            edit(window_join(), lambda s: s["operator"].pop("assigner")),
            join(assigner={"type": "tumbling", "size_ms": 10}),
        ],
        [window_join(assigner={"type": "sliding", "size_ms": 10, "slide_ms": 5}), join()],
    ),
    "window_join_lateness": (
        [window_join(how="left", allowed_lateness_ms=5)],
        [
            window_join(allowed_lateness_ms=5),
            window_join(how="semi", allowed_lateness_ms=0),
            join(allowed_lateness_ms=5),
        ],
    ),
    "lookup_max_rows": (
        [
            edit(lookup_join(), lambda s: s["operator"].pop("max_rows")),
            join(max_rows=5),
        ],
        [lookup_join(), join()],
    ),
    "lookup_no_lateness": (
        [lookup_join(allowed_lateness_ms=5)],
        [lookup_join(allowed_lateness_ms=0), join(allowed_lateness_ms=5)],
    ),
    "regular_no_lateness": (
        [regular_join(allowed_lateness_ms=5)],
        [regular_join(allowed_lateness_ms=0), regular_join(state_ttl_ms=5)],
    ),
    "state_ttl_for_regular": (
        [join(state_ttl_ms=5), lookup_join(state_ttl_ms=5)],
        [regular_join(state_ttl_ms=5), regular_join()],
    ),
    "lookup_table_input": (
        [
            edit(lookup_join(), input_("b", source={"topics": ["in.b"], "bounded": True})),
            edit(lookup_join(), input_("b", source={"topics": ["in.b"], "start_from": "latest"})),
        ],
        [
            edit(lookup_join(), input_("b", source={"topics": ["in.b"], "format": "avro"})),
            edit(lookup_join(), input_("a", source={"topics": ["in.a"], "bounded": True})),
            edit(lookup_join(), input_("a", source={"topics": ["in.a"], "format": "protobuf"})),
            edit(
                lookup_join(),
                input_(
                    "b", source={"topics": ["in.b"], "format": "avro", "avro_schema": AVRO_ORDER}
                ),
            ),
            edit(join(), input_("b", source={"topics": ["in.b"], "format": "json_schema"})),
            edit(
                edit(join(), input_("a", source={"topics": ["in.a"], "start_from": "latest"})),
                input_("b", source={"topics": ["in.b"], "start_from": "latest"}),
            ),
        ],
    ),
    "join_select": (
        [join(select={"x": "c.v"}), join(select={"x": "a.v +", "y": "b"})],
        [join(select={"x": "a.v + b.w", "y": "COALESCE(b.w, 0)"})],
    ),
    "input_topics_disjoint": (
        [edit(join(), input_("b", source={"topics": ["x", "in.a"]}))],
        [edit(join(), input_("b", source={"topics": ["x", "in.b"]}))],
    ),
    "timestamp_source": (
        [
            with_("timestamp", source="kafka", field="ts"),
            with_("timestamp", source="kafka", format="iso8601"),
            with_("timestamp"),
            with_("timestamp", field=None),
            with_("timestamp", source="field"),
            edit(join(), input_("a", timestamp={"source": "kafka", "field": "ts"})),
        ],
        [
            with_("timestamp", source="kafka"),
            with_("timestamp", field="ts", format="iso8601"),
            edit(join(), input_("a", timestamp={"field": "ts", "format": "iso8601"})),
        ],
    ),
    "punctuated_field": (
        [
            with_("watermark", strategy="punctuated"),
            with_("watermark", field="wm"),
            edit(join(), input_("b", watermark={"strategy": "punctuated"})),
        ],
        [with_("watermark", strategy="punctuated", field="wm"), with_("watermark")],
    ),
    "bound_only_when_out_of_order": (
        [
            with_("watermark", strategy="ascending", max_out_of_orderness_ms=5),
            with_("watermark", strategy="strictly_ascending", max_out_of_orderness_ms=1),
            with_("watermark", strategy="punctuated", field="wm", max_out_of_orderness_ms=5),
        ],
        [
            with_("watermark", strategy="ascending", max_out_of_orderness_ms=0),
            with_("watermark", strategy="strictly_ascending"),
            with_("watermark", max_out_of_orderness_ms=5),
        ],
    ),
    "idle_advance_needs_timeout": (
        [
            with_("watermark", idle_advance=True),
            with_("watermark", idle_advance=True, idle_timeout_ms=None),
            edit(join(), input_("a", watermark={"idle_advance": True})),
        ],
        [
            with_("watermark", idle_advance=True, idle_timeout_ms=10),
            with_("watermark", idle_advance=False),
        ],
    ),
    "slide_within_size": (
        [window(assigner={"type": "sliding", "size_ms": 10, "slide_ms": 20})],
        [window(assigner={"type": "sliding", "size_ms": 20, "slide_ms": 10})],
    ),
    "offset_within_period": (
        [
            window(assigner={"type": "tumbling", "size_ms": 10, "offset_ms": -10}),
            window(assigner={"type": "sliding", "size_ms": 20, "slide_ms": 10, "offset_ms": 10}),
        ],
        [window(assigner={"type": "sliding", "size_ms": 20, "slide_ms": 10, "offset_ms": 9})],
    ),
    "aggregations_or_function": (
        [no_aggregations(window()), window(function=FN)],
        [no_aggregations(window(function=FN)), window(function=None)],
    ),
    "evictor_needs_function": (
        [window(evictor={"type": "count", "max_count": 2})],
        [no_aggregations(window(function=FN, evictor={"type": "time", "keep_ms": 5}))],
    ),
    "window_function_allowed": (
        [no_aggregations(window(function="os:system")), no_aggregations(window(function="x"))],
        [no_aggregations(window(function=FN))],
    ),
    "aggregation_field": (
        [
            window(aggregations={"n": {"fn": "count", "field": "x"}}),
            window(aggregations={"s": {"fn": "sum"}}),
            window(aggregations={"s": {"fn": "avg", "field": None}}),
            running(aggregations={"n": {"fn": "count", "field": "x"}}),
            running(aggregations={"s": {"fn": "sum"}}),
        ],
        [
            window(aggregations={"n": {"fn": "count"}, "s": {"fn": "max", "field": "x.y"}}),
            running(aggregations={"n": {"fn": "count"}, "s": {"fn": "sum", "field": "x"}}),
        ],
    ),
    "table_read_by_an_aggregate": (
        [
            table(window()),
            table(process()),
            table(edit(running(), lambda s: s.update(operator={"type": "map", "fields": ["a"]}))),
        ],
        [
            table(),
            table(top_n()),
            running(),
            edit(window(), lambda s: s["source"].update(changelog="append")),
        ],
    ),
    "table_top_n_ranks_rows_by_primary_key": (
        [
            table(top_n(row_key="product")),
            edit(table(top_n()), lambda s: s.pop("key")),
            edit(table(top_n()), lambda s: s.update(key=None)),
        ],
        [
            table(top_n()),
            table(top_n(row_key=None)),
            top_n(row_key="product"),
            edit(top_n(), lambda s: s.pop("key")),
        ],
    ),
    "table_not_a_join_input": (
        [edit(join(), input_("a", source={"topics": ["in.a"], "changelog": "upsert"}))],
        [
            join(),
            edit(join(), input_("a", source={"topics": ["in.a"], "changelog": "append"})),
            edit(regular_join(), input_("b", source={"topics": ["in.b"], "changelog": "upsert"})),
        ],
    ),
    "table_input_keyed_by_its_primary_key": (
        [
            edit(
                regular_join(how="full"),
                input_("a", source={"topics": ["in.a"], "changelog": "upsert"}),
            )
        ],
        [
            edit(regular_join(), input_("b", source={"topics": ["in.b"], "changelog": "upsert"})),
            regular_join(),
        ],
    ),
    "table_input_steps_keep_rows": (
        [
            edit(
                regular_join(),
                input_(
                    "b",
                    source={"topics": ["in.b"], "changelog": "upsert"},
                    steps=[{"filter": "x > 1"}],
                ),
            )
        ],
        [
            edit(
                regular_join(),
                input_(
                    "b",
                    source={"topics": ["in.b"], "changelog": "upsert"},
                    steps=[{"set": {"y": "x"}}],
                ),
            ),
            edit(regular_join(), input_("b", steps=[{"filter": "x > 1"}])),
        ],
    ),
    "table_key_not_partitioned": (
        [table(key={"field": "customer", "partitioned": True})],
        [
            table(key={"field": "customer"}),
            table(key={"field": "customer", "partitioned": False}),
            edit(running(), lambda s: s.update(key={"field": "c", "partitioned": True})),
        ],
    ),
    "table_steps_keep_rows": (
        [
            table(steps=[{"set": {"b": "a"}}, {"unnest": "xs", "as": "x"}]),
            table(steps=[{"filter": "a > 1"}, {"unnest": "xs", "as": "x"}]),
        ],
        [
            table(steps=[{"set": {"b": "a"}}, {"drop": ["a"]}]),
            table(steps=[{"filter": "a > 1"}]),
            table(top_n(), steps=[{"filter": "x > 1"}]),
            edit(running(), lambda s: s.update(steps=[{"filter": "a > 1"}])),
        ],
    ),
    "aggregation_retracts": (
        [
            table(running(aggregations={"f": {"fn": "first", "field": "x"}})),
            table(
                running(
                    aggregations={
                        "n": {"fn": "count"},
                        "b": {"fn": "max_by", "field": "x", "by": "y"},
                    }
                )
            ),
        ],
        [
            table(
                running(
                    aggregations={
                        "n": {"fn": "count"},
                        "s": {"fn": "sum", "field": "x"},
                        "m": {"fn": "min", "field": "x"},
                        "c": {"fn": "collect", "field": "x"},
                        "d": {"fn": "count_distinct", "field": "x"},
                        "a": {"fn": "avg", "field": "x"},
                    }
                )
            ),
            running(aggregations={"f": {"fn": "first", "field": "x"}}),
        ],
    ),
    "state_ttl_covers_emit_interval": (
        [running(state_ttl_ms=500), running(emit_interval_ms=10_000, state_ttl_ms=9_999)],
        [
            running(),
            running(state_ttl_ms=1000),
            running(emit_interval_ms=100, state_ttl_ms=500),
        ],
    ),
    "rocksdb_state_supported": (
        [
            {**lookup_join(), "state": {"backend": "rocksdb"}},
            {**table(window()), "state": {"backend": "rocksdb"}},
            {
                **edit(running(), lambda s: s.update(operator={"type": "map", "fields": ["a"]})),
                "state": {"backend": "rocksdb"},
            },
        ],
        [
            {**running(), "state": {"backend": "rocksdb"}},
            {**running(state_ttl_ms=60_000), "state": {"backend": "rocksdb"}},
            {**join(), "state": {"backend": "rocksdb"}},
            {**window_join(), "state": {"backend": "rocksdb"}},
            {**regular_join(how="full", state_ttl_ms=1000), "state": {"backend": "rocksdb"}},
            {
                **edit(join(kind="temporal", how="inner"), lambda s: s["operator"].pop("between")),
                "state": {"backend": "rocksdb"},
            },
            {**lookup_join(), "state": {"backend": "memory"}},
            {**running(state_ttl_ms=None), "state": {"backend": "rocksdb"}},
            {**table(), "state": {"backend": "rocksdb", "cache_bytes": 1 << 20}},
            {**top_n(), "state": {"backend": "rocksdb"}},
            {**table(top_n()), "state": {"backend": "rocksdb"}},
            {**process(ttl_ms=1000), "state": {"backend": "rocksdb"}},
            {**running(state_ttl_ms=60_000), "state": {"backend": "memory"}},
            {**window(), "state": {"backend": "memory"}},
            {**window(), "state": {"backend": "rocksdb"}},
            {
                **window(
                    assigner={"type": "session", "gap_ms": 100},
                    trigger={"type": "count", "count": 3},
                ),
                "state": {"backend": "rocksdb", "cache_bytes": 1 << 20},
            },
            {**window(), "state": {"cache_bytes": 1 << 20}},
        ],
    ),
    "standbys_need_rocksdb": (
        [
            {**running(), "state": {"backend": "memory", "standby_replicas": 1}},
            {**window(), "state": {"backend": "memory", "standby_replicas": 8}},
        ],
        [
            {**running(), "state": {"backend": "rocksdb", "standby_replicas": 2}},
            {**running(), "state": {"standby_replicas": 1}},
            {**window(), "state": {"backend": "memory", "standby_replicas": 0}},
            {**window(), "state": {"backend": "memory"}},
        ],
    ),
    "row_key_is_not_the_key": (
        [top_n(row_key="user")],
        [top_n(), top_n(row_key="product"), {**top_n(row_key="user"), "key": None}],
    ),
    "aggregation_by": (
        [
            window(aggregations={"b": {"fn": "max_by", "field": "x"}}),
            window(aggregations={"b": {"fn": "min_by", "field": "x", "by": None}}),
            window(aggregations={"s": {"fn": "max", "field": "x", "by": "y"}}),
            running(aggregations={"b": {"fn": "max_by", "field": "x"}}),
        ],
        [
            window(
                aggregations={
                    "b": {"fn": "max_by", "field": "x", "by": "y.z"},
                    "c": {"fn": "min_by", "field": "x", "by": "y"},
                    "s": {"fn": "max", "field": "x"},
                }
            )
        ],
    ),
    "trigger_fits_time": (
        [
            window(trigger={"type": "processing_time"}),
            window(time="processing", trigger={"type": "event_time"}),
        ],
        [
            window(time="processing", trigger={"type": "processing_time"}),
            window(trigger={"type": "count", "count": 2}),
        ],
    ),
    "global_window_trigger": (
        [
            window(assigner={"type": "global"}),
            window(assigner={"type": "global"}, trigger={"type": "event_time"}),
        ],
        [window(assigner={"type": "global"}, trigger={"type": "continuous", "interval_ms": 5})],
    ),
    "no_lateness_in_processing_time": (
        [window(time="processing", allowed_lateness_ms=5)],
        [window(time="processing", allowed_lateness_ms=0), window(allowed_lateness_ms=5)],
    ),
    "process_function_known": (
        [process("nope"), process("os:system"), process("examples.udf")],
        [process(ttl_ms=5), process(FN, quiet_ms=5)],
    ),
    "builtin_params": (
        [
            process(),
            process(ttl_ms=5, color="red"),
            process("daily_reset_counter", utc_offset_minutes=841),
        ],
        [
            process(ttl_ms=5, fields=["a.b"]),
            edit(process("daily_reset_counter"), lambda s: s["operator"].pop("params")),
        ],
    ),
    "source_topics_distinct": (
        [
            edit(window(), lambda s: s["source"].update(topics=["a", "a"])),
            edit(window(), lambda s: s["source"].update(topics=[".."])),
            edit(join(), input_("a", source={"topics": ["x", "x"]})),
        ],
        [edit(window(), lambda s: s["source"].update(topics=["a", "b"]))],
    ),
    "sink_topics_own": (
        [
            sink(topic="."),
            sink(late_topic="clockwork.late"),
            sink(dead_letter_topic="clockwork.x"),
            sink(topic="in"),
            sink(late_topic="out"),
            edit(join(), lambda s: s["sink"].update(topic="in.b")),
        ],
        [sink(late_topic="out.late", dead_letter_topic="out.dead")],
    ),
    "default_dead_letter_topic": (
        [sink(topic="t" * 246), sink(late_topic="out.dlq")],
        [sink(topic="t" * 245), sink(topic="t" * 249, dead_letter_topic="d")],
    ),
    "late_topic_of_event_time_operators": (
        [
            sink(late_topic="l") | {"operator": process(ttl_ms=5)["operator"]},
            edit(window(time="processing"), lambda s: s["sink"].update(late_topic="l")),
        ],
        [sink(late_topic="l"), edit(join(), lambda s: s["sink"].update(late_topic="l"))],
    ),
}


@cache
def validator(rule_name: str | None, allowed: tuple[str, ...] = ALLOWED) -> Any:
    """The models' schema with one rule's fragment (None: with none)."""
    rules = [BY_NAME[rule_name]] if rule_name is not None else []
    return jsonschema_rs.validator_for(assemble(allowed, rules))


def assert_agree(
    r: Rule, spec: Any, allowed: tuple[str, ...] = ALLOWED, registry: bool | None = True
) -> None:
    problems = list(r.check(spec, Service(allowed, registry)))
    assert {p.type for p in problems} <= r.reports, (r.name, problems)
    if r.schema is None or not validator(None, allowed).is_valid(spec):
        return
    fragment_ok = validator(r.name, allowed).is_valid(spec)
    if not fragment_ok:
        assert problems, f"{r.name}: the fragment refuses what the check accepts: {spec}"
    stated = [p for p in problems if p.type in r.stated]
    if stated:
        assert not fragment_ok, (
            f"{r.name}: the check reports {stated}, the fragment accepts: {spec}"
        )


def declared_rules() -> list[Rule]:
    """Every rule the modules of the rules package declare (each module's own)."""
    found: list[Rule] = []
    for info in pkgutil.iter_modules(rules_package.__path__):
        module = importlib.import_module(f"{rules_package.__name__}.{info.name}")
        found.extend(v for v in vars(module).values() if isinstance(v, Rule))
    return found


def test_the_order_names_every_declared_rule_once() -> None:
    """``RULES`` is the one order of a 422's problems: a rule declared in a module but
    left out of it would never run, and one named twice would report twice."""
    assert len(RULES) == len(set(RULES))
    assert sorted(r.name for r in declared_rules()) == sorted(r.name for r in RULES)
    assert set(declared_rules()) == set(RULES)


def test_every_rule_has_examples() -> None:
    assert sorted(EXAMPLES) == sorted(BY_NAME)


CASES = [
    pytest.param(name, spec, refused, id=f"{name}-{'refused' if refused else 'accepted'}-{i}")
    for name, (refused_specs, accepted_specs) in EXAMPLES.items()
    for refused, specs in ((True, refused_specs), (False, accepted_specs))
    for i, spec in enumerate(specs)
]


@pytest.mark.parametrize(("name", "spec", "refused"), CASES)
def test_check_and_fragment_agree_on_the_examples(name: str, spec: Any, refused: bool) -> None:
    r = BY_NAME[name]
    service = service_for(name)
    assert validator(None).is_valid(spec), "an example the models' schema accepts"
    assert bool(list(r.check(spec, service))) == refused
    assert_agree(r, spec, registry=service.schema_registry)
    if not refused:  # and the service takes it whole (the examples are real specs)
        assert not [p for q in RULES for p in q.check(spec, service)]
        PipelineSpec.model_validate(
            spec,
            context={"allowed_modules": ALLOWED, "schema_registry": service.schema_registry},
        )


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(spec=edited_specs())
def test_check_and_fragment_agree_on_edited_specs(spec: Any) -> None:
    for r in RULES:
        assert_agree(r, spec)
        assert_agree(r, spec, allowed=())
        assert_agree(r, spec, registry=False)


@pytest.mark.parametrize("allowed", [ALLOWED, ()])
def test_the_served_schema_is_the_models_and_every_rules_fragment(
    allowed: tuple[str, ...],
) -> None:
    """Every fragment is in the served schema, where its rule says, in the rules' order;
    and the schema holds no ``allOf`` a rule did not declare."""
    served = pipeline_schema(allowed)
    bare = assemble(allowed, [])
    declared: dict[str, list[Any]] = {}
    for r in RULES:
        if r.schema is not None:
            declared.setdefault(r.schema.model, []).append(r.schema.resolve(allowed))
    assert set(declared) <= {PipelineSpec.__name__, *served["$defs"]}
    for model in {PipelineSpec.__name__, *served["$defs"]}:
        node = served if model == PipelineSpec.__name__ else served["$defs"][model]
        bare_node = bare if model == PipelineSpec.__name__ else bare["$defs"][model]
        assert node.get("allOf", []) == declared.get(model, []), model
        rest = {k: v for k, v in node.items() if k not in ("allOf", "$defs")}
        assert rest == {k: v for k, v in bare_node.items() if k != "$defs"}, model


def test_a_rule_without_a_fragment_says_why_for_each_problem() -> None:
    def check(spec: Any, allowed: Any) -> Any:
        return iter(())

    with pytest.raises(ValueError, match="says why"):
        rule(reports={"a", "b"}, beyond_schema={"a": "reasons"})(check)
    with pytest.raises(ValueError, match="no fragment"):
        rule(reports={"a"}, schema=Fragment("KeySpec", {}), beyond_schema={"a": "x"})(check)
    assert check.__name__ not in BY_NAME


def test_aggregations_whose_protobuf_json_names_clash_are_refused_at_each_later_one() -> None:
    """protoc refuses two fields of one message with one JSON name (``a_b``, ``aB`` and
    ``a__b`` are all ``aB``): a protobuf sink's spec says so at create time, at each
    aggregation after the first of its JSON name."""
    names = ["a_b", "n", "aB", "a__b"]
    spec = window(aggregations={name: {"fn": "count"} for name in names})
    spec["sink"]["format"] = "protobuf"
    problems = [(p.loc, p.type) for p in check(spec, SERVICE)]
    assert problems == [
        (("operator", "aggregations", "aB"), "protobuf_json_name_clash"),
        (("operator", "aggregations", "a__b"), "protobuf_json_name_clash"),
    ]
