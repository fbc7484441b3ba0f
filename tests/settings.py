"""Settings for the test suite. DATABASE_URL picks the database (default: a SQLite file).

A SQLite *file* (not :memory:) so that runworker subprocesses share it.
"""

from pathlib import Path

import django
import environ

BASE_DIR = Path(__file__).resolve().parent
env = environ.Env()

SECRET_KEY = "tests-only"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ALLOWED_HOSTS = ["*"]

SQLITE_TEST_FILE = BASE_DIR / ".test-db.sqlite3"
# Dry-run reports (tests move it to a tmp folder); never the package's folder (E115).
MEDIA_ROOT = str(BASE_DIR / "media")
DATABASES = {"default": env.db("DATABASE_URL", default="sqlite:///%s" % (BASE_DIR / ".db.sqlite3"))}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "timeout": 30,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )
    DATABASES["default"]["TEST"] = {"NAME": env.str("SQLITE_TEST_NAME", str(SQLITE_TEST_FILE))}
elif DATABASES["default"].get("OPTIONS", {}).get("pool") in (1, "1"):
    # DATABASE_URL=...?pool=1: Django's connection pool, at most a connection per handler
    # thread and the loop's, idle ones closed after a second (tests/processes/test_connections.py).
    DATABASES["default"]["OPTIONS"]["pool"] = {"min_size": 1, "max_size": 5, "max_idle": 1.0}

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular_sidecar",  # the API docs page's Swagger UI files
    "scheduler_app",
    "tests.testapp",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "tests.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
# SCHEDULER_TEST_POSTMARK_URL: mail goes through django-anymail's Postmark backend to that
# URL (tests/sends/fake_esp.py serves it), as a project sending through an ESP does.
_MAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
if env.str("SCHEDULER_TEST_POSTMARK_URL", ""):
    _MAIL_BACKEND = "anymail.backends.postmark.EmailBackend"
    ANYMAIL = {
        "POSTMARK_SERVER_TOKEN": "test-token",
        "POSTMARK_API_URL": env.str("SCHEDULER_TEST_POSTMARK_URL"),
    }
if django.VERSION >= (6, 1):
    # Django 6.1 deprecates EMAIL_BACKEND in favour of MAILERS.
    MAILERS = {"default": {"BACKEND": _MAIL_BACKEND}}
else:
    EMAIL_BACKEND = _MAIL_BACKEND
# Django 6.0 takes plain addresses and deprecates (name, address) pairs.
ADMINS = ["ops@example.com"] if django.VERSION >= (6, 0) else [("Ops", "ops@example.com")]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
STATIC_URL = "/static/"

SCHEDULER_APP = {
    "QUEUES": ["default", "emails", "slow"],
    "POLL_INTERVAL": 0.5,
    "LEASE_SECONDS": 10,
    "SUMMARY_INTERVAL": 5,
    "DATABASE_UNAVAILABLE_TIMEOUT": env.float("SCHEDULER_DB_UNAVAILABLE_TIMEOUT", 60.0),
    "PROVIDERS": {
        "email": "scheduler_app.sends.providers.email.DjangoEmailProvider",
        "report": "scheduler_app.sends.providers.report.ReportProvider",
        "fake": "tests.testapp.sending.FakeProvider",
        "noop": "tests.testapp.sending.NoopProvider",
    },
    "SUPPRESSION_CHECK": "tests.testapp.sending.suppressed",
    "PUBLIC_BASE_URL": "https://mail.example.com",
    "FEEDBACK_WEBHOOK_SECRET": "test-secret-of-the-feedback-webhook",
    "SEND_CLAIM_SECONDS": env.float("SCHEDULER_SEND_CLAIM_SECONDS", 300.0),
    "SEND_LANES": env.int("SCHEDULER_SEND_LANES", 2),
    # 1: calls on the lane's thread, inside the test's transaction (FakeProvider records there).
    "SEND_WINDOW": env.int("SCHEDULER_SEND_WINDOW", 1),
    "SEND_CHUNK_SIZE": env.int("SCHEDULER_SEND_CHUNK_SIZE", 100),
    "SEND_MARKER_SYNCHRONOUS_COMMIT": env.bool("SCHEDULER_SEND_MARKER_SYNCHRONOUS_COMMIT", True),
    # tests/celery: the Celery app of the relay and workers, and one queue prefix per test.
    "CELERY_APP": "tests.celery_app.app",
    "CELERY_QUEUE_PREFIX": env.str("SCHEDULER_CELERY_QUEUE_PREFIX", "scheduler_tests."),
    "CELERY_MAX_BROKER_WAIT": env.float("SCHEDULER_CELERY_MAX_BROKER_WAIT", 300.0),
    "CELERY_JOBS_PER_MESSAGE": env.int("SCHEDULER_CELERY_JOBS_PER_MESSAGE", 1),
    "ALERT_INTERVAL": env.float("SCHEDULER_ALERT_INTERVAL", 60.0),
    "WORKER_HEARTBEAT_INTERVAL": env.float("SCHEDULER_HEARTBEAT_INTERVAL", 10.0),
    # The built-in prune schedule is on by default; tests of declared schedules count
    # their own (tests/db/test_retention.py turns it on).
    "PRUNE_SCHEDULE": None,
}

# django.tasks (the django_tasks backport on Django 5.2) enqueues scheduler_app jobs.
TASKS = {
    "default": {
        "BACKEND": "scheduler_app.tasks_backend.SchedulerBackend",
        "QUEUES": ["default", "emails"],
    }
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"scheduler_app": {"handlers": ["console"], "level": env.str("LOG_LEVEL", "INFO")}},
}

# A worker subprocess whose alerts go to a webhook (tests/processes/test_live_workers.py).
if env.str("SCHEDULER_TEST_ALERT_WEBHOOK", ""):
    SCHEDULER_APP["ALERT_NOTIFIERS"] = [
        {
            "class": "scheduler_app.alerts.notifiers.Webhook",
            "url": env.str("SCHEDULER_TEST_ALERT_WEBHOOK"),
            "timeout": 120,
        }
    ]

# A subprocess behind PgBouncer in transaction-pooling mode (tests/pgbouncer): Django's
# DISABLE_SERVER_SIDE_CURSORS declares it, and "direct" is the same database without it.
if env.bool("SCHEDULER_TEST_TRANSACTION_POOLING", False):
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
if env.str("SCHEDULER_TEST_DIRECT_DATABASE_URL", ""):
    DATABASES["direct"] = env.db("SCHEDULER_TEST_DIRECT_DATABASE_URL")

# A worker subprocess that LISTENs elsewhere (tests/processes/test_connections.py,
# tests/pgbouncer): "" polls, "direct" LISTENs on a connection of its own through an alias
# of the same database.
if "SCHEDULER_TEST_LISTEN_DATABASE" in env:
    SCHEDULER_APP["LISTEN_DATABASE"] = env.str("SCHEDULER_TEST_LISTEN_DATABASE")
    if SCHEDULER_APP["LISTEN_DATABASE"]:
        DATABASES.setdefault(SCHEDULER_APP["LISTEN_DATABASE"], dict(DATABASES["default"]))

# SCHEDULER_TEST_PLAIN_JOB_TABLE=1: the test database's job and recipient tables stay one
# table each, as an install's that holds rows do until scheduler_partition converts them
# (.ci/run's own step).
if env.bool("SCHEDULER_TEST_PLAIN_JOB_TABLE", False):
    SCHEDULER_APP["PARTITIONED_HISTORY"] = False

# A worker subprocess on a host whose clock is off (tests/processes/test_skewed_clock.py).
if env.float("SCHEDULER_TEST_CLOCK_SKEW", 0.0):
    from tests.skewed_clock import skew_clock

    skew_clock(env.float("SCHEDULER_TEST_CLOCK_SKEW"))

# tests/separate_database: scheduler_app's tables on a database of their own, a second one
# on the same PostgreSQL server (docs/separate-database.md); .ci/run runs that folder with
# SCHEDULER_TEST_SEPARATE_DATABASE=1. SCHEDULER_TEST_SCHEDULER_DATABASE_NAME names the
# second database (worker subprocesses get the test database's name).
if env.bool("SCHEDULER_TEST_SEPARATE_DATABASE", False):
    if DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(
            "SCHEDULER_TEST_SEPARATE_DATABASE needs a PostgreSQL DATABASE_URL."
        )
    DATABASES["scheduler"] = {
        **DATABASES["default"],
        "NAME": env.str(
            "SCHEDULER_TEST_SCHEDULER_DATABASE_NAME", "%s_scheduler" % DATABASES["default"]["NAME"]
        ),
    }
    DATABASE_ROUTERS = [
        "tests.routers.UsersWithTheScheduler",
        "scheduler_app.routers.SchedulerRouter",
    ]
    SCHEDULER_APP["DATABASE"] = "scheduler"
