"""The OpenAPI schema is valid, public and describes the running system; Swagger UI needs no CDN."""

import io
import re

import pytest
from django.contrib.staticfiles import finders
from django.core.management import call_command

from queue_app.handlers import registered_types

OPERATIONS = {
    ("/api/jobs/", "get"),
    ("/api/jobs/", "post"),
    ("/api/jobs/bulk/", "post"),
    ("/api/jobs/{id}/", "get"),
    ("/api/jobs/{id}/logs/", "get"),
    ("/api/jobs/{id}/cancel/", "post"),
    ("/api/jobs/{id}/retry/", "post"),
    ("/api/queues/", "get"),
    ("/api/queues/{name}/", "get"),
    ("/api/queues/{name}/", "patch"),
    ("/api/queues/{name}/pause/", "post"),
    ("/api/queues/{name}/resume/", "post"),
    ("/api/stats/", "get"),
    ("/api/health/", "get"),
    ("/api/workflows/", "post"),
    ("/api/workflows/{id}/", "get"),
    ("/api/workflows/{id}/cancel/", "post"),
    ("/api/workflows/{id}/retry/", "post"),
}


def test_the_schema_generates_without_warnings_and_validates():
    out = io.StringIO()
    call_command("spectacular", "--validate", "--fail-on-warn", "--format", "openapi-json", stdout=out)

    assert '"openapi": "3.0.3"' in out.getvalue()


@pytest.mark.django_db
def test_the_schema_lists_every_operation_and_the_live_registry(client):
    schema = client.get("/api/schema/?format=json").json()

    operations = {(path, method) for path, item in schema["paths"].items() for method in item}
    assert operations == OPERATIONS
    create = schema["components"]["schemas"]["JobCreateRequest"]
    assert create["additionalProperties"] is False
    assert create["required"] == ["type"]
    assert schema["components"]["schemas"]["TypeEnum"]["enum"] == registered_types(public=True)
    assert "demo.echo" in registered_types(public=True)
    assert "django.task" in registered_types() and "django.task" not in registered_types(public=True)
    assert set(schema["components"]["securitySchemes"]) == {"tokenAuth", "cookieAuth"}
    # Credentials are optional on health (staff see the errors).
    assert schema["paths"]["/api/health/"]["get"]["security"] == [{"tokenAuth": []}, {"cookieAuth": []}, {}]
    post = schema["paths"]["/api/jobs/"]["post"]
    assert {"200", "201", "400", "409", "413", "415", "422"} <= set(post["responses"])
    assert [p["name"] for p in post["parameters"]] == ["Idempotency-Key"]
    workflow = schema["components"]["schemas"]["WorkflowCreateRequest"]
    assert workflow["required"] == ["steps"]
    step = schema["components"]["schemas"]["WorkflowStepInRequest"]
    assert {"id", "type", "depends_on", "on_failure"} <= set(step["properties"])


@pytest.mark.django_db
def test_every_operation_that_needs_credentials_documents_401_and_403(client):
    schema = client.get("/api/schema/?format=json").json()

    missing = {
        (path, method): sorted({"401", "403"} - set(operation["responses"]))
        for path, item in schema["paths"].items()
        for method, operation in item.items()
        if {} not in operation.get("security", [])  # {}: anonymous callers allowed
    }
    assert {operation: codes for operation, codes in missing.items() if codes} == {}
    assert ("/api/queues/", "get") in missing and ("/api/queues/{name}/", "get") in missing


@pytest.mark.django_db
def test_the_configured_queues_are_the_schema_enum(client, queue_config):
    queue_config(QUEUES="default,emails:fifo")
    schema = client.get("/api/schema/?format=json").json()

    assert schema["components"]["schemas"]["QueueEnum"]["enum"] == ["default", "emails"]


@pytest.mark.django_db
def test_swagger_ui_is_served_from_local_static_files(client):
    response = client.get("/api/docs/")

    assert response.status_code == 200
    html = response.content.decode()
    # The start-up script comes from ?script (no inline script, for the Content-Security-Policy).
    assert '<script src="/api/docs/?script="></script>' in html
    assert "/api/schema/" in client.get("/api/docs/?script=").content.decode()
    assets = [asset for asset in re.findall(r'(?:src|href)="([^"]+)"', html) if asset != "/api/docs/?script="]
    assert len(assets) >= 3
    for asset in assets:
        assert asset.startswith("/static/"), asset  # nothing from another host
        assert finders.find(asset.removeprefix("/static/")), asset


@pytest.mark.django_db
def test_unknown_api_paths_are_json_404s(api):
    response = api.get("/api/nothing/here/")

    assert response.status_code == 404
    assert response.json() == {"code": "not_found", "detail": "Not found."}
