"""A bad environment setting stops ``manage.py`` with one line naming it, not a traceback
(or, for the pool, a failure at the first query)."""

import subprocess

import pytest

from tests.helpers import child_env, manage


def check(**env: str) -> subprocess.CompletedProcess:
    process = manage("check", env=child_env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = process.communicate(timeout=60)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DATABASE_POOL_MIN_SIZE": "abc"}, "DATABASE_POOL_MIN_SIZE must be an integer >= 0, not 'abc'."),
        ({"DATABASE_POOL_MAX_SIZE": "0"}, "DATABASE_POOL_MAX_SIZE must be an integer >= 1, not '0'."),
        (
            {"DATABASE_POOL_MIN_SIZE": "5", "DATABASE_POOL_MAX_SIZE": "2"},
            "DATABASE_POOL_MIN_SIZE (5) must not be above DATABASE_POOL_MAX_SIZE (2).",
        ),
        (
            {"DATABASE_POOL_TIMEOUT": "ten"},
            "DATABASE_POOL_TIMEOUT must be a number > 0 and <= 3600, not 'ten'.",
        ),
        (
            {"DATABASE_POOL_TIMEOUT": "-1"},
            "DATABASE_POOL_TIMEOUT must be a number > 0 and <= 3600, not '-1'.",
        ),
        (
            {"DATABASE_POOL_TIMEOUT": "nan"},
            "DATABASE_POOL_TIMEOUT must be a number > 0 and <= 3600, not 'nan'.",
        ),
        ({"SECURE_HSTS_SECONDS": "1y"}, "SECURE_HSTS_SECONDS must be an integer >= 0, not '1y'."),
        (
            {"LOG_LEVEL": "verbose"},
            "LOG_LEVEL must be DEBUG, INFO, WARNING, ERROR or CRITICAL, not 'verbose'.",
        ),
    ],
)
def test_a_bad_value_stops_manage_py_with_one_line_naming_it(env, message):
    done = check(**env)
    assert done.returncode == 1
    assert done.stderr == f"manage.py: {message}\n"


def test_good_values_pass():
    done = check(
        DATABASE_POOL_MIN_SIZE="0",
        DATABASE_POOL_MAX_SIZE="1",
        DATABASE_POOL_TIMEOUT="2.5",
        LOG_LEVEL="warning",
    )
    assert done.returncode == 0, done.stderr
