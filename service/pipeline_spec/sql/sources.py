"""``CREATE SOURCE`` (or Flink's ``CREATE TABLE``) -> one input of the spec: its source,
timestamp, watermark and the key its producers partition by.

```sql
CREATE SOURCE orders (
  order_id VARCHAR, "user" VARCHAR, amount DOUBLE, ts BIGINT,
  WATERMARK FOR ts AS ts - INTERVAL '2' SECOND
) WITH (topic = 'orders', timestamp_format = 'epoch_millis', partitioned_by = 'user');
```

A table (Flink's upsert-kafka) is a source with ``changelog = 'upsert'`` in its ``WITH``
or a ``PRIMARY KEY (...) NOT ENFORCED`` (the columns its Kafka key holds): each Kafka
key's newest record is its row, a tombstone deletes it.

The columns are what the records' JSON holds: their types let the compiler refuse a
comparison of a number with a string, and their names an unknown column; a source
declared without columns is read as it comes (nothing to check). The ``WATERMARK`` is
the event time: ``ts - INTERVAL 'n' UNIT`` is a bounded out-of-orderness of ``n``,
``ts`` alone a bound of 0; without one the source has no event time, and a window or a
join over it is refused (the compiler says which).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from service.operators.steps.compiler import column_path

from .context import Compilation
from .options import OptionError, duration_ms, format_of, options_of, scalar

__all__ = ["Column", "Source", "read_source", "stand_in", "watermark_of_delay"]


@dataclass(frozen=True, slots=True)
class Column:
    """A declared column: its SQL type as written and its family (what the steps'
    values are: ``number``, ``string``, ``boolean``, ``timestamp``; ``any`` for
    structured values, whose fields are read as paths)."""

    name: str
    sql_type: str
    family: str


@dataclass(slots=True)
class Source:
    """One declared source, as the rest of the compiler reads it."""

    name: str
    statement: int
    node: exp.Expression
    columns: dict[str, Column] = field(default_factory=dict)
    time_column: str | None = None
    """The ``WATERMARK FOR`` column (the event time), dotted when it is a field of a
    ``STRUCT`` column (``window.end``: a result topic's); None: no watermark."""
    time_path: tuple[str, ...] = ()
    """:attr:`time_column` as a path (``("window", "end")``)."""
    source: dict[str, Any] = field(default_factory=dict)
    timestamp: dict[str, Any] = field(default_factory=dict)
    watermark: dict[str, Any] = field(default_factory=dict)
    partitioned_by: str | None = None
    shuffle_partitions: int | None = None
    max_rows: int | None = None
    """A lookup join's table: the most rows it may hold (the spec's ``max_rows``)."""
    primary_key: tuple[str, ...] = ()
    """A table's ``PRIMARY KEY`` columns (what the Kafka key holds); ``()``: none declared."""
    watermark_node: exp.Expression | None = None
    watermark_refused: bool = False
    """Its ``WATERMARK`` was written but refused (reported there): a window or join over
    it does not say again that it has none."""
    known: bool = True
    """False for a :func:`stand_in`, which no statement declared."""
    written_at: dict[str, exp.Expression] = field(default_factory=dict)
    """Each field of the spec's source -> the ``WITH`` option it was written from (a
    rule's problem of the field is placed there: :func:`source_origins`)."""

    def declares(self, column: str) -> bool:
        """Whether ``column`` is a column of this source (any, if it declares none)."""
        return not self.columns or column in self.columns


def stand_in(name: str, statement: int, node: exp.Expression) -> Source:
    """A source a query names but that could not be read (unknown, or not a name): it
    declares no columns, so every column resolves against it and the rest of the
    statement (its aggregates, its other columns, its conditions) is still checked,
    without an unknown column reported for each column of a source already refused."""
    return Source(name, statement, node, known=False)


_NUMBER = {
    "INT",
    "INTEGER",
    "BIGINT",
    "SMALLINT",
    "TINYINT",
    "DOUBLE",
    "FLOAT",
    "REAL",
    "DECIMAL",
    "NUMERIC",
    "UBIGINT",
    "UINT",
    "USMALLINT",
    "UTINYINT",
    "BIGDECIMAL",
}
_STRING = {"VARCHAR", "CHAR", "TEXT", "NCHAR", "NVARCHAR", "STRING", "BPCHAR"}
_BOOLEAN = {"BOOLEAN"}
_TIMESTAMP = {"TIMESTAMP", "TIMESTAMPTZ", "TIMESTAMPLTZ", "TIMESTAMP_S", "TIMESTAMP_MS", "DATETIME"}
_TIMESTAMP_FORMATS = ("epoch_millis", "epoch_seconds", "iso8601")
_IGNORED = ("connector",)
"""Flink's ``CREATE TABLE`` options that say what this service always is (Kafka)."""

SOURCE_OPTIONS = (
    "topic",
    "format",
    "timestamp_format",
    "partitioned_by",
    "start_from",
    "bounded",
    "idle_timeout",
    "idle_advance",
    "max_drift",
    "watermark_interval",
    "shuffle_partitions",
    "max_rows",
    "changelog",
)


def family_of(data_type: exp.DataType) -> str:
    name = data_type.this.name if hasattr(data_type.this, "name") else str(data_type.this)
    if name in _NUMBER:
        return "number"
    if name in _STRING:
        return "string"
    if name in _BOOLEAN:
        return "boolean"
    if name in _TIMESTAMP:
        return "timestamp"
    return "any"


def read_source(comp: Compilation, create: exp.Create, statement: int) -> Source | None:
    """The source a ``CREATE SOURCE``/``CREATE TABLE`` declares (None: too broken to use;
    its problems are reported)."""
    target = create.this
    table = target.this if isinstance(target, exp.Schema) else target
    if not isinstance(table, exp.Table) or not table.name:
        comp.refuse(create, statement, "CREATE SOURCE needs a name", "sql_syntax")
        return None
    source = Source(table.name, statement, table)
    if isinstance(target, exp.Schema):
        for item in target.expressions:
            _declare(comp, source, item, statement)
    _options(comp, source, create.args.get("properties"), statement)
    _table(comp, source, statement)
    if not source.source.get("topics"):
        comp.refuse(
            table,
            statement,
            f"source {source.name!r} names no topic: add WITH (topic = '...')",
            "sql_missing",
        )
    return source


def _declare(comp: Compilation, source: Source, item: exp.Expression, statement: int) -> None:
    if isinstance(item, exp.ColumnDef):
        kind = item.args.get("kind")
        family = family_of(kind) if isinstance(kind, exp.DataType) else "any"
        sql_type = kind.sql("risingwave") if isinstance(kind, exp.DataType) else "ANY"
        if item.name in source.columns:
            comp.refuse(item, statement, f"column {item.name!r} is declared twice", "sql_duplicate")
        source.columns[item.name] = Column(item.name, sql_type, family)
        for constraint in item.args.get("constraints") or ():
            if isinstance(constraint.args.get("kind"), exp.PrimaryKeyColumnConstraint):
                _primary_key(comp, source, constraint, (item.name,), statement)
            else:
                comp.refuse(constraint, statement, "column constraints are not supported")
    elif isinstance(item, exp.PrimaryKey):
        names = tuple(e.name for e in item.expressions)
        for column in item.expressions:
            if source.columns and column.name not in source.columns:
                comp.refuse(
                    column,
                    statement,
                    f"PRIMARY KEY names {column.name!r}, which is not a declared column",
                    "sql_unknown_column",
                )
        _primary_key(comp, source, item, names, statement)
    elif isinstance(item, exp.WatermarkColumnConstraint):
        _watermark(comp, source, item, statement)
    else:
        comp.refuse(
            item,
            statement,
            f"{item.sql('risingwave')!r}: a source declares columns and one WATERMARK",
        )


def _primary_key(
    comp: Compilation,
    source: Source,
    node: exp.Expression,
    names: tuple[str, ...],
    statement: int,
) -> None:
    """``PRIMARY KEY (...) [NOT ENFORCED]``: the source is a table (``changelog =
    'upsert'``), its rows keyed by these columns, which its Kafka key holds."""
    if source.primary_key:
        comp.refuse(node, statement, "a table has one PRIMARY KEY", "sql_duplicate")
        return
    source.primary_key = names
    source.written_at.setdefault("changelog", node)


def _table(comp: Compilation, source: Source, statement: int) -> None:
    """A ``PRIMARY KEY`` makes the source a table, as ``changelog = 'upsert'`` does; the
    two may be written together, but not with ``changelog = 'append'``."""
    if not source.primary_key:
        return
    if source.source.get("changelog") == "append":
        comp.refuse(
            source.written_at["changelog"],
            statement,
            "a source with a PRIMARY KEY is a table: its changelog is 'upsert', not 'append'",
            "sql_option",
        )
        return
    source.source["changelog"] = "upsert"


def _watermark(
    comp: Compilation, source: Source, item: exp.WatermarkColumnConstraint, statement: int
) -> None:
    column, expression = item.this, item.expression
    if source.time_column is not None:
        comp.refuse(item, statement, "a source has one WATERMARK")
        return
    source.watermark_refused = True  # until it is read whole, below
    path = column_path(column) if isinstance(column, exp.Column | exp.Dot) else None
    if not path:
        comp.refuse(
            item,
            statement,
            "WATERMARK FOR names one column of the source, or a field of a STRUCT column "
            '("window"."end")',
        )
        return
    name = ".".join(path)
    declared = source.columns.get(path[0])
    if declared is None:
        comp.refuse(
            column,
            statement,
            f"WATERMARK FOR {name}: no column {path[0]!r} is declared",
            "sql_unknown_column",
        )
        return
    nested = len(path) > 1
    if nested and declared.family != "any":
        comp.refuse(
            column,
            statement,
            f"WATERMARK FOR {name}: {path[0]!r} is {declared.sql_type}, which has no fields "
            "(a STRUCT column has)",
            "sql_type_mismatch",
        )
        return
    if not nested and declared.family not in ("number", "timestamp", "string"):
        comp.refuse(
            column,
            statement,
            f"the event time column {name!r} is {declared.sql_type}: "
            "it is a number (epoch) or a TIMESTAMP",
            "sql_type_mismatch",
        )
    delay: int | None = None
    if _names(expression, path):
        delay = 0
    elif (
        isinstance(expression, exp.Sub)
        and _names(expression.this, path)
        and isinstance(expression.expression, exp.Interval)
    ):
        try:
            delay = duration_ms(expression.expression)
        except OptionError as exc:
            comp.refuse(expression.expression, statement, f"the watermark's delay is {exc}")
            return
    if delay is None or delay < 0:
        comp.refuse(
            expression,
            statement,
            f"WATERMARK FOR {name} AS {name} - INTERVAL '...' <unit> (a bounded delay) or AS "
            f"{name}: other watermark expressions are not supported",
        )
        return
    source.watermark_refused = False
    source.time_column = name
    source.time_path = path
    source.watermark_node = item
    family = "number" if nested else declared.family  # a nested field: epoch by default
    source.timestamp = {"field": name, "format": _default_format(family)}
    source.watermark = watermark_of_delay(delay)


def _names(node: exp.Expression, path: tuple[str, ...]) -> bool:
    """Whether ``node`` is a reference to the column (or field) ``path``."""
    return isinstance(node, exp.Column | exp.Dot) and column_path(node) == path


def watermark_of_delay(delay_ms: int) -> dict[str, Any]:
    """The spec's watermark for ``WATERMARK FOR ts AS ts - <delay_ms>``, as Flink SQL means it.

    Flink SQL's watermark is the expression itself over the largest timestamp seen:
    ``W = max_ts - n`` (its ``WatermarkAssignerOperator`` keeps the maximum of the
    expression's values). The spec's bounded out-of-orderness ``B`` is Flink's DataStream
    one, ``W = max_ts - B - 1``, so ``n`` is ``B = n - 1``; ``AS ts`` (``W = max_ts``,
    Flink's "strictly ascending") is a strategy of its own, as no ``B >= 0`` gives it.
    Checked row for row against Flink SQL (tests/integration/test_sql_flink.py).
    """
    if delay_ms == 0:
        return {"strategy": "strictly_ascending"}
    return {"strategy": "bounded_out_of_orderness", "max_out_of_orderness_ms": delay_ms - 1}


def _default_format(family: str) -> str:
    return "epoch_millis" if family == "number" else "iso8601"


def _options(
    comp: Compilation, source: Source, properties: exp.Expression | None, statement: int
) -> None:
    source.source = {"topics": [], "format": "json"}
    for option in options_of(properties):
        try:
            _option(source, option.name, option.node)
            if option.name in _SOURCE_FIELDS:
                source.written_at[_SOURCE_FIELDS[option.name]] = option.node
        except UnknownOption:
            comp.refuse(
                option.node,
                statement,
                f"unknown option {option.name!r}: a source takes {', '.join(SOURCE_OPTIONS)}",
                "sql_option",
            )
        except OptionError as exc:
            comp.refuse(option.node, statement, f"{option.name} takes {exc}", "sql_option")


_SOURCE_FIELDS = {
    "topic": "topics",
    "topics": "topics",
    "format": "format",
    "value.format": "format",
    "start_from": "start_from",
    "scan.startup.mode": "start_from",
    "bounded": "bounded",
    "changelog": "changelog",
}
"""The ``WITH`` options that are a field of the spec's source, by name."""


def source_origins(comp: Compilation, at: tuple[str | int, ...], source: Source) -> None:
    """Note where the source section at ``at`` and its fields were written."""
    comp.came_from(at, source.node, source.statement)
    for name, node in source.written_at.items():
        comp.came_from((*at, name), node, source.statement)


def _option(source: Source, name: str, node: exp.Expression) -> None:
    if name in _IGNORED or name.startswith("properties."):
        return
    if name in ("topic", "topics"):
        source.source["topics"] = [t.strip() for t in _text(node).split(",") if t.strip()]
    elif name in ("format", "value.format"):
        source.source["format"] = format_of(node)
    elif name == "timestamp_format":
        fmt = _text(node).lower()
        if fmt not in _TIMESTAMP_FORMATS:
            raise OptionError(" or ".join(repr(f) for f in _TIMESTAMP_FORMATS))
        if source.timestamp:  # the columns (and the WATERMARK) are read before WITH
            source.timestamp["format"] = fmt
    elif name == "partitioned_by":
        source.partitioned_by = _text(node)
    elif name in ("start_from", "scan.startup.mode"):
        start = _text(node).lower().removesuffix("-offset")
        if start not in ("earliest", "latest"):
            raise OptionError("'earliest' or 'latest'")
        source.source["start_from"] = start
    elif name == "bounded":
        source.source["bounded"] = _bool(node)
    elif name == "changelog":
        mode = _text(node).lower()
        if mode not in ("append", "upsert"):
            raise OptionError("'append' or 'upsert'")
        source.source["changelog"] = mode
    elif name == "idle_timeout":
        source.watermark["idle_timeout_ms"] = duration_ms(node)
    elif name == "idle_advance":
        source.watermark["idle_advance"] = _bool(node)
    elif name == "max_drift":
        source.watermark["max_drift_ms"] = duration_ms(node)
    elif name == "watermark_interval":
        source.watermark["interval_ms"] = duration_ms(node)
    elif name == "shuffle_partitions":
        value = scalar(node)
        if not isinstance(value, int) or isinstance(value, bool):
            raise OptionError("a number of partitions")
        source.shuffle_partitions = value
    elif name == "max_rows":
        value = scalar(node)
        if not isinstance(value, int) or isinstance(value, bool):
            raise OptionError("a number of rows")
        source.max_rows = value
    else:
        raise UnknownOption(name)


class UnknownOption(OptionError):
    """An option name a source does not take."""


def _text(node: exp.Expression) -> str:
    value = scalar(node)
    if not isinstance(value, str):
        raise OptionError("a string")
    return value


def _bool(node: exp.Expression) -> bool:
    value = scalar(node)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise OptionError("TRUE or FALSE")
    return value
