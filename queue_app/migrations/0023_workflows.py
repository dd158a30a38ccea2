"""Workflows and batches: the waiting status, dependency rows with their "who waits on me"
index, workflow and batch tables, and the functions that settle and resume dependents
(queue_app/engine/sql/schema/workflows_v1.sql, where they are written whole)."""

import django.db.models.deletion
import django.db.models.functions.datetime
import queue_app.ids
from queue_app.engine.sql.schema import RunSQLFile
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('queue_app', '0022_snooze_progress'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name='job',
            name='status',
            field=models.CharField(choices=[('waiting', 'Waiting'), ('queued', 'Queued'), ('processing', 'Processing'), ('cancelling', 'Cancelling'), ('completed', 'Completed'), ('failed', 'Failed'), ('cancelled', 'Cancelled')], default='queued', max_length=20),
        ),
        migrations.CreateModel(
            name='Batch',
            fields=[
                ('id', models.UUIDField(default=queue_app.ids.new_job_id, editable=False, primary_key=True, serialize=False)),
                ('name', models.CharField(blank=True, default='', max_length=200)),
                ('created_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ('on_complete', models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='queue_app.job')),
                ('on_failure', models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='queue_app.job')),
                ('on_success', models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='queue_app.job')),
                ('owner', models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='job_batches', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'db_table': 'job_batches',
                'ordering': ['-created_at'],
            },
        ),
        migrations.CreateModel(
            name='BatchMember',
            fields=[
                ('job', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='batch_member', serialize=False, to='queue_app.job')),
                ('batch', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='members', to='queue_app.batch')),
            ],
            options={
                'db_table': 'job_batch_members',
            },
        ),
        migrations.CreateModel(
            name='Workflow',
            fields=[
                ('id', models.UUIDField(default=queue_app.ids.new_job_id, editable=False, primary_key=True, serialize=False)),
                ('name', models.CharField(blank=True, default='', max_length=200)),
                ('created_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ('owner', models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='job_workflows', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'db_table': 'job_workflows',
                'ordering': ['-created_at'],
            },
        ),
        migrations.CreateModel(
            name='JobDependency',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('position', models.PositiveIntegerField(default=0)),
                ('depends_on', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='dependents', to='queue_app.job')),
                ('job', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='dependencies', to='queue_app.job')),
            ],
            options={
                'db_table': 'job_dependencies',
                'ordering': ['job', 'position'],
                'indexes': [models.Index(fields=['depends_on'], name='idx_job_dependencies_parent')],
                'constraints': [models.UniqueConstraint(fields=('job', 'depends_on'), name='uq_job_dependency')],
            },
        ),
        migrations.CreateModel(
            name='JobWait',
            fields=[
                ('job', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='wait', serialize=False, to='queue_app.job')),
                ('on_failure', models.CharField(choices=[('cancel', 'Cancel'), ('continue', 'Continue'), ('only_on_failure', 'Only On Failure')], default='cancel', max_length=20)),
                ('blocked_by', models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='queue_app.job')),
            ],
            options={
                'db_table': 'job_waits',
                'indexes': [models.Index(condition=models.Q(('blocked_by__isnull', False)), fields=['blocked_by'], name='idx_job_waits_blocked_by')],
            },
        ),
        migrations.CreateModel(
            name='WorkflowStep',
            fields=[
                ('job', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='workflow_step', serialize=False, to='queue_app.job')),
                ('name', models.CharField(max_length=200)),
                ('position', models.PositiveIntegerField(default=0)),
                ('workflow', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='steps', to='queue_app.workflow')),
            ],
            options={
                'db_table': 'job_workflow_steps',
                'ordering': ['workflow', 'position'],
                'constraints': [models.UniqueConstraint(fields=('workflow', 'name'), name='uq_workflow_step_name')],
            },
        ),
        RunSQLFile(
            "workflows_v1.sql",
            sha256="6f207a4d6ac6beeb7df1d2b2ba37b9c2504b66cfdcc679e494d124a73ec47d0e",
            reverse_sql=(
                "DROP FUNCTION queue_resume_dependents_v1(uuid[]);"
                " DROP FUNCTION queue_settle_dependents_v1(uuid[])"
            ),
        ),
    ]
