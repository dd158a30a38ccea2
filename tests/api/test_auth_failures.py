"""Failed logins and failed token checks are limited per client, on by default."""

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import Client
from rest_framework.authtoken.models import Token

from queue_app.api.auth_failures import KEY_PREFIX
from tests.api.conftest import make_user, run_in_child
from tests.helpers import database_url

# Failed authentications and throttles count in the Redis cache.
pytestmark = pytest.mark.redis

DEFAULT_FAILURES_ALLOWED = 20  # AUTH_FAILURE_RATE's default, 20/hour


def _login(client: Client, url: str, password: str) -> bool:
    """Submit the login form; True when it logged the user in."""
    client.post(url, {"username": "operator", "password": password})
    return "_auth_user_id" in client.session


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["/admin/login/", "/api/auth/login/"])
def test_a_client_over_the_default_limit_cannot_log_in_even_with_the_right_password(url):
    User.objects.create_user("operator", password="the-right-password", is_staff=True)
    client = Client()
    assert _login(client, url, "the-right-password")  # the form works
    client.logout()
    for _ in range(DEFAULT_FAILURES_ALLOWED):
        assert not _login(client, url, "a-wrong-password")
    assert not _login(client, url, "the-right-password")
    # Another client is not affected.
    assert _login(Client(REMOTE_ADDR="192.0.2.7"), url, "the-right-password")


@pytest.mark.django_db(transaction=True)
def test_wrong_tokens_are_limited_and_answered_with_429():
    token = Token.objects.create(user=make_user("eve"))
    result = run_in_child(
        """
        import os
        def get(token, **extra):
            return client.get("/api/jobs/", HTTP_AUTHORIZATION="Token " + token, **extra)
        wrong = [get("0" * 40).status_code for _ in range(4)]
        right = get(os.environ["TEST_TOKEN"])
        elsewhere = get(os.environ["TEST_TOKEN"], REMOTE_ADDR="192.0.2.7").status_code
        anonymous = client.get("/api/schema/").status_code
        print(json.dumps({"wrong": wrong, "right": right.status_code, "code": right.json()["code"],
                          "retry_after": right.get("Retry-After"), "elsewhere": elsewhere,
                          "anonymous": anonymous}))
        """,
        DATABASE_URL=database_url(),
        AUTH_FAILURE_RATE="3/minute",
        TEST_TOKEN=token.key,
    )
    assert result["wrong"] == [401, 401, 401, 429]
    # Over the limit, even the right token is refused unchecked, until the window ends.
    assert (result["right"], result["code"]) == (429, "throttled")
    assert 0 < int(result["retry_after"]) <= 60
    assert result["elsewhere"] == 200
    assert result["anonymous"] == 200


@pytest.mark.django_db(transaction=True)
def test_an_empty_rate_turns_the_limit_off():
    result = run_in_child(
        """
        statuses = {client.get("/api/jobs/", HTTP_AUTHORIZATION="Token " + "0" * 40).status_code
                    for _ in range(30)}
        print(json.dumps(sorted(statuses)))
        """,
        DATABASE_URL=database_url(),
        AUTH_FAILURE_RATE="",
    )
    assert result == [401]


@pytest.mark.django_db
def test_a_window_ending_while_a_failure_is_counted_is_still_a_401(settings, monkeypatch):
    """The counter's key expires just after the first write of the count (driven here by
    deleting it at that moment, on the real Redis). Opening the window and counting in two
    steps then counted a key that no longer existed: a 500. One transaction has no such moment."""
    settings.AUTH_FAILURE_RATE = "3/minute"
    redis = cache.client.get_client(write=True)
    key = cache.client.make_key(KEY_PREFIX + "127.0.0.1")
    redis.set(key, 1, ex=60)  # a window already running, one failure in
    send = redis.execute_command

    def expire_after_the_first_write(*args, **options):
        result = send(*args, **options)
        if args[0] == "SET":
            monkeypatch.setattr(redis, "execute_command", send)
            send("DEL", key)
        return result

    monkeypatch.setattr(redis, "execute_command", expire_after_the_first_write)

    response = Client(raise_request_exception=False).get("/api/jobs/", HTTP_AUTHORIZATION="Token " + "0" * 40)

    assert response.status_code == 401
    assert cache.get(KEY_PREFIX + "127.0.0.1") == 2
    assert 0 < cache.ttl(KEY_PREFIX + "127.0.0.1") <= 60


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("backend", "longest_wait"),
    [
        # Django's own Redis cache: the window's time left, as with django-redis.
        ("django.core.cache.backends.redis.RedisCache", 60),
        # A cache each process keeps apart (check warning queue_app.W013) still counts in this
        # process; it cannot tell when the window ends, so the whole window is the wait.
        ("django.core.cache.backends.locmem.LocMemCache", 60),
    ],
)
def test_the_limit_counts_in_djangos_own_caches_too(settings, backend, longest_wait):
    """A project without django-redis: counting used django-redis's client API, so every
    wrong token (and the check before every token) was a 500 with any other cache."""
    settings.AUTH_FAILURE_RATE = "3/minute"
    settings.CACHES = {"default": {"BACKEND": backend, "LOCATION": settings.CACHE_URL}}
    client = Client(raise_request_exception=False)

    def get():
        return client.get("/api/jobs/", HTTP_AUTHORIZATION="Token " + "0" * 40)

    assert [get().status_code for _ in range(3)] == [401, 401, 401]
    refused = get()
    assert (refused.status_code, refused.json()["code"]) == (429, "throttled")
    assert 0 < int(refused["Retry-After"]) <= longest_wait


@pytest.mark.django_db(transaction=True)
def test_wrong_tokens_sent_to_health_lock_nobody_out():
    """A load balancer or anyone else may probe /api/health/ with whatever header it carries:
    health needs no authentication, so a wrong token there is not a failed login, and the
    address's real token still works on the rest of the API."""
    token = Token.objects.create(user=make_user("eve"))
    result = run_in_child(
        """
        import os
        wrong = {client.get("/api/health/", HTTP_AUTHORIZATION="Token " + "0" * 40).status_code
                 for _ in range(10)}
        right = client.get("/api/jobs/", HTTP_AUTHORIZATION="Token " + os.environ["TEST_TOKEN"])
        print(json.dumps({"wrong": sorted(wrong), "right": right.status_code}))
        """,
        DATABASE_URL=database_url(),
        AUTH_FAILURE_RATE="3/minute",
        TEST_TOKEN=token.key,
    )
    assert result == {"wrong": [200], "right": 200}
    assert cache.get(KEY_PREFIX + "127.0.0.1") is None
