"""The documentation site builds strictly, and a broken page fails that build.

``./dev test`` runs the same strict build before pytest; these tests keep the gate honest: the
validation options in mkdocs.yml must turn a broken link or anchor into a failure (MkDocs'
own ``validation`` settings, https://www.mkdocs.org/user-guide/configuration/#validation).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.helpers import PROJECT_ROOT

DOCS = PROJECT_ROOT / "docs"


def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)]
    return subprocess.run(command, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=180)


def copy_of_the_site(tmp_path: Path) -> Path:
    """mkdocs.yml and docs/ copied to tmp_path, still reading the code from the repository."""
    config = yaml.safe_load((PROJECT_ROOT / "mkdocs.yml").read_text())
    shutil.copytree(DOCS, tmp_path / "docs")
    config["docs_dir"] = str(tmp_path / "docs")
    for plugin in config["plugins"]:
        if isinstance(plugin, dict) and "mkdocstrings" in plugin:
            plugin["mkdocstrings"]["handlers"]["python"]["paths"] = [str(PROJECT_ROOT)]
    path = tmp_path / "mkdocs.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_site_builds_strictly(tmp_path):
    done = build(PROJECT_ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "reference" / "python-api" / "index.html").exists()


def test_a_broken_anchor_a_missing_page_or_an_orphan_page_fails_the_build(tmp_path):
    config = copy_of_the_site(tmp_path)
    assert build(config, tmp_path / "site").returncode == 0  # the copy builds as the original does
    with open(tmp_path / "docs" / "reference" / "settings.md", "a") as page:
        page.write("\nSee [the lease](../explanation/architecture.md#no-such-section).\n")
        page.write("\nSee [the guide](../how-to/no-such-page.md).\n")
    (tmp_path / "docs" / "how-to" / "orphan.md").write_text("# Not in the nav\n")

    done = build(config, tmp_path / "site")
    assert done.returncode == 1
    # Each is a warning (so an error under --strict), not the INFO line MkDocs logs by default.
    warnings = "\n".join(line for line in done.stderr.splitlines() if line.startswith("WARNING"))
    assert "does not contain an anchor '#no-such-section'" in warnings
    assert "'../how-to/no-such-page.md', but the target" in warnings
    assert 'not included in the "nav"' in warnings and "how-to/orphan.md" in done.stderr


def test_the_python_reference_lists_every_public_name():
    """Every name queue_app.services exports has its entry, generated from its docstring."""
    module = ast.parse((PROJECT_ROOT / "queue_app" / "services.py").read_text())
    exported = next(
        ast.literal_eval(node.value)
        for node in module.body
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets)
    )
    page = (DOCS / "reference" / "python-api.md").read_text()
    listed = set(re.findall(r"^::: queue_app\.services\.(\w+)$", page, flags=re.M))
    assert set(exported) - listed == set(), "add these to docs/reference/python-api.md"
    assert listed - set(exported) == set(), "these are not exported by queue_app.services"


def test_the_readme_opens_with_the_two_commands_and_its_links_resolve():
    readme = (PROJECT_ROOT / "README.md").read_text()
    commands = re.findall(r"^    (\./dev \w+)$", readme, flags=re.M)
    assert commands[:2] == ["./dev up", "./dev test"]
    assert len(readme.splitlines()) <= 150
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", readme)
    assert links, "the README links into docs/"
    missing = [link for link in links if not (PROJECT_ROOT / link).exists()]
    assert missing == []


def test_the_settings_reference_names_every_setting():
    """Every environment variable the project's settings read and every JOBQUEUE key has its entry."""
    page = (DOCS / "reference" / "settings.md").read_text()
    source = (PROJECT_ROOT / "jobsite" / "settings.py").read_text()
    variables = set(re.findall(r"(?:_env_\w+|environ\.get)\(\s*\"([A-Z][A-Z0-9_]+)\"", source))
    conf = ast.parse((PROJECT_ROOT / "queue_app" / "conf.py").read_text())
    queue_settings = next(n for n in conf.body if isinstance(n, ast.ClassDef) and n.name == "QueueSettings")
    keys = {n.target.id for n in queue_settings.body if isinstance(n, ast.AnnAssign)}
    assert len(variables) > 20 and len(keys) > 20  # the patterns still find what the files hold
    assert {name for name in variables | keys if f"`{name}`" not in page} == set()


def test_the_commands_reference_names_every_command():
    """Every management command of the app, and every ./dev command, has its row."""
    page = (DOCS / "reference" / "commands.md").read_text()
    commands = {path.stem for path in (PROJECT_ROOT / "queue_app/management/commands").glob("[!_]*.py")}
    script = (PROJECT_ROOT / "dev").read_text()
    cases = re.search(r"^case \"\$command\" in$(.*?)^esac$", script, flags=re.M | re.S).group(1)
    patterns = re.findall(r"^    ([a-z| -]+)\)$", cases, flags=re.M)  # e.g. "stop | psql | redis-cli)"
    dev_commands = {name.strip() for pattern in patterns for name in pattern.split("|")}
    assert len(commands) > 5 and len(dev_commands) > 5
    assert {name for name in commands if f"| `manage.py {name}" not in page} == set()
    assert {name for name in dev_commands if f"`./dev {name}" not in page} == set()


def test_the_rest_reference_names_every_operation_of_the_schema():
    """Every method and path of the project's own OpenAPI schema (drf-spectacular) is on the page."""
    from drf_spectacular.generators import SchemaGenerator

    page = (DOCS / "reference" / "rest-api.md").read_text()
    schema = SchemaGenerator().get_schema(request=None, public=True)
    operations = {f"{method.upper()} {path}" for path, item in schema["paths"].items() for method in item}
    assert len(operations) > 10
    assert {operation for operation in operations if f"`{operation}`" not in page} == set()
