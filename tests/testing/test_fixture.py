"""The ``queue`` fixture, loaded as the docs say (``pytest_plugins`` in tests/conftest.py),
reaches every helper."""

import pytest

from queue_app import testing
from queue_app.services import enqueue_job
from queue_app.testing.fixtures import QueueHelpers

pytestmark = pytest.mark.django_db


def test_the_fixture_offers_every_helper(queue):
    assert isinstance(queue, QueueHelpers)
    assert {name for name in testing.__all__ if name != "RunSummary"} <= set(dir(queue))


def test_enqueue_assert_and_run_through_the_fixture(queue):
    job = enqueue_job("demo.echo", {"invoice": 42, "copy": True})

    assert queue.assert_enqueued(type="demo.echo", payload={"invoice": 42}) == job
    assert queue.enqueued_jobs(type="demo.echo") == [job]
    assert queue.run_jobs().completed == 1
    queue.assert_not_enqueued(type="demo.echo")
    assert queue.enqueued_jobs() == []
