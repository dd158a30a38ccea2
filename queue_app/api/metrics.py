"""GET /metrics: the Prometheus exposition of the queue.

Two sources: the counters and histograms every process wrote
(``observability.metrics``), and gauges read from both stores when the
scrape arrives (``engine.stats``, the read model behind /api/stats/), so a
depth is never stale and no process has to push it.

Who may read it: a logged-in user with ``queue_app.view_job`` (the figures
cover every user's jobs), or a scraper sending ``Authorization: Bearer
<METRICS_TOKEN>`` when that setting is set.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator

from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET

from queue_app.api.errors import error_body
from queue_app.api.permissions import may_view_all_jobs
from queue_app.conf import queue_settings
from queue_app.engine.stats import queue_stats
from queue_app.observability import metrics


class StoreCollector:
    """Gauges from one ``queue_stats()`` read, taken at scrape time."""

    def collect(self) -> Iterator:
        from prometheus_client.core import GaugeMetricFamily

        postgresql_up = GaugeMetricFamily("jobqueue_postgresql_up", "1 when PostgreSQL answered this scrape.")
        try:
            stats = queue_stats()
        except DatabaseError:
            postgresql_up.add_metric([], 0)
            yield postgresql_up
            return
        postgresql_up.add_metric([], 1)
        yield postgresql_up

        jobs = GaugeMetricFamily(
            "jobqueue_jobs",
            "Jobs in PostgreSQL by queue and status (a status past a large count is the planner's estimate).",
            labels=["queue", "status"],
        )
        for queue, statuses in stats.by_queue.items():
            for status, count in statuses.items():
                jobs.add_metric([queue, status], count)
        yield jobs

        scheduled = GaugeMetricFamily(
            "jobqueue_jobs_scheduled",
            "Queued jobs waiting for a time (retry backoff or a scheduled start).",
            labels=["queue"],
        )
        for queue, count in stats.scheduled.items():
            scheduled.add_metric([queue], count)
        yield scheduled

        oldest = GaugeMetricFamily(
            "jobqueue_oldest_queued_age_seconds", "How long the longest-waiting due job has waited."
        )
        age = stats.age(stats.oldest_queued_at)
        oldest.add_metric([], age.total_seconds() if age is not None else 0)
        yield oldest

        backlog = GaugeMetricFamily(
            "jobqueue_outbox_backlog", "Outbox rows not relayed to Redis yet.", labels=["queue"]
        )
        backlog_age = GaugeMetricFamily(
            "jobqueue_outbox_oldest_age_seconds",
            "Age of the oldest outbox row not relayed yet.",
            labels=["queue"],
        )
        for queue in stats.by_queue:
            pending, first = stats.outbox_backlog.get(queue, (0, None))
            first_age = stats.age(first)
            backlog.add_metric([queue], pending)
            backlog_age.add_metric([queue], first_age.total_seconds() if first_age is not None else 0)
        yield backlog
        yield backlog_age

        redis_up = GaugeMetricFamily("jobqueue_redis_up", "1 when Redis answered this scrape.")
        redis_up.add_metric([], 0 if stats.redis is None else 1)
        yield redis_up
        if stats.redis is not None:
            ids = GaugeMetricFamily(
                "jobqueue_redis_ids",
                "Job ids in each Redis structure (priority, fifo: ready; retry: waiting for a time).",
                labels=["queue", "structure"],
            )
            for queue, structures in stats.redis.items():
                for structure, count in structures.items():
                    ids.add_metric([queue, structure], count)
            yield ids


def _bearer_token_matches(request: HttpRequest) -> bool:
    expected = queue_settings().METRICS_TOKEN
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return bool(expected) and scheme.lower() == "bearer" and hmac.compare_digest(given.strip(), expected)


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """The exposition, for a user with view_job or the bearer token; 401/403 otherwise."""
    if not _bearer_token_matches(request):
        user = request.user
        if not user.is_authenticated:
            response = JsonResponse(
                error_body("not_authenticated", "Log in, or send Authorization: Bearer <METRICS_TOKEN>."),
                status=401,
            )
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
            return response
        if not may_view_all_jobs(user):
            return JsonResponse(
                error_body("permission_denied", "Reading metrics needs the queue_app.view_job permission."),
                status=403,
            )
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    registry = metrics.counters_registry()
    registry.register(StoreCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
