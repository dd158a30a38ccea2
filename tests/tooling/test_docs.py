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
