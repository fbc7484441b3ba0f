"""A job's state as undo and an owner's read return it: its columns, and the Job built
from such a row (both vendors' UNDO and JOB_STATE statements)."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from scheduler_app.database import connection
from scheduler_app.models import Job

#: Job columns an owner never sees and an undo never needs: large, kept for operators.
_NOT_READ_BACK = frozenset({"result", "last_error"})


@functools.cache
def job_state_columns() -> tuple[str, ...]:
    """Return the Job columns undo_job() and read_job_state() read, in the model's order."""
    return tuple(f.attname for f in Job._meta.concrete_fields if f.attname not in _NOT_READ_BACK)


def job_from_state(row: Sequence[Any]) -> Job:
    """Return the Job of a row of job_state_columns() (payload as JSON text, aware datetimes).

    The columns left out (result, last_error) are deferred: reading one queries.
    """
    columns = job_state_columns()
    values = list(row)
    payload = columns.index("payload")
    values[payload] = json.loads(values[payload])
    return Job.from_db(connection.alias, columns, values)
