"""The ``queue`` pytest fixture: the testing helpers, for a test that asks for them.

Load it from a ``conftest.py``::

    pytest_plugins = ["queue_app.testing.fixtures"]

    @pytest.mark.django_db
    def test_checkout_sends_the_receipt(client, queue):
        client.post("/checkout/")
        queue.assert_enqueued(type="send_receipt")
        assert queue.run_jobs().completed == 1

The fixture opens no database access of its own: the test asks for it as usual
(``django_db``, ``db``, ``transactional_db``).
"""

from __future__ import annotations

import pytest

from queue_app import testing


class QueueHelpers:
    """``queue_app.testing``'s functions, reached from the fixture."""

    enqueued_jobs = staticmethod(testing.enqueued_jobs)
    assert_enqueued = staticmethod(testing.assert_enqueued)
    assert_not_enqueued = staticmethod(testing.assert_not_enqueued)
    run_jobs = staticmethod(testing.run_jobs)
    perform_job = staticmethod(testing.perform_job)


@pytest.fixture
def queue() -> QueueHelpers:
    """Assert on enqueued jobs and run them in the test: ``queue.run_jobs()``, ..."""
    return QueueHelpers()
