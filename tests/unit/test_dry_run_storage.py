"""DRY_RUN_STORAGE: the Django storage dry-run reports are written to (#38), and its check."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.test import override_settings

import scheduler_app
from scheduler_app.checks.sends import check_dry_run_storage
from scheduler_app.sends.dry_run import report_storage

FILES = "django.core.files.storage.FileSystemStorage"
PACKAGE = Path(scheduler_app.__file__).resolve().parent


def with_setting(**changes):
    return override_settings(SCHEDULER_APP={**settings.SCHEDULER_APP, **changes})


def messages(errors):
    return [(error.id, error.msg) for error in errors]


def test_reports_go_to_the_default_storage_unless_another_is_named(tmp_path):
    storages = {
        "default": {"BACKEND": FILES, "OPTIONS": {"location": str(tmp_path / "media")}},
        "reports": {"BACKEND": FILES, "OPTIONS": {"location": str(tmp_path / "reports")}},
    }
    with override_settings(STORAGES=storages):
        assert report_storage().location == str(tmp_path / "media")
        with with_setting(DRY_RUN_STORAGE="reports"):
            assert report_storage().location == str(tmp_path / "reports")
            assert check_dry_run_storage() == []


def test_an_unknown_storage_is_e115():
    with with_setting(DRY_RUN_STORAGE="reports"):
        assert messages(check_dry_run_storage()) == [
            (
                "scheduler_app.E115",
                "SCHEDULER_APP['DRY_RUN_STORAGE'] must name a storage in STORAGES "
                "(default, staticfiles), not 'reports'.",
            )
        ]


def test_a_storage_inside_the_installed_package_is_e115():
    """An unset MEDIA_ROOT with the project next to the package wrote reports into it."""
    storages = {"default": {"BACKEND": FILES, "OPTIONS": {"location": str(PACKAGE.parent)}}}
    with override_settings(STORAGES=storages):
        assert messages(check_dry_run_storage()) == [
            (
                "scheduler_app.E115",
                "SCHEDULER_APP['DRY_RUN_STORAGE'] ('default') would write dry-run reports "
                "into the installed package (%s); set MEDIA_ROOT, or name another storage."
                % (PACKAGE / "dry-runs"),
            )
        ]
