"""The admin: the queryable history of jobs, their log trails and the outbox, and the queues'
controls, schedules, workflows and batches.

Importing this package registers every ModelAdmin; each lives in its own module:

- jobs.py: the job list, a job's page (job_page.py, its log trail inline) and the
  dashboard (dashboard.py, charts.py); the list's actions in job_actions.py;
- logs.py: the log trail of every job; outbox.py: the outbox rows;
- queues.py: the queues and their controls; schedules.py: the periodic schedules;
- workflows.py: workflows and batches.

Shared: history.py (the read-only, never-counting list every history admin is),
filters.py, display.py, search.py, pagination.py and changelist.py (query strings
a list cannot take, refused before any query runs).
"""

from queue_app.admin import jobs, logs, outbox, queues, schedules, workflows  # noqa: F401  (register)
from queue_app.admin.jobs import JobAdmin, JobLogInline
from queue_app.admin.logs import JobLogAdmin
from queue_app.admin.outbox import OutboxMessageAdmin

__all__ = ["JobAdmin", "JobLogAdmin", "JobLogInline", "OutboxMessageAdmin"]
