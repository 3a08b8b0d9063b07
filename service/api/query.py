"""The query string's contract, for every operation in one place: a parameter is given at
most once, in the form its schema in the OpenAPI document states; anything else is a 422.

Why it is needed: FastAPI reads a scalar parameter given twice as its last value (so
``?since_ms=false&since_ms=0.0`` was read as 0 and answered 200), and pydantic's lax
parsing takes ``" 5"``, ``"1_000"`` and ``"0.0"`` for an integer and ``"yes"`` or ``"1"``
for a boolean, none of which the document's ``integer`` or ``boolean`` says. A client
(or a fuzzer, schemathesis) that reads the document must find the service accept exactly
what it says.

Why a dependency of the whole app rather than an ASGI middleware: it runs only once a
route has matched (a path that is not served stays a 404, a method a 405, and the token
is checked before it), and it knows the route, so it checks against that operation's
parameters as :func:`document_query_contract` leaves them in the document. It answers
with the API's 422 (``{"detail": [{"loc", "msg", "type", "input"}, ...]}``), every
problem of the query together with FastAPI's own problems of the path and the other
parameters, so one answer names them all.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from fastapi import Request
from fastapi.dependencies.utils import request_params_to_args
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute

__all__ = ["QUERY_422", "document_query_contract", "query_problems", "single_valued_query"]

QUERY_422 = (
    "a query parameter given more than once, or not in the form its schema states (an "
    "integer in decimal digits, a boolean as true or false)"
)
"""What the document's 422 of every operation adds to its description."""

_FORMS: dict[str, tuple[re.Pattern[str], str, str]] = {
    "integer": (
        re.compile(r"-?[0-9]+"),
        "int_parsing",
        "Input should be an integer in decimal digits",
    ),
    "number": (
        re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?"),
        "float_parsing",
        "Input should be a number as JSON writes it",
    ),
    "boolean": (re.compile(r"true|false"), "bool_parsing", "Input should be true or false"),
}
"""The one written form of each JSON Schema type with a form of its own in a query string
(a string is any text; an ``enum`` and bounds are FastAPI's to check): its pattern, the
problem's ``type`` (pydantic's name for the same problem) and its message."""


def _types(schema: Mapping[str, Any]) -> set[str]:
    """The JSON types a parameter's schema allows (of each ``anyOf`` branch); empty when
    it does not say (any text then)."""
    declared = schema.get("type")
    found = {declared} if isinstance(declared, str) else set(declared or ())
    for branch in schema.get("anyOf", ()):
        found |= _types(branch)
    return found


def query_problems(
    items: Iterable[tuple[str, str]], parameters: Mapping[str, Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Every problem of a query string's ``items`` (name, value; in order, repeats kept)
    against an operation's query ``parameters`` (name -> schema): a name given more than
    once (unless its schema is an array), and a value not in its type's form. A name the
    operation does not declare is checked for repeats only."""
    given = list(items)
    counts = Counter(name for name, _ in given)
    problems: list[dict[str, Any]] = []
    for name, count in counts.items():
        schema = parameters.get(name, {})
        types = _types(schema)
        values = [value for key, value in given if key == name]
        if count > 1 and "array" not in types:
            problems.append(
                {
                    "loc": ["query", name],
                    "type": "duplicate_parameter",
                    "msg": f"given {count} times: a query parameter is given at most once",
                    "input": values,
                }
            )
            continue
        if "array" in types:
            types = _types(schema.get("items", {}))
        forms = [_FORMS[t] for t in types if t in _FORMS]
        if not forms or types - _FORMS.keys() - {"null"}:
            continue  # not a typed scalar, or text is one of its forms
        for value in values:
            if not any(pattern.fullmatch(value) for pattern, _, _ in forms):
                _, kind, message = forms[0]
                problems.append(
                    {"loc": ["query", name], "type": kind, "msg": message, "input": value}
                )
    return problems


def _query_parameters(request: Request, route: APIRoute) -> dict[str, Mapping[str, Any]]:
    """The route's query parameters as the app's OpenAPI document states them."""
    paths = request.app.openapi().get("paths", {})
    operation = paths.get(route.path_format, {}).get(request.method.lower(), {})
    return {
        p["name"]: p.get("schema", {})
        for p in operation.get("parameters", ())
        if p.get("in") == "query"
    }


async def single_valued_query(request: Request) -> None:
    """The app's dependency: a 422 for a query with problems (see the module), else
    nothing. Runs before the route's own parameters are read."""
    route = request.scope.get("route")
    if not request.query_params or not isinstance(route, APIRoute):
        return  # probes and most reads: nothing to check, no document to build
    problems = query_problems(request.query_params.multi_items(), _query_parameters(request, route))
    if not problems:
        return
    named = {tuple(p["loc"]) for p in problems}
    _, path_errors = request_params_to_args(route.dependant.path_params, request.path_params)
    _, query_errors = request_params_to_args(route.dependant.query_params, request.query_params)
    others = [e for e in query_errors if tuple(e["loc"]) not in named]
    raise RequestValidationError([*path_errors, *problems, *others])


def document_query_contract(doc: dict[str, Any]) -> None:
    """Make the OpenAPI document say what :func:`single_valued_query` accepts.

    An optional query parameter typed ``X | None`` is documented as ``X``: a query
    string cannot say null (leaving the parameter out is how), and ``null`` as text is
    refused. Every operation's 422 says that a repeated or malformed query parameter is
    one, with the API's problem list as its body.
    """
    problem_list = "HTTPValidationError" in doc.get("components", {}).get("schemas", {})
    for path in doc.get("paths", {}).values():
        for operation in path.values():
            for parameter in operation.get("parameters", ()):
                if parameter.get("in") == "query" and not parameter.get("required"):
                    parameter["schema"] = _without_null(parameter.get("schema", {}))
            responses = operation.setdefault("responses", {})
            response = responses.setdefault("422", {"description": ""})
            if response.get("description") in ("", "Validation Error"):
                response["description"] = QUERY_422
            else:
                response["description"] = f"{response['description']}; or {QUERY_422}"
            if problem_list:
                response.setdefault(
                    "content",
                    {
                        "application/json": {
                            "schema": {"$ref": "#/components/schemas/HTTPValidationError"}
                        }
                    },
                )


def _without_null(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` without its ``null`` branch, when one other branch is left."""
    branches = [b for b in schema.get("anyOf", ()) if b.get("type") != "null"]
    if "anyOf" not in schema or len(branches) != 1:
        return schema
    rest = {k: v for k, v in schema.items() if k != "anyOf"}
    return {**branches[0], **rest}
