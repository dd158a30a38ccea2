"""Property-based run of the API against its own OpenAPI schema (schemathesis).

Every operation gets generated requests (valid and invalid per the schema,
and once more without credentials); no response may be a 5xx or disagree with
the schema in status code, content type, headers or body.
"""

import zlib

import pytest
import schemathesis
from django.contrib.auth.models import Permission
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from rest_framework.authtoken.models import Token
from schemathesis.checks import CHECKS
from schemathesis.specs.openapi import checks as openapi_checks

from queue_app import services
from tests.api.conftest import make_user

pytestmark = pytest.mark.redis

CONFORMANCE_CHECKS = [
    CHECKS.get_one("not_a_server_error"),
    openapi_checks.status_code_conformance,
    openapi_checks.content_type_conformance,
    openapi_checks.response_headers_conformance,
    openapi_checks.response_schema_conformance,
    openapi_checks.ignored_auth,
]

# Loaded from the running application, so the schema is the one it serves.
schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", get_wsgi_application())


@pytest.fixture(autouse=True)
def keep_the_test_connection():
    """Django closes the database connection when a request finishes; its test
    client suspends that, and so must a test that calls the WSGI app directly."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture
def fuzzer(db):
    """A staff user who may view every job, so that /api/stats/ is reached too."""
    user = make_user("fuzzer", staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_job"))
    return user


@pytest.fixture
def token_header(fuzzer) -> dict[str, str]:
    return {"Authorization": f"Token {Token.objects.create(user=fuzzer).key}"}


@pytest.fixture
def known_job_id(fuzzer) -> str:
    return str(services.enqueue_job("demo.echo", {"n": 1}, owner=fuzzer).id)


@pytest.mark.django_db
@schema.parametrize()
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.function_scoped_fixture,
    ],
)
def test_api_conforms_to_its_schema(case, token_header, known_job_id):
    # Random ids only ever find nothing: aim half of them at a real job, so that
    # retrieve, logs, cancel and retry answer 200 and 409 too.
    if (
        case.path_parameters
        and "id" in case.path_parameters
        and zlib.crc32(repr(case.path_parameters["id"]).encode()) % 2
    ):
        case.path_parameters["id"] = known_job_id
    case.call_and_validate(headers=token_header, checks=CONFORMANCE_CHECKS)
