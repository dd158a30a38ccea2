"""cancel_job, retry_job and reenqueue_job called with ids that cannot name a job."""

import uuid

import pytest

from queue_app.exceptions import JobNotFound
from queue_app.models import JobLog
from queue_app.services import cancel_job, reenqueue_job, retry_job

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("action", [cancel_job, retry_job, reenqueue_job])
@pytest.mark.parametrize("job_id", ["nope", None, 123, "", uuid.UUID(int=0), str(uuid.UUID(int=0))])
def test_an_id_that_names_no_job_is_job_not_found(action, job_id):
    """Not DataError or ValidationError from the database: the caller (API, admin, code)
    handles one error for every id that names no job."""
    with pytest.raises(JobNotFound):
        action(job_id)
    assert not JobLog.objects.exists()
