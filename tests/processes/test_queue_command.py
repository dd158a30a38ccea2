"""manage.py queue pause|resume|status|limit NAME."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from queue_app.models import QueueState

pytestmark = [pytest.mark.django_db, pytest.mark.redis]


def run(*args: str) -> str:
    out = StringIO()
    call_command("queue", *args, stdout=out)
    return out.getvalue()


def test_pause_resume_and_status():
    assert run("status") == "default: active, concurrency limit none, rate limit none\n"
    assert run("pause", "default") == "default: paused, concurrency limit none, rate limit none\n"
    assert QueueState.objects.get(name="default").paused
    assert run("resume", "default").startswith("default: active")
    assert not QueueState.objects.get(name="default").paused


def test_limit_sets_and_removes_each_limit():
    assert run("limit", "default", "--concurrency=3", "--rate=2.5").endswith(
        "concurrency limit 3, rate limit 2.5/s\n"
    )
    assert run("limit", "default", "--rate=none").endswith("concurrency limit 3, rate limit none\n")


def test_limit_sets_and_removes_the_per_key_limits():
    assert run("limit", "default", "--key-concurrency=2", "--key-rate=0.5").endswith(
        "rate limit none, per key: concurrency limit 2, rate limit 0.5/s\n"
    )
    assert run("limit", "default", "--key-concurrency=none", "--key-rate=none").endswith("rate limit none\n")
    assert QueueState.objects.get(name="default").key_concurrency_limit is None
    with pytest.raises(CommandError, match="--key-concurrency: must be a whole number"):
        run("limit", "default", "--key-concurrency=0")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("pause", "nope"), "name: unknown queue 'nope'"),
        (("pause",), "pause: name the queue"),
        (("limit", "default"), "limit: give --concurrency"),
        (("limit", "default", "--concurrency=0"), "--concurrency: must be a whole number"),
        (("limit", "default", "--rate=fast"), "--rate: expected a number or 'none'"),
        (("limit", "default", "--rate=0"), "--rate: must be .* or 'none' for no limit"),
        (
            ("pause", "default", "--concurrency=3"),
            "pause: --concurrency, --rate, --key-concurrency and --key-rate go with limit only",
        ),
        (
            ("status", "default", "--rate=5"),
            "status: --concurrency, --rate, --key-concurrency and --key-rate go with limit only",
        ),
    ],
)
def test_bad_input_names_the_argument(args, message):
    with pytest.raises(CommandError, match=message):
        run(*args)
    assert not QueueState.objects.filter(paused=True).exists()
    assert not QueueState.objects.exclude(concurrency_limit=None, rate_limit=None).exists()
