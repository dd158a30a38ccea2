"""The app's events follow the project's logging: its structlog configuration when it has one,
else the standard library loggers ``queue_app.*`` that its LOGGING governs.

structlog's own default, in a project that configures nothing, prints every event, debug ones
included, to stdout: a host project's shell printed ``[debug] job_enqueued`` after each enqueue.
"""

from collections.abc import Iterator

import pytest
import structlog
from structlog.testing import capture_logs

from queue_app.observability.logs import get_logger
from queue_app.services import enqueue_job


@pytest.fixture
def unconfigured_structlog() -> Iterator[None]:
    """structlog as a project that never configured it has it; the suite's configuration after."""
    saved = structlog.get_config()
    structlog.reset_defaults()
    try:
        yield
    finally:
        structlog.configure(**saved)


@pytest.mark.django_db
@pytest.mark.redis
def test_without_structlog_configured_an_enqueue_prints_nothing(unconfigured_structlog, capsys, caplog):
    with caplog.at_level("INFO", logger="queue_app"):
        enqueue_job("demo.echo", {"hi": 1})

    assert capsys.readouterr() == ("", "")
    assert [r for r in caplog.records if r.name.startswith("queue_app")] == []  # job_enqueued is DEBUG


@pytest.mark.django_db
@pytest.mark.redis
def test_without_structlog_configured_events_are_standard_library_records(unconfigured_structlog, caplog):
    with caplog.at_level("DEBUG", logger="queue_app"):
        job = enqueue_job("demo.echo", {"hi": 1}, queue="default")

    (record,) = [r for r in caplog.records if r.name == "queue_app.engine.enqueue"]
    assert record.levelname == "DEBUG"
    assert record.getMessage() == (
        f"job_enqueued job_id={job.id} type=demo.echo queue=default priority=medium"
    )


def test_an_exception_reaches_the_standard_library_record(unconfigured_structlog, caplog):
    log = get_logger("queue_app.test")
    with caplog.at_level("ERROR", logger="queue_app"):
        try:
            raise ValueError("broken")
        except ValueError:
            log.error("handler_crashed", exc_info=True, job_id="j1")

    (record,) = caplog.records
    assert record.getMessage() == "handler_crashed job_id=j1"
    assert record.exc_info[0] is ValueError


def test_with_structlog_configured_the_configuration_takes_the_events(capsys, caplog):
    with capture_logs() as events:
        get_logger("queue_app.test").info("shown", queue="emails")

    assert events == [{"event": "shown", "queue": "emails", "log_level": "info"}]
    assert caplog.records == []
