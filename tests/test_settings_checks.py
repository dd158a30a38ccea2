"""JOBQUEUE validation: a bad value is the system check queue_app.E001, naming the key.

Checked the way Django's own check-framework tests do (tests/check_framework in
Django: ``call_command("check")`` raising ``SystemCheckError``), then through real
commands, which run the checks before they start.
"""

import subprocess

import pytest
from django.core import checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from queue_app.conf import queue_settings
from tests.helpers import child_env, manage

BAD_VALUES = [
    ({"LEASE_SECONDS": "soon"}, "JOBQUEUE['LEASE_SECONDS'] must be a number, not 'soon'"),
    ({"RELAY_BATCH_SIZE": 0}, "JOBQUEUE['RELAY_BATCH_SIZE'] must be greater than 0, not 0"),
    ({"RELAY_BATCH_SIZE": "2.5"}, "JOBQUEUE['RELAY_BATCH_SIZE'] must be a whole number, not '2.5'"),
    ({"RELAY_BATCH_SIZE": float("inf")}, "JOBQUEUE['RELAY_BATCH_SIZE'] must be a whole number, not inf"),
    ({"LEASE_SECONDS": "nan"}, "JOBQUEUE['LEASE_SECONDS'] must be a finite number, not 'nan'"),
    ({"RELAY_POLL_SECONDS": "inf"}, "JOBQUEUE['RELAY_POLL_SECONDS'] must be a finite number, not 'inf'"),
    ({"RELAY_POLL_SECONDS": "1e300"}, "JOBQUEUE['RELAY_POLL_SECONDS'] must be at most 315360000 (ten years)"),
    ({"RETRY_BACKOFF_MAX_SECONDS": -1}, "JOBQUEUE['RETRY_BACKOFF_MAX_SECONDS'] must be greater than 0"),
    ({"LEASE_RESCUE_SECONDS": 0}, "JOBQUEUE['LEASE_RESCUE_SECONDS'] must be greater than 0"),
    ({"LEASE_RESCUE_SECONDS": "often"}, "JOBQUEUE['LEASE_RESCUE_SECONDS'] must be a number, not 'often'"),
    ({"LEASE_SECONDZ": 30}, "JOBQUEUE: unknown key(s) LEASE_SECONDZ"),
    ({"QUEUES": "default,bulk:lifo"}, "JOBQUEUE['QUEUES']: unknown mode 'lifo' for 'bulk'"),
    ({"QUEUES": {"no spaces": {}}}, "JOBQUEUE['QUEUES']: invalid queue name 'no spaces'"),
    (
        {"LEASE_SECONDS": 10, "HEARTBEAT_SECONDS": 10},
        "JOBQUEUE['HEARTBEAT_SECONDS'] must be shorter than LEASE_SECONDS",
    ),
    (
        {"LEASE_SECONDS": 10, "HEARTBEAT_SECONDS": 30},
        "JOBQUEUE['HEARTBEAT_SECONDS'] must be shorter than LEASE_SECONDS",
    ),
    # The default lease is 60 s: a heartbeat of 60 s alone is already too long.
    ({"HEARTBEAT_SECONDS": 60}, "JOBQUEUE['HEARTBEAT_SECONDS'] must be shorter than LEASE_SECONDS"),
    ({"METRICS_ENABLED": "maybe"}, "JOBQUEUE['METRICS_ENABLED'] must be a boolean (1/0, true/false)"),
    ({"TRACING_ENABLED": 2}, "JOBQUEUE['TRACING_ENABLED'] must be a boolean (1/0, true/false)"),
    ({"METRICS_TOKEN": 1234}, "JOBQUEUE['METRICS_TOKEN'] must be a string"),
    ({"MAX_SNOOZES": 0}, "JOBQUEUE['MAX_SNOOZES'] must be greater than 0, not 0"),
    ({"MAX_SNOOZES": "many"}, "JOBQUEUE['MAX_SNOOZES'] must be a whole number, not 'many'"),
    ({"PROGRESS_MIN_INTERVAL_SECONDS": -1}, "JOBQUEUE['PROGRESS_MIN_INTERVAL_SECONDS'] must be greater"),
    ({"PROGRESS_MIN_INTERVAL_SECONDS": "nan"}, "JOBQUEUE['PROGRESS_MIN_INTERVAL_SECONDS'] must be a finite"),
    ({"JOB_LOG_LINES_PER_SECOND": 0}, "JOBQUEUE['JOB_LOG_LINES_PER_SECOND'] must be greater than 0, not 0"),
    # A fraction for a whole number is refused, not cut (int(2.5) would be 2).
    ({"JOB_LOG_LINES_PER_SECOND": 2.5}, "JOBQUEUE['JOB_LOG_LINES_PER_SECOND'] must be a whole number"),
    # A brace would make the prefix the keys' Redis Cluster hash tag instead of the queue name.
    ({"REDIS_KEY_PREFIX": "{site}:"}, "JOBQUEUE['REDIS_KEY_PREFIX'] must not contain { or }"),
    ({"REDIS_KEY_PREFIX": "site }"}, "JOBQUEUE['REDIS_KEY_PREFIX'] must not contain { or }"),
    ({"REDIS_KEY_PREFIX": "my site:"}, "JOBQUEUE['REDIS_KEY_PREFIX'] must not contain spaces or control"),
    ({"REDIS_KEY_PREFIX": 7}, "JOBQUEUE['REDIS_KEY_PREFIX'] must be a string, not 7"),
]


def queue_errors() -> list[checks.CheckMessage]:
    return [message for message in checks.run_checks() if message.id.startswith("queue_app.")]


@pytest.mark.parametrize(("jobqueue", "message"), BAD_VALUES)
def test_a_bad_value_is_error_e001_naming_the_key(settings, jobqueue, message):
    settings.JOBQUEUE = jobqueue
    (error,) = queue_errors()
    assert error.id == "queue_app.E001" and error.level == checks.ERROR
    assert error.msg.startswith(message)
    with pytest.raises(SystemCheckError, match=r"queue_app\.E001"):
        call_command("check")


def test_a_heartbeat_just_shorter_than_the_lease_is_accepted(settings):
    settings.JOBQUEUE = {"LEASE_SECONDS": 10, "HEARTBEAT_SECONDS": 9.9}
    assert queue_errors() == []


def test_values_from_the_environment_are_strings_and_coerced(settings):
    settings.JOBQUEUE = {"LEASE_SECONDS": "30", "HEARTBEAT_SECONDS": "2.5", "QUEUES": "default,bulk:fifo"}
    assert queue_errors() == []


@pytest.mark.parametrize(("value", "expected"), [("1", True), ("off", False), ("TRUE", True), (False, False)])
def test_switches_accept_booleans_and_their_environment_spellings(settings, value, expected):
    settings.JOBQUEUE = {"METRICS_ENABLED": value, "TRACING_ENABLED": value, "METRICS_TOKEN": "t"}
    assert queue_errors() == []
    assert (queue_settings().METRICS_ENABLED, queue_settings().TRACING_ENABLED) == (expected, expected)


def test_an_empty_switch_keeps_its_default(settings):
    settings.JOBQUEUE = {"METRICS_ENABLED": "", "DISPATCH_ON_COMMIT": "", "TRACING_ENABLED": ""}
    assert queue_errors() == []
    switches = queue_settings()
    assert switches.METRICS_ENABLED and switches.DISPATCH_ON_COMMIT and not switches.TRACING_ENABLED


@pytest.mark.processes
@pytest.mark.parametrize(
    "command", [("runworker", "--burst"), ("runrelay", "--once"), ("reconcile_queue",), ("runsystem",)]
)
@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("JOBQUEUE_LEASE_SECONDS", "soon", "JOBQUEUE['LEASE_SECONDS'] must be a number, not 'soon'"),
        ("JOBQUEUE_LEASE_SECONDS", "nan", "JOBQUEUE['LEASE_SECONDS'] must be a finite number, not 'nan'"),
        ("JOBQUEUE_HEARTBEAT_SECONDS", "60", "JOBQUEUE['HEARTBEAT_SECONDS'] must be shorter than LEASE"),
    ],
)
def test_every_command_stops_at_start_up_with_the_check_error(command, variable, value, message):
    env = child_env(**{variable: value})
    process = manage(*command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 1
    # The system check's report, not a traceback from whatever read the settings first.
    assert "Traceback" not in stderr
    assert f"(queue_app.E001) {message}" in stderr
    assert "Started" not in stdout
