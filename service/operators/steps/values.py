"""The run-time semantics of step expressions: SQL types over JSON values, NULL rules.

A JSON value is one of six SQL types: NULL (``None``, also a missing field), BOOLEAN
(``bool``), NUMBER (``int`` or ``float``, never a ``bool``), STRING, ARRAY (``list``)
and OBJECT (``dict``). The compiled code (compiler.py) inlines the common case of each
operator (two numbers, a string against a string literal) and calls these functions for
everything else: they apply the NULL rules and raise :class:`EvalError` for a type
mismatch, which sends the record to the dead-letter topic (``step_failed``).

:data:`FUNCTIONS` is the whole function table: nothing else is callable from an
expression. Every function here returns NULL when any argument is NULL (the lazy ones,
``COALESCE``, ``IFNULL``, ``NULLIF`` and ``IF``, are compiled inline).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any, NamedTuple

from .errors import EvalError

NUMBER_TYPES = frozenset({int, float})


def kind(value: Any) -> str:
    """The SQL type name of a JSON value."""
    t = type(value)
    if value is None:
        return "NULL"
    if t is bool:
        return "BOOLEAN"
    if t is int or t is float:
        return "NUMBER"
    if t is str:
        return "STRING"
    if t is list:
        return "ARRAY"
    if t is dict:
        return "OBJECT"
    return t.__name__.upper()  # pragma: no cover - not a JSON value


def _is_number(value: Any) -> bool:
    return type(value) in NUMBER_TYPES


# -- operators --------------------------------------------------------------------------
def arith(op: str, a: Any, b: Any) -> Any:
    """``a op b`` for ``+ - * / %``: NULL in, NULL out; numbers only.

    ``/`` and ``%`` of two integers are integer operations truncating toward zero (SQL);
    a zero divisor is an error (as in Flink).
    """
    if a is None or b is None:
        return None
    if not (_is_number(a) and _is_number(b)):
        raise EvalError(f"cannot apply {op} to {kind(a)} and {kind(b)}")
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if b == 0:
        raise EvalError("division by zero")
    if op == "/":
        if type(a) is int and type(b) is int:
            q = abs(a) // abs(b)
            return q if (a < 0) == (b < 0) else -q
        return a / b
    # %
    if type(a) is int and type(b) is int:
        r = abs(a) % abs(b)
        return r if a >= 0 else -r
    return math.fmod(a, b)


def negate(a: Any) -> Any:
    if a is None:
        return None
    if not _is_number(a):
        raise EvalError(f"cannot negate {kind(a)}")
    return -a


_COMPARABLE = frozenset({"NUMBER", "STRING", "BOOLEAN"})
_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "=": lambda a, b: bool(a == b),
    "<>": lambda a, b: bool(a != b),
    "<": lambda a, b: bool(a < b),
    "<=": lambda a, b: bool(a <= b),
    ">": lambda a, b: bool(a > b),
    ">=": lambda a, b: bool(a >= b),
}


def compare(op: str, a: Any, b: Any) -> bool | None:
    """``a op b``: NULL if either is NULL; both numbers, both strings or both booleans."""
    if a is None or b is None:
        return None
    ka, kb = kind(a), kind(b)
    if ka != kb or ka not in _COMPARABLE:
        raise EvalError(f"cannot compare {ka} with {kb}")
    return _COMPARE[op](a, b)


def truth(value: Any, what: str) -> bool:
    """Whether a condition holds: TRUE; FALSE and NULL do not; anything else is an error."""
    if value is True:
        return True
    if value is False or value is None:
        return False
    raise EvalError(f"{what} is {kind(value)}, not BOOLEAN")


def and_(a: Any, b: Any) -> bool | None:
    """Three-valued AND of two evaluated operands (the compiled code already returned
    FALSE without evaluating ``b`` when ``a`` was FALSE)."""
    if a is not None and type(a) is not bool:
        raise EvalError(f"AND of {kind(a)}, not BOOLEAN")
    if b is not None and type(b) is not bool:
        raise EvalError(f"AND of {kind(b)}, not BOOLEAN")
    if a is False or b is False:
        return False
    if a is None or b is None:
        return None
    return True


def or_(a: Any, b: Any) -> bool | None:
    """Three-valued OR (``a`` is not TRUE here: the compiled code returned TRUE first)."""
    if a is not None and type(a) is not bool:
        raise EvalError(f"OR of {kind(a)}, not BOOLEAN")
    if b is not None and type(b) is not bool:
        raise EvalError(f"OR of {kind(b)}, not BOOLEAN")
    if a is True or b is True:
        return True
    if a is None or b is None:
        return None
    return False


def not_(a: Any) -> bool | None:
    if a is None:
        return None
    if type(a) is not bool:
        raise EvalError(f"NOT of {kind(a)}, not BOOLEAN")
    return not a


def in_(x: Any, items: list[Any]) -> bool | None:
    """``x IN (items)``: TRUE if one equals ``x``; else NULL if ``x`` or an item is NULL."""
    if x is None:
        return None
    unknown = False
    for item in items:
        result = compare("=", x, item)
        if result is True:
            return True
        if result is None:
            unknown = True
    return None if unknown else False


def between(x: Any, low: Any, high: Any) -> bool | None:
    return and_(compare(">=", x, low), compare("<=", x, high))


def like_regex(pattern: str) -> re.Pattern[str]:
    """SQL LIKE: ``%`` any run of characters, ``_`` one character, the rest literal."""
    parts = []
    for char in pattern:
        if char == "%":
            parts.append(".*")
        elif char == "_":
            parts.append(".")
        else:
            parts.append(re.escape(char))
    return re.compile("".join(parts), re.DOTALL)


_LIKE_CACHE: dict[str, re.Pattern[str]] = {}


def like(value: Any, pattern: Any) -> bool | None:
    if value is None or pattern is None:
        return None
    if type(value) is not str or type(pattern) is not str:
        raise EvalError(f"cannot match {kind(value)} LIKE {kind(pattern)}")
    regex = _LIKE_CACHE.get(pattern)
    if regex is None:
        if len(_LIKE_CACHE) > 256:
            _LIKE_CACHE.clear()
        regex = _LIKE_CACHE[pattern] = like_regex(pattern)
    return regex.fullmatch(value) is not None


def concat2(a: Any, b: Any) -> str | None:
    """``a || b``: strings only."""
    if a is None or b is None:
        return None
    if type(a) is not str or type(b) is not str:
        raise EvalError(f"cannot concatenate {kind(a)} and {kind(b)}")
    return a + b


def is_bool(value: Any, expected: bool) -> bool:
    """``value IS TRUE`` / ``IS FALSE``: never NULL."""
    if value is None:
        return False
    if type(value) is not bool:
        raise EvalError(f"IS {'TRUE' if expected else 'FALSE'} of {kind(value)}")
    return value is expected


# -- casts ------------------------------------------------------------------------------
def _finite(value: float) -> float:
    if math.isinf(value) or math.isnan(value):
        raise EvalError(f"{value} is not a finite number")
    return value


def cast_int(value: Any) -> int | None:
    if value is None:
        return None
    t = type(value)
    if t is int:
        result: int = value
        return result
    if t is float:
        return int(_finite(value))  # truncates toward zero
    if t is bool:
        return 1 if value else 0
    if t is str:
        try:
            return int(value.strip())
        except ValueError:
            raise EvalError(f"cannot cast {value[:40]!r} to INT") from None
    raise EvalError(f"cannot cast {kind(value)} to INT")


def cast_double(value: Any) -> float | None:
    if value is None:
        return None
    t = type(value)
    if t is float:
        result: float = value
        return result
    if t is int:
        return float(value)
    if t is bool:
        return 1.0 if value else 0.0
    if t is str:
        try:
            return _finite(float(value.strip()))
        except ValueError:
            raise EvalError(f"cannot cast {value[:40]!r} to DOUBLE") from None
    raise EvalError(f"cannot cast {kind(value)} to DOUBLE")


def cast_string(value: Any) -> str | None:
    if value is None:
        return None
    t = type(value)
    if t is str:
        result: str = value
        return result
    if t is bool:
        return "TRUE" if value else "FALSE"
    if t is int or t is float:
        return repr(value)
    import orjson  # arrays and objects as their JSON text

    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def cast_boolean(value: Any) -> bool | None:
    if value is None:
        return None
    t = type(value)
    if t is bool:
        result: bool = value
        return result
    if t is int or t is float:
        return bool(value != 0)
    if t is str:
        text = value.strip().lower()
        if text == "true":
            return True
        if text == "false":
            return False
        raise EvalError(f"cannot cast {value[:40]!r} to BOOLEAN")
    raise EvalError(f"cannot cast {kind(value)} to BOOLEAN")


CASTS: dict[str, Callable[[Any], Any]] = {
    "INT": cast_int,
    "DOUBLE": cast_double,
    "STRING": cast_string,
    "BOOLEAN": cast_boolean,
}
"""Cast targets by the family of SQL type names that map to them (compiler.py)."""


def try_cast(cast: Callable[[Any], Any], value: Any) -> Any:
    """``TRY_CAST``: NULL where ``CAST`` fails."""
    try:
        return cast(value)
    except EvalError:
        return None


# -- the function table -----------------------------------------------------------------
def _str_arg(name: str, value: Any) -> str:
    if type(value) is not str:
        raise EvalError(f"{name} takes a STRING, not {kind(value)}")
    return value


def _num_arg(name: str, value: Any) -> int | float:
    if type(value) not in NUMBER_TYPES:
        raise EvalError(f"{name} takes a NUMBER, not {kind(value)}")
    result: int | float = value
    return result


def _int_arg(name: str, value: Any) -> int:
    if type(value) is not int:
        raise EvalError(f"{name} takes an integer, not {kind(value)} {value!r}"[:120])
    result: int = value
    return result


def _upper(s: Any) -> str:
    return _str_arg("UPPER", s).upper()


def _lower(s: Any) -> str:
    return _str_arg("LOWER", s).lower()


def _trim(s: Any) -> str:
    return _str_arg("TRIM", s).strip(" ")


def _ltrim(s: Any) -> str:
    return _str_arg("LTRIM", s).lstrip(" ")


def _rtrim(s: Any) -> str:
    return _str_arg("RTRIM", s).rstrip(" ")


def _length(s: Any) -> int:
    return len(_str_arg("LENGTH", s))


_NO_LENGTH: Any = object()


def _substring(s: Any, start: Any, length: Any = _NO_LENGTH) -> str:
    """1-based ``start``; a start of 0 or below counts the characters before the first."""
    text = _str_arg("SUBSTRING", s)
    first = _int_arg("SUBSTRING", start)
    if length is _NO_LENGTH:
        return text[max(first - 1, 0) :]
    count = _int_arg("SUBSTRING", length)
    if count < 0:
        raise EvalError("SUBSTRING length is negative")
    end = first - 1 + count
    return text[max(first - 1, 0) : max(end, 0)]


def _concat(*parts: Any) -> str:
    return "".join(_str_arg("CONCAT", p) for p in parts)


def _replace(s: Any, old: Any, new: Any) -> str:
    return _str_arg("REPLACE", s).replace(_str_arg("REPLACE", old), _str_arg("REPLACE", new))


def _left(s: Any, n: Any) -> str:
    count = _int_arg("LEFT", n)
    return _str_arg("LEFT", s)[: max(count, 0)]


def _right(s: Any, n: Any) -> str:
    count = _int_arg("RIGHT", n)
    text = _str_arg("RIGHT", s)
    return text[len(text) - count :] if 0 < count <= len(text) else (text if count > 0 else "")


def _split(s: Any, delimiter: Any) -> list[str]:
    sep = _str_arg("SPLIT", delimiter)
    if not sep:
        raise EvalError("SPLIT needs a non-empty delimiter")
    return _str_arg("SPLIT", s).split(sep)


def _abs(x: Any) -> int | float:
    return abs(_num_arg("ABS", x))


def _round(x: Any, digits: Any = 0) -> int | float:
    """Half away from zero, as SQL rounds (not Python's half to even)."""
    number = _num_arg("ROUND", x)
    places = _int_arg("ROUND", digits)
    if places < -300 or places > 300:
        raise EvalError("ROUND digits out of range")
    if type(number) is int and places >= 0:
        return number
    try:
        exponent = Decimal(1).scaleb(-places)
        rounded = Decimal(repr(number)).quantize(exponent, rounding=ROUND_HALF_UP)
    except InvalidOperation:
        raise EvalError(f"cannot round {number!r}") from None
    return int(rounded) if type(number) is int else float(rounded)


def _floor(x: Any) -> int:
    return math.floor(_num_arg("FLOOR", x))


def _ceil(x: Any) -> int:
    return math.ceil(_num_arg("CEIL", x))


def _power(x: Any, y: Any) -> float:
    base, exponent = _num_arg("POWER", x), _num_arg("POWER", y)
    try:
        result = math.pow(base, exponent)
    except (ValueError, OverflowError) as exc:
        raise EvalError(f"POWER({base!r}, {exponent!r}): {exc}") from None
    return result


def _sqrt(x: Any) -> float:
    number = _num_arg("SQRT", x)
    if number < 0:
        raise EvalError("SQRT of a negative number")
    return math.sqrt(number)


def _ln(x: Any) -> float:
    number = _num_arg("LN", x)
    if number <= 0:
        raise EvalError("LN of a number <= 0")
    return math.log(number)


def _log10(x: Any) -> float:
    number = _num_arg("LOG10", x)
    if number <= 0:
        raise EvalError("LOG10 of a number <= 0")
    return math.log10(number)


def _exp(x: Any) -> float:
    try:
        return math.exp(_num_arg("EXP", x))
    except OverflowError:
        raise EvalError("EXP overflows") from None


def _mod(a: Any, b: Any) -> Any:
    return arith("%", _num_arg("MOD", a), _num_arg("MOD", b))


def _sign(x: Any) -> int:
    number = _num_arg("SIGN", x)
    return (number > 0) - (number < 0)


def _extreme(name: str, values: tuple[Any, ...], pick_greater: bool) -> Any:
    best = values[0]
    for value in values[1:]:
        if compare(">" if pick_greater else "<", value, best):
            best = value
    if kind(best) not in ("NUMBER", "STRING"):
        raise EvalError(f"{name} takes numbers or strings, not {kind(best)}")
    return best


def _greatest(*values: Any) -> Any:
    return _extreme("GREATEST", values, True)


def _least(*values: Any) -> Any:
    return _extreme("LEAST", values, False)


def _cardinality(a: Any) -> int:
    if type(a) is not list and type(a) is not dict:
        raise EvalError(f"CARDINALITY takes an ARRAY or OBJECT, not {kind(a)}")
    return len(a)


class Function(NamedTuple):
    """An entry of the function table: the implementation and how many arguments."""

    implementation: Callable[..., Any]
    min_args: int
    max_args: int | None
    """None: any number from ``min_args``."""
    doc: str


FUNCTIONS: dict[str, Function] = {
    "UPPER": Function(_upper, 1, 1, "UPPER(s): upper case"),
    "LOWER": Function(_lower, 1, 1, "LOWER(s): lower case"),
    "TRIM": Function(_trim, 1, 1, "TRIM(s): without leading and trailing spaces"),
    "LTRIM": Function(_ltrim, 1, 1, "LTRIM(s): without leading spaces"),
    "RTRIM": Function(_rtrim, 1, 1, "RTRIM(s): without trailing spaces"),
    "LENGTH": Function(_length, 1, 1, "LENGTH(s): the number of characters"),
    "CHAR_LENGTH": Function(_length, 1, 1, "CHAR_LENGTH(s): LENGTH"),
    "SUBSTRING": Function(_substring, 2, 3, "SUBSTRING(s, start[, length]): 1-based"),
    "SUBSTR": Function(_substring, 2, 3, "SUBSTR(s, start[, length]): SUBSTRING"),
    "CONCAT": Function(_concat, 1, None, "CONCAT(s, ...): the strings joined"),
    "REPLACE": Function(_replace, 3, 3, "REPLACE(s, from, to): every occurrence"),
    "LEFT": Function(_left, 2, 2, "LEFT(s, n): the first n characters"),
    "RIGHT": Function(_right, 2, 2, "RIGHT(s, n): the last n characters"),
    "SPLIT": Function(_split, 2, 2, "SPLIT(s, delimiter): an ARRAY of strings"),
    "ABS": Function(_abs, 1, 1, "ABS(x)"),
    "ROUND": Function(_round, 1, 2, "ROUND(x[, digits]): half away from zero"),
    "FLOOR": Function(_floor, 1, 1, "FLOOR(x): an integer"),
    "CEIL": Function(_ceil, 1, 1, "CEIL(x): an integer"),
    "CEILING": Function(_ceil, 1, 1, "CEILING(x): CEIL"),
    "POWER": Function(_power, 2, 2, "POWER(x, y): a DOUBLE"),
    "SQRT": Function(_sqrt, 1, 1, "SQRT(x)"),
    "LN": Function(_ln, 1, 1, "LN(x): natural logarithm"),
    "LOG10": Function(_log10, 1, 1, "LOG10(x)"),
    "EXP": Function(_exp, 1, 1, "EXP(x)"),
    "MOD": Function(_mod, 2, 2, "MOD(a, b): a % b"),
    "SIGN": Function(_sign, 1, 1, "SIGN(x): -1, 0 or 1"),
    "GREATEST": Function(_greatest, 1, None, "GREATEST(x, ...): the largest"),
    "LEAST": Function(_least, 1, None, "LEAST(x, ...): the smallest"),
    "CARDINALITY": Function(_cardinality, 1, 1, "CARDINALITY(a): elements of an ARRAY"),
}
"""Every function an expression may call (plus the lazy ones compiled inline:
``COALESCE(x, ...)``, ``IFNULL(x, y)``, ``NULLIF(x, y)``, ``IF(condition, a, b)``)."""

LAZY_FUNCTIONS: dict[str, tuple[int, int | None, str]] = {
    "COALESCE": (1, None, "COALESCE(x, ...): the first argument that is not NULL"),
    "IFNULL": (2, 2, "IFNULL(x, y): COALESCE(x, y)"),
    "NULLIF": (2, 2, "NULLIF(x, y): NULL if x = y, else x"),
    "IF": (3, 3, "IF(condition, a, b): a if the condition is TRUE, else b"),
}


def call(implementation: Callable[..., Any], *args: Any) -> Any:
    """Call a table function: NULL if any argument is NULL."""
    for arg in args:
        if arg is None:
            return None
    return implementation(*args)


def nullif(a: Any, b: Any) -> Any:
    return None if compare("=", a, b) is True else a
