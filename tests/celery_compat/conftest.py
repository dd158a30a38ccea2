"""Real runworker and runrelay processes for the Celery task modules, shared by this package.

The workers run the settings of ``mysite`` (a project that moved from Celery) with the
tutorials' folder on PYTHONPATH, so ``tasks`` and ``proj`` import as the tutorials name
them; this process puts the folder on sys.path to send their tasks.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import child_env, kill_group, manage

TUTORIALS = Path(__file__).resolve().parent / "tutorials"
if str(TUTORIALS) not in sys.path:
    sys.path.insert(0, str(TUTORIALS))

QUEUES = "default,mail,lopri"


@pytest.fixture(autouse=True)
def _celery_queues(queue_config):
    """The shop sends mail on its own queue; the Next Steps tutorial routes to "lopri"."""
    queue_config(QUEUES=QUEUES)


@pytest.fixture(scope="package")
def mail_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("shop-mail")


@pytest.fixture(scope="module")
def celery_workers(django_db_setup, django_db_blocker, mail_dir, tmp_path_factory):
    """One worker and one relay (retries reach Redis through it) for a module's tests. Not
    the package's: test_celery_api.py runs its jobs by hand and needs no worker taking them,
    wherever it falls in the order the tests run in."""
    logs = tmp_path_factory.mktemp("celery-logs")
    with django_db_blocker.unblock():
        env = child_env(
            DJANGO_SETTINGS_MODULE="tests.celery_compat.mysite.settings",
            PYTHONPATH=os.pathsep.join(filter(None, [str(TUTORIALS), os.environ.get("PYTHONPATH")])),
            JOBQUEUE_QUEUES=QUEUES,
            SHOP_MAIL_DIR=str(mail_dir),
        )
    started = []
    try:
        for command, args in (("runworker", ()), ("runrelay", ("--poll=0.2",))):
            with open(logs / f"{command}.log", "w") as log:
                started.append(manage(command, *args, env=env, stdout=log, stderr=subprocess.STDOUT))
        yield logs
    finally:
        for process in started:
            kill_group(process)
