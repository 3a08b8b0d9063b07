"""The SQL form of a body (#32): ``{"name", "sql"}`` beside the JSON spec, on the registry
the routes call. A script's problems are one 422 (``SpecInvalid``), each with its
statement, line and column; the store keeps the script as written."""

from __future__ import annotations

import pytest

from service.api.registry import PipelineRegistry, SpecInvalid
from service.api.store import StoredPipeline
from service.settings import Settings

SCRIPT = """CREATE SOURCE orders (
  "user" VARCHAR, amount DOUBLE, ts BIGINT, WATERMARK FOR ts AS ts - INTERVAL '2' SECOND
) WITH (topic = 'orders');
INSERT INTO revenue
SELECT "user", window_start, window_end, SUM(amount) AS revenue
FROM TUMBLE(orders, ts, INTERVAL '1' MINUTE)
GROUP BY "user", window_start, window_end;
"""


def registry() -> PipelineRegistry:
    registry = PipelineRegistry.__new__(PipelineRegistry)
    registry._settings = Settings(udf_modules=())
    return registry


def test_a_sql_body_builds_the_definition_of_the_spec_it_compiles_to() -> None:
    spec, definition, sql = registry().parse_body({"name": "revenue", "sql": SCRIPT})
    assert sql == SCRIPT
    assert definition.name == "revenue"
    assert definition.topics == ("orders",)
    assert definition.key_field == "user"
    assert spec.to_json()["operator"]["aggregations"] == {
        "revenue": {"fn": "sum", "field": "amount"}
    }


def test_a_json_body_has_no_script() -> None:
    spec, _, _ = registry().parse_body({"name": "revenue", "sql": SCRIPT})
    _, _, sql = registry().parse_body(spec.to_json())
    assert sql is None


def test_compile_answers_the_spec_and_the_script() -> None:
    answer = registry().compile({"sql": SCRIPT})
    assert answer["name"] == "compiled"
    assert answer["spec"]["sink"] == {"topic": "revenue"}
    assert answer["sql"] == SCRIPT


def test_every_problem_of_a_script_is_one_422_with_statement_line_and_column() -> None:
    broken = SCRIPT.replace("SUM(amount)", "SUM(price)").replace(
        "window_end;", "window_end\nORDER BY 1;"
    )
    with pytest.raises(SpecInvalid) as caught:
        registry().parse_body({"name": "revenue", "sql": broken})
    found = [(e["type"], e["statement"], e["line"]) for e in caught.value.errors]
    assert found == [("sql_unknown_column", 2, 5), ("sql_unsupported", 2, 8)]
    assert all(e["loc"] == ["sql"] for e in caught.value.errors)


NO_WATERMARK_HAVING_UNKNOWN_COLUMN = """CREATE SOURCE orders (
  "user" VARCHAR, amount DOUBLE, ts BIGINT
) WITH (topic = 'orders');
INSERT INTO revenue
SELECT "user", window_start, window_end, SUM(no_such_column) AS revenue
FROM TUMBLE(orders, ts, INTERVAL '1' MINUTE)
GROUP BY "user", window_start, window_end
HAVING COUNT(*) > 1;
"""
"""Issue 47: the 422 named the missing watermark and the HAVING, and the unknown column
only once the watermark was added."""


@pytest.mark.parametrize("endpoint", ["POST /pipelines", "POST /sql/compile"])
def test_the_422_names_every_problem_of_the_script(endpoint: str) -> None:
    body = {"name": "revenue", "sql": NO_WATERMARK_HAVING_UNKNOWN_COLUMN}
    with pytest.raises(SpecInvalid) as caught:
        if endpoint == "POST /pipelines":
            registry().parse_body(body)
        else:
            registry().compile(body)
    errors = caught.value.errors
    assert [(e["type"], e["statement"], e["line"], e["column"]) for e in errors] == [
        ("sql_unknown_column", 2, 5, 46),
        ("sql_no_watermark", 2, 6, 6),
        ("sql_unsupported", 2, 8, 1),
    ]
    assert "no_such_column" in errors[0]["msg"]


def test_a_bad_name_beside_sql_is_placed_on_the_name() -> None:
    with pytest.raises(SpecInvalid) as caught:
        registry().parse_body({"name": "Not A Name", "sql": SCRIPT})
    assert [e["loc"] for e in caught.value.errors] == [["name"]]


def test_a_malformed_sql_body_lists_each_field() -> None:
    with pytest.raises(SpecInvalid) as caught:
        registry().parse_body({"name": 5, "sql": None, "extra": 1})
    assert sorted(tuple(e["loc"]) for e in caught.value.errors) == [
        ("extra",),
        ("name",),
        ("sql",),
    ]


def test_compile_without_sql_is_a_422() -> None:
    with pytest.raises(SpecInvalid):
        registry().compile({"name": "x"})


def test_a_replacement_takes_the_name_from_the_path() -> None:
    spec, _, _ = registry().parse_body({"sql": SCRIPT}, path_name="revenue")
    assert spec.name == "revenue"


def test_the_store_keeps_the_script_as_written() -> None:
    stored = StoredPipeline(name="revenue", spec={"name": "revenue"}, sql=SCRIPT)
    again = StoredPipeline.from_value("revenue", stored.to_value(), 7)
    assert again.sql == SCRIPT
    plain = StoredPipeline(name="revenue", spec={"name": "revenue"})
    assert b"sql" not in plain.to_value()
    assert StoredPipeline.from_value("revenue", plain.to_value(), 8).sql is None
