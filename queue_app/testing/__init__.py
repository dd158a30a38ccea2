"""Testing helpers: assert on what is enqueued, and run queued jobs inside the test.

    from queue_app.testing import assert_enqueued, run_jobs

    def test_signup_sends_the_welcome_mail(client):
        client.post("/signup/", {"email": "a@example.com"})
        assert_enqueued(type="send_welcome", payload={"email": "a@example.com"})
        assert run_jobs().completed == 1

As ``Oban.Testing`` and Celery's eager mode give, against the real PostgreSQL and with
no Redis, relay or worker process. pytest users may take them as one fixture,
``queue`` (``pytest_plugins = ["queue_app.testing.fixtures"]``).
"""

from queue_app.testing.assertions import assert_enqueued, assert_not_enqueued, enqueued_jobs
from queue_app.testing.inline import RunSummary, perform_job, run_jobs

__all__ = [
    "RunSummary",
    "assert_enqueued",
    "assert_not_enqueued",
    "enqueued_jobs",
    "perform_job",
    "run_jobs",
]
