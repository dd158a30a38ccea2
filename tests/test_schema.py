"""The migrations yield the schema the code describes: the functions of the schema files
(``queue_app/engine/sql/schema/``) and the indexes and constraints of the models' Meta.

As procrastinate's ``tests/migration/`` proves its migrations produce ``schema.sql``: the
test database is built by running every migration, and each check compares what they made
with what the files or models make in a scratch schema of the same database. So a schema
file edited without a migration, a function created by a migration without a file, or an
index changed by hand-written SQL fails here.

Also: the job table keeps exactly the original system's index set, plus the indexes
queries of ours need (the claim's count of a limited queue's running jobs, a user's own jobs,
newest first, for the API's list, a unique key's jobs for a unique enqueue's look-up, the
reconciler's pages of queued jobs and retention's oldest finished jobs of a status; the
idempotency key's index is now per owner).
"""

import pytest
from django.apps import apps
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader

from queue_app.engine.sql import schema

SCRATCH = "schema_check"


def _indexes(table: str) -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s", [table])
        return dict(cursor.fetchall())


@pytest.mark.django_db
def test_job_table_has_exactly_the_original_indexes():
    indexes = _indexes("queue_app_jobs")
    assert set(indexes) == {
        "queue_app_jobs_pkey",
        "idx_jobs_live_status",
        "idx_jobs_type",
        "idx_jobs_created_at",
        "idx_jobs_next_retry_at",
        "uq_jobs_owner_idempotency_key",
        "idx_jobs_running_queue",
        "idx_jobs_owner_created",
        "idx_jobs_unique_key",
        "idx_jobs_queued_id",
        "idx_jobs_cancelled_at",
        "idx_jobs_completed_at",
        "idx_jobs_expired_at",
        "idx_jobs_failed_at",
        "idx_jobs_running_key",
        "idx_jobs_queued_expiry",
        "idx_jobs_parked_key",
        "idx_jobs_queued_key",
        "idx_jobs_time_id_tail",
    }
    assert indexes["idx_jobs_running_queue"].endswith(
        "USING btree (queue) WHERE ((status)::text = ANY"
        " ((ARRAY['processing'::character varying, 'cancelling'::character varying])::text[]))"
    )
    assert indexes["idx_jobs_owner_created"].endswith(
        "USING btree (owner_id, created_at, id) WHERE (owner_id IS NOT NULL)"
    )
    assert indexes["idx_jobs_unique_key"].endswith(
        "USING btree (unique_key, status, created_at) WHERE (unique_key IS NOT NULL)"
    )
    # Partial: a job without a concurrency key, or without an expiry, is in neither.
    assert indexes["idx_jobs_running_key"].endswith(
        "USING btree (queue, concurrency_key) WHERE ((concurrency_key IS NOT NULL) AND ((status)::text = ANY"
        " ((ARRAY['processing'::character varying, 'cancelling'::character varying])::text[])))"
    )
    assert indexes["idx_jobs_parked_key"].endswith(
        "USING btree (queue, concurrency_key, priority_value DESC, enqueued_at)"
        " WHERE (parked AND ((status)::text = 'queued'::text))"
    )
    assert indexes["idx_jobs_queued_key"].endswith(
        "USING btree (queue, concurrency_key) WHERE ((concurrency_key IS NOT NULL) AND (NOT parked)"
        " AND ((status)::text = 'queued'::text))"
    )
    assert indexes["idx_jobs_queued_expiry"].endswith(
        "USING btree (expires_at) WHERE ((expires_at IS NOT NULL) AND ((status)::text = 'queued'::text))"
    )
    assert indexes["idx_jobs_queued_id"].endswith("USING btree (id) WHERE ((status)::text = 'queued'::text)")
    # The admin's search by the id's tail the lists show (admin/search.py), led by the id's
    # time span so new jobs' entries append rather than land on random pages.
    assert indexes["idx_jobs_time_id_tail"].endswith(
        'USING btree ("left"((id)::text, 6), "right"((id)::text, 8))'
    )
    for status in ("cancelled", "completed", "expired", "failed"):
        assert indexes[f"idx_jobs_{status}_at"].endswith(
            f"USING btree (completed_at) WHERE ((status)::text = '{status}'::text)"
        )
    assert "UNIQUE" in indexes["queue_app_jobs_pkey"]
    assert indexes["idx_jobs_live_status"].endswith(
        "USING btree (status) WHERE ((status)::text = ANY ((ARRAY["
        "'cancelling'::character varying, 'processing'::character varying, "
        "'queued'::character varying, 'waiting'::character varying])::text[]))"
    )
    assert indexes["idx_jobs_type"].endswith("USING btree (type)")
    assert indexes["idx_jobs_created_at"].endswith("USING btree (created_at)")
    assert indexes["idx_jobs_next_retry_at"].endswith(
        "USING btree (next_retry_at) WHERE (next_retry_at IS NOT NULL)"
    )
    assert indexes["uq_jobs_owner_idempotency_key"].startswith("CREATE UNIQUE INDEX")
    assert indexes["uq_jobs_owner_idempotency_key"].endswith(
        "USING btree (idempotency_key, owner_id) NULLS NOT DISTINCT WHERE (idempotency_key IS NOT NULL)"
    )
    non_unique = [
        name for name in indexes if name not in ("queue_app_jobs_pkey", "uq_jobs_owner_idempotency_key")
    ]
    assert all("UNIQUE" not in indexes[name] for name in non_unique)


@pytest.mark.django_db
def test_outbox_has_a_partial_index_on_undispatched_rows():
    indexes = _indexes("queue_app_job_outbox")
    assert indexes["idx_outbox_undispatched"].endswith("USING btree (id) WHERE (dispatched_at IS NULL)")


def _functions(namespace: str) -> dict[str, str]:
    """Signature -> definition of the functions in ``namespace`` that no extension owns,
    the schema's name taken out of the definitions."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')',
                   pg_get_functiondef(p.oid)
              FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE n.nspname = %s
               AND NOT EXISTS (SELECT FROM pg_depend d
                                WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')
            """,
            [namespace],
        )
        return {
            signature: definition.replace(f"FUNCTION {namespace}.", "FUNCTION ", 1)
            for signature, definition in cursor.fetchall()
        }


@pytest.fixture
def namespaces():
    """(the migrated schema, an empty scratch schema put first on the search path for this
    test's transaction): what is created unqualified goes to the scratch schema."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_schema(), current_setting('search_path')")
        migrated, search_path = cursor.fetchone()
        cursor.execute(f"CREATE SCHEMA {SCRATCH}")
        cursor.execute("SELECT set_config('search_path', %s, true)", [f"{SCRATCH}, {search_path}"])
    yield migrated, SCRATCH
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('search_path', %s, true)", [search_path])


@pytest.mark.django_db
def test_the_migrations_define_exactly_the_functions_of_the_schema_files(namespaces):
    migrated_namespace, scratch = namespaces
    with connection.cursor() as cursor:
        for text in schema.files().values():
            cursor.execute(text)
    from_files, migrated = _functions(scratch), _functions(migrated_namespace)
    assert migrated_namespace != scratch

    assert sorted(from_files) == sorted(migrated), "a function without a file, or a file without a migration"
    for signature, definition in migrated.items():
        assert from_files[signature] == definition, f"{signature} differs from its schema file"
    assert "queue_claim_jobs_v3(p_ids uuid[], p_worker text, p_lease double precision, p_queues text[]," in (
        " ".join(migrated)
    )


def _schema_file_operations() -> list[tuple[str, schema.RunSQLFile]]:
    graph = MigrationLoader(None, ignore_no_migrations=True).graph
    return [
        (f"{app_label}.{name}", operation)
        for (app_label, name), migration in graph.nodes.items()
        for operation in migration.operations
        if isinstance(operation, schema.RunSQLFile)
    ]


def test_schema_files_are_as_their_migrations_loaded_them():
    """A database migrated before an edit would keep the old functions, and one migrated
    after it would get the new ones: a released file never changes (a new version is a new
    file). The operation refuses an edited file; this names it without a database."""
    loaded = _schema_file_operations()
    assert "claim_v3.sql" in {operation.name for _, operation in loaded}
    for migration, operation in loaded:
        found = schema.checksum(schema.files()[operation.name])
        assert found == operation.sha256, f"{operation.name} changed since {migration} loaded it"


def test_a_schema_file_whose_checksum_differs_is_refused():
    with pytest.raises(schema.SchemaFileChanged, match="claim_v3.sql changed since its migration"):
        schema.pinned_text("claim_v3.sql", "0" * 64)


def _table_definitions(namespace: str, tables: list[str]) -> dict[tuple[str, str, str], str]:
    """(table, "index" or "constraint", name) -> definition, the schema's name taken out."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT t.relname, 'index', i.relname, pg_get_indexdef(i.oid)
              FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
             WHERE t.relnamespace = %(namespace)s::regnamespace AND t.relname = ANY(%(tables)s)
            UNION ALL
            SELECT t.relname, 'constraint', c.conname, pg_get_constraintdef(c.oid)
              FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid
             WHERE t.relnamespace = %(namespace)s::regnamespace AND t.relname = ANY(%(tables)s)
            """,
            {"namespace": namespace, "tables": tables},
        )
        return {
            (table, kind, name): definition.replace(f"{namespace}.", "")
            for table, kind, name, definition in cursor.fetchall()
        }


@pytest.mark.django_db
def test_the_migrations_make_the_indexes_and_constraints_of_the_models(namespaces):
    """Names and definitions, Meta's and the ones Django derives from fields (primary keys,
    foreign keys, their indexes, checks of positive integers)."""
    migrated_namespace, scratch = namespaces
    models = list(apps.get_app_config("queue_app").get_models())
    with connection.schema_editor() as editor:
        for model in models:
            editor.create_model(model)
    tables = [model._meta.db_table for model in models]
    from_models = _table_definitions(scratch, tables)
    migrated = _table_definitions(migrated_namespace, tables)

    assert sorted(from_models) == sorted(migrated)
    for key, definition in migrated.items():
        assert from_models[key] == definition, key
    assert from_models[("queue_app_jobs", "index", "idx_jobs_running_queue")].startswith(
        "CREATE INDEX idx_jobs_running_queue ON queue_app_jobs USING btree (queue) WHERE"
    )


@pytest.mark.django_db(transaction=True)
def test_the_claim_v3_migration_reverses_and_applies_again():
    """Backwards it drops the version 3 functions and brings the old index back; the
    version 2 functions, which workers of the previous release call, stay either way."""
    executor = MigrationExecutor(connection)
    target = ("queue_app", "0021_claim_v3")
    [parent] = executor.loader.graph.node_map[target].parents
    leaves = executor.loader.graph.leaf_nodes()
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_schema()")
        namespace = cursor.fetchone()[0]
    try:
        executor.migrate([parent.key])
        assert not [f for f in _functions(namespace) if f.startswith("queue_claim_jobs_v3(")]
        # Before migration 0026 the table had its first name.
        assert "idx_jobs_processing_queue" in _indexes("jobs")
        assert "idx_jobs_running_queue" not in _indexes("jobs")
        assert [f for f in _functions(namespace) if f.startswith("queue_claim_jobs(")]
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(leaves)
    indexes = _indexes("queue_app_jobs")
    assert "idx_jobs_running_queue" in indexes and "idx_jobs_processing_queue" not in indexes
    assert {f.split("(")[0] for f in _functions(namespace)} >= {"queue_claim_jobs_v3", "queue_claim_jobs"}
