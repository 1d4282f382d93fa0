"""The Grafana dashboard (``docs/grafana/sql-lease.json``) queries only metrics that exist.

Every metric name in every panel's PromQL must be one that OpenTelemetry's Prometheus exporter
renders from `OpenTelemetryObserver`'s instruments (``sql_lease_lease_acquire_attempts_total``,
``..._bucket``, ...), found by running the real exporter on an observer that recorded one
point on each instrument; and every instrument appears on some panel.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sql_lease.observer import LeaseEvent, LeaseEventKind, StatementEvent, by_prefix
from sql_lease.otel import INSTRUMENTS, OpenTelemetryObserver

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "sql-lease.json"
K = LeaseEventKind

_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset"}
_KEYWORDS |= {"and", "or", "unless", "inf", "nan"}
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def rendered() -> dict[str, set[str]]:
    """Sample names the Prometheus exporter writes, by the instrument they come from."""
    registry = CollectorRegistry()
    reader = PrometheusMetricReader(registry=registry)
    observer = OpenTelemetryObserver(
        MeterProvider(metric_readers=[reader]), lease_class=by_prefix(":")
    )
    observer.on_statement(StatementEvent("acquire_lease", "postgresql", 0.002))
    events = [
        LeaseEvent(K.GRANTED, "job:1", "a", 1, None, 0.001),
        LeaseEvent(K.REFUSED, "job:1", "b", 1, "a", 0.001),
        LeaseEvent(K.WAIT_ENDED, "job:1", "b", 1, "timeout", 0.5),
        LeaseEvent(K.ACQUIRED, "job:2", "a", 2),
        LeaseEvent(K.RENEWED_LATE, "job:2", "a", 2, None, 0.3),
        LeaseEvent(K.LOST, "job:2", "a", 2, "gone", 4.0),
    ]
    for event in events:
        observer.on_lease_event(event)
    observer.flush()
    text = generate_latest(registry).decode()
    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        out[family.name] = {sample.name for sample in family.samples}
    return out


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (label matchers, ``by (...)`` lists,
    range selectors and function names left out)."""
    stripped = re.sub(r"\{[^}]*\}", " ", expr)
    stripped = re.sub(r"\[[^\]]*\]", " ", stripped)
    stripped = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", " ", stripped)
    names = set()
    for match in _IDENT.finditer(stripped):
        name = match.group(0)
        after = stripped[match.end() :].lstrip()
        if name.lower() in _KEYWORDS or after.startswith("("):
            continue
        names.add(name)
    return names


def panels() -> list[dict[str, Any]]:
    data = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    found: list[dict[str, Any]] = data["panels"]
    return found


def exprs(panel: dict[str, Any]) -> list[str]:
    return [str(target["expr"]) for target in panel["targets"]]


def test_the_parser_finds_metric_names_and_nothing_else() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (le, x_y) (rate(a_b_bucket{c_d=~"$v"}[$__rate_interval])))'
        " / sum(rate(e_f_total[5m])) or vector(0)"
    )
    assert metric_names(expr) == {"a_b_bucket", "e_f_total"}


@pytest.fixture(scope="module")
def exported() -> dict[str, set[str]]:
    return rendered()


def test_every_instrument_is_exported(exported: dict[str, set[str]]) -> None:
    for instrument in INSTRUMENTS:  # dots become underscores; a unit or _total may follow
        assert any(f.startswith(instrument.replace(".", "_")) for f in exported), instrument


def test_every_panel_queries_only_exported_metrics(exported: dict[str, set[str]]) -> None:
    samples = set().union(*exported.values())
    for panel in panels():
        assert panel["targets"], panel["title"]
        for expr in exprs(panel):
            names = metric_names(expr)
            assert names, (panel["title"], expr)
            assert names <= samples, (panel["title"], names - samples)


def test_every_instrument_has_a_panel(exported: dict[str, set[str]]) -> None:
    used = {name for panel in panels() for expr in exprs(panel) for name in metric_names(expr)}
    for instrument in INSTRUMENTS:
        family = next(f for f in exported if f.startswith(instrument.replace(".", "_")))
        assert exported[family] & used, f"no panel shows {instrument}"


def test_panels_have_unique_ids_and_titles() -> None:
    ids = [panel["id"] for panel in panels()]
    titles = [panel["title"] for panel in panels()]
    assert len(set(ids)) == len(ids) and len(set(titles)) == len(titles)
