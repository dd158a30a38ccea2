"""Reading the queue's Prometheus figures in tests: from this process, or from a scrape."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from queue_app.observability import metrics


def local_value(name: str, **labels: str) -> float:
    """A sample of this process's own counters (PROMETHEUS_MULTIPROC_DIR unset); 0 when absent."""
    return metrics.counters_registry().get_sample_value(name, labels) or 0.0


def parse(exposition: str) -> dict[tuple[str, frozenset], float]:
    """{(sample name, labels): value} of a /metrics body."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
    }


def sample(scraped: dict, name: str, **labels: str) -> float:
    return scraped.get((name, frozenset(labels.items())), 0.0)
