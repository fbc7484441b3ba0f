"""How a Worker runs: the options runworker builds from its arguments and settings."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import socket
import uuid


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkerOptions:
    """How a Worker runs; runworker builds one from its options and settings."""

    queues: tuple[str, ...]
    concurrency: int
    batch_size: int
    poll_interval: float
    lease_seconds: float
    shutdown_timeout: float
    database_unavailable_timeout: float
    summary_interval: float
    #: Seconds between looks for due schedule occurrences; None: this worker never does.
    scheduler_interval: float | None = None
    #: Seconds past its timeout after which a handler's thread is abandoned (see abandoned.py).
    timeout_grace: float = 10.0
    #: Seconds between heartbeat writes (the worker's row in the admin's live workers).
    heartbeat_interval: float = 10.0
    #: Seconds between offers to evaluate the alert rules; None: this worker never does.
    alert_interval: float | None = None
    worker_id: str = dataclasses.field(default_factory=lambda: default_worker_id())

    @property
    def lease(self) -> dt.timedelta:
        return dt.timedelta(seconds=self.lease_seconds)


def default_worker_id() -> str:
    """Return ``host:pid:random``: unique per process, readable in the admin."""
    return "%s:%s:%s" % (socket.gethostname(), os.getpid(), uuid.uuid4().hex[:6])
