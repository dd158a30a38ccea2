"""demo.* job types exist only where settings.DEMO_JOB_TYPES says (on with DEBUG, off in production)."""

import pytest

from tests.api.conftest import run_in_child

PRODUCTION = {
    "DJANGO_SETTINGS_MODULE": "jobsite.settings",
    "DEBUG": "0",
    "SECRET_KEY": "test-secret-key-long-enough-for-the-deployment-checks-0123456789abcdef",
}
SCRIPT = """
from queue_app.handlers import registered_types
print(json.dumps(sorted(t for t in registered_types() if t.startswith("demo."))))
"""
DEMO = ["demo.echo", "demo.fail", "demo.sleep"]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, []),
        ({"DEMO_JOB_TYPES": "1"}, DEMO),
        ({"DEBUG": "1"}, DEMO),
        ({"DEBUG": "1", "DEMO_JOB_TYPES": "0"}, []),
    ],
    ids=["production", "production-opted-in", "debug", "debug-opted-out"],
)
def test_demo_types_are_registered_only_when_the_setting_says(env, expected):
    assert run_in_child(SCRIPT, **{**PRODUCTION, "DEMO_JOB_TYPES": "", **env}) == expected
