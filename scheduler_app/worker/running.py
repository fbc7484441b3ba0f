"""An attempt running here: what the loop, the abandoned-thread handling and the drain
know of a job between its claim and its outcome."""

from __future__ import annotations

import dataclasses
import datetime as dt

from scheduler_app.worker.execution import ClaimedJob


@dataclasses.dataclass(slots=True)
class Running:
    """An attempt of ``job`` handed to an executor thread here (or, for an executor that
    runs jobs elsewhere, leased from here)."""

    job: ClaimedJob
    deadline: float | None  # time.monotonic() after which the job has timed out
    timed_out: bool = False  # past its deadline; fails as a timeout whenever it returns
    finalised: bool = False  # handed back at shutdown: whatever it returns is discarded
    returned: bool = False  # the handler returned (set by its thread, under the worker's lock)
    abandoned: bool = False  # given up on: its outcome is recorded, its thread runs on
    held: ClaimedJob | None = None  # the claim whose row is held while the thread runs
    retry_at: dt.datetime | None = None  # when the held job may run once the thread ends
    # A newer claim of the same job (this attempt's lease was lost and the job
    # rescued): it starts once this attempt ends, so the two never run at once.
    next: ClaimedJob | None = None
