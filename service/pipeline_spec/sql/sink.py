"""Where results go (``INSERT INTO``, ``CREATE SINK``) and the pipeline's settings (``SET``).

```sql
CREATE SINK revenue WITH (topic = 'revenue-per-user', late_topic = 'revenue.late',
                          format = 'avro');
SET allowed_lateness = INTERVAL '5' SECOND;
INSERT INTO revenue SELECT ...;
```

``INSERT INTO name`` writes to the topic ``name`` (quote a topic with dashes or dots:
``INSERT INTO "revenue-per-user"``), unless a ``CREATE SINK name`` declares its topics.
``SET`` takes what the spec sets for the whole pipeline: ``allowed_lateness``,
``early_fire`` (a continuous trigger: early results every interval of event time),
``delivery``, ``on_bad_value``, ``state_ttl`` (a regular join's state TTL, or a running
aggregate's) and ``emit_interval`` (how often a running aggregate, a ``GROUP BY`` without
a window, emits a key; 1 second when not set); Flink's names
(``table.exec.emit.allow-lateness``, ``table.exec.emit.early-fire.delay``,
``table.exec.state.ttl``, ``table.exec.mini-batch.allow-latency``) say the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from .context import Compilation
from .options import OptionError, duration_ms, format_of, options_of, scalar
from .problems import Position

__all__ = ["SETTINGS", "Settings", "SinkDecl", "read_set", "read_sink", "sink_spec"]

SINK_OPTIONS = ("topic", "late_topic", "dead_letter_topic", "format")
SETTINGS = (
    "allowed_lateness",
    "early_fire",
    "delivery",
    "on_bad_value",
    "state_ttl",
    "emit_interval",
)
_ALIASES = {
    "table.exec.emit.allow-lateness": "allowed_lateness",
    "table.exec.emit.early-fire.delay": "early_fire",
    "table.exec.state.ttl": "state_ttl",
    "table.exec.mini-batch.allow-latency": "emit_interval",
}
_CHOICES = {
    "delivery": ("at_least_once", "exactly_once"),
    "on_bad_value": ("dead_letter", "skip"),
}


@dataclass(slots=True)
class Settings:
    """What the ``SET`` statements said: spec values by name, and where each was set."""

    values: dict[str, Any] = field(default_factory=dict)
    at: dict[str, Position] = field(default_factory=dict)


@dataclass(slots=True)
class SinkDecl:
    """A ``CREATE SINK``: its name and the sink section it gives."""

    name: str
    statement: int
    node: exp.Expression
    sink: dict[str, Any] = field(default_factory=dict)


def read_sink(comp: Compilation, create: exp.Create, statement: int) -> SinkDecl | None:
    table = create.this
    if not isinstance(table, exp.Table) or not table.name:
        comp.refuse(
            create, statement, "CREATE SINK name WITH (topic = '...') names the sink", "sql_syntax"
        )
        return None
    decl = SinkDecl(table.name, statement, table, {"topic": table.name})
    for option in options_of(create.args.get("properties")):
        if option.name == "connector" or option.name.startswith("properties."):
            continue
        if option.name in ("format", "value.format"):
            try:
                decl.sink["format"] = format_of(option.node)
            except OptionError as exc:
                comp.refuse(option.node, statement, f"{option.name} takes {exc}", "sql_option")
            continue
        if option.name not in SINK_OPTIONS:
            comp.refuse(
                option.node,
                statement,
                f"{option.name}: no such option here; a sink takes {', '.join(SINK_OPTIONS)}",
                "sql_option",
            )
            continue
        value = scalar(option.node) if isinstance(option.node, exp.Literal) else None
        if not isinstance(value, str):
            comp.refuse(
                option.node, statement, f"{option.name} takes a topic name (a string)", "sql_option"
            )
            continue
        decl.sink[option.name] = value
    if create.args.get("expression") is not None:
        comp.refuse(
            create,
            statement,
            "CREATE SINK ... AS SELECT is not supported: declare "
            "the sink and write INSERT INTO <sink> SELECT ...",
        )
    return decl


def sink_spec(
    comp: Compilation, insert: exp.Insert, sinks: dict[str, SinkDecl], statement: int
) -> None:
    """The spec's sink, from the ``INSERT INTO`` target (and its ``CREATE SINK``)."""
    target = insert.this
    if isinstance(target, exp.Schema):
        comp.refuse(
            target,
            statement,
            "INSERT INTO takes no column list: a result record's "
            "shape is fixed ({key, window, result}; a join's select)",
        )
        target = target.this
    if not isinstance(target, exp.Table) or not target.name:
        comp.refuse(insert, statement, "INSERT INTO <topic or sink> SELECT ...", "sql_syntax")
        return
    if target.args.get("db") is not None:
        comp.refuse(target, statement, "a sink is one name (a topic, or a CREATE SINK)")
    decl = sinks.get(target.name)
    if decl is not None:
        comp.spec["sink"] = dict(decl.sink)
        comp.came_from(("sink",), decl.node, decl.statement)
        for name in decl.sink:
            comp.came_from(("sink", name), decl.node, decl.statement)
    else:
        comp.spec["sink"] = {"topic": target.name}
        comp.came_from(("sink",), target, statement)


def read_set(comp: Compilation, node: exp.Set, statement: int, settings: Settings) -> None:
    """``SET name = value``: one of :data:`SETTINGS` into ``settings``."""
    for item in node.expressions:
        assignment = item.this if isinstance(item, exp.SetItem) else None
        if not isinstance(assignment, exp.EQ):
            comp.refuse(item, statement, "SET name = value")
            continue
        name_node, value = assignment.this, assignment.expression
        raw_name = name_node.name if isinstance(name_node, exp.Expression) else ""
        name = _ALIASES.get(raw_name.lower(), raw_name.lower())
        if name not in SETTINGS:
            comp.refuse(
                name_node,
                statement,
                f"SET {raw_name}: no such setting (settings: {', '.join(SETTINGS)})",
                "sql_option",
            )
            continue
        try:
            if name in _CHOICES:
                choice = scalar(value)
                if not isinstance(choice, str) or choice.lower() not in _CHOICES[name]:
                    raise OptionError(" or ".join(repr(c) for c in _CHOICES[name]))
                settings.values[name] = choice.lower()
            else:
                settings.values[name] = duration_ms(value)
            settings.at[name] = comp.at(value, statement)
        except OptionError as exc:
            comp.refuse(value, statement, f"{name} takes {exc}", "sql_option")
