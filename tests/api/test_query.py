"""The query string's contract (service/api/query.py) on the app without a broker: the
check runs before any route reads the service, so a refused query is a 422 where an
accepted one reaches the route (503 here: nothing started). The real server's answers,
200 included, are in tests/integration/test_api_errors.py."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from service.api.app import create_app
from service.api.query import QUERY_422, query_problems
from service.settings import Settings

INTEGER = {"type": "integer"}
BOOLEAN = {"type": "boolean"}


@pytest.fixture
def app() -> FastAPI:
    return create_app(Settings(kafka_bootstrap_servers="k:9092", api_token="t"))


def client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://t",
        headers={"Authorization": "Bearer t"},
    )


def problems(response: httpx.Response) -> list[tuple[tuple[Any, ...], str]]:
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert all(isinstance(p["msg"], str) and p["msg"] for p in detail)
    return [(tuple(p["loc"]), p["type"]) for p in detail]


def test_a_parameter_given_twice_is_a_problem_even_with_good_values() -> None:
    found = query_problems([("since_ms", "1"), ("since_ms", "2")], {"since_ms": INTEGER})
    assert found == [
        {
            "loc": ["query", "since_ms"],
            "type": "duplicate_parameter",
            "msg": "given 2 times: a query parameter is given at most once",
            "input": ["1", "2"],
        }
    ]


def test_an_undeclared_parameter_may_not_repeat_either_but_an_array_may() -> None:
    assert [p["type"] for p in query_problems([("x", "1"), ("x", "1")], {})] == [
        "duplicate_parameter"
    ]
    array = {"ids": {"type": "array", "items": INTEGER}}
    assert query_problems([("ids", "1"), ("ids", "2")], array) == []
    assert [p["input"] for p in query_problems([("ids", "1"), ("ids", "b")], array)] == ["b"]


def test_an_integer_is_decimal_digits_only() -> None:
    for good in ("0", "-12", "1700000000000"):
        assert query_problems([("n", good)], {"n": INTEGER}) == [], good
    for bad in ("0.0", "false", " 5", "+5", "1_000", "1e3", "", "null", "0x10"):
        found = query_problems([("n", bad)], {"n": INTEGER})
        assert [(p["type"], p["input"]) for p in found] == [("int_parsing", bad)], bad


def test_a_boolean_is_true_or_false() -> None:
    for good in ("true", "false"):
        assert query_problems([("b", good)], {"b": BOOLEAN}) == []
    for bad in ("1", "0", "yes", "True", "on", ""):
        assert [p["type"] for p in query_problems([("b", bad)], {"b": BOOLEAN})] == [
            "bool_parsing"
        ], bad


def test_text_and_enums_have_no_form_of_their_own() -> None:
    enum = {"type": "string", "enum": ["pipeline", "local"]}
    assert query_problems([("scope", "nope")], {"scope": enum}) == []  # FastAPI's to refuse
    assert query_problems([("q", "")], {"q": {}}) == []


async def test_history_refuses_since_ms_given_twice(app: FastAPI) -> None:
    """The request schemathesis found accepted (issue 47)."""
    async with client(app) as c:
        response = await c.get("/history?since_ms=false&since_ms=0.0")
        assert problems(response) == [(("query", "since_ms"), "duplicate_parameter")]
        assert response.json()["detail"][0]["input"] == ["false", "0.0"]
        twice_good = await c.get("/pipelines/p-1/history?since_ms=1&since_ms=1")
        assert problems(twice_good) == [(("query", "since_ms"), "duplicate_parameter")]
        assert (await c.get("/history?since_ms=5")).status_code == 503  # reached the route


async def test_every_operation_refuses_a_repeated_parameter(app: FastAPI) -> None:
    async with client(app) as c:
        status = await c.get("/pipelines/p-1/status?scope=local&scope=local")
        assert problems(status) == [(("query", "scope"), "duplicate_parameter")]
        replace = await c.put("/pipelines/p-1?reset_state=true&reset_state=false", json={})
        assert problems(replace) == [(("query", "reset_state"), "duplicate_parameter")]
        listed = await c.get("/pipelines?unused=1&unused=2")
        assert problems(listed) == [(("query", "unused"), "duplicate_parameter")]
        assert (await c.get("/healthz?a=1&a=1")).status_code == 422


async def test_wrong_typed_parameters_are_refused(app: FastAPI) -> None:
    async with client(app) as c:
        for since in ("0.0", "false", "", "null"):
            assert problems(await c.get(f"/history?since_ms={since}")) == [
                (("query", "since_ms"), "int_parsing")
            ], since
        for reset in ("1", "yes", "True"):
            assert problems(await c.put(f"/pipelines/p-1?reset_state={reset}", json={})) == [
                (("query", "reset_state"), "bool_parsing")
            ], reset


async def test_one_422_names_the_query_and_the_path_problems(app: FastAPI) -> None:
    async with client(app) as c:
        response = await c.get("/pipelines/Bad%20Name/history?since_ms=x&since_ms=1")
        assert sorted(problems(response)) == [
            (("path", "name"), "string_pattern_mismatch"),
            (("query", "since_ms"), "duplicate_parameter"),
        ]


async def test_a_path_not_served_stays_404_and_the_token_comes_first(app: FastAPI) -> None:
    async with client(app) as c:
        assert (await c.get("/nowhere?a=1&a=2")).status_code == 404
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        assert (await c.put("/pipelines/p-1?reset_state=1&reset_state=1")).status_code == 401


def test_the_document_says_what_is_accepted(app: FastAPI) -> None:
    doc = app.openapi()
    for path in ("/history", "/pipelines/{name}/history"):
        (since,) = [p for p in doc["paths"][path]["get"]["parameters"] if p["in"] == "query"]
        assert since["schema"]["type"] == "integer" and "anyOf" not in since["schema"], path
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            assert QUERY_422 in operation["responses"]["422"]["description"], (method, path)
