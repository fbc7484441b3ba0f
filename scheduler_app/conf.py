"""A typed, lazy view of the ``SCHEDULER_APP`` setting.

Read settings as ``app_settings.LEASE_SECONDS``; values are looked up on each
access (cached until Django's ``setting_changed`` fires), so tests can use
``override_settings``. Unknown keys are refused by system check E001.
"""

from __future__ import annotations

import math
from email.utils import parseaddr
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed

from scheduler_app.bounds import LARGEST_INTEGER

DEFAULTS: dict[str, Any] = {
    # Queues a job may be scheduled on; anything else is refused.
    "QUEUES": ["default"],
    # Worker defaults (each one a runworker option too). 16: four workers hold at most
    # 4 x (16 handlers + the loop's + the side connection) = 72 connections, so a web
    # application's 20 fit beside them under PostgreSQL's default max_connections of 100,
    # with room left for a migration and a shell (docs/performance.md).
    "CONCURRENCY": 16,
    "CLAIM_BATCH_SIZE": 100,
    "POLL_INTERVAL": 1.0,
    # Where runworker LISTENs for new jobs: None, on its side connection to the scheduler's
    # database; an alias, on a connection of its own to that database; "", nowhere (poll).
    "LISTEN_DATABASE": None,
    "LEASE_SECONDS": 30.0,
    "SHUTDOWN_TIMEOUT": 30.0,
    # How long the database may stay unreachable before runworker exits non-zero.
    "DATABASE_UNAVAILABLE_TIMEOUT": 60.0,
    # Seconds between worker summary log lines.
    "SUMMARY_INTERVAL": 60.0,
    # Extra seconds added to an undo window, so a click at the last moment wins.
    "UNDO_SAFETY_MARGIN": 2.0,
    # Recurring schedules declared in code (see scheduler_app.schedules.declared),
    # and how often each worker looks for due occurrences (seconds).
    "SCHEDULES": {},
    # Raise it whenever SCHEDULES changes: during a rolling deploy the highest
    # version's declarations win, and lower ones are ignored.
    "SCHEDULES_VERSION": 0,
    "SCHEDULER_INTERVAL": 1.0,
    # Bulk sends.
    "PROVIDERS": {
        "email": "scheduler_app.sends.providers.email.DjangoEmailProvider",
        "report": "scheduler_app.sends.providers.report.ReportProvider",
    },
    "SEND_QUEUE": "default",
    "SEND_LANES": 2,  # dispatch jobs per batch, so several workers share one send
    "SEND_WINDOW": 50,  # provider calls a lane keeps in flight at once
    "SEND_CHUNK_SIZE": 1000,  # the most recipients a lane claims at once (~1 s of work)
    # A lane's claim on a chunk, extended while it works; after a crash, the chunk's
    # recipients go to another lane once it expires. Longer than any provider call.
    "SEND_CLAIM_SECONDS": 60.0,
    "SEND_MARKER_SYNCHRONOUS_COMMIT": True,  # False: markers commit without the WAL flush
    "RECIPIENT_MAX_ATTEMPTS": 5,
    "BREAKER_WINDOW": 100,  # the automatic breaker looks at this many latest attempts
    "BREAKER_THRESHOLD": 0.5,  # and pauses the batch when more than this share failed
    "PROGRESS_LOG_EVERY": 1000,
    # Dotted path to f(addresses, batch) -> {address: reason} for recipients to skip
    # at send time (e.g. unsubscribed since the freeze).
    "SUPPRESSION_CHECK": None,
    "LARGE_BATCH": 10000,  # checklist: no two batches this large ...
    "LARGE_BATCH_WINDOW": 3600.0,  # ... scheduled within this many seconds of each other
    "CHECKLIST_RELAX": [],  # checklist item names that do not block scheduling
    "DRY_RUN_SHORT_BODY": 20,  # a rendered body shorter than this is reported as very short
    "DRY_RUN_STORAGE": "default",  # the STORAGES alias dry-run reports are written to
    # The domain of Message-IDs (<hash of the idempotency key>@domain), the same on every
    # host; None: the domain of DEFAULT_FROM_EMAIL.
    "MESSAGE_ID_DOMAIN": None,
    # Task defaults, overridable per task in @task(...).
    "DEFAULT_MAX_ATTEMPTS": 3,
    "DEFAULT_TIMEOUT": None,
    # Seconds after its scheduled time during which a job of a task a worker does not
    # know (a newer deploy's) is handed back for another worker; then it fails.
    "UNKNOWN_TASK_GRACE": 3600.0,
    # Mail feedback: one-click unsubscribe, bounces and complaints (scheduler_app.feedback).
    "PUBLIC_BASE_URL": None,
    "UNSUBSCRIBE_MAILTO": None,
    "UNSUBSCRIBE_SCOPE": "audience",
    "UNSUBSCRIBE_RATE_LIMIT": 30,
    "FEEDBACK_WEBHOOK_SECRET": None,
    "SOFT_BOUNCE_LIMIT": 3,
    "SOFT_BOUNCE_WINDOW": 7 * 24 * 3600.0,
    "COMPLAINT_RATE_LIMIT": 0.003,
    "BOUNCE_RATE_LIMIT": 0.05,
    "FEEDBACK_MIN_SENT": 100,
    # The Celery executor (runworker --executor celery; see docs/celery.md).
    "CELERY_APP": None,  # dotted path to the project's Celery app instance
    "CELERY_QUEUE_PREFIX": "scheduler_app.",  # Celery queue = prefix + job queue
    "CELERY_MAX_IN_FLIGHT": 1000,  # published, not yet started messages per queue
    "CELERY_MAX_BROKER_WAIT": 300.0,  # seconds a message may wait before it is published again
    "CELERY_JOBS_PER_MESSAGE": 1,  # most jobs one Celery message carries, run in turn
    # Operability (see docs/operability.md): alerts, workers' heartbeats, stale sends.
    "ALERT_INTERVAL": 60.0,
    "ALERT_NOTIFIERS": ["scheduler_app.alerts.notifiers.MailAdmins"],
    "ALERT_RENOTIFY_AFTER": 3600.0,
    "ALERT_RESOLVE_AFTER": 300.0,
    "ADMIN_BASE_URL": "",
    "OVERDUE_AFTER": 600.0,
    "FAILING_RATE": 0.5,
    "FAILING_WINDOW": 3600.0,
    "WORKER_HEARTBEAT_INTERVAL": 10.0,
    "WORKER_LOST_AFTER": 60.0,
    "STALE_SEND_AFTER": 3600.0,
    "STALLED_SEND_AFTER": 900.0,
    # Prometheus metrics (scheduler_app.metrics; needs the [metrics] extra).
    "METRICS_ALLOWED_IPS": [],  # addresses or networks the metrics view serves
    "METRICS_TOKEN": None,  # or a bearer token that is served from anywhere
    "METRICS_CACHE_SECONDS": 10.0,
    "METRICS_WINDOW": 3600.0,  # recent runs, lateness and first-attempt success cover this
    "METRICS_MAX_BATCHES": 10,  # at most this many sending/paused batches get their own series
    # Retention (scheduler_prune and the built-in daily schedule): days to keep; None keeps.
    "RETENTION_JOBS_DAYS": 30,
    "RETENTION_OCCURRENCES_DAYS": 90,
    "RETENTION_CONTROL_EVENTS_DAYS": 365,
    "RETENTION_RECIPIENT_CONTEXT_DAYS": 30,
    "RETENTION_BATCHES_DAYS": None,
    "RETENTION_DRY_RUN_REPORTS_DAYS": 30,
    "RETENTION_WORKERS_DAYS": 7,
    "RETENTION_ALERTS_DAYS": 90,
    "PRUNE_BATCH_SIZE": 1000,
    "PRUNE_MAX_ROWS": 1_000_000,
    "PRUNE_SCHEDULE": "30 3 * * *",  # cron, UTC; None switches the built-in schedule off
    # Partitioned job history on PostgreSQL (scheduler_app.partitions): whether migrating a
    # new install partitions its job table, the finish times one partition holds, and how
    # many partitions are made ahead.
    "PARTITIONED_HISTORY": True,
    "HISTORY_PARTITION_MINUTES": 1440,
    "HISTORY_PARTITIONS_AHEAD": 7,
    "OCCURRENCE_PARTITION_DAYS": 7,
    # The database of scheduler_app's tables (an alias of DATABASES; see
    # docs/separate-database.md), and the business database whose commits schedule() waits
    # for when they are not the same one (the outbox mode); None: schedule() writes at once.
    "DATABASE": "default",
    "ENQUEUE_ON_COMMIT_OF": None,
}

# What each setting means, in Markdown: the settings reference in the docs is generated
# from DEFAULTS and this dict, and a test keeps their keys the same.
DESCRIPTIONS: dict[str, str] = {
    "QUEUES": (
        "The queues jobs may be scheduled on; scheduling on any other queue raises "
        "`UnknownQueue`. `runworker` serves all of them unless given `--queue`."
    ),
    "CONCURRENCY": (
        "Jobs one worker runs at once, each in its own thread (`--concurrency`). A worker "
        "holds at most CONCURRENCY + 2 database connections: one per running handler that "
        "uses the database, the claim loop's, and one its side threads share (see the "
        "performance guide)."
    ),
    "CLAIM_BATCH_SIZE": ("Most jobs a worker claims in one statement (`--batch-size`)."),
    "POLL_INTERVAL": (
        "Longest time, in seconds, an idle worker waits before looking for due jobs again "
        "(`--poll-interval`)."
    ),
    "LISTEN_DATABASE": (
        "Where `runworker` LISTENs for the NOTIFY that wakes it when a job is scheduled "
        "(PostgreSQL). `None`: on the connection its side threads share, to the "
        "scheduler's database (`DATABASE`). An alias of `DATABASES`: on a connection of its "
        "own to that database; use a direct connection's alias when the scheduler's "
        "database goes through a "
        'transaction pooler, which cannot keep a LISTEN. `""`: nowhere; the worker '
        "looks for due jobs every `POLL_INTERVAL`."
    ),
    "LEASE_SECONDS": (
        "How long a claimed job is leased to its worker. The worker renews the lease every "
        "third of it; if the worker dies, the job runs again once the lease has expired (or "
        "fails, if that was its last attempt) (`--lease`)."
    ),
    "SHUTDOWN_TIMEOUT": (
        "On SIGTERM/SIGINT, how long a worker lets running jobs finish; jobs still running "
        "then are handed back to the queue without using an attempt (`--shutdown-timeout`)."
    ),
    "DATABASE_UNAVAILABLE_TIMEOUT": (
        "How long, in seconds, the database may stay unreachable before `runworker` gives up "
        "and exits non-zero."
    ),
    "SUMMARY_INTERVAL": (
        "Seconds between a worker's summary log lines (claimed, succeeded, failed, retried, ...)."
    ),
    "UNDO_SAFETY_MARGIN": (
        "Extra seconds a job scheduled with `undo_window` waits after the window closes, so "
        "an undo clicked at the last moment still wins."
    ),
    "SCHEDULES": (
        "Recurring schedules declared in code (see [Recurring schedules](schedules.md)): "
        "names are strings, and a schedule's `queue` must be one of `QUEUES`."
    ),
    "SCHEDULES_VERSION": (
        "An integer from 0 to 2147483647 you raise with every change of `SCHEDULES`; during "
        "a rolling deploy the highest version's declarations win (see [Deploys](../deploys.md))."
    ),
    "SCHEDULER_INTERVAL": ("Seconds between a worker's looks for due schedule occurrences."),
    "PROVIDERS": ("Provider name to dotted class path; each path must import."),
    "SEND_QUEUE": ("The queue send jobs run on; one of `QUEUES`."),
    "SEND_LANES": (
        "Jobs per batch, so several workers share one send. A worker may run several lanes "
        "of one batch (each takes a handler thread of `CONCURRENCY`); one lane already keeps "
        "`SEND_WINDOW` calls in flight."
    ),
    "SEND_WINDOW": (
        "The most provider calls one lane keeps in flight at once, each on a sender thread "
        "of the lane with its own connection (SMTP or HTTP). A lane's rate is about this "
        "divided by the provider's answer time (50 calls at 80 ms: 625 a second). It shrinks "
        "by half at a throttling answer (HTTP 429, SMTP 421 or 4xx X.7.x) and grows back by "
        "one per window of accepted calls. A crash re-sends at most this many calls per "
        "lane; 1 sends one message at a time."
    ),
    "SEND_CHUNK_SIZE": (
        "The most recipients a lane claims at once (it sends them one at a time). Lanes "
        "size their chunks to about a second of work, from the rate limit and the speed "
        "they see, up to this."
    ),
    "SEND_CLAIM_SECONDS": (
        "How long a lane's claim on its chunk lasts; the lane extends it while it works. "
        "After a crash, the chunk's unsent recipients go to another lane once it expires. "
        "Keep it well above your longest provider call: a call still running when its claim "
        "expires may be repeated by another lane. The `email` provider bounds each SMTP "
        "operation by `EMAIL_TIMEOUT`, or by a third of this when `EMAIL_TIMEOUT` is `None` "
        "(20 s by default)."
    ),
    "SEND_MARKER_SYNCHRONOUS_COMMIT": (
        "PostgreSQL: True (the default) makes a lane wait for each marker's WAL flush. "
        "False commits a lane's statements with synchronous_commit = off: faster when the "
        "disk is the bound, but a crash of PostgreSQL itself (not of a worker) can lose the "
        "markers of the last moments (up to 3 x wal_writer_delay) and re-send those "
        "recipients, with the same key and Message-ID."
    ),
    "RECIPIENT_MAX_ATTEMPTS": (
        "Attempts per recipient: transient errors, and crashes of the lane while it was "
        "sending to that recipient."
    ),
    "BREAKER_WINDOW": (
        "The automatic breaker looks at this many latest attempts of a batch (per batch "
        "overridable)."
    ),
    "BREAKER_THRESHOLD": (
        "The automatic breaker pauses a batch when more than this share of its last "
        "`BREAKER_WINDOW` attempts failed (per batch overridable)."
    ),
    "PROGRESS_LOG_EVERY": ("A progress log line every N recipients."),
    "SUPPRESSION_CHECK": (
        "`None`, or the dotted path (it must import) to `f(addresses, batch) -> {address: "
        "reason}`: recipients to skip at send time."
    ),
    "LARGE_BATCH": ("Checklist: no two batches of at least this many recipients ..."),
    "LARGE_BATCH_WINDOW": ("... scheduled within this many seconds of each other."),
    "CHECKLIST_RELAX": (
        "A list of the checklist items that do not block scheduling, by name "
        "(`audience_within_limit`, `dry_run_clean`, `seed_sent`, `schedule_unambiguous`, "
        "`no_other_large_batch`)."
    ),
    "DRY_RUN_SHORT_BODY": (
        "Dry-runs flag bodies shorter than this many characters (an integer >= 0; 0 flags none)."
    ),
    "DRY_RUN_STORAGE": (
        "The storage dry-run reports are written to and downloaded from, by its alias in "
        "Django's `STORAGES` (`default`: `MEDIA_ROOT`, under `scheduler_app/dry-runs/`). "
        "Check `scheduler_app.E115` refuses an unknown alias, and a file system storage that "
        "would write into the installed package (an unset `MEDIA_ROOT` next to it)."
    ),
    "MESSAGE_ID_DOMAIN": (
        "The domain of the Message-IDs the `email` provider sets (`<hash of the idempotency "
        "key>@domain`), the same on every host so a re-send after a crash carries the same "
        "one; `None` means the domain of `DEFAULT_FROM_EMAIL`. Must be a plausible domain "
        "name (check `scheduler_app.E030`); an internationalized one is written in punycode "
        "(`bücher.example` gives `xn--bcher-kva.example`)."
    ),
    "DEFAULT_MAX_ATTEMPTS": (
        "`max_attempts` of tasks that don't set their own: an integer from 1 to 2147483647."
    ),
    "DEFAULT_TIMEOUT": (
        "Timeout of tasks that don't set their own: positive seconds (or a timedelta) up to "
        "3652 days; `None` means no limit. While either task default is invalid, tasks get "
        "the built-in one and the system check reports it."
    ),
    "UNKNOWN_TASK_GRACE": (
        "Seconds after its scheduled time during which a job of a task a worker does not know"
        " (a newer deploy's) is handed back for another worker; after that it fails. `0` "
        "fails it at once."
    ),
    "PUBLIC_BASE_URL": (
        "The site's public `https://` origin (e.g. `'https://example.com'`), for the one-click "
        "unsubscribe links of batch messages. `None`: batch messages carry no List-Unsubscribe "
        "header (warning `scheduler_app.W100`)."
    ),
    "UNSUBSCRIBE_MAILTO": (
        "An address that receives unsubscribe requests by mail (a plain address such as "
        "`'unsubscribe@example.com'`: no name, spaces or control characters); when set, "
        "List-Unsubscribe also offers `mailto:` with the token in the subject."
    ),
    "UNSUBSCRIBE_SCOPE": (
        "What an unsubscribe link stops: `'audience'` (the batch's audience, e.g. one "
        "newsletter) or `'all'` (all mail sent through scheduler_app)."
    ),
    "UNSUBSCRIBE_RATE_LIMIT": (
        "Requests a minute with a link that is no good one client IP may make to the public "
        "unsubscribe URL; more get 429. Counted in Django's default cache, so share it between "
        "processes (valid links are never limited)."
    ),
    "FEEDBACK_WEBHOOK_SECRET": (
        "The shared secret of the feedback webhook's HMAC-SHA256 signature; `None` turns the "
        "webhook off (403)."
    ),
    "SOFT_BOUNCE_LIMIT": (
        "Messages to one address that soft-bounced within `SOFT_BOUNCE_WINDOW` after which it "
        "is suppressed (the retries an ESP reports of one message count once)."
    ),
    "SOFT_BOUNCE_WINDOW": ("Seconds over which soft bounces are counted (default 7 days)."),
    "COMPLAINT_RATE_LIMIT": (
        "A batch whose complaints pass this share of its sent messages is paused (0.003 is "
        "0.3%, the most large mailbox providers tolerate); `None` turns it off."
    ),
    "BOUNCE_RATE_LIMIT": (
        "A batch whose hard bounces pass this share of its sent messages is paused; `None` "
        "turns it off."
    ),
    "FEEDBACK_MIN_SENT": (
        "The complaint and bounce limits apply once a batch has sent at least this many."
    ),
    "CELERY_APP": (
        "Dotted path to your project's Celery app instance (e.g. `'proj.celery.app'`), which "
        "`runworker --executor celery` publishes jobs with. `None`: the Celery executor is "
        "off. Only read by the relay: `runworker` without `--executor celery` never imports "
        "Celery (check `scheduler_app.E060`)."
    ),
    "CELERY_QUEUE_PREFIX": (
        "Jobs of queue `q` are published to the Celery queue `<prefix>q`; start Celery "
        "workers with `-Q` listing those names (check `scheduler_app.E061`)."
    ),
    "CELERY_MAX_IN_FLIGHT": (
        "Most jobs per queue the relay keeps published but not yet started by a Celery "
        "worker; it claims more as they start. Bounds the broker's backlog, so no lease "
        "expires while a message waits (check `scheduler_app.E062`)."
    ),
    "CELERY_MAX_BROKER_WAIT": (
        "Seconds a published job may wait in the broker before the relay hands it back and "
        "publishes it again (a lost message); its old message is then refused if it ever "
        "arrives (check `scheduler_app.E063`)."
    ),
    "CELERY_JOBS_PER_MESSAGE": (
        "Most jobs the relay puts in one Celery message; a Celery worker thread runs them "
        "one after the other. Above 1, a backlog costs Celery's per-message work once per "
        "message instead of once per job, but jobs of one message never run side by side: "
        "for short jobs (check `scheduler_app.E064`)."
    ),
    "ALERT_INTERVAL": (
        "Seconds between evaluations of the alert rules; every worker offers to run them, "
        "one at a time across hosts."
    ),
    "ALERT_NOTIFIERS": (
        "Where alerts are delivered: dotted paths of notifier classes, or dicts "
        '`{"class": path, **options}` (e.g. the `Webhook` notifier\'s `url`, http(s), and '
        "`timeout`, positive seconds); each must build and have a `notify()` method "
        "(`scheduler_app.E044`). The default mails `ADMINS`; a system check warns "
        "(`scheduler_app.W040`) when none would deliver."
    ),
    "ALERT_RENOTIFY_AFTER": (
        "Seconds after which an open alert nobody acknowledged is delivered again."
    ),
    "ALERT_RESOLVE_AFTER": (
        "Seconds an alert must stay resolved before its resolved notice goes out; if its "
        "breach returns sooner the same alert reopens, with no new notice, so a flapping "
        "condition is one opened and one resolved notice."
    ),
    "ADMIN_BASE_URL": (
        "The admin's absolute URL prefix (e.g. `https://ops.example.com`), for the links in "
        "alerts; empty: links are paths."
    ),
    "OVERDUE_AFTER": (
        "Seconds a due job may wait to start before an `overdue` alert opens for its task."
    ),
    "FAILING_RATE": (
        "A `failing` alert opens when more than this share of a task's jobs that finished "
        "in the last `FAILING_WINDOW` seconds failed for good."
    ),
    "FAILING_WINDOW": ("Seconds of finished jobs the `failing` rule looks at."),
    "WORKER_HEARTBEAT_INTERVAL": ("Seconds between a worker's heartbeat writes."),
    "WORKER_LOST_AFTER": (
        "Seconds without a heartbeat after which a worker is marked lost (its jobs come back "
        "through lease rescue)."
    ),
    "STALE_SEND_AFTER": (
        "A batch (or, for local-time deliveries, a recipient) this many seconds past its "
        "scheduled time does not start sending: it is paused as stale until resumed."
    ),
    "STALLED_SEND_AFTER": (
        "Seconds a sending batch may go without marking any recipient, while recipients "
        "are due, before a `stalled_send` alert opens."
    ),
    "METRICS_ALLOWED_IPS": (
        'Client addresses or networks (`"10.0.0.0/8"`, `"::1"`) the metrics view serves; '
        "others get 403. Behind a reverse proxy on the same host every request comes from "
        "the proxy's address: use `METRICS_TOKEN` or block the path at the proxy."
    ),
    "METRICS_TOKEN": (
        "A secret; a request with `Authorization: Bearer <token>` is served the metrics from "
        "any address. `None`: addresses only."
    ),
    "METRICS_CACHE_SECONDS": (
        "How long the metrics view reuses the numbers it read from the database (Django's "
        "default cache); `0` reads them on every scrape."
    ),
    "METRICS_WINDOW": (
        "Seconds of recent attempts the metrics view counts for runs per outcome, lateness "
        "and the first-attempt success ratio."
    ),
    "METRICS_MAX_BATCHES": (
        "At most this many send batches that are sending or paused (the most recent) get "
        "their own `batch` series, so the number of series stays bounded."
    ),
    "RETENTION_JOBS_DAYS": (
        "Days to keep finished jobs (succeeded, failed, cancelled) and their attempt "
        "history, counted from `finished_at`. With partitioned attempts (PostgreSQL), a "
        "partition of them goes whole at a prune run once every job of its range of ids "
        "is gone. `None` keeps them."
    ),
    "RETENTION_OCCURRENCES_DAYS": (
        "Days to keep the record of schedule occurrences (enqueued, skipped, error). With "
        "partitioned occurrences (PostgreSQL), a partition of them goes whole once its "
        "interval is past the cutoff and none of its runs is pending or running. `None` "
        "keeps them."
    ),
    "RETENTION_CONTROL_EVENTS_DAYS": (
        "Days to keep the audit trail of pauses, resumes and cancels. `None` keeps it."
    ),
    "RETENTION_RECIPIENT_CONTEXT_DAYS": (
        "Days after a batch finished (completed, cancelled or failed) after which its "
        "recipients' template context (personal data) is blanked; the recipient rows, "
        "the sent markers, stay. `None` keeps it."
    ),
    "RETENTION_BATCHES_DAYS": (
        "Days after a batch finished (completed, cancelled or failed) after which the batch "
        "goes, with its recipients (the sent markers, and with them the unsubscribe links "
        "of its messages) and its lanes' progress. With partitioned recipients "
        "(PostgreSQL), a partition of them goes whole once every batch with recipients in "
        "it qualifies. `None` keeps them."
    ),
    "RETENTION_DRY_RUN_REPORTS_DAYS": (
        "Days to keep dry-run report files, except the latest report of a batch that has "
        "not finished. `None` keeps them."
    ),
    "RETENTION_WORKERS_DAYS": (
        "Days to keep the heartbeat rows of stopped and lost workers. `None` keeps them."
    ),
    "RETENTION_ALERTS_DAYS": ("Days to keep resolved alerts. `None` keeps them."),
    "PRUNE_BATCH_SIZE": (
        "Rows one pruning statement deletes (or blanks); each is its own short transaction."
    ),
    "PRUNE_MAX_ROWS": (
        "The breaker: a prune that would touch more rows than this refuses, deletes nothing "
        "and raises an alert (`scheduler_prune --max-rows` overrides it once)."
    ),
    "PRUNE_SCHEDULE": (
        "Cron expression (UTC) of the built-in daily prune schedule `scheduler-prune`; "
        "`None` switches it off."
    ),
    "PARTITIONED_HISTORY": (
        "On PostgreSQL, whether `migrate` partitions the job, recipient, schedule "
        "occurrence and job attempt tables while they are empty (a new install; migrations "
        "0033, 0035, 0036 and 0037), so that retention drops finished jobs with their "
        "attempts, finished batches' recipients and old occurrences by whole partitions. "
        "An install "
        "whose tables hold rows keeps one table each until `scheduler_partition` converts "
        "them online. `False` keeps one table each; SQLite always does."
    ),
    "HISTORY_PARTITION_MINUTES": (
        "With partitioned job history (PostgreSQL: a new install, or after "
        "`scheduler_partition`): the minutes of finish times one history partition holds, "
        "aligned to UTC (1440: a day). Retention drops a partition once all of it is past "
        "the cutoff, so finished jobs are kept up to this much longer than "
        "`RETENTION_JOBS_DAYS`. A partition of recipients (of job attempts) is made as "
        "wide as the batches (the jobs) created in this long."
    ),
    "HISTORY_PARTITIONS_AHEAD": (
        "With partitioned history: how many partitions after the current one "
        "`scheduler_partition` and each prune make ahead, of jobs, of schedule occurrences, "
        "of job attempts and of recipients. Jobs that finish in an interval without its "
        "partition, occurrences of such an interval, and attempts and recipients of jobs "
        "and batches past the partitions made, go to an overflow partition, whose rows "
        "retention deletes one by one."
    ),
    "OCCURRENCE_PARTITION_DAYS": (
        "With partitioned schedule occurrences (PostgreSQL): the days of occurrence times "
        "one partition holds, aligned to UTC. Occurrences are few next to jobs, and every "
        "look-up of a schedule's latest ones reads each partition: wide partitions keep "
        "them few. Retention drops a partition once all of it is past the cutoff, so "
        "occurrences are kept up to this much longer than `RETENTION_OCCURRENCES_DAYS`."
    ),
    "DATABASE": (
        "The alias in `DATABASES` of the database that holds scheduler_app's tables. Another "
        "one than `'default'` takes the job churn off the business database: it needs "
        "`scheduler_app.routers.SchedulerRouter` in `DATABASE_ROUTERS`, the user model on "
        "that database too, and `migrate --database` for it, and `schedule()` is no longer "
        "atomic with a business transaction unless `ENQUEUE_ON_COMMIT_OF` is set (checks "
        "`scheduler_app.E120`-`E122`, `W120`; see "
        "[A separate database](../separate-database.md))."
    ),
    "ENQUEUE_ON_COMMIT_OF": (
        "`None`, or the alias of your business database when it is not `DATABASE` (the "
        "outbox mode): `schedule()` and `schedule_many()` called inside a transaction of it "
        "write their jobs when it commits (nothing if it rolls back) and return them unsaved "
        "until then. A crash between that commit and the write loses those jobs (check "
        "`scheduler_app.E123`; see [A separate database](../separate-database.md))."
    ),
}


def is_integer(value: Any, low: int, high: float = LARGEST_INTEGER) -> bool:
    """Return whether ``value`` is an int (not a bool) from ``low`` to ``high``."""
    return not isinstance(value, bool) and isinstance(value, int) and low <= value <= high


def is_number(value: Any) -> bool:
    """Return whether ``value`` is a finite int or float (not a bool, NaN or infinity).

    NaN passes every comparison the checks make (``nan <= 0`` is false), and an
    infinite lease or interval never expires.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float (10**400)
        return False


class AppSettings:
    """Attribute access to ``settings.SCHEDULER_APP`` merged over DEFAULTS."""

    def __init__(self) -> None:
        self._cache: dict[str, Any] = {}

    @property
    def user_settings(self) -> dict[str, Any]:
        """Return SCHEDULER_APP, or {} (the defaults) when it is not a dict: check E001
        reports that, and importing the app must not crash before the check can run."""
        user = getattr(settings, "SCHEDULER_APP", {})
        return user if isinstance(user, dict) else {}

    def __getattr__(self, name: str) -> Any:
        if name not in DEFAULTS:
            raise AttributeError("Unknown scheduler_app setting: %r" % name)
        if name not in self._cache:
            self._cache[name] = self.user_settings.get(name, DEFAULTS[name])
        return self._cache[name]

    def reload(self) -> None:
        self._cache.clear()


app_settings = AppSettings()


def message_id_domain() -> str:
    """Return MESSAGE_ID_DOMAIN, or else the domain of DEFAULT_FROM_EMAIL ('' if it has none)."""
    if app_settings.MESSAGE_ID_DOMAIN is not None:
        return app_settings.MESSAGE_ID_DOMAIN
    _, at, domain = parseaddr(settings.DEFAULT_FROM_EMAIL)[1].rpartition("@")
    return domain if at else ""


def _reload_on_change(*, setting: str, **kwargs: Any) -> None:
    if setting == "SCHEDULER_APP":
        app_settings.reload()


setting_changed.connect(_reload_on_change)
