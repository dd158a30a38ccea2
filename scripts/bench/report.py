"""The printed table: ours (first run, last run) beside each peer, with ours / peer (and
beside ours as of a baseline commit, with current / baseline, when the run has one)."""

from __future__ import annotations

# (key, label, format); jobs/s: higher is better; ms, s and MiB: lower is better.
ROWS = [
    ("enqueue", "enqueue, one call per job (jobs/s)", "{:,.0f}"),
    ("bulk_enqueue", "bulk enqueue, 1,000 per call (jobs/s)", "{:,.0f}"),
    ("http_submit", "HTTP POST /api/jobs/, 8 clients, 2 procs (req/s)", "{:,.0f}"),
    ("relay", "relay, outbox to Redis (jobs/s)", "{:,.0f}"),
    ("drain_1", "drain, 1 worker process (jobs/s)", "{:,.0f}"),
    ("drain_2", "drain, 2 worker processes (jobs/s)", "{:,.0f}"),
    ("startup_1_s", "worker start-up to first job, 1 process (s)", "{:.2f}"),
    ("latency_p50_ms", "enqueue-to-start p50 at 200 jobs/s (ms)", "{:.1f}"),
    ("latency_p95_ms", "enqueue-to-start p95 at 200 jobs/s (ms)", "{:.1f}"),
    ("latency_p99_ms", "enqueue-to-start p99 at 200 jobs/s (ms)", "{:.1f}"),
    ("saturation_p50_ms", "enqueue-to-start p50, saturated (ms)", "{:.1f}"),
    ("saturation_p95_ms", "enqueue-to-start p95, saturated (ms)", "{:.1f}"),
    ("saturation_p99_ms", "enqueue-to-start p99, saturated (ms)", "{:.1f}"),
    ("chord_ms", "chord: 1,000 jobs, then a callback; enqueue to callback done, 2 procs (ms)", "{:,.0f}"),
    ("chain_ms", "chain of 20 steps, enqueue to last step done, 2 procs (ms)", "{:,.1f}"),
    ("chain_step_ms", "chain, per step (chain / 20) (ms)", "{:.2f}"),
    ("reconcile_s", "reconcile after a Redis flush (s)", "{:.1f}"),
    ("reconcile_rss_mib", "reconcile peak RSS (MiB)", "{:.0f}"),
]

# Figures of systems with workflows; the others (and a baseline from before them) show "n/a".
WORKFLOW_FIGURES = frozenset({"chord_ms", "chain_ms", "chain_step_ms"})

# The performance goals: (key, against, bound, higher is better). ``against`` is a peer (the
# ratio ours / peer; for a time, how many times faster: peer / ours, at least ``bound``), one
# of our own figures of the same run (ours / that figure), or None (the figure itself).
GOALS = [
    ("enqueue", "pgqueuer", 1.0, True),
    ("enqueue", "django-tasks-db", 1.5, True),
    ("bulk_enqueue", "procrastinate", 1.5, True),
    ("drain_1", "pgqueuer", 1.25, True),
    ("drain_1", "celery", 3.0, True),
    ("drain_2", "pgqueuer", 1.1, True),
    ("latency_p50_ms", None, 2.0, False),
    ("latency_p99_ms", None, 5.0, False),
    ("chord_ms", "celery", 3.0, False),
    ("chain_step_ms", "latency_p50_ms", 2.0, False),
    ("http_submit", None, 1000.0, True),
    ("reconcile_s", None, 60.0, False),
    ("reconcile_rss_mib", None, 256.0, False),
]
LABELS = {key: label for key, label, _ in ROWS}


def goals(results: dict) -> list[dict]:
    """Each goal this run can judge: the figure or ratio it reached and whether that meets it.
    The goals are for the full workload: a smaller run (--quick, --jobs) judges none, a
    reconcile of fewer than 1,000,000 jobs not the reconcile's."""
    if results["workload"]["jobs"] < 5_000:
        return []
    ours = results["medians"].get("ours", {})
    full_reconcile = (results.get("reconcile") or {}).get("reconcile_jobs", 0) >= 1_000_000
    judged = []
    for key, against, bound, higher in GOALS:
        if key.startswith("reconcile") and not full_reconcile:
            continue
        goal = {"figure": key, "peer": None, "of": None, "faster": False, "bound": bound, "higher": higher}
        if against in LABELS:  # one of our own figures
            value = ours[key] / ours[against] if ours.get(key) is not None and ours.get(against) else None
            goal["of"] = against
        elif against:
            value = results["ratios"].get(against, {}).get(key)
            if value and not higher:  # a time: how many times faster than the peer
                value, goal["faster"], goal["higher"] = 1 / value, True, True
            goal["peer"] = against
        else:
            value = ours.get(key)
        if value is None:
            continue
        met = value >= bound if goal["higher"] else value <= bound
        judged.append({**goal, "value": value, "met": met})
    return judged


def _goal_line(goal: dict) -> str:
    label = LABELS[goal["figure"]]
    sign = ">=" if goal["higher"] else "<="
    if goal.get("faster"):
        wanted, reached = f">= {goal['bound']:g}x faster than {goal['peer']}", f"{goal['value']:.2f}x"
    elif goal["peer"]:
        wanted, reached = f"{sign} {goal['bound']:g}x {goal['peer']}", f"{goal['value']:.2f}x"
    elif goal.get("of"):
        wanted, reached = f"{sign} {goal['bound']:g}x {LABELS[goal['of']]}", f"{goal['value']:.2f}x"
    else:
        wanted, reached = f"{sign} {goal['bound']:,g}", f"{goal['value']:,.1f}"
    verdict = "met" if goal["met"] else "not met"
    return f"  {verdict:<7}  {label} {wanted}: {reached}"


CAVEATS = """\
Caveats: durability is not equal. Redis runs here with persistence {redis_persistence}; Celery keeps no
record of a job once acked (no result backend) and loses queued jobs with Redis. This project,
procrastinate, pgqueuer and django-tasks-db commit every job to PostgreSQL (fsync={fsync},
synchronous_commit={synchronous_commit}); this project also writes a log trail and an outbox row
per job. "2 worker processes" are processes for this project, pgqueuer, Celery and django-tasks-db,
and 2 asyncio slots in one process for procrastinate. Ratios are ours (median of every run of this
project, first and last) / peer; above 1 is better for rates, below 1 for times and memory."""


def _cell(value, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def render(results: dict, peers: list[str]) -> str:
    medians = results["medians"]
    first, last, ours = (
        medians.get("ours (first)", {}),
        medians.get("ours (last)", {}),
        medians.get("ours", {}),
    )
    header = ["figure", "ours first", "ours last"]
    for peer in peers:
        header += [peer, "ours/" + peer]
    without_workflows = set(results.get("without_workflows", []))
    lines = []
    for key, label, fmt in ROWS:
        if key not in ours and not any(key in medians.get(peer, {}) for peer in peers):
            continue
        row = [label, _cell(first.get(key, ours.get(key)), fmt), _cell(last.get(key), fmt)]
        for peer in peers:
            if key in WORKFLOW_FIGURES and peer in without_workflows:
                row += ["n/a", "n/a"]
                continue
            value = medians.get(peer, {}).get(key)
            ratio = results["ratios"].get(peer, {}).get(key)
            row += [_cell(value, fmt), "-" if ratio is None else f"{ratio:.2f}x"]
        lines.append(row)
    widths = [max(len(str(row[i])) for row in [header, *lines]) for i in range(len(header))]

    def fmt_row(row: list[str]) -> str:
        return "  ".join(
            cell.ljust(widths[0]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row)
        )

    machine = results["machine"]
    workload = results["workload"]
    title = (
        f"{workload['jobs']:,} no-op jobs, medians of {results['rounds']} round(s); "
        f"{machine['cores']} cores; "
        f"PostgreSQL {machine['server_version']} fsync={machine['fsync']} "
        f"synchronous_commit={machine['synchronous_commit']}; Redis {machine['redis_version']}"
    )
    if results.get("baseline"):
        title += (
            f"\nbaseline: {results['baseline']['subject']}, from a temporary worktree, its rounds paired"
            " with this tree's in alternating order; ours/baseline is this tree / baseline"
        )
    table = [title, "", fmt_row(header), fmt_row(["-" * w for w in widths]), *map(fmt_row, lines)]
    if results.get("errors"):
        table += ["", *(f"FAILED {run['system']}: {run['error']}" for run in results["errors"])]
    if isinstance(results.get("reconcile"), dict) and "error" in results["reconcile"]:
        table.append(f"FAILED reconcile: {results['reconcile']['error']}")
    judged = results.get("goals", [])
    if judged:
        table += ["", "Goals (ours, medians of every round; ratios ours / peer in this run):"]
        table += [_goal_line(goal) for goal in judged]
    persistence = f"appendonly={machine['redis_appendonly']}, save='{machine['redis_save']}'"
    table += [
        "",
        CAVEATS.format(
            redis_persistence=persistence,
            fsync=machine["fsync"],
            synchronous_commit=machine["synchronous_commit"],
        ),
    ]
    return "\n".join(table)
