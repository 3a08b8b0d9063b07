"""A pipeline script -> the JSON spec (the stored, canonical form), or every problem.

The script is ``CREATE SOURCE`` statements (the inputs), optional ``CREATE SINK`` and
``SET`` statements, and one ``INSERT INTO ... SELECT`` (the pipeline). Each statement
kind is read by its own module (:mod:`.sources`, :mod:`.sink`, :mod:`.windows`,
:mod:`.joins`, with :mod:`.expressions` for what becomes steps); this module dispatches
the statements, refuses by name what the spec cannot run, and puts the spec together.

Then :func:`validate_sql` runs the spec's own validation (every field check and rule of
:mod:`service.pipeline_spec.rules`), so a SQL pipeline is held to exactly the rules a
JSON one is, and places each of its problems at the statement, line and column the
offending part of the spec was written from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlglot import exp

from service.pipeline_spec import rules
from service.pipeline_spec.models import PipelineSpec, validate_spec

from .context import Compilation, Loc
from .joins import compile_join
from .parsing import parse_script
from .problems import SqlError, SqlProblem, Text
from .running import compile_running_aggregate
from .selects import compile_select
from .sink import Settings, SinkDecl, read_set, read_sink, sink_spec
from .sources import Source, read_source, stand_in
from .top_n import compile_top_n, top_n_query
from .windows import compile_window, resolve_window, window_call

__all__ = ["Compiled", "compile_sql", "validate_sql"]

_SPEC_ORDER = (
    "name",
    "source",
    "inputs",
    "steps",
    "key",
    "timestamp",
    "watermark",
    "operator",
    "sink",
    "delivery",
)
_CLAUSES = {
    "having": "HAVING is not supported: a window's results are final and unfiltered "
    "(filter them downstream, or filter the records with WHERE)",
    "order": "ORDER BY is not supported: a stream has no end to sort up to (results come "
    "per window, in watermark order)",
    "limit": "LIMIT is not supported on a stream",
    "offset": "OFFSET is not supported on a stream",
    "qualify": "QUALIFY is not supported",
    "windows": "a WINDOW clause (OVER windows) is not supported: use TUMBLE, HOP or SESSION",
    "with_": "WITH (common table expressions) is not supported: one SELECT per pipeline",
    "distinct": "SELECT DISTINCT is not supported (an updating result): use COUNT(DISTINCT x) "
    "in a window",
    "laterals": "LATERAL is not supported",
    "prewhere": "PREWHERE is not supported",
}


_KEYWORDS = {
    "having": "HAVING",
    "order": "ORDER",
    "limit": "LIMIT",
    "offset": "OFFSET",
    "qualify": "QUALIFY",
    "windows": "WINDOW",
    "distinct": "DISTINCT",
}
"""The keyword each refused clause starts with (where its problem is placed)."""


@dataclass(frozen=True, slots=True)
class Compiled:
    """A compiled script: the spec and where each of its parts came from."""

    sql: str
    spec: dict[str, Any]
    comp: Compilation

    def problem(self, loc: Loc, message: str, kind: str) -> SqlProblem:
        """A problem of the spec at ``loc``, placed where that part was written."""
        path = ".".join(map(str, loc))
        hint = self.comp.hints.get(loc)
        text = f"{message} (the spec's {path}{f': {hint}' if hint else ''})" if path else message
        return SqlProblem(self.comp.origin(loc), kind, text, loc)


def compile_sql(name: str, sql: str) -> Compiled:
    """The spec ``sql`` compiles to (named ``name``); :class:`SqlError` with every problem."""
    compiled = _compile(name, sql)
    if compiled.comp.problems:
        raise SqlError(compiled.comp.problems)
    return compiled


def _compile(name: str, sql: str) -> Compiled:
    """What ``sql`` compiles to, problems and all: with SQL problems (``comp.problems``)
    the spec holds the parts that could be written, and lacks the others."""
    if not isinstance(sql, str):
        raise SqlError([SqlProblem(Text("").at_offset(0, 0), "sql_syntax", "sql is a string")])
    comp = Compilation(Text(sql))
    statements, problems = parse_script(comp.text)
    comp.problems.extend(problems)
    sources: dict[str, Source] = {}
    sinks: dict[str, SinkDecl] = {}
    settings = Settings()
    inserts: list[tuple[exp.Insert, int]] = []
    for statement in statements:
        tree, number = statement.tree, statement.number
        if isinstance(tree, exp.Create):
            kind = str(tree.args.get("kind") or "").upper()
            if kind in ("SOURCE", "TABLE"):
                source = read_source(comp, tree, number)
                if source is not None and source.name in sources:
                    comp.refuse(
                        source.node,
                        number,
                        f"source {source.name!r} is declared twice",
                        "sql_duplicate",
                    )
                elif source is not None:
                    sources[source.name] = source
            elif kind == "SINK":
                sink = read_sink(comp, tree, number)
                if sink is not None:
                    sinks[sink.name] = sink
            else:
                comp.refuse(
                    tree,
                    number,
                    f"CREATE {kind} is not supported: a script declares "
                    "sources (CREATE SOURCE), sinks (CREATE SINK) and one INSERT INTO",
                )
        elif isinstance(tree, exp.Set):
            read_set(comp, tree, number, settings)
        elif isinstance(tree, exp.Insert):
            inserts.append((tree, number))
        elif isinstance(tree, exp.Command):  # sqlglot's fallback for what it cannot read
            comp.refuse(
                tree,
                number,
                f"syntax error: {tree.name.upper()} ... is not understood "
                "here (see docs/sql.md for the forms this service reads)",
                "sql_syntax",
            )
        elif isinstance(tree, exp.Query):
            comp.refuse(
                tree, number, "a query alone writes nowhere: INSERT INTO <topic> SELECT ..."
            )
        else:
            comp.refuse(tree, number, f"{tree.key.upper()} statements are not supported here")
    if not inserts and not problems:
        comp.refuse(
            None,
            0,
            "the script has no INSERT INTO <topic> SELECT ...: that is the pipeline",
            "sql_missing",
        )
    for insert, number in inserts[1:]:
        comp.refuse(insert, number, "one INSERT INTO per script (a script is one pipeline)")
        # Read all the same, into a spec of its own, for its own problems.
        apart = Compilation(comp.text)
        _query(apart, sources, sinks, settings, insert, number)
        comp.problems.extend(p for p in apart.problems if p.at.statement == number)
    if inserts:
        insert, number = inserts[0]
        _query(comp, sources, sinks, settings, insert, number)
    operator = comp.spec.get("operator")
    if (
        "emit_interval" in settings.values
        and isinstance(operator, dict)
        and operator.get("type") not in ("aggregate", "top_n")
    ):
        comp.problems.append(
            SqlProblem(
                settings.at["emit_interval"],
                "sql_option",
                "SET emit_interval is for a GROUP BY without a window (a running "
                "aggregate's upserts) or a Top-N, not this query",
            )
        )
    if "delivery" in settings.values:
        comp.spec["delivery"] = settings.values["delivery"]
        comp.origins[("delivery",)] = settings.at["delivery"]
    spec = {"name": name, **comp.spec}
    ordered = {key: spec[key] for key in _SPEC_ORDER if key in spec}
    return Compiled(sql, ordered, comp)


def _query(
    comp: Compilation,
    sources: dict[str, Source],
    sinks: dict[str, SinkDecl],
    settings: Settings,
    insert: exp.Insert,
    number: int,
) -> None:
    sink_spec(comp, insert, sinks, number)
    select = insert.expression
    if not isinstance(select, exp.Select):
        what = type(select).__name__.upper() if isinstance(select, exp.Expression) else "nothing"
        comp.refuse(
            select if isinstance(select, exp.Expression) else insert,
            number,
            f"INSERT INTO ... SELECT: {what} is not supported here (one SELECT)",
        )
        return
    for clause, message in _CLAUSES.items():
        if select.args.get(clause):
            node = select.args[clause]
            keyword = _KEYWORDS.get(clause)
            if keyword is not None and isinstance(node, exp.Expression):
                comp.refuse_clause(node, number, keyword, message)
            else:
                comp.refuse(node if isinstance(node, exp.Expression) else select, number, message)
    from_ = select.args.get("from_")
    if not isinstance(from_, exp.From):
        comp.refuse(select, number, "SELECT ... FROM a source (or a window of one)", "sql_missing")
        return
    inner = top_n_query(select)
    if inner is not None:
        compile_top_n(comp, sources, select, inner, number, settings)
        return
    joins = select.args.get("joins") or []
    if joins:
        compile_join(comp, sources, select, number, settings)
        return
    call = window_call(from_.this)
    if call is not None:
        if call.name.upper() in ("TUMBLE", "HOP", "SESSION"):
            compile_window(comp, sources, select, call, number, settings)
        else:
            comp.refuse(
                call,
                number,
                f"FROM {call.name}(...): the window functions are "
                "TUMBLE, HOP and SESSION (CUMULATE is not supported)",
            )
            resolve_window(comp, sources, select, call, number)
        return
    table = from_.this
    name = table.name if isinstance(table, exp.Table) else ""
    source = sources.get(name)
    if not name:
        comp.refuse(select, number, "SELECT ... FROM a source (or a window of one)", "sql_missing")
        source = stand_in(name, number, table)
    elif source is None:
        comp.refuse(
            table,
            number,
            f"unknown source {table.name!r}: declare it with CREATE "
            f"SOURCE (declared: {', '.join(sources) or 'none'})",
            "sql_unknown_source",
        )
        source = stand_in(table.name, number, table)
    if select.args.get("group") or any(
        isinstance(e, exp.AggFunc) for e in select.find_all(exp.AggFunc)
    ):
        compile_running_aggregate(comp, source, select, number, settings)
    else:
        compile_select(comp, source, select, number)


def validate_sql(
    name: str, sql: str, allowed_modules: Sequence[str], *, schema_registry: bool | None = None
) -> tuple[PipelineSpec, Compiled]:
    """Compile and validate as any spec is: :class:`SqlError` with every problem of
    either, each placed in the script.

    A script with problems of its own (SQL the compiler cannot translate) compiles to a
    partial spec, which is not validated field by field (a part left out is not the
    user's problem), but the rules still run on it: a problem of a part that *was*
    written (a ``how`` the join's kind does not take, a setting its kind does not use)
    is named in the same answer, as the rule words it for a JSON spec. The compiler
    refuses only what the spec cannot express; the rules refuse the rest, for both."""
    compiled = _compile(name, sql)
    if compiled.comp.problems:
        found = [
            compiled.problem(p.loc, p.msg, p.type)
            for p in rules.check(
                compiled.spec, rules.Service(tuple(allowed_modules), schema_registry)
            )
            if _written(compiled.spec, p.loc) or p.loc in compiled.comp.hints
        ]
        raise SqlError([*compiled.comp.problems, *found])
    try:
        spec = validate_spec(compiled.spec, allowed_modules, schema_registry=schema_registry)
    except ValidationError as exc:
        problems = [
            compiled.problem(tuple(err["loc"]), err["msg"], err["type"])
            for err in exc.errors(include_url=False, include_context=False)
        ]
        raise SqlError(problems) from exc
    return spec, compiled


def _written(spec: Any, loc: Loc) -> bool:
    """Whether the partial spec holds a value at ``loc`` (a rule's problem of a part the
    compiler could not write, a missing one, is the SQL problem's consequence; a part
    the script left out has a hint where the compiler knows how it is written)."""
    node = spec
    for part in loc:
        found = isinstance(node, dict) and part in node
        found = found or (isinstance(node, list) and isinstance(part, int) and part < len(node))
        if not found:
            return False
        node = node[part]
    return bool(loc) and node is not None
