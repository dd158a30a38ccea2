"""docker-compose.yml and Procfile: valid YAML, and every command one this project really runs.

No Docker engine runs in CI, so the files are checked statically: each ``manage.py`` command must
exist and accept its arguments (its own parser reads them), gunicorn must name an importable WSGI
application, and every service a service depends on must be defined.
"""

from __future__ import annotations

import importlib
import shlex

import pytest
import yaml
from django.core.management import get_commands, load_command_class

from tests.helpers import PROJECT_ROOT

COMPOSE = yaml.safe_load((PROJECT_ROOT / "docker-compose.yml").read_text())
PROCFILE = dict(
    line.split(":", 1) for line in (PROJECT_ROOT / "Procfile").read_text().splitlines() if line.strip()
)
STORE_IMAGES = {"postgres", "redis"}


def compose_commands() -> dict[str, list[str]]:
    commands = {}
    for name, service in COMPOSE["services"].items():
        if name in STORE_IMAGES:
            continue
        command = service["command"]
        commands[f"compose:{name}"] = shlex.split(command) if isinstance(command, str) else command
    return commands


def procfile_commands() -> dict[str, list[str]]:
    return {f"Procfile:{name}": shlex.split(line.replace("$PORT", "8000")) for name, line in PROCFILE.items()}


ALL_COMMANDS = {**compose_commands(), **procfile_commands()}


@pytest.mark.parametrize("where", sorted(ALL_COMMANDS))
def test_every_process_runs_a_real_command(where):
    argv = ALL_COMMANDS[where]
    if argv[:2] == ["python", "manage.py"]:
        name, args = argv[2], argv[3:]
        assert name in get_commands(), f"{where}: manage.py has no command {name!r}"
        command = load_command_class(get_commands()[name], name)
        # The command's own parser: an unknown option or a bad value exits with an error.
        command.create_parser("manage.py", name).parse_args(args)
    else:
        assert argv[0] == "gunicorn", f"{where}: expected manage.py or gunicorn, got {argv[0]!r}"
        module, _, attribute = argv[1].partition(":")
        assert hasattr(importlib.import_module(module), attribute or "application")


def test_compose_starts_every_part_of_the_system():
    services = COMPOSE["services"]
    expected = {"postgres", "redis", "migrate", "web", "relay", "worker", "scheduler", "reconciler"}
    assert expected <= set(services)
    assert services["web"]["command"][0] == "gunicorn"
    assert services["reconciler"]["command"][2:4] == ["reconcile_queue", "--loop"]
    assert set(PROCFILE) >= {"web", "relay", "worker", "scheduler", "reconciler", "release"}


def test_stores_and_web_have_health_checks_and_dependencies_exist():
    services = COMPOSE["services"]
    for name in ("postgres", "redis", "web"):
        assert services[name]["healthcheck"]["test"], name
    for name, service in services.items():
        for dependency, condition in service.get("depends_on", {}).items():
            assert dependency in services, f"{name} depends on an undefined service {dependency}"
            if condition["condition"] == "service_healthy":
                assert "healthcheck" in services[dependency], f"{dependency} has no health check"


def test_web_health_check_probes_the_health_endpoint():
    probe = " ".join(COMPOSE["services"]["web"]["healthcheck"]["test"])
    assert "/api/health/" in probe
