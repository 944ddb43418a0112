"""The metrics' names follow the Prometheus conventions, and the Grafana dashboard in docs/ plots only
metrics that exist."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from crawlherd import metrics

DASHBOARD = Path(__file__).parents[2] / "docs" / "grafana" / "crawlherd-dashboard.json"


def _families() -> dict[str, str]:
    text = metrics.exposition().decode()
    return {f.name: f.type for f in text_string_to_metric_families(text) if not f.name.endswith("_created")}


def test_names_follow_the_conventions() -> None:
    families = _families()
    assert families
    for name, kind in families.items():
        assert name.startswith("crawlherd_"), name
        if kind == "counter":
            assert f"{name}_total" in metrics.exposition().decode(), name
        if kind == "histogram":
            assert name.endswith("_seconds"), name


def test_status_class() -> None:
    assert [metrics.status_class(s) for s in (200, 302, 404, 503, None, 0)] == [
        "2xx",
        "3xx",
        "4xx",
        "5xx",
        "error",
        "error",
    ]


def test_the_dashboard_plots_existing_metrics() -> None:
    samples = {s.name for f in text_string_to_metric_families(metrics.exposition().decode()) for s in f.samples}
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    used = {m for p in dashboard["panels"] for t in p["targets"] for m in re.findall(r"crawlherd_[a-z_]+", t["expr"])}
    assert used and used <= samples, used - samples
    documented = (Path(__file__).parents[2] / "docs" / "console.md").read_text(encoding="utf-8")
    families = _families()
    assert all(name in documented for name in families), [n for n in families if n not in documented]
