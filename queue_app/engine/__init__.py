"""The engine: every change to a job's state, and the SQL that makes it.

Each transition is one conditional UPDATE (expected status, plus the attempt
number as a fencing token for a running job), its JobLog row and, where Redis
must change, its OutboxMessage row, in one transaction. The engine never
touches Redis: the relay applies outbox rows.
"""
