"""Cursors for sync jobs: read where the last successful run stopped, propose where this one did.

In a handler::

    @task(count_key="processed", zero_runs_alert=3)
    def sync_orders(ctx):
        cursor = ctx.cursor("orders")
        rows = fetch_orders(since=cursor.value)
        ...
        cursor.advance(rows[-1].updated_at.isoformat() if rows else cursor.value,
                       processed=len(rows))

The worker saves the proposed value only if the job succeeds, in the same
transaction that records its outcome: a failed (or retried, or lost) run
never moves the cursor. ``processed`` is added to the job's result under
the task's ``count_key`` (default "processed") unless the handler's result
already has it, so it feeds the suspicious-success rule.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from scheduler_app.bounds import LARGEST_INTEGER
from scheduler_app.hooks import Hook
from scheduler_app.payloads import check_payload

#: The result key the cursor's processed count goes under when the task declares none.
DEFAULT_COUNT_KEY = "processed"

#: ``saved_value(name)``: the value saved under a cursor's name, None if never saved
#: (``SyncCursor.objects.saved_value``: the registry, and so JobContext and this module,
#: loads before the models).
saved_value: Hook[[str], Any] = Hook("cursors.saved_value")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CursorProposal:
    """A cursor's new value, saved if the job that proposed it succeeds."""

    name: str
    value: Any
    processed: int | None


class Cursor:
    """A named cursor as a handler sees it: ``value`` (None at first) and ``advance()``."""

    def __init__(self, name: str, value: Any) -> None:
        self.name = name
        self.value = value
        self.proposal: CursorProposal | None = None

    def advance(self, value: Any, *, processed: int | None = None) -> None:
        """Propose ``value`` (JSON) as the next run's start; ``processed``: items this run handled.

        Raises ValueError (InvalidPayload for the value) for what the database could not
        store with the job's success: a value that is not JSON or holds a NUL or a lone
        surrogate, a count below 0 or past the column's range.
        """
        stored = check_payload(value, name="value of cursor %r" % self.name)
        if processed is not None and (
            isinstance(processed, bool)
            or not isinstance(processed, int)
            or not 0 <= processed <= LARGEST_INTEGER
        ):
            raise ValueError(
                "Cursor %r: processed must be an integer from 0 to %s."
                % (self.name, LARGEST_INTEGER)
            )
        self.proposal = CursorProposal(name=self.name, value=stored, processed=processed)


class Cursors:
    """The cursors one attempt's handler opened (``ctx.cursor(name)``)."""

    def __init__(self) -> None:
        self._opened: dict[str, Cursor] = {}

    def open(self, name: str) -> Cursor:
        """Return the cursor ``name`` with its saved value (None if never saved)."""
        if name not in self._opened:
            if not isinstance(name, str) or not 0 < len(name) <= 200:
                raise ValueError("A cursor name is a string of 1 to 200 characters.")
            self._opened[name] = Cursor(name, saved_value(name))
        return self._opened[name]

    def proposals(self) -> tuple[CursorProposal, ...]:
        """Return the proposals made by this attempt, in the order the cursors were opened."""
        return tuple(c.proposal for c in self._opened.values() if c.proposal is not None)


def with_processed_count(result: Any, proposals: Iterable[CursorProposal], key: str) -> Any:
    """Return ``result`` with the proposals' processed total under ``key`` (if it lacks one).

    A result that is neither None nor a dict is returned as it is.
    """
    counts = [p.processed for p in proposals if p.processed is not None]
    if not counts or not (result is None or isinstance(result, dict)) or key in (result or {}):
        return result
    return {**(result or {}), key: sum(counts)}
