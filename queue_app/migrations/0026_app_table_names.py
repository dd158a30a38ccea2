"""The app's tables carry its namespace: ``jobs`` becomes ``queue_app_jobs``, ``job_logs``
``queue_app_job_logs``, and so on, so the app can live in any project's database.

Renaming a table keeps the names of its constraints, indexes and sequences, which were
derived from the old name: they are renamed to the names a new table gets (what Django
and PostgreSQL would create), so a migrated database and a new one agree
(tests/test_schema.py). Indexes named in the models' Meta keep their names.

The database functions name the tables in their bodies, so the claim and the workflow
functions are loaded again under new names (claim_v5.sql, workflows_v2.sql). The earlier
versions stay, as released files, but name the old tables: processes of the previous
release cannot run against the renamed tables, so stop them all before migrating.
"""

from django.db import migrations

from queue_app.engine.sql.schema import RunSQLFile

CLAIM_ARGUMENTS = "uuid[], text, float8, text[], boolean[], integer, text[], text, text, text, text, text, text"

# Each name derived from an old table name, with the one a new table gets (Django hashes the
# table's name into foreign keys' and their indexes' names); tests/test_schema.py compares
# them with the models. Constraints as (table, old, new); an index backing a constraint
# follows its constraint.
CONSTRAINTS = [
    ('queue_app_job_batch_members', 'job_batch_members_batch_id_def2880d_fk_job_batches_id', 'queue_app_job_batch__batch_id_e8b5e235_fk_queue_app'),
    ('queue_app_job_batch_members', 'job_batch_members_job_id_0f383f8b_fk_jobs_id', 'queue_app_job_batch__job_id_fa7d955d_fk_queue_app'),
    ('queue_app_job_batch_members', 'job_batch_members_pkey', 'queue_app_job_batch_members_pkey'),
    ('queue_app_job_batches', 'job_batches_on_complete_id_f674e87b_fk_jobs_id', 'queue_app_job_batche_on_complete_id_11a8111c_fk_queue_app'),
    ('queue_app_job_batches', 'job_batches_on_failure_id_58556cd6_fk_jobs_id', 'queue_app_job_batche_on_failure_id_8f5c2554_fk_queue_app'),
    ('queue_app_job_batches', 'job_batches_on_success_id_9feedea6_fk_jobs_id', 'queue_app_job_batche_on_success_id_e5a0672e_fk_queue_app'),
    ('queue_app_job_batches', 'job_batches_owner_id_734b7637_fk_auth_user_id', 'queue_app_job_batches_owner_id_d09c8a0c_fk_auth_user_id'),
    ('queue_app_job_batches', 'job_batches_pkey', 'queue_app_job_batches_pkey'),
    ('queue_app_job_dependencies', 'job_dependencies_depends_on_id_3025bd37_fk_jobs_id', 'queue_app_job_depend_depends_on_id_76809fef_fk_queue_app'),
    ('queue_app_job_dependencies', 'job_dependencies_job_id_39ec41ec_fk_jobs_id', 'queue_app_job_dependencies_job_id_bd6b8adc_fk_queue_app_jobs_id'),
    ('queue_app_job_dependencies', 'job_dependencies_pkey', 'queue_app_job_dependencies_pkey'),
    ('queue_app_job_dependencies', 'job_dependencies_position_check', 'queue_app_job_dependencies_position_check'),
    ('queue_app_job_key_buckets', 'job_key_buckets_pkey', 'queue_app_job_key_buckets_pkey'),
    ('queue_app_job_logs', 'job_logs_job_id_6b3fd931_fk_jobs_id', 'queue_app_job_logs_job_id_4deb718d_fk_queue_app_jobs_id'),
    ('queue_app_job_logs', 'job_logs_pkey', 'queue_app_job_logs_pkey'),
    ('queue_app_job_maintenance_leases', 'job_maintenance_leases_pkey', 'queue_app_job_maintenance_leases_pkey'),
    ('queue_app_job_outbox', 'job_outbox_job_id_6f501787_fk_jobs_id', 'queue_app_job_outbox_job_id_63972fca_fk_queue_app_jobs_id'),
    ('queue_app_job_outbox', 'job_outbox_pkey', 'queue_app_job_outbox_pkey'),
    ('queue_app_job_queues', 'job_queues_concurrency_limit_check', 'queue_app_job_queues_concurrency_limit_check'),
    ('queue_app_job_queues', 'job_queues_key_concurrency_limit_check', 'queue_app_job_queues_key_concurrency_limit_check'),
    ('queue_app_job_queues', 'job_queues_pkey', 'queue_app_job_queues_pkey'),
    ('queue_app_job_schedules', 'job_schedules_last_job_id_7b98c75e_fk_jobs_id', 'queue_app_job_schedu_last_job_id_2fad3985_fk_queue_app'),
    ('queue_app_job_schedules', 'job_schedules_pkey', 'queue_app_job_schedules_pkey'),
    ('queue_app_job_waits', 'job_waits_blocked_by_id_1ca905af_fk_jobs_id', 'queue_app_job_waits_blocked_by_id_26b57f39_fk_queue_app_jobs_id'),
    ('queue_app_job_waits', 'job_waits_job_id_1cda75dd_fk_jobs_id', 'queue_app_job_waits_job_id_fca65a29_fk_queue_app_jobs_id'),
    ('queue_app_job_waits', 'job_waits_pkey', 'queue_app_job_waits_pkey'),
    ('queue_app_job_workflow_steps', 'job_workflow_steps_job_id_fb4b8cd7_fk_jobs_id', 'queue_app_job_workfl_job_id_c751c8fd_fk_queue_app'),
    ('queue_app_job_workflow_steps', 'job_workflow_steps_pkey', 'queue_app_job_workflow_steps_pkey'),
    ('queue_app_job_workflow_steps', 'job_workflow_steps_position_check', 'queue_app_job_workflow_steps_position_check'),
    ('queue_app_job_workflow_steps', 'job_workflow_steps_workflow_id_4cd0c54e_fk_job_workflows_id', 'queue_app_job_workfl_workflow_id_dd4d223a_fk_queue_app'),
    ('queue_app_job_workflows', 'job_workflows_owner_id_2fe586af_fk_auth_user_id', 'queue_app_job_workflows_owner_id_5f7ba7a9_fk_auth_user_id'),
    ('queue_app_job_workflows', 'job_workflows_pkey', 'queue_app_job_workflows_pkey'),
    ('queue_app_jobs', 'jobs_attempts_check', 'queue_app_jobs_attempts_check'),
    ('queue_app_jobs', 'jobs_fence_check', 'queue_app_jobs_fence_check'),
    ('queue_app_jobs', 'jobs_max_attempts_check', 'queue_app_jobs_max_attempts_check'),
    ('queue_app_jobs', 'jobs_owner_id_f6fb3e2d_fk_auth_user_id', 'queue_app_jobs_owner_id_9eee6472_fk_auth_user_id'),
    ('queue_app_jobs', 'jobs_pkey', 'queue_app_jobs_pkey'),
    ('queue_app_jobs', 'jobs_snoozes_check', 'queue_app_jobs_snoozes_check'),
]
# Indexes of no constraint, and the tables' sequences, as (old, new).
INDEXES = [
    ('job_batch_members_batch_id_def2880d', 'queue_app_job_batch_members_batch_id_e8b5e235'),
    ('job_logs_job_id_6b3fd931', 'queue_app_job_logs_job_id_4deb718d'),
    ('job_maintenance_leases_queue_3db416e0_like', 'queue_app_job_maintenance_leases_queue_dd9e2ae5_like'),
    ('job_outbox_job_id_6f501787', 'queue_app_job_outbox_job_id_63972fca'),
    ('job_queues_name_1061f28b_like', 'queue_app_job_queues_name_bde81492_like'),
    ('job_schedules_name_85781c67_like', 'queue_app_job_schedules_name_a001594e_like'),
    ('job_workflow_steps_workflow_id_4cd0c54e', 'queue_app_job_workflow_steps_workflow_id_dd4d223a'),
]
SEQUENCES = [
    ('job_dependencies_id_seq', 'queue_app_job_dependencies_id_seq'),
    ('job_logs_id_seq', 'queue_app_job_logs_id_seq'),
    ('job_outbox_id_seq', 'queue_app_job_outbox_id_seq'),
]


FORWARD = ";\n".join(
    [f"ALTER TABLE {table} RENAME CONSTRAINT {old} TO {new}" for table, old, new in CONSTRAINTS]
    + [f"ALTER INDEX {old} RENAME TO {new}" for old, new in INDEXES]
    + [f"ALTER SEQUENCE {old} RENAME TO {new}" for old, new in SEQUENCES]
)
BACKWARD = ";\n".join(
    [f"ALTER TABLE {table} RENAME CONSTRAINT {new} TO {old}" for table, old, new in CONSTRAINTS]
    + [f"ALTER INDEX {new} RENAME TO {old}" for old, new in INDEXES]
    + [f"ALTER SEQUENCE {new} RENAME TO {old}" for old, new in SEQUENCES]
)


class Migration(migrations.Migration):
    dependencies = [
        ("queue_app", "0025_status_choices_waiting_and_expired"),
    ]

    operations = [
        migrations.AlterModelTable(name="job", table="queue_app_jobs"),
        migrations.AlterModelTable(name="joblog", table="queue_app_job_logs"),
        migrations.AlterModelTable(name="outboxmessage", table="queue_app_job_outbox"),
        migrations.AlterModelTable(name="schedulestate", table="queue_app_job_schedules"),
        migrations.AlterModelTable(name="queuestate", table="queue_app_job_queues"),
        migrations.AlterModelTable(name="keybucket", table="queue_app_job_key_buckets"),
        migrations.AlterModelTable(name="maintenancelease", table="queue_app_job_maintenance_leases"),
        migrations.AlterModelTable(name="workflow", table="queue_app_job_workflows"),
        migrations.AlterModelTable(name="workflowstep", table="queue_app_job_workflow_steps"),
        migrations.AlterModelTable(name="jobdependency", table="queue_app_job_dependencies"),
        migrations.AlterModelTable(name="jobwait", table="queue_app_job_waits"),
        migrations.AlterModelTable(name="batch", table="queue_app_job_batches"),
        migrations.AlterModelTable(name="batchmember", table="queue_app_job_batch_members"),
        migrations.RunSQL(FORWARD, BACKWARD),
        RunSQLFile(
            "claim_v5.sql",
            sha256="5b921d0e9f314b42537366224fd63ea201050ac519dc28880f9a28d4232c6b22",
            reverse_sql=(
                f"DROP FUNCTION queue_claim_jobs_v5({CLAIM_ARGUMENTS});"
                f" DROP FUNCTION queue_claim_controlled_jobs_v5({CLAIM_ARGUMENTS});"
                " DROP FUNCTION queue_release_stalled_keys_v2(text[], integer, integer)"
            ),
        ),
        RunSQLFile(
            "workflows_v2.sql",
            sha256="8cfc94917c7d928373431f296fef2361ca666cbf63395be6c11905a37f91a2f6",
            reverse_sql=(
                "DROP FUNCTION queue_resume_dependents_v2(uuid[], integer);"
                " DROP FUNCTION queue_settle_dependents_v2(uuid[], integer)"
            ),
        ),
    ]
