"""The exception handler: database errors from input become 4xx, and every body can be encoded."""

import json

import pytest
from django.db import DataError, IntegrityError, connection, transaction

from queue_app.api.errors import exception_handler
from queue_app.exceptions import PayloadTooLarge, TransitionNotAllowed
from queue_app.models import Job


def _raised_by(sql: str) -> Exception:
    with pytest.raises(Exception) as caught, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql)
    return caught.value


@pytest.mark.django_db
def test_a_value_out_of_range_in_postgresql_is_400():
    error = _raised_by("SELECT 100000::smallint")
    assert isinstance(error, DataError)

    response = exception_handler(error, {})

    assert response.status_code == 400
    assert response.data["code"] == "invalid"


@pytest.mark.django_db
def test_a_unique_violation_is_409():
    Job.objects.create(type="demo.echo", max_attempts=1, idempotency_key="k")
    with pytest.raises(IntegrityError) as caught, transaction.atomic():
        Job.objects.create(type="demo.echo", max_attempts=1, idempotency_key="k")

    response = exception_handler(caught.value, {})

    assert (response.status_code, response.data["code"]) == (409, "conflict")


def test_recursion_is_400_and_other_errors_are_left_to_django():
    assert exception_handler(RecursionError(), {}).status_code == 400
    assert exception_handler(ZeroDivisionError(), {}) is None


def test_queue_errors_keep_their_status_code_and_field():
    too_large = exception_handler(PayloadTooLarge("larger than 10 bytes (12)", field="payload"), {})
    conflict = exception_handler(TransitionNotAllowed("cannot cancel a job that is completed"), {})

    assert too_large.status_code == 413
    assert too_large.data == {
        "code": "payload_too_large",
        "detail": "payload: larger than 10 bytes (12)",
        "errors": {"payload": ["larger than 10 bytes (12)"]},
    }
    assert conflict.status_code == 409 and "errors" not in conflict.data


def test_lone_surrogates_echoed_in_messages_are_escaped():
    response = exception_handler(PayloadTooLarge("bad \ud800 value", field="pay\udfffload"), {})

    assert response.data["detail"] == "pay\\udfffload: bad \\ud800 value"
    json.dumps(response.data, ensure_ascii=False).encode("utf-8")  # would raise on a lone surrogate
