"""DATABASE_PGBOUNCER=1: what PgBouncer's transaction pooling cannot carry is turned off
where Django reads it (docs/how-to/scale-out.md, "PgBouncer")."""

import json
import subprocess
import sys

import pytest

from tests.helpers import child_env

READ_SETTINGS = """
import json, django
django.setup()
from django.conf import settings
from django.db import connection
print(json.dumps({
    "pgbouncer": settings.DATABASE_PGBOUNCER,
    "server_side_cursors_off": connection.settings_dict.get("DISABLE_SERVER_SIDE_CURSORS", False),
    "prepare_threshold": connection.settings_dict["OPTIONS"].get("prepare_threshold", "unset"),
}))
"""


def database_settings(**env: str) -> dict:
    command = [sys.executable, "-c", READ_SETTINGS]
    result = subprocess.run(command, env=child_env(**env), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1", {"pgbouncer": True, "server_side_cursors_off": True, "prepare_threshold": None}),
        ("0", {"pgbouncer": False, "server_side_cursors_off": False, "prepare_threshold": "unset"}),
    ],
)
def test_pgbouncer_mode_turns_off_server_side_cursors_and_prepared_statements(value, expected):
    assert database_settings(DATABASE_PGBOUNCER=value) == expected
