"""The metrics directory runsystem (and gunicorn's master) prepares for the processes it starts."""

import os

from queue_app.observability.metrics import MULTIPROC_ENV
from queue_app.observability.multiproc import prepare_directory, remove_directory


def test_a_named_directory_is_emptied_of_an_earlier_runs_values(tmp_path, monkeypatch):
    (tmp_path / "counter_123.db").write_bytes(b"stale")
    (tmp_path / "notes.txt").write_text("not ours")
    monkeypatch.setenv(MULTIPROC_ENV, str(tmp_path))
    directory, made_here = prepare_directory()
    assert (directory, made_here) == (tmp_path, False)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["notes.txt"]


def test_without_one_a_private_directory_is_made_for_the_children(monkeypatch):
    monkeypatch.delenv(MULTIPROC_ENV, raising=False)
    directory, made_here = prepare_directory()
    try:
        assert made_here and directory.is_dir() and not any(directory.iterdir())
        assert os.environ[MULTIPROC_ENV] == str(directory)
    finally:
        remove_directory(directory)
    assert not directory.exists()
