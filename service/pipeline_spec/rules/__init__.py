"""The cross-field rules of the pipeline spec, by concern, and the one order they run in.

Each rule is one declaration (:mod:`.base`): its check (a generator of problems over the
raw JSON, told the facts of the service it may read: :class:`.base.Service`) beside its
JSON Schema fragment, or ``beyond_schema={type: why}`` where no JSON Schema can say it.
Every refusal of a spec is a field check of the models or one of these rules (SQL
refuses only what a spec cannot express; the build only what needs the user's code
imported; docs/architecture.md, "Where a refusal lives"). The rules live by concern:

- :mod:`.sources`: one stream's source, topics, steps, key and timestamp;
- :mod:`.watermarks`: its watermark;
- :mod:`.windows`: a window's assigner, function, trigger, evictor and lateness;
- :mod:`.aggregates`: the fields each aggregate function takes (a window's, a running
  aggregate's);
- :mod:`.running`: a running aggregate's state TTL and emit interval;
- :mod:`.top_n`: a Top-N's row key;
- :mod:`.tables`: a table source (``changelog: "upsert"``): what reads it, and which
  steps and keys may stand between;
- :mod:`.processes`: a keyed process function and its params;
- :mod:`.join_inputs`: a join's two inputs;
- :mod:`.joins`: a join operator, one rule per kind where a kind has a field or a
  refusal of its own;
- :mod:`.sinks`: the sink's topics and format;
- :mod:`.state`: the state backend, and which operators it holds;

with what several of them read in :mod:`.raw` (the raw JSON, defensively),
:mod:`.topics` (Kafka's topic names) and :mod:`.user_functions`.

Why raw JSON and not the validated models: pydantic runs a model's "after" validator only
when every field of that model is valid, so a spec with a bad ``allowed_lateness_ms``
would hide that its evictor cannot work with its aggregations. The checks read the input
defensively instead (a part that is missing or of the wrong type is skipped: the field
checks already report it) and each one reports its own problems, so the user gets every
problem in one answer. :class:`service.pipeline_spec.models.PipelineSpec` merges them
with the field errors; :func:`check` runs them all in the order of :data:`RULES`.

Adding a rule: write its check under ``@rule(...)`` in its concern's module, with the
problem types it reports and its fragment (``Fragment("ModelName", {...})``, joined to
that model's definition as one more ``allOf`` entry), or ``beyond_schema={type: why}``;
name it in :data:`RULES` where its problems belong in a 422; and give
``tests/pipeline_spec/test_rules.py`` a spec it refuses and one it accepts (a test fails
when a declared rule is missing from :data:`RULES`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from service.pipeline_spec.rules import (
    aggregates,
    join_inputs,
    joins,
    processes,
    running,
    sinks,
    sources,
    state,
    tables,
    top_n,
    watermarks,
    windows,
)
from service.pipeline_spec.rules.base import Fragment, Problem, Rule, Service, rule
from service.pipeline_spec.rules.processes import BUILTIN_PARAMS_SCHEMAS

__all__ = [
    "BUILTIN_PARAMS_SCHEMAS",
    "RULES",
    "Fragment",
    "Problem",
    "Rule",
    "Service",
    "check",
    "rule",
]

RULES: tuple[Rule, ...] = (
    # the stream: source or inputs, and the source's format
    sources.source_or_inputs,
    sources.stream_settings_in_inputs,
    sources.avro_schema_is_avro,
    sources.avro_schema_parses,
    sources.source_format_has_a_registry,
    # a join's inputs, as streams
    join_inputs.inputs_need_a_join,
    join_inputs.inputs_agree,
    join_inputs.inputs_are_shuffled,
    # each stream's steps, key, timestamp and watermark
    sources.step_expressions,
    sources.partitioned_key_is_not_shuffled,
    # a table source: what reads it, and what stands between
    tables.table_read_by_an_aggregate,
    tables.table_not_a_join_input,
    tables.table_input_keyed_by_its_primary_key,
    tables.table_input_steps_keep_rows,
    tables.table_key_not_partitioned,
    tables.table_steps_keep_rows,
    tables.table_top_n_ranks_rows_by_primary_key,
    sources.timestamp_source,
    watermarks.punctuated_field,
    watermarks.bound_only_when_out_of_order,
    watermarks.idle_advance_needs_timeout,
    # the operator: a window
    windows.slide_within_size,
    windows.offset_within_period,
    windows.aggregations_or_function,
    windows.evictor_needs_function,
    windows.window_function_allowed,
    aggregates.aggregation_field,
    aggregates.aggregation_by,
    aggregates.aggregation_retracts,
    windows.trigger_fits_time,
    windows.global_window_trigger,
    windows.no_lateness_in_processing_time,
    # a running aggregate (its aggregations: the aggregates' rules above)
    running.state_ttl_covers_emit_interval,
    state.rocksdb_state_supported,
    state.standbys_need_rocksdb,
    # a Top-N
    top_n.row_key_is_not_the_key,
    # a keyed process function
    processes.process_function_known,
    processes.builtin_params,
    # a join
    joins.join_inputs_named,
    joins.join_how_fits_kind,
    joins.interval_between,
    joins.between_in_order,
    joins.window_join_assigner,
    joins.window_join_lateness,
    joins.lookup_max_rows,
    joins.lookup_no_lateness,
    joins.regular_no_lateness,
    joins.state_ttl_for_regular,
    join_inputs.lookup_table_input,
    joins.join_select,
    join_inputs.input_topics_disjoint,
    # the topics: read and written
    sources.source_topics_distinct,
    sinks.sink_topics_own,
    sinks.default_dead_letter_topic,
    sinks.late_topic_of_event_time_operators,
    sinks.sink_format_has_a_schema,
    sinks.sink_format_has_a_registry,
    sinks.protobuf_result_names_apart,
)
"""Every rule, in the order :func:`check` runs them: the order of the spec's sections,
which is the order of a 422's problems."""


def check(spec: Mapping[str, Any], service: Service) -> list[Problem]:
    """Every cross-field problem of ``spec`` for ``service``, in the order of :data:`RULES`."""
    return [problem for r in RULES for problem in r.check(spec, service)]
