"""Settings for the example project; every deployment-specific value comes from the environment.

DATABASE_URL picks the database (default: a SQLite file beside this module,
shared by the web server and the worker).
"""

from pathlib import Path

import django
import environ

BASE_DIR = Path(__file__).resolve().parent
env = environ.Env()

SECRET_KEY = env.str("SECRET_KEY", default="django-insecure-example-project-dev-only")
DEBUG = env.bool("DEBUG", default=True)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost"])

DATABASES = {"default": env.db("DATABASE_URL", default="sqlite:///%s" % (BASE_DIR / "db.sqlite3"))}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The web server and the worker write to the same file: wait for the lock
    # instead of failing, and take it at BEGIN so two writers never deadlock.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "timeout": 30,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )

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
    "example_project.demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "example_project.urls"
WSGI_APPLICATION = "example_project.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
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

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

_email_backend = env.str("EMAIL_BACKEND", default="django.core.mail.backends.console.EmailBackend")
_smtp_options = {
    "host": env.str("EMAIL_HOST", default="localhost"),
    "port": env.int("EMAIL_PORT", default=25),
    "username": env.str("EMAIL_HOST_USER", default=""),
    "password": env.str("EMAIL_HOST_PASSWORD", default=""),
    "use_tls": env.bool("EMAIL_USE_TLS", default=False),
    "use_ssl": env.bool("EMAIL_USE_SSL", default=False),
    # Unset: the email provider bounds each SMTP operation by SEND_CLAIM_SECONDS / 3.
    "timeout": env.float("EMAIL_TIMEOUT", default=None),
}
if django.VERSION >= (6, 1):
    # Django 6.1 deprecates EMAIL_BACKEND and the EMAIL_* options in favour of MAILERS.
    _smtp = _email_backend == "django.core.mail.backends.smtp.EmailBackend"
    MAILERS = {"default": {"BACKEND": _email_backend, "OPTIONS": _smtp_options if _smtp else {}}}
else:
    EMAIL_BACKEND = _email_backend
    EMAIL_HOST = _smtp_options["host"]
    EMAIL_PORT = _smtp_options["port"]
    EMAIL_HOST_USER = _smtp_options["username"]
    EMAIL_HOST_PASSWORD = _smtp_options["password"]
    EMAIL_USE_TLS = _smtp_options["use_tls"]
    EMAIL_USE_SSL = _smtp_options["use_ssl"]
    EMAIL_TIMEOUT = _smtp_options["timeout"]
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="demo@example.com")

# Uploads and dry-run reports (scheduler_app/dry-runs/), never the installed package's folder.
MEDIA_ROOT = env.str("MEDIA_ROOT", default=str(BASE_DIR / "media"))

# The origin start.sh serves (PORT, default 8000): links in mails and alerts lead back to it.
_LOCAL_URL = "http://127.0.0.1:%s" % env.int("PORT", default=8000)

SCHEDULER_APP = {
    "QUEUES": ["default", "emails", "slow"],
    # Batch messages carry one-click unsubscribe links to this origin (mail/unsubscribe/...).
    "PUBLIC_BASE_URL": env.str("PUBLIC_BASE_URL", default=_LOCAL_URL),
    # /metrics answers requests from this machine only (and any bearing METRICS_TOKEN).
    "METRICS_ALLOWED_IPS": env.list("METRICS_ALLOWED_IPS", default=["127.0.0.1", "::1"]),
    "METRICS_TOKEN": env.str("METRICS_TOKEN", default=None),
    "SCHEDULES": {
        # Every 2 minutes in London time; see it under Schedules in the admin.
        "demo-cleanup": {
            "task": "demo.cleanup",
            "cron": "*/2 * * * *",
            "timezone": "Europe/London",
        },
        # Every minute, with targets: it must succeed at least every 5 minutes, and two
        # runs in a row that sync 0 orders open a "suspicious success" alert (it always
        # syncs 0 here), so Alerts in the admin shows one within a few minutes.
        "demo-sync-orders": {
            "task": "demo.sync_orders",
            "fixed_rate": 60,
            "expected_every": 300,
            "count_key": "processed",
            "zero_runs_alert": 2,
        },
    },
    # Evaluate the alert rules often, for the demo; alert mails go to ADMINS (printed by
    # the console email backend) with links into this admin.
    "ALERT_INTERVAL": 15,
    "ADMIN_BASE_URL": env.str("ADMIN_BASE_URL", default=_LOCAL_URL),
}
# Django 6.0 takes plain addresses and deprecates (name, address) pairs.
ADMINS = ["ops@example.com"] if django.VERSION >= (6, 0) else [("Demo operator", "ops@example.com")]

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "scheduler_app": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
        "example_project": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    },
}
