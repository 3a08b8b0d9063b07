"""The Grafana dashboard and the Prometheus rules use only metric names the service
exports (so a renamed metric breaks this test, not a dashboard in production)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry, Metric

from service.api.routes.metrics import PROCESS_REGISTRY
from service.runtime.observability.metrics import METRIC_NAMES, build_metrics

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
NAME = re.compile(r"\b(?:clockwork|process|python)_[a-z0-9_]+\b")
_SUFFIXES = {
    "histogram": ("_bucket", "_sum", "_count"),
    "counter": ("_total",),
    "summary": ("_sum", "_count"),
}


def exported_names() -> set[str]:
    """Every sample name /metrics can carry: the runtime's families with their suffixes,
    plus the process metrics."""
    registry = CollectorRegistry()
    build_metrics(registry)
    families: list[Metric] = [*registry.collect(), *PROCESS_REGISTRY.collect()]
    names: set[str] = set()
    for family in families:
        suffixes = _SUFFIXES.get(family.type, ("",))
        names.update(family.name + s for s in suffixes)
    return names


def expressions(node: Any) -> list[str]:
    """Every ``expr`` / ``query`` / ``definition`` string in a JSON or YAML document."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                found.append(value)
            elif key == "query" and isinstance(value, dict | str):
                found.extend([value] if isinstance(value, str) else expressions(value))
            else:
                found.extend(expressions(value))
    elif isinstance(node, list):
        for item in node:
            found.extend(expressions(item))
    return found


def test_the_runtime_list_matches_its_registry() -> None:
    names = exported_names()
    for name in METRIC_NAMES:
        assert name in names or f"{name}_count" in names, name


def test_dashboard_uses_only_exported_metrics() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "clockwork-dashboard.json").read_text())
    exprs = expressions(dashboard)
    assert len(exprs) >= 20
    used = {name for expr in exprs for name in NAME.findall(expr)}
    assert used - exported_names() == set()
    # The panels the issue asks for are there.
    for needed in (
        "clockwork_watermark_lag_milliseconds",
        "clockwork_timers_queued",
        "clockwork_records_in_total",
        "clockwork_records_out_total",
        "clockwork_late_records_total",
        "clockwork_dead_lettered_records_total",
        "clockwork_windows_open",
        "clockwork_checkpoint_age_seconds",
        "clockwork_consumer_lag_records",
        "clockwork_batch_processing_seconds_bucket",
    ):
        assert needed in used, needed
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_alert_rules_use_only_exported_metrics() -> None:
    rules = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    alerts = {r["alert"]: r["expr"] for g in rules["groups"] for r in g["rules"]}
    for needed in (
        "ClockworkWatermarkStuck",
        "ClockworkConsumerLagGrowing",
        "ClockworkTimerQueueGrowing",
        "ClockworkDeadLetters",
        "ClockworkCheckpointStale",
    ):
        assert needed in alerts
    used = {name for expr in alerts.values() for name in NAME.findall(expr)}
    assert used
    assert used - exported_names() == set()


def test_prometheus_scrapes_the_replicas_and_loads_the_rules() -> None:
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    assert config["rule_files"] == ["/etc/prometheus/alerts.yml"]
    job = config["scrape_configs"][0]
    assert job["metrics_path"] == "/metrics"
    assert job["static_configs"][0]["targets"] == ["clockwork-1:8000", "clockwork-2:8000"]
