"""Testing helpers: assert on what is enqueued.

    from queue_app.testing import assert_enqueued

    def test_signup_sends_the_welcome_mail(client):
        client.post("/signup/", {"email": "a@example.com"})
        assert_enqueued(type="send_welcome", payload={"email": "a@example.com"})

As ``Oban.Testing`` gives, against the real PostgreSQL.
"""

from queue_app.testing.assertions import assert_enqueued, assert_not_enqueued, enqueued_jobs

__all__ = [
    "assert_enqueued",
    "assert_not_enqueued",
    "enqueued_jobs",
]
