"""A straightforward reference interpreter of the step expressions' whitelist.

It walks sqlglot's tree per evaluation, with the semantics written out plainly, so the
compiled code (service/operators/steps/compiler.py) can be checked against it. The
plain functions of the table are called as they are (they are the specification);
operators, NULL rules, laziness and casts are re-implemented here.
"""

from __future__ import annotations

import re
from typing import Any

from sqlglot import exp

from service.operators.steps import values
from service.operators.steps.compiler import parse


class Failed(Exception):
    """The expression fails on this record."""


def _kind(v: Any) -> str:
    return values.kind(v)


def _num(v: Any) -> bool:
    return type(v) in (int, float)


def _compare(op: str, a: Any, b: Any) -> Any:
    if a is None or b is None:
        return None
    if _kind(a) != _kind(b) or _kind(a) not in ("NUMBER", "STRING", "BOOLEAN"):
        raise Failed
    return {"=": a == b, "<>": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


def _bool_or_null(v: Any) -> Any:
    if v is not None and type(v) is not bool:
        raise Failed
    return v


def _cond(v: Any) -> bool:
    return _bool_or_null(v) is True


def evaluate(text: str, record: dict[str, Any]) -> Any:
    return _eval(parse(text), record)


def _field(node: exp.Expression) -> list[str]:
    if isinstance(node, exp.Dot):
        return [*_field(node.this), node.expression.name]
    return [node.args[k].name for k in ("catalog", "db", "table", "this") if node.args.get(k)]


def _eval(node: exp.Expression, r: dict[str, Any]) -> Any:
    e = lambda n: _eval(n, r)  # noqa: E731
    if isinstance(node, exp.Paren):
        return e(node.this)
    if isinstance(node, exp.Column | exp.Dot):
        value: Any = r
        for part in _field(node):
            value = value.get(part) if type(value) is dict else None
        return value
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        return int(node.this) if re.fullmatch(r"[0-9]+", node.this) else float(node.this)
    if isinstance(node, exp.Boolean):
        return node.this
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Neg):
        v = e(node.this)
        if v is None:
            return None
        if not _num(v):
            raise Failed
        return -v
    if isinstance(node, exp.Add | exp.Sub | exp.Mul | exp.Div | exp.Mod):
        a, b = e(node.this), e(node.expression)
        if a is None or b is None:
            return None
        if not (_num(a) and _num(b)):
            raise Failed
        if isinstance(node, exp.Add):
            return a + b
        if isinstance(node, exp.Sub):
            return a - b
        if isinstance(node, exp.Mul):
            return a * b
        if b == 0:
            raise Failed
        if isinstance(node, exp.Div):
            if type(a) is int and type(b) is int:
                return int(a / b) if abs(a) < 2**52 and abs(b) < 2**52 else values.arith("/", a, b)
            return a / b
        return values.arith("%", a, b)
    ops = {exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
    if type(node) in ops:
        return _compare(ops[type(node)], e(node.this), e(node.expression))
    if isinstance(node, exp.And):
        a = _bool_or_null(e(node.this))
        if a is False:
            return False
        b = _bool_or_null(e(node.expression))
        if b is False:
            return False
        return None if a is None or b is None else True
    if isinstance(node, exp.Or):
        a = _bool_or_null(e(node.this))
        if a is True:
            return True
        b = _bool_or_null(e(node.expression))
        if b is True:
            return True
        return None if a is None or b is None else False
    if isinstance(node, exp.Not):
        v = _bool_or_null(e(node.this))
        return None if v is None else not v
    if isinstance(node, exp.Is):
        v = e(node.this)
        if isinstance(node.expression, exp.Null):
            return v is None
        if v is None:
            return False
        return _bool_or_null(v) is node.expression.this
    if isinstance(node, exp.In):
        x = e(node.this)
        items = [e(i) for i in node.expressions]
        if x is None:
            return None
        unknown = False  # x = i1 OR x = i2 ...: stops at the first TRUE
        for item in items:
            result = _compare("=", x, item)
            if result is True:
                return True
            unknown = unknown or result is None
        return None if unknown else False
    if isinstance(node, exp.Between):
        x, low, high = e(node.this), e(node.args["low"]), e(node.args["high"])
        a, b = _compare(">=", x, low), _compare("<=", x, high)
        if a is False or b is False:
            return False
        return None if a is None or b is None else True
    if isinstance(node, exp.Like):
        v, p = e(node.this), e(node.expression)
        if v is None or p is None:
            return None
        if type(v) is not str or type(p) is not str:
            raise Failed
        regex = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in p)
        m = re.fullmatch(regex, v, re.DOTALL) is not None
        return not m if node.args.get("negate") else m
    if isinstance(node, exp.DPipe):
        a, b = e(node.this), e(node.expression)
        if a is None or b is None:
            return None
        if type(a) is not str or type(b) is not str:
            raise Failed
        return a + b
    if isinstance(node, exp.Case):
        subject = e(node.this) if node.this is not None else None
        for branch in node.args["ifs"]:
            c = e(branch.this)
            if node.this is not None:
                c = _compare("=", subject, c)
            if _cond(c):
                return e(branch.args["true"])
        default = node.args.get("default")
        return e(default) if default is not None else None
    if isinstance(node, exp.If):  # IF(c, a, b) parses as sqlglot's If
        otherwise = node.args.get("false")
        if _cond(e(node.this)):
            return e(node.args["true"])
        return e(otherwise) if otherwise is not None else None
    if isinstance(node, exp.Cast | exp.TryCast):
        family = {"INT": "INT", "BIGINT": "INT", "DOUBLE": "DOUBLE", "VARCHAR": "STRING"}.get(
            node.args["to"].this.name, "BOOLEAN"
        )
        v = e(node.this)
        try:
            return values.CASTS[family](v)
        except (values.EvalError, OverflowError, ValueError):
            if isinstance(node, exp.TryCast):
                return None
            raise Failed from None
    if isinstance(node, exp.Anonymous):
        name = node.name.upper()
        if name in ("COALESCE", "IFNULL"):
            for arg in node.expressions:
                v = e(arg)
                if v is not None:
                    return v
            return None
        if name == "NULLIF":
            a, b = e(node.expressions[0]), e(node.expressions[1])
            return None if _compare("=", a, b) is True else a
        if name == "IF":
            c, a, b = node.expressions
            return e(a) if _cond(e(c)) else e(b)
        args = [e(a) for a in node.expressions]
        if any(a is None for a in args):
            return None
        try:
            return values.FUNCTIONS[name].implementation(*args)
        except (values.EvalError, ArithmeticError, ValueError):
            raise Failed from None
    raise AssertionError(f"not in the whitelist: {type(node).__name__}")
