"""A pull query in SQL (``POST /query``, docs/pull-queries.md): which pipeline, which keys.

ksqlDB's pull query, as far as a key-value read goes::

    SELECT * FROM orders_by_user WHERE key = 'user-42';
    SELECT * FROM orders_by_user WHERE key BETWEEN 'a' AND 'm' LIMIT 50;
    SELECT * FROM "revenue-1" WHERE key >= 'a' AND key < 'b';

Parsed by the same front end as a pipeline script (:mod:`.parsing`, positions and all).
The ``WHERE`` clause is a conjunction of comparisons of ``key`` with string literals
(``=``, ``<``, ``<=``, ``>``, ``>=``, ``BETWEEN``); no ``WHERE`` reads every key. Anything
else is refused at its place (``sql_pull_query``), every problem together.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from .parsing import parse_script
from .problems import Position, SqlError, SqlProblem, Text

__all__ = ["MAX_PULL_LIMIT", "PULL_QUERY_SCHEMA", "PullQuery", "compile_pull_query"]

MAX_PULL_LIMIT = 1000
KIND = "sql_pull_query"
_AFTER = "\u0000"
"""Appended to a key: the smallest string greater than it (turns ``<=`` into ``<``)."""


@dataclass(frozen=True, slots=True)
class PullQuery:
    """One key (``key``) or a range ``[from_key, to_key)`` of one pipeline."""

    pipeline: str
    key: str | None = None
    from_key: str | None = None
    to_key: str | None = None
    limit: int | None = None


_CLAUSES = {
    "joins": "JOIN",
    "group": "GROUP BY",
    "having": "HAVING",
    "order": "ORDER BY",
    "with": "WITH",
    "distinct": "DISTINCT",
    "laterals": "LATERAL",
    "offset": "OFFSET",
}
"""The clauses a pull query has none of, as SQL writes them."""

PULL_QUERY_SCHEMA = {
    "title": "PullQuery",
    "description": "SELECT * FROM <pipeline> WHERE key = '...' (or a key range); "
    "docs/pull-queries.md",
    "type": "object",
    "properties": {"sql": {"type": "string", "minLength": 1, "maxLength": 65_536}},
    "required": ["sql"],
    "additionalProperties": False,
}
"""``POST /query``'s body, as the OpenAPI document states it."""


class _Reader:
    def __init__(self, text: Text) -> None:
        self.text = text
        self.problems: list[SqlProblem] = []

    def refuse(self, node: exp.Expr | None, message: str) -> None:
        self.problems.append(SqlProblem(self.text.at_node(node, 1), KIND, message))

    def literal(self, node: exp.Expr) -> str | None:
        if isinstance(node, exp.Literal) and node.is_string:
            return str(node.this)
        self.refuse(node, "compare the key with a string literal ('...')")
        return None

    def is_key(self, node: exp.Expr) -> bool:
        if isinstance(node, exp.Column) and not node.table and node.name.lower() == "key":
            return True
        self.refuse(node, "a pull query's WHERE compares the column key only")
        return False


def compile_pull_query(sql: str) -> PullQuery:
    """The pipeline and keys ``sql`` reads; :class:`SqlError` with every problem."""
    text = Text(sql if isinstance(sql, str) else "")
    if not isinstance(sql, str):
        raise SqlError([SqlProblem(Position(0, 1, 1), "sql_syntax", "sql is a string")])
    statements, problems = parse_script(text)
    if problems:
        raise SqlError(problems)
    reader = _Reader(text)
    if len(statements) != 1:
        raise SqlError(
            [SqlProblem(Position(0, 1, 1), KIND, "a pull query is one SELECT statement")]
        )
    tree = statements[0].tree
    if not isinstance(tree, exp.Select):
        reader.refuse(tree, "a pull query is SELECT * FROM <pipeline> WHERE key = '...'")
        raise SqlError(reader.problems)
    for item in tree.expressions:
        if not isinstance(item, exp.Star):
            reader.refuse(item, "a pull query selects * (the key's whole state)")
    for clause, words in _CLAUSES.items():
        found = tree.args.get(clause)
        if found:
            node = found[0] if isinstance(found, list) else found
            at = text.at_keyword(node, 1, words.split()[0])
            reader.problems.append(SqlProblem(at, KIND, f"a pull query has no {words}"))
    pipeline = _pipeline(reader, tree)
    query = PullQuery(pipeline or "")
    where = tree.args.get("where")
    if where is not None:
        query = _keys(reader, where.this, query)
    limit = tree.args.get("limit")
    if limit is not None:
        value = limit.expression
        if (
            isinstance(value, exp.Literal)
            and not value.is_string
            and str(value.this).isdigit()
            and 1 <= int(value.this) <= MAX_PULL_LIMIT
        ):
            query = PullQuery(
                query.pipeline, query.key, query.from_key, query.to_key, int(value.this)
            )
        else:
            reader.refuse(value, f"LIMIT takes a whole number from 1 to {MAX_PULL_LIMIT}")
    if reader.problems:
        raise SqlError(reader.problems)
    return query


def _pipeline(reader: _Reader, tree: exp.Select) -> str | None:
    source = tree.args.get("from_") or tree.args.get("from")
    if source is None:
        reader.refuse(tree, "a pull query reads FROM one pipeline")
        return None
    table = source.this
    if not isinstance(table, exp.Table) or table.args.get("db") or not table.name:
        reader.refuse(table, 'FROM names a pipeline (quote a name with hyphens: "my-pipeline")')
        return None
    return str(table.name)


def _keys(reader: _Reader, condition: exp.Expr, query: PullQuery) -> PullQuery:
    """Narrow ``query`` by each comparison of the conjunction ``condition``."""
    parts: list[exp.Expr] = []
    stack = [condition]
    while stack:
        node = stack.pop()
        if isinstance(node, exp.And):
            stack += [node.expression, node.this]
        elif isinstance(node, exp.Paren):
            stack.append(node.this)
        else:
            parts.append(node)
    key, low, high = query.key, query.from_key, query.to_key
    equal = 0
    for part in parts:
        if isinstance(part, exp.Between):
            if reader.is_key(part.this):
                a, b = reader.literal(part.args["low"]), reader.literal(part.args["high"])
                low = _max(low, a)
                high = _min(high, None if b is None else b + _AFTER)
            continue
        if not isinstance(part, exp.EQ | exp.GT | exp.GTE | exp.LT | exp.LTE):
            reader.refuse(
                part, "WHERE takes key = '...', key BETWEEN '...' AND '...', or <, <=, >, >="
            )
            continue
        if not reader.is_key(part.this):
            continue
        value = reader.literal(part.expression)
        if value is None:
            continue
        if isinstance(part, exp.EQ):
            equal += 1
            key = value
        elif isinstance(part, exp.GTE):
            low = _max(low, value)
        elif isinstance(part, exp.GT):
            low = _max(low, value + _AFTER)
        elif isinstance(part, exp.LT):
            high = _min(high, value)
        else:
            high = _min(high, value + _AFTER)
    if equal and (equal > 1 or low is not None or high is not None):
        reader.refuse(condition, "key = '...' is a lookup of one key: compare it with nothing else")
    if equal:
        return PullQuery(query.pipeline, key)
    return PullQuery(query.pipeline, None, low, high)


def _max(a: str | None, b: str | None) -> str | None:
    return b if a is None else a if b is None else max(a, b)


def _min(a: str | None, b: str | None) -> str | None:
    return b if a is None else a if b is None else min(a, b)
