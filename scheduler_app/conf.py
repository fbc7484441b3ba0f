"""A typed, lazy view of the ``SCHEDULER_APP`` setting.

Read settings as ``app_settings.LEASE_SECONDS``; values are looked up on each
access (cached until Django's ``setting_changed`` fires), so tests can use
``override_settings``. Unknown keys are refused by system check E001.
"""

from __future__ import annotations

from email.utils import parseaddr
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed

DEFAULTS: dict[str, Any] = {
    # Queues a job may be scheduled on; anything else is refused.
    "QUEUES": ["default"],
    # Worker defaults (each one a runworker option too).
    "CONCURRENCY": 4,
    "CLAIM_BATCH_SIZE": 100,
    "POLL_INTERVAL": 1.0,
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
    # The domain of Message-IDs (<hash of the idempotency key>@domain), the same on every
    # host; None: the domain of DEFAULT_FROM_EMAIL.
    "MESSAGE_ID_DOMAIN": None,
    # Task defaults, overridable per task in @task(...).
    "DEFAULT_MAX_ATTEMPTS": 3,
    "DEFAULT_TIMEOUT": None,
    # Seconds after its scheduled time during which a job of a task a worker does not
    # know (a newer deploy's) is handed back for another worker; then it fails.
    "UNKNOWN_TASK_GRACE": 3600.0,
}

# What each setting means, in Markdown: the settings reference in the docs is generated
# from DEFAULTS and this dict, and a test keeps their keys the same.
DESCRIPTIONS: dict[str, str] = {
    "QUEUES": (
        "The queues jobs may be scheduled on; scheduling on any other queue raises "
        "`UnknownQueue`. `runworker` serves all of them unless given `--queue`."
    ),
    "CONCURRENCY": ("Jobs one worker runs at once, each in its own thread (`--concurrency`)."),
    "CLAIM_BATCH_SIZE": ("Most jobs a worker claims in one statement (`--batch-size`)."),
    "POLL_INTERVAL": (
        "Longest time, in seconds, an idle worker waits before looking for due jobs again "
        "(`--poll-interval`)."
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
    "SCHEDULES": ("Recurring schedules declared in code (see below)."),
    "SCHEDULES_VERSION": (
        "An integer >= 0 you raise with every change of `SCHEDULES`; during a rolling deploy "
        "the highest version's declarations win (see Deploys below)."
    ),
    "SCHEDULER_INTERVAL": ("Seconds between a worker's looks for due schedule occurrences."),
    "PROVIDERS": ("Provider name to dotted class path."),
    "SEND_QUEUE": ("The queue send jobs run on."),
    "SEND_LANES": ("Jobs per batch, so several workers share one send."),
    "SEND_CHUNK_SIZE": (
        "The most recipients a lane claims at once (it sends them one at a time). Lanes "
        "size their chunks to about a second of work, from the rate limit and the speed "
        "they see, up to this."
    ),
    "SEND_CLAIM_SECONDS": (
        "How long a lane's claim on its chunk lasts; the lane extends it while it works. "
        "After a crash, the chunk's unsent recipients go to another lane once it expires. "
        "Keep it well above your longest provider call (e.g. set `EMAIL_TIMEOUT`): a call "
        "still running when its claim expires may be repeated by another lane."
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
        "Dotted path to `f(addresses, batch) -> {address: reason}`: recipients to skip at "
        "send time."
    ),
    "LARGE_BATCH": ("Checklist: no two batches of at least this many recipients ..."),
    "LARGE_BATCH_WINDOW": ("... scheduled within this many seconds of each other."),
    "CHECKLIST_RELAX": ("Checklist items that do not block scheduling."),
    "DRY_RUN_SHORT_BODY": ("Dry-runs flag bodies shorter than this."),
    "MESSAGE_ID_DOMAIN": (
        "The domain of the Message-IDs the `email` provider sets (`<hash of the idempotency "
        "key>@domain`), the same on every host so a re-send after a crash carries the same "
        "one; `None` means the domain of `DEFAULT_FROM_EMAIL`. Must be a plausible domain "
        "name (check `scheduler_app.E030`)."
    ),
    "DEFAULT_MAX_ATTEMPTS": ("`max_attempts` of tasks that don't set their own."),
    "DEFAULT_TIMEOUT": (
        "Timeout in seconds of tasks that don't set their own; `None` means no limit."
    ),
    "UNKNOWN_TASK_GRACE": (
        "Seconds after its scheduled time during which a job of a task a worker does not know"
        " (a newer deploy's) is handed back for another worker; after that it fails. `0` "
        "fails it at once."
    ),
}


class AppSettings:
    """Attribute access to ``settings.SCHEDULER_APP`` merged over DEFAULTS."""

    def __init__(self) -> None:
        self._cache: dict[str, Any] = {}

    @property
    def user_settings(self) -> dict[str, Any]:
        return getattr(settings, "SCHEDULER_APP", {}) or {}

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
        from scheduler_app.sends.providers import reset_providers

        reset_providers()


setting_changed.connect(_reload_on_change)
