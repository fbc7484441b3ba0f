"""runworker's options: the same bounds as the settings' system checks, and no silent option."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from scheduler_app.management.commands import runworker


class NotRun(Exception):
    """Raised instead of building a worker: these tests never run one."""


@pytest.fixture(autouse=True)
def no_worker(monkeypatch):
    def build_worker(self, options, executor):
        raise NotRun(options)

    monkeypatch.setattr(runworker.Command, "build_worker", build_worker)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # The lease renewal thread died (OverflowError) a moment after start.
        (["--lease", "inf"], "argument --lease: must be a finite number, got 'inf'"),
        (["--lease", "nan"], "argument --lease: must be a finite number, got 'nan'"),
        (
            ["--lease", "1e300"],
            "argument --lease: must be from 1 to 315532800 seconds (3652 days), got 1e300",
        ),
        # Renewed every third of a millisecond late: running jobs were rescued and run twice.
        (
            ["--lease", "0.001"],
            "argument --lease: must be from 1 to 315532800 seconds (3652 days), got 0.001",
        ),
        # An idle worker spun at ~80% CPU.
        (
            ["--poll-interval", "1e-9"],
            "argument --poll-interval: must be from 0.05 to 315532800 seconds (3652 days), "
            "got 1e-9",
        ),
        (
            ["--shutdown-timeout", "inf"],
            "argument --shutdown-timeout: must be a finite number, got 'inf'",
        ),
        # RuntimeError: can't start new thread.
        (
            ["--concurrency", "99999999999999999999"],
            "argument -c/--concurrency: must be from 1 to 1000, got 99999999999999999999",
        ),
        (
            ["--batch-size", "9999999999"],
            "argument --batch-size: must be from 1 to 2147483647, got 9999999999",
        ),
        # Unchanged: below the least value.
        (["--concurrency", "0"], "argument -c/--concurrency: must be from 1 to 1000, got 0"),
        (
            ["--lease", "0"],
            "argument --lease: must be from 1 to 315532800 seconds (3652 days), got 0",
        ),
        (["--poll-interval", "soon"], "argument --poll-interval: 'soon' is not a number"),
    ],
)
def test_out_of_bounds_options_are_argparse_errors_naming_the_option(args, message):
    with pytest.raises(CommandError) as raised:
        call_command("runworker", *args)

    assert str(raised.value) == "Error: " + message


@pytest.mark.parametrize(
    ("option", "value", "parsed"),
    [
        ("--lease", "1", 1.0),
        ("--lease", "315532800", 315532800.0),
        ("--poll-interval", "0.05", 0.05),
        ("--concurrency", "1000", 1000),
        ("--batch-size", "2147483647", 2147483647),
    ],
)
def test_options_at_the_bounds_are_accepted(option, value, parsed):
    parser = runworker.Command().create_parser("manage.py", "runworker")
    options = vars(parser.parse_args([option, value]))

    assert parsed in options.values()


def test_metrics_address_without_metrics_port_is_a_command_error():
    """It used to be ignored: the worker started without serving any metrics."""
    with pytest.raises(CommandError) as raised:
        call_command("runworker", "--metrics-address", "1.2.3.4")

    assert str(raised.value) == (
        "--metrics-address needs --metrics-port: without a port no metrics are served."
    )


@pytest.mark.django_db  # runworker checks the migrations before it builds the worker
def test_no_metrics_options_still_builds_the_worker():
    with pytest.raises(NotRun):
        call_command("runworker")
