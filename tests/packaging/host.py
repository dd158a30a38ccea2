"""A host project for the packaging tests: the app's wheel in a throwaway virtualenv, and a
``django-admin startproject`` beside it with no trace of this repository.

The virtualenv reads the dependencies from this interpreter's site-packages (a .pth file),
so nothing is downloaded; the app itself comes only from the wheel.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import PROJECT_ROOT


def run(*args: str, cwd: Path, env: dict[str, str], timeout: float = 180) -> str:
    """Run a command to completion; its stdout, or a failure showing both streams."""
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def base_environment(home: Path) -> dict[str, str]:
    """A bare environment: none of this repository's settings or store URLs leak into the host."""
    return {"PATH": os.environ["PATH"], "HOME": str(home), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def build_wheel(folder: Path) -> Path:
    """The app's wheel, built from a copy of the sources (the build leaves nothing in the
    repository); returns the folder that holds it."""
    source = folder / "source"
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(PROJECT_ROOT / "queue_app", source / "queue_app", ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(PROJECT_ROOT / name, source / name)
    dist = folder / "dist"
    run(
        sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
        "-w", str(dist), str(source), cwd=folder, env=base_environment(folder),
    )  # fmt: skip
    return dist


@dataclass(frozen=True)
class Virtualenv:
    python: Path
    site_packages: Path


def install(dist: Path, folder: Path) -> Virtualenv:
    """A new virtualenv in ``folder`` with the wheel from ``dist`` installed."""
    env = base_environment(folder.parent)
    run(sys.executable, "-m", "venv", "--without-pip", str(folder), cwd=folder.parent, env=env)
    python = folder / "bin" / "python"
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(run(str(python), "-c", where, cwd=folder.parent, env=env).strip())
    (site / "shared_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run(
        sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-index",
        "--find-links", str(dist), "jobsite-queue", cwd=folder.parent, env=env,
    )  # fmt: skip
    return Virtualenv(python=python, site_packages=site)


@dataclass
class HostProject:
    """A project made by ``django-admin startproject``, run with the virtualenv's Python."""

    venv: Virtualenv
    root: Path
    env: dict[str, str]

    @classmethod
    def start(cls, venv: Virtualenv, root: Path, name: str, env: dict[str, str]) -> HostProject:
        # python -m django is django-admin (Django came through the .pth, without its script).
        root.mkdir(parents=True)
        run(str(venv.python), "-m", "django", "startproject", name, str(root), cwd=root, env=env)
        return cls(venv=venv, root=root, env=env)

    def command(self, line: str) -> list[str]:
        """A documented shell line (``python manage.py ...``) as this project runs it."""
        words = shlex.split(line, comments=True)
        assert words[0] == "python", f"not a python command: {line!r}"
        return [str(self.venv.python), *words[1:]]

    def run(self, line: str, timeout: float = 180) -> subprocess.CompletedProcess:
        return self._run(self.command(line), timeout)

    def manage(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
        return self._run([str(self.venv.python), "manage.py", *args], timeout)

    def _run(self, args: list[str], timeout: float) -> subprocess.CompletedProcess:
        done = subprocess.run(
            args, cwd=self.root, env=self.env, capture_output=True, text=True, timeout=timeout
        )
        assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
        return done

    def shell(self, code: str) -> str:
        """The last line ``code`` prints in ``manage.py shell``."""
        return self.manage("shell", "-c", code).stdout.strip().splitlines()[-1]

    def spawn(self, line: str, **popen) -> subprocess.Popen:
        """Start a documented long-running command in its own process group."""
        return subprocess.Popen(
            self.command(line), cwd=self.root, env=self.env, start_new_session=True, text=True, **popen
        )

    def append(self, path: str, text: str) -> None:
        with open(self.root / path, "a") as file:
            file.write("\n" + text)

    def create(self, path: str, text: str) -> None:
        (self.root / path).write_text(text)
