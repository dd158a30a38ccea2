-- Workflows, version 2: loaded by migration 0026_app_table_names, called by the statements
-- of engine/sql/workflows.sql. Since version 1 (workflows_v1.sql): the same statements on the
-- tables' new names, which carry the app's namespace, and an expired dependency counts as
-- settled without completing (as a cancelled one does): in version 1 its dependents waited
-- for ever. And a released job with a concurrency key takes its turn as an enqueued one does
-- (claim_v5.sql): it parks (queued, parked, no outbox row) when its key already has a job
-- in line, so a workflow's steps of one key never put more than one id of it in Redis; in
-- version 1 every released job went to Redis, whatever its key.
-- A job with dependencies (queue_app_job_dependencies rows, its policy in
-- queue_app_job_waits) is 'waiting' until the transaction that settles its last dependency decides
-- it, in that same transaction: released to 'queued' with its log row and its outbox row
-- (or parked behind its key's job in line, without one), or cancelled with a log row naming
-- the dependency that did not complete. No polling, and no counter anywhere else: the
-- decision reads the dependencies' rows.
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
--
-- A released job with a concurrency_key, ready now, parks behind its key's job in line,
-- or behind another job of its key released in this call (the first by priority, then id,
-- goes in line), under the key's advisory lock (p_key_lock_class, hashtext(queue || '/' ||
-- key)), the lock the enqueue takes to decide the same. The lock is only tried, as the
-- claim tries it: this runs in completions' and claims' transactions, which never wait for
-- an enqueuing one. A key whose lock another transaction holds now parks its released job
-- too; should the key then have no id in line, the maintenance leader gives it its turn
-- (queue_release_stalled_keys_v2), as it does for a key whose claim could not lock it. A job
-- released with its start time still ahead does not park: it joins the line when due.
CREATE OR REPLACE FUNCTION queue_settle_dependents_v2(p_ids uuid[], p_key_lock_class integer)
RETURNS TABLE (id uuid, status varchar)
LANGUAGE plpgsql VOLATILE
AS $settle$
#variable_conflict use_column
DECLARE
    settled uuid[] := p_ids;
    released uuid[];
    cancelled uuid[];
    culprits uuid[];
    locked_keys integer[];
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
            -- The locks of the keys of the released jobs ready now, tried (never waited
            -- for, so in any order; held until the caller's transaction ends).
            locked_keys := ARRAY(
                SELECT k.h FROM (SELECT DISTINCT hashtext(j.queue || '/' || j.concurrency_key) AS h
                                   FROM queue_app_jobs j
                                  WHERE j.id = ANY(released) AND j.concurrency_key IS NOT NULL
                                    AND (j.next_retry_at IS NULL OR j.next_retry_at <= now())) AS k
                 WHERE pg_try_advisory_xact_lock(p_key_lock_class, k.h)
                 ORDER BY k.h
            );
            -- Ready now, or at its run_at when that is still ahead: the outbox row puts it in
            -- the ready set (member: enqueue µs since 2020-01-01, as broker.scores) or the
            -- retry set. A parked job gets none: the claim of its key's job in line gives it
            -- its turn. A statement of its own, after the locks: its snapshot sees every job
            -- put in line by a transaction that held a key's lock before.
            RETURN QUERY
            WITH turns AS (
                -- The literal status is the condition of idx_jobs_queued_key.
                SELECT j.id,
                       NOT hashtext(j.queue || '/' || j.concurrency_key) = ANY(locked_keys)
                       OR EXISTS (SELECT FROM queue_app_jobs u
                                   WHERE u.queue = j.queue AND u.concurrency_key = j.concurrency_key
                                     AND u.status = 'queued' AND NOT u.parked AND u.concurrency_key IS NOT NULL
                                     AND (u.next_retry_at IS NULL OR u.next_retry_at <= now()))
                       OR row_number() OVER (PARTITION BY j.queue, j.concurrency_key
                                             ORDER BY j.priority_value DESC, j.id) > 1 AS parked
                  FROM queue_app_jobs j
                 WHERE j.id = ANY(released) AND j.status = 'waiting' AND j.concurrency_key IS NOT NULL
                   AND (j.next_retry_at IS NULL OR j.next_retry_at <= now())
            ), moved AS (
                UPDATE queue_app_jobs
                   SET status = 'queued',
                       enqueued_at = greatest(now(), coalesce(queue_app_jobs.next_retry_at, now())),
                       next_retry_at = CASE WHEN queue_app_jobs.next_retry_at > now() THEN queue_app_jobs.next_retry_at END,
                       parked = coalesce((SELECT turns.parked FROM turns WHERE turns.id = queue_app_jobs.id), false)
                 WHERE queue_app_jobs.id = ANY(released) AND queue_app_jobs.status = 'waiting'
             RETURNING queue_app_jobs.id, queue_app_jobs.status, queue_app_jobs.queue, queue_app_jobs.priority_value,
                       queue_app_jobs.enqueued_at, queue_app_jobs.next_retry_at, queue_app_jobs.parked
            ), logged AS (
                INSERT INTO queue_app_job_logs (job_id, level, event, message, extra)
                SELECT moved.id, 'info', 'released', 'every dependency settled',
                       CASE WHEN moved.parked THEN '{"parked": true}'::jsonb ELSE '{}'::jsonb END
                  FROM moved
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
                 WHERE NOT moved.parked
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
CREATE OR REPLACE FUNCTION queue_resume_dependents_v2(p_ids uuid[], p_key_lock_class integer)
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
        ARRAY(SELECT DISTINCT d.depends_on_id FROM queue_app_job_dependencies d WHERE d.job_id = ANY(every_resumed)),
        p_key_lock_class);
END
$resume$;
