"""SchedulerBackend tests start real runworker subprocesses as tests/processes does."""

from tests.processes.conftest import start_worker  # noqa: F401  (a fixture)
