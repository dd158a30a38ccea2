"""Every rule of POST /api/jobs/: a 4xx naming the field, and nothing written.

Bodies given as str are sent raw, to reach the JSON parser with input that
json.dumps would never produce (deep nesting, lone surrogates, NaN, ...).
"""

import json
import sys

import pytest

from tests.api.conftest import post_json, rows_written, submit

pytestmark = pytest.mark.redis

DEEP = "[" * 5000 + "]" * 5000


def _nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


# (body, expected status, field named in "errors" or None)
CASES = {
    "type missing": ({"payload": {}}, 400, "type"),
    "type unregistered": ({"type": "no.such.type"}, 400, "type"),
    "type a dotted import path": ({"type": "os.system"}, 400, "type"),
    "type a path to a real function": ({"type": "queue_app.demo.echo"}, 400, "type"),
    "type not a string": ({"type": 123}, 400, "type"),
    "type empty": ({"type": ""}, 400, "type"),
    "type with NUL": ({"type": "demo.echo\u0000"}, 400, "type"),
    "payload a list": ({"type": "demo.echo", "payload": [1, 2]}, 400, "payload"),
    "payload a string": ({"type": "demo.echo", "payload": "{}"}, 400, "payload"),
    "payload null": ({"type": "demo.echo", "payload": None}, 400, "payload"),
    "payload deeper than the limit": ({"type": "demo.echo", "payload": _nested(33)}, 400, "payload"),
    "payload with NUL in a value": ({"type": "demo.echo", "payload": {"a": "x\u0000y"}}, 400, "payload"),
    "payload with NUL in a key": ({"type": "demo.echo", "payload": {"a\u0000": 1}}, 400, "payload"),
    "payload integer beyond 64 bits": ({"type": "demo.echo", "payload": {"n": 2**64}}, 400, "payload"),
    "payload larger than 256 KiB": ({"type": "demo.echo", "payload": {"x": "a" * 262_144}}, 413, "payload"),
    "priority unknown": ({"type": "demo.echo", "priority": "urgent"}, 400, "priority"),
    "priority above 100": ({"type": "demo.echo", "priority": 101}, 400, "priority"),
    "priority below -100": ({"type": "demo.echo", "priority": -101}, 400, "priority"),
    "priority a float": ({"type": "demo.echo", "priority": 1.5}, 400, "priority"),
    "priority a boolean": ({"type": "demo.echo", "priority": True}, 400, "priority"),
    "priority a numeric string": ({"type": "demo.echo", "priority": "5"}, 400, "priority"),
    "queue not configured": ({"type": "demo.echo", "queue": "nope"}, 400, "queue"),
    "queue not a string": ({"type": "demo.echo", "queue": ["default"]}, 400, "queue"),
    "max_attempts 0": ({"type": "demo.echo", "max_attempts": 0}, 400, "max_attempts"),
    "max_attempts 101": ({"type": "demo.echo", "max_attempts": 101}, 400, "max_attempts"),
    "max_attempts a string": ({"type": "demo.echo", "max_attempts": "5"}, 400, "max_attempts"),
    "max_attempts a boolean": ({"type": "demo.echo", "max_attempts": True}, 400, "max_attempts"),
    "max_attempts a float": ({"type": "demo.echo", "max_attempts": 2.5}, 400, "max_attempts"),
    "max_attempts huge": ({"type": "demo.echo", "max_attempts": 10**40}, 400, "max_attempts"),
    "run_at without an offset": ({"type": "demo.echo", "run_at": "2030-01-01T09:00:00"}, 400, "run_at"),
    "run_at not a date": ({"type": "demo.echo", "run_at": "tomorrow"}, 400, "run_at"),
    "run_at an impossible date": ({"type": "demo.echo", "run_at": "2030-02-30T00:00:00Z"}, 400, "run_at"),
    "run_at a number": ({"type": "demo.echo", "run_at": 1893456000}, 400, "run_at"),
    # Python's fromisoformat reads both as 2030-01-01T00:00:00Z.
    "run_at with NUL": ({"type": "demo.echo", "run_at": "2030-01-01T00:00:00\u0000Z"}, 400, "run_at"),
    "run_at with a stray letter": ({"type": "demo.echo", "run_at": "2030-01-01T00:00:00xZ"}, 400, "run_at"),
    "run_at out of range in UTC": (
        {"type": "demo.echo", "run_at": "0001-01-01T00:00:00+05:00"},
        400,
        "run_at",
    ),
    "delay_seconds negative": ({"type": "demo.echo", "delay_seconds": -1}, 400, "delay_seconds"),
    "delay_seconds a string": ({"type": "demo.echo", "delay_seconds": "10"}, 400, "delay_seconds"),
    "delay_seconds a boolean": ({"type": "demo.echo", "delay_seconds": True}, 400, "delay_seconds"),
    "delay_seconds beyond a century": ({"type": "demo.echo", "delay_seconds": 1e12}, 400, "delay_seconds"),
    "delay_seconds a huge integer": ({"type": "demo.echo", "delay_seconds": 10**400}, 400, "delay_seconds"),
    # 2020-01-01 + 2**53 µs: one µs past the last exactly ordered enqueue time.
    "run_at beyond the score range": (
        {"type": "demo.echo", "run_at": "2305-06-05T23:47:34.740992Z"},
        400,
        "run_at",
    ),
    "run_at in 2400": ({"type": "demo.echo", "run_at": "2400-01-31T09:00:00+02:00"}, 400, "run_at"),
    "run_at and delay_seconds": (
        {"type": "demo.echo", "run_at": "2030-01-01T00:00:00Z", "delay_seconds": 5},
        400,
        "run_at",
    ),
    "idempotency_key empty": ({"type": "demo.echo", "idempotency_key": ""}, 400, "idempotency_key"),
    "idempotency_key 256 chars": (
        {"type": "demo.echo", "idempotency_key": "k" * 256},
        400,
        "idempotency_key",
    ),
    "idempotency_key a number": ({"type": "demo.echo", "idempotency_key": 7}, 400, "idempotency_key"),
    "idempotency_key with NUL": ({"type": "demo.echo", "idempotency_key": "a\u0000"}, 400, "idempotency_key"),
    "unknown field": ({"type": "demo.echo", "priorty": "high"}, 400, "priorty"),
    "body a list": ([{"type": "demo.echo"}], 400, "non_field_errors"),
    "body null": ("null", 400, None),
    "malformed JSON": ('{"type": "demo.echo",', 400, None),
    "trailing garbage": ('{"type": "demo.echo"} x', 400, None),
    "JSON nested 5000 deep": ('{"type": "demo.echo", "payload": {"a": ' + DEEP + "}}", 400, None),
    "JSON nested 900 deep": (
        '{"type": "demo.echo", "payload": {"a": ' + "[" * 900 + "]" * 900 + "}}",
        400,
        "payload",
    ),
    "lone surrogate in payload": ('{"type": "demo.echo", "payload": {"a": "\\ud800"}}', 400, "payload"),
    "lone surrogate in payload key": ('{"type": "demo.echo", "payload": {"\\udfff": 1}}', 400, "payload"),
    "lone surrogate in type": ('{"type": "demo.\\ud800"}', 400, "type"),
    "lone surrogate in priority": ('{"type": "demo.echo", "priority": "\\ud800"}', 400, "priority"),
    "lone surrogate in key": ('{"type": "demo.echo", "idempotency_key": "\\ud800"}', 400, "idempotency_key"),
    "lone surrogate in a field name": ('{"type": "demo.echo", "\\ud800": 1}', 400, "\\ud800"),
    "integer with 5000 digits": ('{"type": "demo.echo", "payload": {"n": ' + "9" * 5000 + "}}", 400, None),
    "NaN": ('{"type": "demo.echo", "payload": {"n": NaN}}', 400, None),
    "Infinity": ('{"type": "demo.echo", "payload": {"n": -Infinity}}', 400, None),
    "number overflowing to infinity": ('{"type": "demo.echo", "payload": {"n": 1e999}}', 400, None),
    "invalid UTF-8": (b'{"type": "demo.echo", "payload": {"a": "\xff\xfe"}}', 400, None),
    "a field sent twice": ('{"type": "demo.echo", "type": "demo.fail"}', 400, "type"),
    "a payload key sent twice": ('{"type": "demo.echo", "payload": {"a": 1, "a": 2}}', 400, "payload"),
}


@pytest.mark.django_db
@pytest.mark.parametrize("body, status, field", CASES.values(), ids=CASES.keys())
def test_invalid_request_is_rejected_and_writes_nothing(api, body, status, field):
    response = post_json(api, "/api/jobs/", body)

    assert response.status_code == status, response.content[:500]
    error = response.json()
    assert error["code"] and error["detail"]
    if field is not None:
        assert field in error["errors"], error
        assert error["detail"].startswith(field) or field == "non_field_errors", error
    assert rows_written() == (0, 0, 0)


@pytest.mark.django_db
def test_a_dotted_type_is_looked_up_never_imported(api):
    assert "this" not in sys.modules  # importing it prints the Zen of Python
    response = submit(api, type="this.s")

    assert response.status_code == 400
    assert response.json()["code"] == "unknown_type"
    assert "this" not in sys.modules


@pytest.mark.django_db
def test_payload_limits_follow_the_settings(api, queue_config):
    queue_config(MAX_PAYLOAD_BYTES=100, MAX_PAYLOAD_DEPTH=3)

    assert submit(api, payload={"x": "a" * 80}).status_code == 201
    too_big = submit(api, payload={"x": "a" * 120})
    too_deep = submit(api, payload={"a": {"b": {"c": {}}}})

    assert (too_big.status_code, too_big.json()["code"]) == (413, "payload_too_large")
    assert too_deep.status_code == 400 and "payload" in too_deep.json()["errors"]


@pytest.mark.django_db
def test_the_payload_limit_counts_floats_as_they_read_back(api, queue_config):
    """jsonb keeps 1e300 as a numeric and prints it as 301 digits: 6 bytes sent, 301 read back.
    Counted as sent, a payload of such numbers under the limit read back 44 times over it."""
    queue_config(MAX_PAYLOAD_BYTES=2000)

    too_big = submit(api, payload={"n": [1e300] * 10})  # 70 bytes as sent, 3,019 read back
    assert (too_big.status_code, too_big.json()["code"]) == (413, "payload_too_large")
    assert "payload" in too_big.json()["errors"]
    assert rows_written() == (0, 0, 0)

    fits = submit(api, payload={"n": [1e300, -2.5e-300, 1.5e16, 0.25]})
    assert fits.status_code == 201, fits.content
    read_back = api.get(f"/api/jobs/{fits.json()['id']}/").json()["payload"]
    assert len(json.dumps(read_back, separators=(",", ":"))) <= 2000


@pytest.mark.django_db
def test_a_body_beyond_the_request_limit_is_413(api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 0  # the limit is then 2 x MAX_PAYLOAD_BYTES + 64 KiB
    response = post_json(api, "/api/jobs/", {"type": "demo.echo", "payload": {"x": "a" * 700_000}})

    assert response.status_code == 413
    assert response.json()["code"] == "request_too_large"
    assert rows_written() == (0, 0, 0)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "content_type, body",
    [
        ("application/x-www-form-urlencoded", "type=demo.echo"),
        ("text/plain", '{"type": "demo.echo"}'),
        ("multipart/form-data; boundary=x", "--x--"),
    ],
)
def test_a_body_that_is_not_json_is_415(api, content_type, body):
    response = api.post("/api/jobs/", data=body, content_type=content_type)

    assert response.status_code == 415
    assert response.json()["code"] == "unsupported_media_type"
    assert rows_written() == (0, 0, 0)


@pytest.mark.django_db
def test_an_unsupported_charset_is_400(api):
    response = api.post("/api/jobs/", data=b"{}", content_type="application/json; charset=bz2_codec")

    assert response.status_code == 400
    assert rows_written() == (0, 0, 0)


@pytest.mark.django_db
def test_header_idempotency_key_is_validated_like_the_field(api):
    job = {"type": "demo.echo"}
    too_long = post_json(api, "/api/jobs/", job, HTTP_IDEMPOTENCY_KEY="k" * 256)
    mismatch = post_json(api, "/api/jobs/", {**job, "idempotency_key": "a"}, HTTP_IDEMPOTENCY_KEY="b")

    assert too_long.status_code == 400 and "idempotency_key" in too_long.json()["errors"]
    assert mismatch.status_code == 400 and "idempotency_key" in mismatch.json()["errors"]
    assert rows_written() == (0, 0, 0)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("url", "body", "field", "detail"),
    [
        (
            "/api/jobs/",
            '{"type": "demo.echo", "queue": "default", "queue": "emails"}',
            "queue",
            "queue: The key 'queue' appears more than once in the body; send it once.",
        ),
        (
            "/api/jobs/",
            '{"type": "demo.echo", "payload": {"to": {"id": 1, "id": 2}}}',
            "payload",
            "payload: The key 'id' appears more than once in payload.to; send it once.",
        ),
        (
            "/api/jobs/bulk/",
            '{"jobs": [{"type": "demo.echo"}, {"type": "demo.echo", "type": "demo.fail"}]}',
            "jobs",
            "jobs: The key 'type' appears more than once in jobs.1; send it once.",
        ),
    ],
)
def test_a_key_sent_twice_is_refused_naming_it(api, url, body, field, detail):
    """RFC 8259 section 4: names within an object SHOULD be unique, and readers differ on
    duplicates (Python keeps the last, others the first or refuse): the job run would not be
    the one a proxy or a log reader saw. Refused, naming the key and where it is."""
    response = post_json(api, url, body)

    assert response.status_code == 400, response.content
    assert response.json()["errors"] == {field: [detail.removeprefix(f"{field}: ")]}
    assert response.json()["detail"] == detail
    assert rows_written() == (0, 0, 0)
