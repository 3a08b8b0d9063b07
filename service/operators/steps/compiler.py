"""SQL expressions (Flink SQL / ksqlDB dialect) compiled once into plain Python code.

sqlglot parses the text; this module walks the tree over a whitelist of node types and
emits a Python expression for each node, which :mod:`.program` compiles into one function
per pipeline. Why generated code: a compiled predicate runs at the speed of the Python it
is made of (several million evaluations a second), where walking a tree per record costs
a call per node.

Safety: the generated source contains only names this module makes (``_t3``, ``_C0``,
``_K1``, ``value``), Python operators and calls of the helpers it binds. Every literal
and every field name enters through the namespace as a constant, never as source text,
so no user text is ever compiled as Python. A node type the whitelist does not name, a
function the table (:data:`values.FUNCTIONS`) does not hold, a dunder field name, a
literal longer than :data:`MAX_LITERAL` characters, an expression longer than
:data:`MAX_TEXT` characters or deeper than :data:`MAX_DEPTH` is refused at spec time,
each problem with its column in the text. There is no attribute access, no subscript
other than the payload's own dict lookups, no import, no lambda.

The semantics (types, NULL rules, what is an error) are :mod:`.values`'s; the code here
inlines their common case (two numbers, a string against a string literal) and calls
them for the rest.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import sqlglot
from sqlglot import exp, parser, tokens
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError

from . import values
from .errors import ExpressionError, ExpressionProblem

MAX_TEXT = 4096
"""Characters of one expression."""
MAX_DEPTH = 48
"""Nesting of one expression (Python's own parser stops at about 200 parentheses)."""
MAX_LITERAL = 64
"""Characters of a number literal (a string literal is bounded by :data:`MAX_TEXT`)."""
MAX_IN_ITEMS = 1000


class StepsDialect(Dialect):
    """Flink SQL's expression syntax: backquoted identifiers, single-quoted strings,
    ``||`` concatenation. Function calls stay calls (no dialect-specific rewriting):
    every name is looked up in our table, ``CAST`` and ``TRY_CAST`` keep their syntax."""

    class Tokenizer(tokens.Tokenizer):
        IDENTIFIERS: ClassVar[list[str | tuple[str, str]]] = ["`"]
        QUOTES: ClassVar[list[str | tuple[str, str]]] = ["'"]

    class Parser(parser.Parser):
        FUNCTIONS: ClassVar[dict[str, Callable[..., Any]]] = {}
        FUNCTION_PARSERS: ClassVar[dict[str, Callable[..., Any]]] = {
            name: fn
            for name, fn in parser.Parser.FUNCTION_PARSERS.items()
            if name in ("CAST", "TRY_CAST")
        }
        NO_PAREN_FUNCTIONS: ClassVar[dict[Any, type[exp.Func]]] = {}


_CAST_FAMILIES: dict[str, str] = {
    **dict.fromkeys(("INT", "BIGINT", "SMALLINT", "TINYINT", "INTEGER"), "INT"),
    **dict.fromkeys(("DOUBLE", "FLOAT", "DECIMAL", "REAL"), "DOUBLE"),
    **dict.fromkeys(("VARCHAR", "CHAR", "TEXT", "NCHAR", "NVARCHAR"), "STRING"),
    "BOOLEAN": "BOOLEAN",
}

_ARITH: dict[type[exp.Expression], str] = {
    exp.Add: "+",
    exp.Sub: "-",
    exp.Mul: "*",
    exp.Div: "/",
    exp.Mod: "%",
}
_INLINE_ARITH = frozenset({"+", "-", "*"})
_COMPARE: dict[type[exp.Expression], tuple[str, str]] = {
    exp.EQ: ("=", "=="),
    exp.NEQ: ("<>", "!="),
    exp.LT: ("<", "<"),
    exp.LTE: ("<=", "<="),
    exp.GT: (">", ">"),
    exp.GTE: (">=", ">="),
}
_NUMBER = re.compile(r"^[0-9]+$")
_LOCAL = re.compile(r"^_r[0-9]+$")
_DUNDER = re.compile(r"^__.*__$")

HELPERS: dict[str, Any] = {
    "_dict": dict,
    "_int": int,
    "_float": float,
    "_str": str,
    "_NUM": values.NUMBER_TYPES,
    "_arith": values.arith,
    "_neg": values.negate,
    "_cmp": values.compare,
    "_truth": values.truth,
    "_and": values.and_,
    "_or": values.or_,
    "_not": values.not_,
    "_in": values.in_,
    "_between": values.between,
    "_like": values.like,
    "_concat": values.concat2,
    "_is_bool": values.is_bool,
    "_call": values.call,
    "_nullif": values.nullif,
    "_try_cast": values.try_cast,
    "_getp": None,  # bound by program.py (field paths)
}
"""The names generated code may use besides its constants and temporaries."""


@dataclass
class Reads:
    """Top-level fields already read into locals (``locals``), and the reads still to be
    emitted before the expression (``hoists``): each field is read once per step."""

    locals: dict[str, str] = field(default_factory=dict)
    hoists: list[str] = field(default_factory=list)


@dataclass
class Compiled:
    """One expression: Python source over ``value`` and the constants it needs."""

    text: str
    source: str
    constants: dict[str, Any]
    fields: list[tuple[str, ...]] = field(default_factory=list)
    """The field paths it reads (state fingerprint: what a step depends on)."""


class _Names:
    """Unique names across every expression of one program (constants, temporaries)."""

    def __init__(self) -> None:
        self._counter = itertools.count()

    def next(self, prefix: str) -> str:
        return f"{prefix}{next(self._counter)}"


class _Generator:
    def __init__(self, text: str, names: _Names, record: str, reads: Reads | None = None) -> None:
        self.text = text
        self.names = names
        self.record = record
        self.reads = reads
        self.constants: dict[str, Any] = {}
        self.problems: list[ExpressionProblem] = []
        self.fields: list[tuple[str, ...]] = []

    # -- helpers ------------------------------------------------------------------------
    def const(self, value: Any) -> str:
        name = self.names.next("_C")
        self.constants[name] = value
        return name

    def temp(self) -> str:
        return self.names.next("_t")

    def bind(self, code: str) -> tuple[str, str]:
        """``(name, expression)``: the value of ``code`` under a name, and the expression
        that evaluates and binds it (a local already is one: no walrus needed)."""
        if _LOCAL.match(code):
            return code, code
        t = self.temp()
        return t, f"({t} := {code})"

    def problem(self, node: exp.Expression, message: str) -> str:
        self.problems.append(ExpressionProblem(message, _column(node)))
        return "None"

    # -- the walk -------------------------------------------------------------------------
    def gen(self, node: exp.Expression, depth: int = 0) -> str:
        if depth > MAX_DEPTH:
            return self.problem(node, f"the expression is nested deeper than {MAX_DEPTH}")
        handler = _HANDLERS.get(type(node))
        if handler is None:
            return self.problem(node, f"{_describe(node)} is not supported here")
        extra = [
            key
            for key, arg in node.args.items()
            if arg not in (None, False, []) and key not in _ALLOWED_ARGS.get(type(node), ())
        ]
        if extra:
            return self.problem(node, f"{_describe(node)} with {', '.join(extra)} is not supported")
        return handler(self, node, depth + 1)

    def column(self, node: exp.Expression, depth: int) -> str:
        parts = column_path(node)
        if parts is None:
            return self.problem(node, "not a field path")
        for part in parts:
            if _DUNDER.match(part):
                return self.problem(node, f"field name {part!r} is not allowed (dunder names)")
        self.fields.append(parts)
        record = self.record
        top = self.top_level(parts[0])
        if len(parts) == 1:
            return top
        if len(parts) == 2:
            t = self.temp()
            second = self.const(parts[1])
            inner = f"({t} := {top})"
            return f"({t}.get({second}) if {inner}.__class__ is _dict else None)"
        return f"_getp({record}, {self.const(parts)})"

    def top_level(self, name: str) -> str:
        """A top-level field's value: read once per step into a local when the caller
        keeps reads (program.py hoists them), else a lookup in place."""
        reads = self.reads
        if reads is None:
            return f"{self.record}.get({self.const(name)})"
        local = reads.locals.get(name)
        if local is None:
            local = reads.locals[name] = self.names.next("_r")
            reads.hoists.append(f"{local} = {self.record}.get({self.const(name)})")
        return local

    def literal(self, node: exp.Expression, depth: int) -> str:
        assert isinstance(node, exp.Literal)
        text = node.this
        if node.is_string:
            return self.const(text)
        if len(text) > MAX_LITERAL:
            return self.problem(node, f"a number literal longer than {MAX_LITERAL} characters")
        if _NUMBER.match(text):
            return self.const(int(text))
        try:
            number = float(text)
        except ValueError:
            return self.problem(node, f"not a number: {text[:40]!r}")
        if math.isinf(number) or math.isnan(number):
            return self.problem(node, f"the literal {text[:40]!r} is not a finite number")
        return self.const(number)

    def boolean(self, node: exp.Expression, depth: int) -> str:
        return "True" if node.this else "False"

    def null(self, node: exp.Expression, depth: int) -> str:
        return "None"

    def paren(self, node: exp.Expression, depth: int) -> str:
        return self.gen(node.this, depth)

    def arith(self, node: exp.Expression, depth: int) -> str:
        op = _ARITH[type(node)]
        left, right = self.gen(_arg(node, "this"), depth), self.gen(_arg(node, "expression"), depth)
        a, b = self.temp(), self.temp()
        if op not in _INLINE_ARITH:
            return f"_arith({self.const(op)}, {left}, {right})"
        if _literal_kind(_arg(node, "expression")) == "number":
            a, bound = self.bind(left)
            return (
                f"({a} {op} {right} if {bound}.__class__ in _NUM"
                f" else _arith({self.const(op)}, {a}, {right}))"
            )
        return (
            f"({a} {op} {b} if (({a} := {left}).__class__ in _NUM)"
            f" & (({b} := {right}).__class__ in _NUM) else _arith({self.const(op)}, {a}, {b}))"
        )

    def neg(self, node: exp.Expression, depth: int) -> str:
        inner = node.this
        if isinstance(inner, exp.Literal) and not inner.is_string:
            value = self.literal(inner, depth)
            if value == "None":
                return value
            self.constants[value] = -self.constants[value]
            return value
        a = self.temp()
        return f"(-{a} if ({a} := {self.gen(inner, depth)}).__class__ in _NUM else _neg({a}))"

    def compare(self, node: exp.Expression, depth: int) -> str:
        sql_op, py_op = _COMPARE[type(node)]
        op = self.const(sql_op)
        left_node, right_node = _arg(node, "this"), _arg(node, "expression")
        left, right = self.gen(left_node, depth), self.gen(right_node, depth)
        a, b = self.temp(), self.temp()
        right_literal = _literal_kind(right_node)
        if right_literal is not None:
            a, bound = self.bind(left)
            check = "is _str" if right_literal == "string" else "in _NUM"
            return (
                f"({a} {py_op} {right} if {bound}.__class__ {check} else _cmp({op}, {a}, {right}))"
            )
        return (
            f"({a} {py_op} {b} if (({a} := {left}).__class__ in _NUM)"
            f" & (({b} := {right}).__class__ in _NUM) else _cmp({op}, {a}, {b}))"
        )

    def and_(self, node: exp.Expression, depth: int) -> str:
        a = self.temp()
        left, right = self.gen(_arg(node, "this"), depth), self.gen(_arg(node, "expression"), depth)
        return f"(False if ({a} := {left}) is False else _and({a}, {right}))"

    def or_(self, node: exp.Expression, depth: int) -> str:
        a = self.temp()
        left, right = self.gen(_arg(node, "this"), depth), self.gen(_arg(node, "expression"), depth)
        return f"(True if ({a} := {left}) is True else _or({a}, {right}))"

    def not_(self, node: exp.Expression, depth: int) -> str:
        a = self.temp()
        return (
            f"((not {a}) if ({a} := {self.gen(node.this, depth)}).__class__ is bool else _not({a}))"
        )

    def is_(self, node: exp.Expression, depth: int) -> str:
        target = node.expression
        subject = self.gen(node.this, depth)
        if isinstance(target, exp.Null):
            return f"({subject} is None)"
        if isinstance(target, exp.Boolean):
            return f"_is_bool({subject}, {'True' if target.this else 'False'})"
        return self.problem(node, "IS takes NULL, TRUE or FALSE")

    def in_(self, node: exp.Expression, depth: int) -> str:
        items = node.expressions
        if not items:
            return self.problem(node, "IN needs a list of values")
        if len(items) > MAX_IN_ITEMS:
            return self.problem(node, f"IN with more than {MAX_IN_ITEMS} values")
        subject = self.gen(node.this, depth)
        codes = [self.gen(item, depth) for item in items]
        kinds = {_literal_kind(item) for item in items}
        a = self.temp()
        if kinds == {"string"} or kinds == {"number"}:
            literals = [self.constants[code] for code in codes if code in self.constants]
            if len(literals) == len(codes):
                members = self.const(frozenset(literals))
                listed = self.const(literals)
                check = "is _str" if kinds == {"string"} else "in _NUM"
                return (
                    f"({a} in {members} if ({a} := {subject}).__class__ {check}"
                    f" else _in({a}, {listed}))"
                )
        return f"_in({subject}, [{', '.join(codes)}])"

    def between(self, node: exp.Expression, depth: int) -> str:
        subject = self.gen(node.this, depth)
        low, high = self.gen(node.args["low"], depth), self.gen(node.args["high"], depth)
        return f"_between({subject}, {low}, {high})"

    def like(self, node: exp.Expression, depth: int) -> str:
        subject = self.gen(node.this, depth)
        pattern_node = node.expression
        negate = bool(node.args.get("negate"))
        if _literal_kind(pattern_node) == "string":
            regex = self.const(values.like_regex(pattern_node.this))
            a = self.temp()
            code = (
                f"(({regex}.fullmatch({a}) is not None) if ({a} := {subject}).__class__ is _str"
                f" else _like({a}, {self.const(pattern_node.this)}))"
            )
        else:
            code = f"_like({subject}, {self.gen(pattern_node, depth)})"
        if negate:
            b = self.temp()
            code = f"((not {b}) if ({b} := {code}).__class__ is bool else None)"
        return code

    def dpipe(self, node: exp.Expression, depth: int) -> str:
        left = self.gen(_arg(node, "this"), depth)
        right = self.gen(_arg(node, "expression"), depth)
        return f"_concat({left}, {right})"

    def case(self, node: exp.Expression, depth: int) -> str:
        ifs = node.args.get("ifs") or []
        default = node.args.get("default")
        code = self.gen(default, depth) if default is not None else "None"
        subject_node = node.this
        subject = self.temp() if subject_node is not None else None
        for branch in reversed(ifs):
            if not isinstance(branch, exp.If):
                return self.problem(node, "CASE without WHEN")
            condition = self.gen(branch.this, depth)
            if subject is not None:
                condition = f"_cmp({self.const('=')}, {subject}, {condition})"
            then = self.gen(branch.args["true"], depth)
            code = self.choose(condition, then, code, "a CASE condition")
        if subject is not None and subject_node is not None:
            # bind the CASE subject once, before the branches read it
            code = f"(({subject} := {self.gen(subject_node, depth)}), {code})[1]"
        return code

    def if_(self, node: exp.Expression, depth: int) -> str:
        condition = self.gen(node.this, depth)
        then = self.gen(node.args["true"], depth)
        otherwise = node.args.get("false")
        other = self.gen(otherwise, depth) if otherwise is not None else "None"
        return self.choose(condition, then, other, "an IF condition")

    def choose(self, condition: str, then: str, otherwise: str, what: str) -> str:
        """``then`` if ``condition`` is TRUE, ``otherwise`` if FALSE or NULL, else an error."""
        c = self.temp()
        return (
            f"({then} if ({c} := {condition}) is True else {otherwise}"
            f" if {c} is False or {c} is None else _truth({c}, {self.const(what)}))"
        )

    def cast(self, node: exp.Expression, depth: int) -> str:
        to = node.args.get("to")
        name = to.this.name if isinstance(to, exp.DataType) else str(to)
        family = _CAST_FAMILIES.get(name)
        if family is None:
            return self.problem(
                node, f"cannot cast to {name}: use INT, BIGINT, DOUBLE, DECIMAL, VARCHAR or BOOLEAN"
            )
        cast = self.const(values.CASTS[family])
        subject = self.gen(node.this, depth)
        if isinstance(node, exp.TryCast):
            return f"_try_cast({cast}, {subject})"
        a, c = self.temp(), self.temp()
        bind = f"({c} := ({a} := {subject}).__class__)"
        if family == "INT":  # int(float) truncates toward zero, as CAST does
            return f"({a} if {bind} is int else _int({a}) if {c} is float else {cast}({a}))"
        if family == "DOUBLE":
            return f"({a} if {bind} is float else _float({a}) if {c} is int else {cast}({a}))"
        return f"{cast}({subject})"

    def function(self, node: exp.Expression, depth: int) -> str:
        assert isinstance(node, exp.Anonymous)
        name = str(node.this).upper()
        args = node.expressions
        lazy = values.LAZY_FUNCTIONS.get(name)
        entry = values.FUNCTIONS.get(name)
        if lazy is None and entry is None:
            return self.problem(node, f"unknown function {str(node.this)[:40]!r}")
        low, high = (lazy[0], lazy[1]) if lazy is not None else (entry.min_args, entry.max_args)  # type: ignore[union-attr]
        if len(args) < low or (high is not None and len(args) > high):
            wanted = str(low) if low == high else f"{low} to {high}" if high else f"at least {low}"
            return self.problem(
                node,
                f"{name} takes {wanted} argument{'s' if wanted != '1' else ''}, not {len(args)}",
            )
        codes = [self.gen(arg, depth) for arg in args]
        if name in ("COALESCE", "IFNULL"):
            code = codes[-1]
            for arg in reversed(codes[:-1]):
                a = self.temp()
                code = f"({a} if ({a} := {arg}) is not None else {code})"
            return code
        if name == "NULLIF":
            return f"_nullif({codes[0]}, {codes[1]})"
        if name == "IF":
            return self.choose(codes[0], codes[1], codes[2], "an IF condition")
        assert entry is not None
        return f"_call({self.const(entry.implementation)}, {', '.join(codes)})"


_HANDLERS: dict[type[exp.Expression], Callable[[_Generator, exp.Expression, int], str]] = {
    exp.Column: _Generator.column,
    exp.Dot: _Generator.column,
    exp.Literal: _Generator.literal,
    exp.Boolean: _Generator.boolean,
    exp.Null: _Generator.null,
    exp.Paren: _Generator.paren,
    exp.Neg: _Generator.neg,
    exp.Not: _Generator.not_,
    exp.And: _Generator.and_,
    exp.Or: _Generator.or_,
    exp.Is: _Generator.is_,
    exp.In: _Generator.in_,
    exp.Between: _Generator.between,
    exp.Like: _Generator.like,
    exp.DPipe: _Generator.dpipe,
    exp.Case: _Generator.case,
    exp.If: _Generator.if_,
    exp.Cast: _Generator.cast,
    exp.TryCast: _Generator.cast,
    exp.Anonymous: _Generator.function,
    **dict.fromkeys(_ARITH, _Generator.arith),
    **dict.fromkeys(_COMPARE, _Generator.compare),
}
"""The whitelist: every node type an expression may contain, and its code."""

_BINARY = ("this", "expression")
_ALLOWED_ARGS: dict[type[exp.Expression], tuple[str, ...]] = {
    exp.Column: ("this", "table", "db", "catalog"),
    exp.Dot: ("this", "expression"),
    exp.Literal: ("this", "is_string"),
    exp.Boolean: ("this",),
    exp.Null: (),
    exp.Paren: ("this",),
    exp.Neg: ("this",),
    exp.Not: ("this",),
    exp.Is: _BINARY,
    exp.In: ("this", "expressions"),
    exp.Between: ("this", "low", "high"),
    exp.Like: (*_BINARY, "negate"),
    exp.DPipe: (*_BINARY, "safe"),
    exp.Case: ("this", "ifs", "default"),
    exp.If: ("this", "true", "false"),
    exp.Cast: ("this", "to", "_type"),
    exp.TryCast: ("this", "to", "_type", "safe"),
    exp.Anonymous: ("this", "expressions"),
    **dict.fromkeys((exp.And, exp.Or, *_ARITH, *_COMPARE), _BINARY),
}


def _arg(node: exp.Expression, key: str) -> exp.Expression:
    child = node.args.get(key)
    if not isinstance(child, exp.Expression):
        raise ExpressionError(
            [ExpressionProblem(f"{_describe(node)} without {key}", _column(node))]
        )
    return child


def column_path(node: exp.Expression) -> tuple[str, ...] | None:
    """The identifiers of a column reference ``a.b.c`` (sqlglot spreads them over a
    Column's catalog, db, table and name, and Dot nodes beyond four parts)."""
    if isinstance(node, exp.Column):
        parts = [node.args.get(key) for key in ("catalog", "db", "table", "this")]
        names: list[str] = []
        for part in parts:
            if part is None:
                continue
            if not isinstance(part, exp.Identifier):
                return None
            names.append(str(part.this))
        return tuple(names)
    if isinstance(node, exp.Dot):
        head = column_path(node.this)
        tail = node.expression
        if head is None or not isinstance(tail, exp.Identifier):
            return None
        return (*head, str(tail.this))
    return None


def _literal_kind(node: exp.Expression) -> str | None:
    if isinstance(node, exp.Literal):
        return "string" if node.is_string else "number"
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):
        return None if node.this.is_string else "number"
    return None


def _column(node: exp.Expression) -> int | None:
    """The 1-based column where ``node`` (or the first of its parts that knows) starts."""
    for sub in node.walk():
        meta = getattr(sub, "_meta", None) or {}
        if "start" in meta:
            return int(meta["start"]) + 1
    return None


def _describe(node: exp.Expression) -> str:
    return type(node).__name__ if not isinstance(node, exp.Func) else f"{node.sql_name()}"


def _syntax_message(err: dict[str, Any]) -> str:
    description = str(err.get("description") or "invalid expression")
    if description.startswith("Required keyword"):
        return "the expression is incomplete"
    return description


def parse(text: str) -> exp.Expression:
    """The syntax tree of ``text``, or :class:`ExpressionError` (with the column)."""
    if not isinstance(text, str) or not text.strip():
        raise ExpressionError([ExpressionProblem("an expression must be non-empty text")])
    if len(text) > MAX_TEXT:
        raise ExpressionError(
            [ExpressionProblem(f"an expression is limited to {MAX_TEXT} characters")]
        )
    try:
        trees = sqlglot.parse(text, read=StepsDialect)
    except ParseError as exc:
        problems = [
            ExpressionProblem(f"syntax error: {_syntax_message(err)}", err.get("col"))
            for err in exc.errors
        ] or [ExpressionProblem(f"syntax error: {exc}")]
        raise ExpressionError(problems) from None
    except TokenError as exc:
        raise ExpressionError([ExpressionProblem(f"syntax error: {exc}")]) from None
    except RecursionError:
        raise ExpressionError([ExpressionProblem("the expression is nested too deeply")]) from None
    tree = trees[0] if len(trees) == 1 else None
    if not isinstance(tree, exp.Expression):
        raise ExpressionError([ExpressionProblem("one expression, not several statements")])
    return tree


def compile_expression(
    text: str, names: _Names | None = None, record: str = "value", reads: Reads | None = None
) -> Compiled:
    """``text`` as Python source over the dict named ``record``; :class:`ExpressionError`
    lists every problem found. With ``reads``, top-level fields are locals the caller
    assigns (``reads.hoists``) before evaluating the source."""
    tree = parse(text)
    generator = _Generator(text, names or _Names(), record, reads)
    try:
        source = generator.gen(tree)
    except RecursionError:
        raise ExpressionError([ExpressionProblem("the expression is nested too deeply")]) from None
    if generator.problems:
        raise ExpressionError(generator.problems)
    return Compiled(text, source, generator.constants, generator.fields)


def check_expression(text: str) -> list[ExpressionProblem]:
    """Every problem of ``text`` (empty: it compiles)."""
    try:
        compile_expression(text)
    except ExpressionError as exc:
        return exc.problems
    return []


def get_path(value: Any, parts: tuple[str, ...]) -> Any:
    """The field at ``parts`` of a dict, or None (NULL) when missing."""
    for part in parts:
        if type(value) is not dict:
            return None
        value = value.get(part)
    return value


HELPERS["_getp"] = get_path

GENERATED_BUILTINS: dict[str, Any] = {
    "Exception": Exception,
    "KeyError": KeyError,
    "bool": bool,
    "int": int,
    "float": float,
    "str": str,
    "dict": dict,
    "list": list,
}
"""The only builtins generated code sees (its ``__builtins__``): the exceptions its
``try`` blocks name and the types it compares classes with. Nothing of a user's text
reaches the generated source (names and literals are constants), so this is a second
wall, not the first: no ``__import__``, ``open`` or ``getattr`` is reachable even
through a bug of the generator."""


_NAME = re.compile(r"\b_\w+\b")


def as_defaults(namespace: dict[str, Any], source: str) -> str:
    """``name=name, ...`` for a generated ``def``: every helper and constant ``source``
    reads becomes a local (a default argument), cheaper to read than a global (and only
    those: each default costs its call a little). Generated code never passes them."""
    used = set(_NAME.findall(source))
    return ", ".join(f"{name}={name}" for name in sorted(namespace) if name in used)


def evaluator(text: str) -> Callable[[dict[str, Any]], Any]:
    """One expression as a function of a record (tests, tools; steps use program.py)."""
    compiled = compile_expression(text)
    namespace = {**HELPERS, **compiled.constants, "__builtins__": GENERATED_BUILTINS}
    defaults = as_defaults(namespace, compiled.source)
    source = f"def evaluate(value, {defaults}):\n    return {compiled.source}\n"
    exec(compile(source, "<steps-expression>", "exec"), namespace)
    function: Callable[[dict[str, Any]], Any] = namespace["evaluate"]
    return function
