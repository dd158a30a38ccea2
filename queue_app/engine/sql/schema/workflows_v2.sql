-- Workflows, version 2: loaded by migration 0026_app_table_names, called by the statements
-- of engine/sql/workflows.sql. Since version 1 (workflows_v1.sql): the same statements on the
-- tables' new names, which carry the app's namespace, and an expired dependency counts as
-- settled without completing (as a cancelled one does): in version 1 its dependents waited
-- for ever.
-- A job with dependencies (queue_app_job_dependencies rows, its policy in
-- queue_app_job_waits) is 'waiting' until the transaction that settles its last dependency decides
-- it, in that same transaction: released to 'queued' with its log row and its outbox row,
-- or cancelled with a log row naming the dependency that did not complete. No polling, and
-- no counter anywhere else: the decision reads the dependencies' rows.
--
-- Statuses, events and levels are literals here; tests/workflows/test_storage.py holds
-- them to the rows "release", "dependency_failed" and "resume" of states.TRANSITION_TABLE.
--
-- A released version is never edited (migration 0026 refuses a file whose sha256 changed).

-- queue_settle_dependents_v2: the jobs p_ids have just settled (completed, failed, cancelled
-- or expired) in the caller's transaction. Each waiting dependent is decided:
--   on_failure 'cancel' (default): cancelled once a dependency failed, was cancelled or expired;
--       released once every dependency completed;
--   'continue': released once every dependency settled, however;
--   'only_on_failure': once every dependency settled, released if one did not complete,
--       else cancelled.
-- A dependent cancelled here settles in turn, so its own dependents are decided next (the
-- loop). Returns the dependents it moved, with their new status.
--
-- Two transactions settling the last two dependencies of one job at the same moment: each
-- locks the waiting dependents first (in id order, so they never deadlock on them), and
-- decides in a later statement, whose snapshot is taken after the lock was granted. The
-- second waits for the first's commit, then sees both dependencies settled and releases
-- the job; the first saw the other dependency unsettled and left it. Exactly one releases.
CREATE OR REPLACE FUNCTION queue_settle_dependents_v2(p_ids uuid[])
RETURNS TABLE (id uuid, status varchar)
LANGUAGE plpgsql VOLATILE
AS $settle$
#variable_conflict use_column
DECLARE
    settled uuid[] := p_ids;
    released uuid[];
    cancelled uuid[];
    culprits uuid[];
BEGIN
    WHILE cardinality(settled) > 0 LOOP
        -- A job nobody waits on costs this one index look-up.
        IF NOT EXISTS (SELECT FROM queue_app_job_dependencies d WHERE d.depends_on_id = ANY(settled)) THEN
            RETURN;
        END IF;

        PERFORM 1
           FROM queue_app_jobs j
          WHERE j.id IN (SELECT d.job_id FROM queue_app_job_dependencies d WHERE d.depends_on_id = ANY(settled))
            AND j.status = 'waiting'
          ORDER BY j.id
            FOR UPDATE OF j;

        SELECT coalesce(array_agg(x.job_id) FILTER (WHERE x.verdict = 'release'), '{}'),
               coalesce(array_agg(x.job_id) FILTER (WHERE x.verdict = 'cancel'), '{}'),
               coalesce(array_agg(x.culprit) FILTER (WHERE x.verdict = 'cancel'), '{}')
          INTO released, cancelled, culprits
          FROM (
            SELECT deciding.job_id, deciding.culprit,
                   CASE WHEN deciding.on_failure = 'cancel' AND deciding.culprit IS NOT NULL THEN 'cancel'
                        WHEN NOT deciding.all_settled THEN 'wait'
                        WHEN deciding.on_failure = 'only_on_failure' AND deciding.culprit IS NULL THEN 'cancel'
                        ELSE 'release' END AS verdict
              FROM (
                SELECT w.job_id, w.on_failure,
                       bool_and(p.status IN ('completed', 'failed', 'cancelled', 'expired')) AS all_settled,
                       (array_agg(p.id ORDER BY d.position, p.id)
                            FILTER (WHERE p.status IN ('failed', 'cancelled', 'expired')))[1] AS culprit
                  FROM queue_app_jobs j
                  JOIN queue_app_job_waits w ON w.job_id = j.id
                  JOIN queue_app_job_dependencies d ON d.job_id = j.id
                  JOIN queue_app_jobs p ON p.id = d.depends_on_id
                 WHERE j.id IN (SELECT d2.job_id FROM queue_app_job_dependencies d2 WHERE d2.depends_on_id = ANY(settled))
                   AND j.status = 'waiting'
                 GROUP BY w.job_id, w.on_failure
              ) AS deciding
          ) AS x;

        IF cardinality(released) > 0 THEN
            -- Ready now, or at its run_at when that is still ahead: the outbox row puts it in
            -- the ready set (member: enqueue µs since 2020-01-01, as broker.scores) or the
            -- retry set.
            RETURN QUERY
            WITH moved AS (
                UPDATE queue_app_jobs
                   SET status = 'queued',
                       enqueued_at = greatest(now(), coalesce(queue_app_jobs.next_retry_at, now())),
                       next_retry_at = CASE WHEN queue_app_jobs.next_retry_at > now() THEN queue_app_jobs.next_retry_at END
                 WHERE queue_app_jobs.id = ANY(released) AND queue_app_jobs.status = 'waiting'
             RETURNING queue_app_jobs.id, queue_app_jobs.status, queue_app_jobs.queue, queue_app_jobs.priority_value, queue_app_jobs.enqueued_at, queue_app_jobs.next_retry_at
            ), logged AS (
                INSERT INTO queue_app_job_logs (job_id, level, event, message, extra)
                SELECT moved.id, 'info', 'released', 'every dependency settled', '{}'::jsonb FROM moved
            ), sent AS (
                INSERT INTO queue_app_job_outbox (job_id, action, queue, score, member)
                SELECT moved.id,
                       CASE WHEN moved.next_retry_at IS NULL THEN 'enqueue' ELSE 'schedule' END,
                       moved.queue,
                       CASE WHEN moved.next_retry_at IS NULL THEN -moved.priority_value::float8
                            ELSE extract(epoch FROM moved.next_retry_at)::float8 END,
                       CASE WHEN moved.next_retry_at IS NULL
                            THEN lpad(least(greatest(
                                     (extract(epoch FROM moved.enqueued_at - timestamptz '2020-01-01 00:00:00+00')
                                      * 1000000)::bigint, 0), 9007199254740991)::text, 16, '0')
                                 || ':' || moved.id::text
                            ELSE '' END
                  FROM moved
            )
            SELECT moved.id, moved.status FROM moved;
            PERFORM pg_notify('jobqueue_outbox', '');
        END IF;

        IF cardinality(cancelled) > 0 THEN
            UPDATE queue_app_job_waits SET blocked_by_id = c.culprit
              FROM unnest(cancelled, culprits) AS c(job_id, culprit)
             WHERE queue_app_job_waits.job_id = c.job_id;
            RETURN QUERY
            WITH reason AS (
                SELECT c.job_id, c.culprit,
                       CASE WHEN c.culprit IS NULL THEN 'every dependency completed: nothing failed'
                            ELSE 'dependency ' || c.culprit::text || ' ended ' || p.status END AS message,
                       p.status AS culprit_status
                  FROM unnest(cancelled, culprits) AS c(job_id, culprit)
                  LEFT JOIN queue_app_jobs p ON p.id = c.culprit
            ), moved AS (
                UPDATE queue_app_jobs
                   SET status = 'cancelled', completed_at = now(), next_retry_at = NULL,
                       last_error = 'DependencyFailed: ' || reason.message,
                       last_error_class = 'queue_app.exceptions.DependencyFailed'
                  FROM reason
                 WHERE queue_app_jobs.id = reason.job_id AND queue_app_jobs.status = 'waiting'
             RETURNING queue_app_jobs.id, queue_app_jobs.status, reason.culprit, reason.message, reason.culprit_status
            ), logged AS (
                INSERT INTO queue_app_job_logs (job_id, level, event, message, extra)
                SELECT moved.id, 'warning', 'dependency_failed', 'cancelled: ' || moved.message,
                       jsonb_strip_nulls(jsonb_build_object('dependency', moved.culprit,
                                                            'dependency_status', moved.culprit_status))
                  FROM moved
            )
            SELECT moved.id, moved.status FROM moved;
            settled := cancelled;
        ELSE
            settled := '{}';
        END IF;
    END LOOP;
END
$settle$;

-- queue_resume_dependents_v2: the jobs p_ids were just retried (back to queued) in the
-- caller's transaction. The jobs their failure cancelled go back to waiting, and so do the
-- jobs those cancelled in turn; then each is decided again, as a settle would (one may
-- still wait on another dependency that failed). Returns the jobs it moved.
CREATE OR REPLACE FUNCTION queue_resume_dependents_v2(p_ids uuid[])
RETURNS TABLE (id uuid, status varchar)
LANGUAGE plpgsql VOLATILE
AS $resume$
#variable_conflict use_column
DECLARE
    retried uuid[] := p_ids;
    resumed uuid[];
    every_resumed uuid[] := '{}';
BEGIN
    WHILE cardinality(retried) > 0 LOOP
        IF NOT EXISTS (SELECT FROM queue_app_job_waits w WHERE w.blocked_by_id = ANY(retried)) THEN
            EXIT;
        END IF;
        WITH moved AS (
            UPDATE queue_app_jobs
               SET status = 'waiting', completed_at = NULL, last_error = '', last_error_class = ''
              FROM queue_app_job_waits w
             WHERE w.job_id = queue_app_jobs.id AND w.blocked_by_id = ANY(retried) AND queue_app_jobs.status = 'cancelled'
         RETURNING queue_app_jobs.id, w.blocked_by_id AS blocked_by
        ), cleared AS (
            UPDATE queue_app_job_waits SET blocked_by_id = NULL WHERE queue_app_job_waits.job_id IN (SELECT moved.id FROM moved)
        ), logged AS (
            INSERT INTO queue_app_job_logs (job_id, level, event, message, extra)
            SELECT moved.id, 'info', 'resumed', 'dependency ' || moved.blocked_by::text || ' retried',
                   jsonb_build_object('dependency', moved.blocked_by)
              FROM moved
        )
        SELECT coalesce(array_agg(moved.id), '{}') INTO resumed FROM moved;
        every_resumed := every_resumed || resumed;
        retried := resumed;
    END LOOP;
    IF cardinality(every_resumed) = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT r.id, 'waiting'::varchar FROM unnest(every_resumed) AS r(id);
    RETURN QUERY
    SELECT * FROM queue_settle_dependents_v2(
        ARRAY(SELECT DISTINCT d.depends_on_id FROM queue_app_job_dependencies d WHERE d.job_id = ANY(every_resumed)));
END
$resume$;
