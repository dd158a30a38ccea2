"""The Grafana dashboard in deploy/grafana queries only metric names this project exposes."""

import json
import re

import pytest

from queue_app.api.metrics import StoreCollector
from queue_app.observability.metrics import instruments
from tests.helpers import PROJECT_ROOT

DASHBOARD = PROJECT_ROOT / "deploy" / "grafana" / "jobqueue.json"
# What a scrape shows of each kind of metric (prometheus_client's exposition).
SAMPLE_SUFFIXES = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"], "gauge": [""]}


def exposed_names() -> set[str]:
    families = [family for metric in instruments().all() for family in metric.describe()]
    families += list(StoreCollector().collect())
    return {family.name + suffix for family in families for suffix in SAMPLE_SUFFIXES[family.type]}


def queries(dashboard: dict) -> list[str]:
    found = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    variables = dashboard["templating"]["list"]
    found += [variable["definition"] for variable in variables if "definition" in variable]
    return found


@pytest.mark.django_db
@pytest.mark.redis
def test_every_query_names_an_exposed_metric():
    dashboard = json.loads(DASHBOARD.read_text())
    names = exposed_names()
    used = {name for query in queries(dashboard) for name in re.findall(r"\bjobqueue_[a-z_]+", query)}
    assert used, "the dashboard queries nothing"
    assert used <= names, f"not exposed: {sorted(used - names)}"
    # Every counter and gauge family shows somewhere on the dashboard.
    assert {name.removesuffix("_total") for name in used} >= {
        name.removesuffix("_total") for name in names if not name.endswith(("_bucket", "_count", "_sum"))
    }
