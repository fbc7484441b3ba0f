"""Who may see and act on which objects.

Users see only what they own; active staff with the model's ``change``
permission see and act on everything. Objects outside what a user may see
do not exist for them (404, never 403), so nothing leaks about others'.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from scheduler_app.cancellation import ANY_OWNER
from scheduler_app.models import Job, SendBatch, Suppression

#: Staff with this permission may see and cancel every job.
CHANGE_ANY_JOB = "scheduler_app.change_job"
#: Staff with this permission may see and act on every send batch.
CHANGE_ANY_BATCH = "scheduler_app.change_sendbatch"
#: Needed (besides seeing the batch) to resume a paused send.
RESUME_BATCHES = "scheduler_app.resume_sendbatch"
#: Needed to send a message (POST messages/): without it the API is no open relay.
SEND_MESSAGES = "scheduler_app.send_message"
#: Staff with this permission see every suppression and add them in any scope (all mail too).
ADD_ANY_SUPPRESSION = "scheduler_app.add_suppression"


def acts_on_all(user: Any, permission: str) -> bool:
    """Return True if ``user`` is active staff holding ``permission``."""
    return bool(user.is_active and user.is_staff and user.has_perm(permission))


def visible_to(user: Any, queryset: QuerySet, *, permission: str) -> QuerySet:
    """Return what ``user`` may see of ``queryset``: their own, or all with ``permission``."""
    if user is None or not user.is_authenticated:
        return queryset.none()
    if acts_on_all(user, permission):
        return queryset
    return queryset.filter(owner=user)


def visible_jobs(user: Any) -> QuerySet[Job]:
    """Return the jobs ``user`` may see and cancel."""
    return visible_to(user, Job.objects.all(), permission=CHANGE_ANY_JOB)


def job_owner_scope(user: Any) -> Any:
    """Return whose jobs ``user`` may see and cancel, as cancellation.undo()'s ``owner``.

    ``user`` themself, or ANY_OWNER for active staff with scheduler_app.change_job:
    the rule of visible_jobs() for an authenticated user.
    """
    return ANY_OWNER if acts_on_all(user, CHANGE_ANY_JOB) else user


def visible_batches(user: Any) -> QuerySet[SendBatch]:
    """Return the send batches ``user`` may see and act on."""
    return visible_to(user, SendBatch.objects.all(), permission=CHANGE_ANY_BATCH)


def own_audiences(user: Any) -> set[str]:
    """Return the audiences of the send batches ``user`` owns: the scopes they manage."""
    if user is None or not user.is_authenticated:
        return set()
    return set(SendBatch.objects.filter(owner=user).values_list("audience", flat=True))


def visible_suppressions(user: Any) -> QuerySet[Suppression]:
    """Return the suppressions ``user`` may see: those in their own audiences, or all."""
    if acts_on_all(user, ADD_ANY_SUPPRESSION):
        return Suppression.objects.all()
    return Suppression.objects.filter(scope__in=own_audiences(user))
