"""``runweb --bind``: an address gunicorn would widen to every interface, or could not listen on,
is refused before gunicorn starts."""

from __future__ import annotations

import subprocess

import pytest

from tests.helpers import child_env, kill_group, manage

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize(
    "bind", ["", ":8000", "127.0.0.1", "127.0.0.1:notaport", "127.0.0.1:0", "127.0.0.1:65536", "unix:"]
)
def test_a_bad_bind_is_refused_naming_the_option(bind):
    process = manage(
        "runweb", f"--bind={bind}", env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        _, stderr = process.communicate(timeout=30)
    finally:
        kill_group(process)  # without the check, gunicorn would still be serving
    assert process.returncode == 1
    assert f"CommandError: --bind: expected HOST:PORT (port 1-65535) or unix:PATH, not {bind!r}" in (
        stderr.decode()
    )
