"""System checks of the metrics and retention settings: E050-E057, W050, W058."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import override_settings

from scheduler_app.checks.metrics import check_metrics_settings
from scheduler_app.checks.retention import check_retention_settings


def ids(**changes):
    with override_settings(SCHEDULER_APP={**settings.SCHEDULER_APP, **changes}):
        return [p.id for p in check_metrics_settings() + check_retention_settings()]


def test_the_defaults_pass():
    assert ids() == []


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"METRICS_ALLOWED_IPS": "127.0.0.1"}, "scheduler_app.E050"),
        ({"METRICS_ALLOWED_IPS": ["localhost"]}, "scheduler_app.E050"),
        ({"METRICS_ALLOWED_IPS": ["10.0.0.0/8", None]}, "scheduler_app.E050"),
        ({"METRICS_ALLOWED_IPS": ["0.0.0.0/0"]}, "scheduler_app.W050"),
        ({"METRICS_ALLOWED_IPS": ["::/0"]}, "scheduler_app.W050"),
        ({"METRICS_TOKEN": ""}, "scheduler_app.E051"),
        ({"METRICS_TOKEN": 1234}, "scheduler_app.E051"),
        ({"METRICS_CACHE_SECONDS": -1}, "scheduler_app.E052"),
        ({"METRICS_WINDOW": 0}, "scheduler_app.E052"),
        ({"METRICS_WINDOW": "1h"}, "scheduler_app.E052"),
        ({"METRICS_MAX_BATCHES": -1}, "scheduler_app.E053"),
        ({"METRICS_MAX_BATCHES": 2.5}, "scheduler_app.E053"),
        ({"RETENTION_JOBS_DAYS": 0}, "scheduler_app.E054"),
        ({"RETENTION_ALERTS_DAYS": "90"}, "scheduler_app.E054"),
        ({"RETENTION_WORKERS_DAYS": True}, "scheduler_app.E054"),
        ({"PRUNE_BATCH_SIZE": 0}, "scheduler_app.E055"),
        ({"PRUNE_MAX_ROWS": 1.5}, "scheduler_app.E055"),
        ({"OCCURRENCE_PARTITION_DAYS": 0}, "scheduler_app.E055"),
        ({"OCCURRENCE_PARTITION_DAYS": 7.5}, "scheduler_app.E055"),
        ({"PRUNE_SCHEDULE": "every night"}, "scheduler_app.E056"),
        ({"PRUNE_SCHEDULE": "61 3 * * *"}, "scheduler_app.E056"),
        ({"PRUNE_SCHEDULE": 3}, "scheduler_app.E056"),
        ({"PARTITIONED_HISTORY": "yes"}, "scheduler_app.E057"),
        ({"PARTITIONED_HISTORY": 1}, "scheduler_app.E057"),
        ({"RETENTION_BATCHES_DAYS": 0}, "scheduler_app.E054"),
        # Unsubscribe links must work 30 days; a batch's go with its recipients.
        ({"RETENTION_BATCHES_DAYS": 29.5}, "scheduler_app.W058"),
    ],
)
def test_each_bad_value_gets_its_id(changes, expected):
    assert ids(**changes) == [expected]


@pytest.mark.parametrize(
    "changes",
    [
        {"METRICS_ALLOWED_IPS": ["127.0.0.1", "::1", "10.0.0.0/8"]},
        {"METRICS_TOKEN": "s3cret", "METRICS_CACHE_SECONDS": 0, "METRICS_MAX_BATCHES": 0},
        {"RETENTION_JOBS_DAYS": None, "RETENTION_ALERTS_DAYS": 0.5},
        {"PRUNE_SCHEDULE": None},
        {"PARTITIONED_HISTORY": False},
        {"RETENTION_BATCHES_DAYS": 30},
        {"OCCURRENCE_PARTITION_DAYS": 1},
    ],
)
def test_good_values_pass(changes):
    assert ids(**changes) == []
