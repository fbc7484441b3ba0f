"""System checks for the SCHEDULER_APP setting, the task registry and SchedulerBackend."""

from __future__ import annotations

import ipaddress
import math
import re
from pathlib import Path
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.core.exceptions import ImproperlyConfigured
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import validate_email
from django.db.models import DO_NOTHING
from django.urls import URLResolver, get_resolver
from django.utils.module_loading import import_string

from scheduler_app.bounds import SETTING_BOUNDS, out_of_bounds
from scheduler_app.conf import DEFAULTS, app_settings, is_integer, message_id_domain
from scheduler_app.models import Job
from scheduler_app.registry import all_tasks
from scheduler_app.targets import as_duration

POSITIVE_NUMBERS = (
    "POLL_INTERVAL",
    "SCHEDULER_INTERVAL",
    "LEASE_SECONDS",
    "SHUTDOWN_TIMEOUT",
    "DATABASE_UNAVAILABLE_TIMEOUT",
    "SUMMARY_INTERVAL",
    "SEND_CLAIM_SECONDS",
    "LARGE_BATCH_WINDOW",
)
POSITIVE_INTEGERS = (
    "CONCURRENCY",
    "CLAIM_BATCH_SIZE",
    "SEND_LANES",
    "SEND_WINDOW",
    "SEND_CHUNK_SIZE",
    "RECIPIENT_MAX_ATTEMPTS",
    "BREAKER_WINDOW",
    "PROGRESS_LOG_EVERY",
    "LARGE_BATCH",
)
DOMAIN_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", re.IGNORECASE)

NON_NEGATIVE_NUMBERS = ("UNDO_SAFETY_MARGIN", "UNKNOWN_TASK_GRACE")


@register(Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    user = getattr(settings, "SCHEDULER_APP", {})
    if not isinstance(user, dict):
        return [
            Error(
                "SCHEDULER_APP must be a dict, not %s." % type(user).__name__,
                hint="Until it is one, scheduler_app uses its defaults for every key.",
                id="scheduler_app.E001",
            )
        ]
    errors = [
        Error(
            "Unknown key %r in SCHEDULER_APP." % key,
            hint="Known keys: %s." % ", ".join(sorted(DEFAULTS)),
            id="scheduler_app.E001",
        )
        for key in sorted(set(user) - set(DEFAULTS))
    ]
    queues = app_settings.QUEUES
    if (
        not isinstance(queues, list | tuple)
        or not queues
        or not all(isinstance(q, str) and q and len(q) <= 100 for q in queues)
    ):
        errors.append(
            Error(
                "SCHEDULER_APP['QUEUES'] must be a non-empty list of queue names "
                "(strings of 1 to 100 characters).",
                id="scheduler_app.E002",
            )
        )
    for name in POSITIVE_NUMBERS:
        value = getattr(app_settings, name)
        if not _number(value) or value <= 0:
            errors.append(
                Error(
                    "SCHEDULER_APP[%r] must be a positive number." % name, id="scheduler_app.E003"
                )
            )
    for name in POSITIVE_INTEGERS:
        value = getattr(app_settings, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            errors.append(
                Error(
                    "SCHEDULER_APP[%r] must be a positive integer." % name, id="scheduler_app.E004"
                )
            )
    errors.extend(_check_task_defaults())
    for name in NON_NEGATIVE_NUMBERS:
        value = getattr(app_settings, name)
        if not _number(value) or value < 0:
            errors.append(
                Error("SCHEDULER_APP[%r] must be a number >= 0." % name, id="scheduler_app.E005")
            )
    errors.extend(_check_message_id_domain())
    errors.extend(_check_celery())
    if not isinstance(app_settings.SEND_MARKER_SYNCHRONOUS_COMMIT, bool):
        errors.append(
            Error(
                "SCHEDULER_APP['SEND_MARKER_SYNCHRONOUS_COMMIT'] must be True or False.",
                id="scheduler_app.E085",
            )
        )
    threshold = app_settings.BREAKER_THRESHOLD
    if not _number(threshold) or not 0 < threshold <= 1:
        errors.append(
            Error(
                "SCHEDULER_APP['BREAKER_THRESHOLD'] must be a number above 0 and at most 1 "
                "(the share of failed attempts that pauses a batch).",
                id="scheduler_app.E086",
            )
        )

    # The upper bound (Schedule.declared_version is an integer column) is E007's.
    if not is_integer(app_settings.SCHEDULES_VERSION, 0, math.inf):
        errors.append(
            Error(
                "SCHEDULER_APP['SCHEDULES_VERSION'] must be an integer, at least 0.",
                id="scheduler_app.E006",
            )
        )
    return errors


def _check_task_defaults() -> list[Error]:
    """DEFAULT_MAX_ATTEMPTS (E004) and DEFAULT_TIMEOUT (E008), by the rules registry uses."""
    errors = []
    if not is_integer(app_settings.DEFAULT_MAX_ATTEMPTS, 1, math.inf):  # E007: the most
        errors.append(
            Error(
                "SCHEDULER_APP['DEFAULT_MAX_ATTEMPTS'] must be an integer, at least 1.",
                id="scheduler_app.E004",
            )
        )
    timeout = app_settings.DEFAULT_TIMEOUT
    try:
        as_duration(timeout, "DEFAULT_TIMEOUT")
    except ValueError as exc:
        errors.append(
            Error(
                "SCHEDULER_APP['DEFAULT_TIMEOUT'] must be None or a positive number of seconds: "
                "%s; got %r." % (exc, timeout),
                id="scheduler_app.E008",
            )
        )
    return errors


CELERY_APP_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")


def _check_celery() -> list[Error]:
    """Check the Celery executor's settings without importing Celery or the app."""
    errors = []
    app = app_settings.CELERY_APP
    if app is not None and not (isinstance(app, str) and CELERY_APP_PATH.fullmatch(app)):
        errors.append(
            Error(
                "SCHEDULER_APP['CELERY_APP'] must be None or the dotted path to a Celery app "
                "instance, such as 'proj.celery.app', not %r." % (app,),
                id="scheduler_app.E060",
            )
        )
    prefix = app_settings.CELERY_QUEUE_PREFIX
    if not isinstance(prefix, str) or len(prefix) > 100:
        errors.append(
            Error(
                "SCHEDULER_APP['CELERY_QUEUE_PREFIX'] must be a string of at most 100 characters.",
                id="scheduler_app.E061",
            )
        )
    in_flight = app_settings.CELERY_MAX_IN_FLIGHT
    if isinstance(in_flight, bool) or not isinstance(in_flight, int) or in_flight < 1:
        errors.append(
            Error(
                "SCHEDULER_APP['CELERY_MAX_IN_FLIGHT'] must be a positive integer.",
                id="scheduler_app.E062",
            )
        )
    wait = app_settings.CELERY_MAX_BROKER_WAIT
    # Not NaN or infinity either: a lost message would never be published again.
    if not _number(wait) or wait <= 0:
        errors.append(
            Error(
                "SCHEDULER_APP['CELERY_MAX_BROKER_WAIT'] must be a positive, finite number of "
                "seconds.",
                id="scheduler_app.E063",
            )
        )
    return errors


def _check_message_id_domain() -> list[Error]:
    configured = app_settings.MESSAGE_ID_DOMAIN
    if configured is not None:
        if isinstance(configured, str) and _plausible_domain(configured):
            return []
        return [
            Error(
                "SCHEDULER_APP['MESSAGE_ID_DOMAIN'] must be a domain name such as "
                "'mail.example.com', not %r." % (configured,),
                id="scheduler_app.E030",
            )
        ]
    if _plausible_domain(message_id_domain()):
        return []
    return [
        Error(
            "Message-IDs take their domain from DEFAULT_FROM_EMAIL (%r), which has none."
            % settings.DEFAULT_FROM_EMAIL,
            hint="Set SCHEDULER_APP['MESSAGE_ID_DOMAIN'] (e.g. 'mail.example.com').",
            id="scheduler_app.E030",
        )
    ]


def _plausible_domain(domain: str) -> bool:
    """Return True for a host name of dot-separated labels (IDNA allowed), at most 253 long."""
    try:
        ascii_domain = domain.encode("idna").decode("ascii")
    except UnicodeError:
        return False
    labels = ascii_domain.split(".")
    return len(ascii_domain) <= 253 and all(DOMAIN_LABEL.fullmatch(label) for label in labels)


@register(Tags.compatibility)
def check_task_queues(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    queues = app_settings.QUEUES
    if not isinstance(queues, list | tuple):
        return []
    return [
        Error(
            "Task %r uses queue %r, which SCHEDULER_APP['QUEUES'] does not list."
            % (name, spec.queue),
            id="scheduler_app.E010",
        )
        for name, spec in sorted(all_tasks().items())
        if spec.queue not in queues
    ]


@register(Tags.compatibility)
def check_declared_schedules(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    from scheduler_app.exceptions import ValidationError
    from scheduler_app.schedules.declared import declared_schedules

    try:
        declared_schedules()
    except ValidationError as exc:
        return [Error(exc.message, id="scheduler_app.E020")]
    return []


@register(Tags.compatibility)
def check_tasks_backends(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Check each TASKS backend that is a SchedulerBackend against SCHEDULER_APP['QUEUES']."""
    configured = getattr(settings, "TASKS", None)
    if not isinstance(configured, dict):
        return []
    errors = []
    for alias, params in configured.items():
        if isinstance(params, dict) and _is_scheduler_backend(params.get("BACKEND")):
            errors.extend(_check_tasks_backend(alias, params))
    return errors


def _is_scheduler_backend(path: Any) -> bool:
    if not isinstance(path, str):
        return False
    try:
        backend = import_string(path)
    except ImportError:
        return False  # the tasks framework reports a backend it cannot import
    # Imported here: scheduler_app.tasks_backend needs django.tasks or django_tasks, which a
    # project that does not use it may lack; it can import when a backend path names it.
    from scheduler_app.tasks_backend import SchedulerBackend

    return isinstance(backend, type) and issubclass(backend, SchedulerBackend)


def _check_tasks_backend(alias: str, params: dict[str, Any]) -> list[Error]:
    # Django's default when QUEUES is left out.
    queues = params.get("QUEUES", ["default"])
    if isinstance(queues, str) or not isinstance(queues, list | tuple | set | frozenset):
        return [
            Error(
                "TASKS[%r]['QUEUES'] must be a list of queue names." % alias,
                id="scheduler_app.E071",
            )
        ]
    if not queues:
        return [
            Error(
                "TASKS[%r]['QUEUES'] is empty, which lets Tasks name any queue." % alias,
                hint="List the queues of SCHEDULER_APP['QUEUES'] that Tasks may use.",
                id="scheduler_app.E071",
            )
        ]
    listed = app_settings.QUEUES
    # Of any other type, E002 reports SCHEDULER_APP['QUEUES'], as check_task_queues leaves it.
    errors = [
        Error(
            "TASKS[%r] lists queue %r, which SCHEDULER_APP['QUEUES'] does not list."
            % (alias, queue),
            hint="SCHEDULER_APP['QUEUES'] is the authority: add the queue there, or drop it here.",
            id="scheduler_app.E070",
        )
        for queue in sorted(queues, key=str)
        if isinstance(listed, list | tuple) and queue not in listed
    ]
    if params.get("OPTIONS"):
        errors.append(
            Error(
                "TASKS[%r]['OPTIONS'] is set, but SchedulerBackend takes no options." % alias,
                hint="Set attempts and timeouts in SCHEDULER_APP (DEFAULT_MAX_ATTEMPTS, "
                "DEFAULT_TIMEOUT).",
                id="scheduler_app.E072",
            )
        )
    return errors


#: Operability settings that must be positive numbers of seconds (check E040).
OPERABILITY_SECONDS = (
    "ALERT_INTERVAL",
    "ALERT_RENOTIFY_AFTER",
    "ALERT_RESOLVE_AFTER",
    "OVERDUE_AFTER",
    "FAILING_WINDOW",
    "WORKER_HEARTBEAT_INTERVAL",
    "WORKER_LOST_AFTER",
    "STALE_SEND_AFTER",
    "STALLED_SEND_AFTER",
)


@register(Tags.compatibility)
def check_operability(app_configs: Any = None, **kwargs: Any) -> list[Error | Warning]:
    """Alert, heartbeat and stale-send settings; warn when no alert would be delivered."""
    from scheduler_app.alerts.notifiers import build_notifier

    problems: list[Error | Warning] = []
    for name in OPERABILITY_SECONDS:
        value = getattr(app_settings, name)
        if not _number(value) or value <= 0:
            problems.append(
                Error(
                    "SCHEDULER_APP[%r] must be a positive number of seconds." % name,
                    id="scheduler_app.E040",
                )
            )
    rate = app_settings.FAILING_RATE
    if not _number(rate) or not 0 <= rate < 1:
        problems.append(
            Error(
                "SCHEDULER_APP['FAILING_RATE'] must be a number >= 0 and < 1.",
                id="scheduler_app.E041",
            )
        )
    base = app_settings.ADMIN_BASE_URL
    if not isinstance(base, str) or (base and not base.startswith(("http://", "https://"))):
        problems.append(
            Error(
                "SCHEDULER_APP['ADMIN_BASE_URL'] must be '' or an absolute http(s) URL, not %r."
                % (base,),
                id="scheduler_app.E042",
            )
        )
    heartbeat, lost = app_settings.WORKER_HEARTBEAT_INTERVAL, app_settings.WORKER_LOST_AFTER
    if not problems and lost <= 2 * heartbeat:
        problems.append(
            Error(
                "SCHEDULER_APP['WORKER_LOST_AFTER'] (%ss) must exceed twice "
                "WORKER_HEARTBEAT_INTERVAL (%ss), or live workers are marked lost."
                % (lost, heartbeat),
                id="scheduler_app.E043",
            )
        )
    entries = app_settings.ALERT_NOTIFIERS
    if not isinstance(entries, list | tuple):
        return [
            *problems,
            Error("SCHEDULER_APP['ALERT_NOTIFIERS'] must be a list.", id="scheduler_app.E044"),
        ]
    notifiers = []
    for entry in entries:
        try:
            notifier = build_notifier(entry)
        except (ImportError, ValueError) as exc:
            problem = str(exc)
        except Exception as exc:  # whatever the class's constructor raises
            problem = "%s: %s" % (type(exc).__name__, exc)
        else:
            if callable(getattr(notifier, "notify", None)):
                notifiers.append(notifier)
                continue
            problem = "it has no notify() method"
        problems.append(
            Error(
                "SCHEDULER_APP['ALERT_NOTIFIERS'] entry %r cannot be built: %s" % (entry, problem),
                id="scheduler_app.E044",
            )
        )
    if not any(getattr(n, "would_deliver", lambda: True)() for n in notifiers):
        problems.append(
            Warning(
                "No alert notifier would deliver anything: alerts are only visible in the "
                "admin and to scheduler_health.",
                hint="Set ADMINS (the default notifier mails them) or add a notifier such as "
                "{'class': 'scheduler_app.alerts.notifiers.Webhook', 'url': ...} to "
                "SCHEDULER_APP['ALERT_NOTIFIERS'].",
                id="scheduler_app.W040",
            )
        )
    return problems


#: Retention settings: a number of days > 0, or None to keep forever (check E054).
RETENTION_DAYS = (
    "RETENTION_JOBS_DAYS",
    "RETENTION_OCCURRENCES_DAYS",
    "RETENTION_CONTROL_EVENTS_DAYS",
    "RETENTION_RECIPIENT_CONTEXT_DAYS",
    "RETENTION_DRY_RUN_REPORTS_DAYS",
    "RETENTION_WORKERS_DAYS",
    "RETENTION_ALERTS_DAYS",
)


@register(Tags.compatibility)
def check_metrics_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Check the METRICS_* settings (E050-E053, W050)."""
    problems: list[CheckMessage] = []
    allowed = app_settings.METRICS_ALLOWED_IPS
    networks = []
    if not isinstance(allowed, list | tuple):
        allowed = None
    else:
        try:
            networks = [ipaddress.ip_network(entry, strict=False) for entry in allowed]
        except (TypeError, ValueError):
            allowed = None
    if allowed is None:
        problems.append(
            Error(
                "SCHEDULER_APP['METRICS_ALLOWED_IPS'] must be a list of IP addresses or "
                "networks such as '127.0.0.1' or '10.0.0.0/8'.",
                id="scheduler_app.E050",
            )
        )
    elif any(network.prefixlen == 0 for network in networks):
        problems.append(
            Warning(
                "SCHEDULER_APP['METRICS_ALLOWED_IPS'] serves the metrics to every address.",
                hint="List the Prometheus servers' addresses, or use METRICS_TOKEN.",
                id="scheduler_app.W050",
            )
        )
    token = app_settings.METRICS_TOKEN
    if token is not None and (not isinstance(token, str) or not token.strip()):
        problems.append(
            Error(
                "SCHEDULER_APP['METRICS_TOKEN'] must be None or a non-empty string.",
                id="scheduler_app.E051",
            )
        )
    cache_seconds, window = app_settings.METRICS_CACHE_SECONDS, app_settings.METRICS_WINDOW
    if not _number(cache_seconds) or cache_seconds < 0 or not _number(window) or window <= 0:
        problems.append(
            Error(
                "SCHEDULER_APP['METRICS_CACHE_SECONDS'] must be a number >= 0 and "
                "SCHEDULER_APP['METRICS_WINDOW'] a number > 0.",
                id="scheduler_app.E052",
            )
        )
    batches = app_settings.METRICS_MAX_BATCHES
    if isinstance(batches, bool) or not isinstance(batches, int) or batches < 0:
        problems.append(
            Error(
                "SCHEDULER_APP['METRICS_MAX_BATCHES'] must be an integer >= 0.",
                id="scheduler_app.E053",
            )
        )
    return problems


@register(Tags.compatibility)
def check_retention_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Check the RETENTION_* and PRUNE_* settings (E054-E056)."""
    problems: list[CheckMessage] = [
        Error(
            "SCHEDULER_APP[%r] must be a number of days > 0, or None to keep forever." % name,
            id="scheduler_app.E054",
        )
        for name in RETENTION_DAYS
        if getattr(app_settings, name) is not None
        and (not _number(getattr(app_settings, name)) or getattr(app_settings, name) <= 0)
    ]
    for name in ("PRUNE_BATCH_SIZE", "PRUNE_MAX_ROWS"):
        value = getattr(app_settings, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            problems.append(
                Error(
                    "SCHEDULER_APP[%r] must be a positive integer." % name,
                    id="scheduler_app.E055",
                )
            )
    cron = app_settings.PRUNE_SCHEDULE
    if cron is not None:
        from scheduler_app.schedules.recurrence import CronError, check_cron

        try:
            if not isinstance(cron, str):
                raise CronError("not a string")
            check_cron(cron)
        except CronError as exc:
            problems.append(
                Error(
                    "SCHEDULER_APP['PRUNE_SCHEDULE'] must be None or a cron expression "
                    "(UTC), not %r: %s." % (cron, exc),
                    id="scheduler_app.E056",
                )
            )
    return problems


@register(Tags.models)
def check_job_relations(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Refuse a project's foreign key to Job but a DO_NOTHING one without a constraint (E059).

    The PostgreSQL prune deletes jobs in one statement (db.postgresql.PRUNE_JOBS) that
    handles scheduler_app's own relations only: the constraint would fail every run.
    """
    if app_settings.RETENTION_JOBS_DAYS is None:
        return []
    return [
        Error(
            "A relation to scheduler_app.Job that the prune cannot honour: on PostgreSQL "
            "it deletes finished jobs with one SQL statement, which ignores on_delete, so "
            "a database constraint would make every prune fail.",
            hint="Declare it with on_delete=models.DO_NOTHING and db_constraint=False (a "
            "pruned job leaves its id behind), keep the job's id in a plain integer field, "
            "or set SCHEDULER_APP['RETENTION_JOBS_DAYS'] = None and delete finished jobs "
            "yourself.",
            obj=field,
            id="scheduler_app.E059",
        )
        for app_config in app_configs or apps.get_app_configs()
        if app_config.name != "scheduler_app"
        for model in app_config.get_models(include_auto_created=True)
        for field in model._meta.local_fields
        if field.is_relation
        and field.related_model is Job
        and (field.db_constraint or field.remote_field.on_delete is not DO_NOTHING)
    ]


def _number(value: Any) -> bool:
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


@register(Tags.compatibility)
def check_numeric_bounds(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """E007: every numeric setting within its bound (scheduler_app.bounds.SETTING_BOUNDS).

    Finite is not enough: a 1e300 s lease passes ``_number()`` and kills the lease
    thread. The other checks judge a value's type and sign; this one its size.
    """
    errors = []
    for name in SETTING_BOUNDS:
        value = getattr(app_settings, name)
        bound = out_of_bounds(name, value)
        if bound is not None:
            errors.append(
                Error(
                    "SCHEDULER_APP[%r] must be %s, not %r." % (name, bound.describe(), value),
                    hint=bound.why,
                    id="scheduler_app.E007",
                )
            )
    return errors


@register(Tags.database)
def check_no_transaction_pooling(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[Error]:
    """Refuse PgBouncer in transaction-pooling mode, which Django marks with
    DISABLE_SERVER_SIDE_CURSORS (see docs/performance.md)."""
    default = settings.DATABASES.get("default", {})
    if not default.get("DISABLE_SERVER_SIDE_CURSORS"):
        return []
    return [
        Error(
            "scheduler_app does not support a transaction-pooling connection pooler (such as "
            "PgBouncer with pool_mode=transaction), which DATABASES['default']"
            "['DISABLE_SERVER_SIDE_CURSORS'] = True says this is: runworker LISTENs for new jobs "
            "on a session of its own and records outcomes and claims in one pipelined "
            "transaction.",
            hint="Connect to PostgreSQL directly or through session pooling "
            "(pool_mode=session); see docs/performance.md.",
            id="scheduler_app.E080",
        )
    ]


@register(Tags.urls)
def check_api_docs_assets(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """Warn when the URLconf serves the API docs page but its assets cannot be served."""
    # Imported here: the API's views load DRF, which only projects that route it need.
    from scheduler_app.api.views import DocsView

    if apps.is_installed("drf_spectacular_sidecar") or not _has_urlconf():
        return []
    try:
        patterns = get_resolver().url_patterns
    except (ImportError, ImproperlyConfigured):
        return []  # Django's own URL checks report a broken URLconf
    if not _routes_view(patterns, DocsView):
        return []
    return [
        Warning(
            "The API docs page (/api/docs/) is routed but 'drf_spectacular_sidecar' is not in "
            "INSTALLED_APPS, so its Swagger UI files will not be found and the page stays blank.",
            hint="Add 'drf_spectacular_sidecar' to INSTALLED_APPS (it is installed with "
            "django-scheduler-app).",
            id="scheduler_app.W090",
        )
    ]


def _has_urlconf() -> bool:
    """Return whether the settings name a URLconf; a worker-only settings module may not."""
    return bool(getattr(settings, "ROOT_URLCONF", None))


def _routes_view(patterns: list[Any], view_class: type) -> bool:
    """Return whether any of ``patterns``, followed into includes, is ``view_class``."""
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            if _routes_view(pattern.url_patterns, view_class):
                return True
        elif issubclass(getattr(pattern.callback, "view_class", object), view_class):
            return True
    return False


@register(Tags.compatibility)
def check_feedback_settings(app_configs: Any = None, **kwargs: Any) -> list[Error | Warning]:
    """Mail feedback: the unsubscribe link's origin, scope, limits and webhook secret."""
    problems: list[Error | Warning] = []
    base = app_settings.PUBLIC_BASE_URL
    if base is None:
        problems.append(
            Warning(
                "Batch messages carry no one-click unsubscribe: SCHEDULER_APP"
                "['PUBLIC_BASE_URL'] is not set.",
                hint="Set it to your site's https origin and include "
                "scheduler_app.feedback.urls; large mailbox providers require it of bulk mail.",
                id="scheduler_app.W100",
            )
        )
    elif not _is_origin(base):
        problems.append(
            Error(
                "SCHEDULER_APP['PUBLIC_BASE_URL'] must be an origin such as "
                "'https://example.com', not %r." % (base,),
                id="scheduler_app.E100",
            )
        )
    elif base.startswith("http://") and not re.match(r"http://(localhost|127\.0\.0\.1)\b", base):
        problems.append(
            Warning(
                "SCHEDULER_APP['PUBLIC_BASE_URL'] is not https: mailbox providers ignore "
                "one-click unsubscribe links that are not HTTPS (RFC 8058).",
                id="scheduler_app.W101",
            )
        )
    if app_settings.UNSUBSCRIBE_SCOPE not in ("audience", "all"):
        problems.append(
            Error(
                "SCHEDULER_APP['UNSUBSCRIBE_SCOPE'] must be 'audience' or 'all'.",
                id="scheduler_app.E101",
            )
        )
    for name in ("UNSUBSCRIBE_RATE_LIMIT", "SOFT_BOUNCE_LIMIT", "FEEDBACK_MIN_SENT"):
        value = getattr(app_settings, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            problems.append(
                Error(
                    "SCHEDULER_APP[%r] must be a positive integer." % name, id="scheduler_app.E102"
                )
            )
    window = app_settings.SOFT_BOUNCE_WINDOW
    if not _number(window) or window <= 0:
        problems.append(
            Error(
                "SCHEDULER_APP['SOFT_BOUNCE_WINDOW'] must be a positive number.",
                id="scheduler_app.E102",
            )
        )
    for name in ("COMPLAINT_RATE_LIMIT", "BOUNCE_RATE_LIMIT"):
        value = getattr(app_settings, name)
        if value is not None and (not _number(value) or not 0 < value < 1):
            problems.append(
                Error(
                    "SCHEDULER_APP[%r] must be None or a share between 0 and 1." % name,
                    id="scheduler_app.E103",
                )
            )
    secret = app_settings.FEEDBACK_WEBHOOK_SECRET
    if secret is not None and (not isinstance(secret, str) or len(secret) < 16):
        problems.append(
            Error(
                "SCHEDULER_APP['FEEDBACK_WEBHOOK_SECRET'] must be a string of at least 16 "
                "characters.",
                id="scheduler_app.E104",
            )
        )
    mailto = app_settings.UNSUBSCRIBE_MAILTO
    if mailto is not None and not _plain_address(mailto):
        problems.append(
            Error(
                "SCHEDULER_APP['UNSUBSCRIBE_MAILTO'] must be a plain address such as "
                "'unsubscribe@example.com', not %r." % (mailto,),
                id="scheduler_app.E105",
            )
        )
    return problems


def _plain_address(value: Any) -> bool:
    """Return whether ``value`` is an email address alone, fit for a mailto: URL in a header:
    no name, no control characters (a CR or LF fails every message), nothing URL-like."""
    if (
        not isinstance(value, str)
        or any(c in value for c in '<>?,"\\ :')
        or not value.isprintable()
    ):
        return False
    try:
        validate_email(value)
    except DjangoValidationError:
        return False
    return True


@register(Tags.compatibility)
def check_send_settings(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Bulk sends: providers, the suppression check, the send queue, the checklist's relaxed
    items and the dry-run's short-body limit (E110-E114); each failed only at send time."""
    from scheduler_app.exceptions import UnknownQueue
    from scheduler_app.registry import check_queue
    from scheduler_app.sends.checklist import ITEM_NAMES

    errors = []
    providers = app_settings.PROVIDERS
    if not isinstance(providers, dict) or not all(isinstance(name, str) for name in providers):
        errors.append(
            Error(
                "SCHEDULER_APP['PROVIDERS'] must be a dict of provider name -> dotted path, "
                "not %r." % (providers,),
                id="scheduler_app.E110",
            )
        )
    else:
        errors.extend(
            Error("SCHEDULER_APP['PROVIDERS'][%r] %s." % (name, problem), id="scheduler_app.E110")
            for name, path in providers.items()
            if (problem := _import_problem(path))
        )
    suppression = app_settings.SUPPRESSION_CHECK
    if suppression is not None and (problem := _import_problem(suppression)):
        errors.append(
            Error("SCHEDULER_APP['SUPPRESSION_CHECK'] %s." % problem, id="scheduler_app.E111")
        )
    if isinstance(app_settings.QUEUES, list | tuple):  # else E002 reports QUEUES
        try:
            check_queue(app_settings.SEND_QUEUE)
        except UnknownQueue as exc:
            errors.append(
                Error("SCHEDULER_APP['SEND_QUEUE']: %s" % exc.message, id="scheduler_app.E112")
            )
    relax = app_settings.CHECKLIST_RELAX
    if not isinstance(relax, list | tuple):
        problem = "must be a list of checklist item names, not %r" % (relax,)
    else:
        unknown = [name for name in relax if name not in ITEM_NAMES]
        problem = "names unknown checklist item %r" % (unknown[0],) if unknown else ""
    if problem:
        errors.append(
            Error(
                "SCHEDULER_APP['CHECKLIST_RELAX'] %s; the items are: %s."
                % (problem, ", ".join(sorted(ITEM_NAMES))),
                id="scheduler_app.E113",
            )
        )
    if not is_integer(app_settings.DRY_RUN_SHORT_BODY, 0, math.inf):  # E007: the most
        errors.append(
            Error(
                "SCHEDULER_APP['DRY_RUN_SHORT_BODY'] must be an integer >= 0 (0 flags no body).",
                id="scheduler_app.E114",
            )
        )
    return errors


@register(Tags.compatibility)
def check_dry_run_storage(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """E115: DRY_RUN_STORAGE names a storage, and not one that writes into this package."""
    from django.core.files.storage import storages

    from scheduler_app.sends.dry_run import REPORT_DIR, report_storage

    alias = app_settings.DRY_RUN_STORAGE
    if not isinstance(alias, str) or alias not in storages.backends:
        return [
            Error(
                "SCHEDULER_APP['DRY_RUN_STORAGE'] must name a storage in STORAGES (%s), not %r."
                % (", ".join(storages.backends), alias),
                id="scheduler_app.E115",
            )
        ]
    try:
        folder = Path(report_storage().path(REPORT_DIR)).resolve()
    except NotImplementedError:  # not on a file system: it cannot be the package's folder
        return []
    package = Path(__file__).resolve().parent
    if folder == package or package in folder.parents:
        return [
            Error(
                "SCHEDULER_APP['DRY_RUN_STORAGE'] (%r) would write dry-run reports into the "
                "installed package (%s); set MEDIA_ROOT, or name another storage."
                % (alias, folder),
                id="scheduler_app.E115",
            )
        ]
    return []


def _import_problem(path: Any) -> str:
    """Return what is wrong with ``path`` as the dotted path of a class or function, or ''."""
    if not isinstance(path, str) or not path:
        return "must be a dotted path, not %r" % (path,)
    try:
        imported = import_string(path)
    except Exception as exc:  # ImportError, or whatever the module raises
        return "cannot be imported: %s" % exc
    return "" if callable(imported) else "(%r) is not a class or callable" % path


def _is_origin(base: Any) -> bool:
    return isinstance(base, str) and re.fullmatch(r"https?://[^/\s?#]+/?", base) is not None


@register(Tags.urls)
def check_unsubscribe_route(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Refuse a PUBLIC_BASE_URL whose unsubscribe view the URLconf does not route.

    A URLs check: it loads the URLconf, which only ``check --tag urls`` (or a
    full check) should do.
    """
    from django.urls import NoReverseMatch, reverse

    if not _is_origin(app_settings.PUBLIC_BASE_URL):
        return []  # check_feedback_settings reports it
    # Without a URLconf nothing routes it, and a worker could not make the links either.
    if _has_urlconf():
        try:
            reverse("scheduler_app_feedback:unsubscribe", args=["r1:x"])
        except NoReverseMatch:
            pass
        except (ImportError, ImproperlyConfigured):
            return []  # Django's own URL checks report a broken URLconf
        else:
            return []
    return [
        Error(
            "SCHEDULER_APP['PUBLIC_BASE_URL'] is set but no URL pattern routes "
            "'scheduler_app_feedback:unsubscribe': batch messages could not carry their "
            "unsubscribe links.",
            hint='Add path("mail/", include("scheduler_app.feedback.urls")) to the URLconf '
            "that ROOT_URLCONF names (workers make the links with it too).",
            id="scheduler_app.E106",
        )
    ]
