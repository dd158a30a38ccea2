"""The database's functions, one versioned ``.sql`` file per function family, and the
migration operation that loads one.

The files are the schema's functions as they are, so nobody replays migrations
to read them (procrastinate keeps its ``procrastinate_fetch_job_v2`` the same
way). A function changes under a new name, in a new file: ``claim_v3.sql``
defines ``queue_claim_jobs_v3``, and the workers of the previous release keep
calling the version they know while a rolling upgrade runs.

A migration loads a file with ``RunSQLFile``, which holds the file to the
sha256 it had when the migration was written. A released file is never edited:
a database migrated before the edit would keep the old functions and one
migrated after it would get the new ones, so the operation refuses an edited
file instead. ``tests/test_schema.py`` checks that the migrations yield exactly
the functions these files define.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from django.db import router
from django.db.migrations.operations.base import Operation

DIRECTORY = Path(__file__).parent


class SchemaFileChanged(Exception):
    """A schema file differs from the one its migration was written for."""


def files() -> dict[str, str]:
    """File name -> text of every schema file."""
    return {path.name: path.read_text() for path in sorted(DIRECTORY.glob("*.sql"))}


def checksum(text: str) -> str:
    """The sha256 a migration pins for a file's text (line endings as Python reads them)."""
    return hashlib.sha256(text.encode()).hexdigest()


def pinned_text(name: str, sha256: str) -> str:
    """The text of schema file ``name``; SchemaFileChanged unless its checksum is ``sha256``."""
    text = (DIRECTORY / name).read_text()
    found = checksum(text)
    if found != sha256:
        raise SchemaFileChanged(
            f"queue_app/engine/sql/schema/{name} changed since its migration was written"
            f" (sha256 {sha256}, now {found}). A released schema file is never edited: put the"
            " new version of its functions in a new file, under new names, with a migration that"
            " loads it."
        )
    return text


class RunSQLFile(Operation):
    """Runs a schema file as one script (``sqlmigrate`` shows it whole).

    ``reverse_sql`` undoes it (dropping what it created).
    """

    reversible = True
    reduces_to_sql = True

    def __init__(self, name: str, *, sha256: str, reverse_sql: str) -> None:
        self.name = name
        self.sha256 = sha256
        self.reverse_sql = reverse_sql

    def deconstruct(self):
        return (
            self.__class__.__qualname__,
            [self.name],
            {"sha256": self.sha256, "reverse_sql": self.reverse_sql},
        )

    def state_forwards(self, app_label, state) -> None:
        pass  # functions are not part of Django's model state

    def database_forwards(self, app_label, schema_editor, from_state, to_state) -> None:
        if router.allow_migrate(schema_editor.connection.alias, app_label):
            schema_editor.execute(pinned_text(self.name, self.sha256), params=None)

    def database_backwards(self, app_label, schema_editor, from_state, to_state) -> None:
        if router.allow_migrate(schema_editor.connection.alias, app_label):
            schema_editor.execute(self.reverse_sql, params=None)

    def describe(self) -> str:
        return f"Load the schema file {self.name}"

    @property
    def migration_name_fragment(self) -> str:
        return self.name.removesuffix(".sql")
