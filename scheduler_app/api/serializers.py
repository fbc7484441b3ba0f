"""Representations of jobs, send batches, query filters, request bodies and outcomes."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import RegexValidator
from django.db.models import Q
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field, extend_schema_serializer
from rest_framework import serializers

from scheduler_app.cancellation import CancelOutcome
from scheduler_app.db import stored_time_zone
from scheduler_app.exceptions import ValidationError as SchedulerValidationError
from scheduler_app.feedback.suppressions import storable_address
from scheduler_app.models import Job, SendBatch, Suppression
from scheduler_app.sends.batches import batch_progress, check_pause_reason
from scheduler_app.sends.rendering import LINE_BREAKS


class TextPattern(RegexValidator):
    """A rule on text that the schema states as its ``pattern`` (drf-spectacular copies it).

    Every pattern here also excludes NUL, which DRF's CharField refuses with its
    own message ("Null characters are not allowed."); so that a NUL is reported
    once, this validator leaves text containing one to that check.
    """

    def __call__(self, value: Any) -> None:
        if "\x00" not in str(value):
            super().__call__(value)


#: Whitespace: each character str.strip() removes (pause_batch() strips the reason) or
#: ECMAScript's ``\s`` (the schema's patterns) matches; spelled out, as the two differ.
_SPACE = r"\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
#: Any text without NUL (PostgreSQL text cannot hold it).
NO_NUL = TextPattern(r"\A[^\x00]*\Z")
#: Not blank: at least one character other than whitespace; no NUL.
NOT_BLANK = TextPattern(
    r"\A[^\x00]*[^\x00%s][^\x00]*\Z" % _SPACE, message="This field may not be blank."
)
#: One line, not blank (a header); no NUL.
ONE_LINE = TextPattern(
    r"\A[^\x00%s]*[^\x00%s][^\x00%s]*\Z" % (LINE_BREAKS, _SPACE, LINE_BREAKS),
    message="Must be a single line, not blank.",
)


class StrictCharField(serializers.CharField):
    """A string field that refuses numbers (DRF's CharField turns them into strings).

    Text is kept as sent (no trimming: Python strips more characters as
    whitespace than JSON Schema's patterns know), and the schema states the
    refusal of NUL as a pattern unless the field has a pattern of its own.
    """

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)
        if not any(isinstance(v, RegexValidator) for v in self.validators):
            self.validators.append(NO_NUL)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictEmailField(serializers.EmailField):
    """An address field that refuses anything but a string."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """An integer field that refuses strings, floats and booleans, as the schema says."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


#: The earliest and latest times a filter stands for: a day inside the range, so that
#: every time zone can hold them (SQLite stores times in the database's TIME_ZONE).
EARLIEST = dt.datetime.min.replace(tzinfo=dt.UTC) + dt.timedelta(days=1)
LATEST = dt.datetime.max.replace(tzinfo=dt.UTC) - dt.timedelta(days=1)


class FilterDateTimeField(serializers.DateTimeField):
    """A time to filter by; any date-time the schema allows is one, and one without an
    offset is UTC (not the project's TIME_ZONE, as DRF would read it).

    A time UTC or the database's time zone cannot hold (year 1 at +05:00, year 9999 at
    -05:00) lies before or after every stored time, so it filters as EARLIEST or LATEST.
    """

    def enforce_timezone(self, value: dt.datetime) -> dt.datetime:
        if timezone.is_naive(value):
            value = value.replace(tzinfo=dt.UTC)
        try:
            value.astimezone(stored_time_zone())  # how SQLite stores it
            return value.astimezone(dt.UTC)
        except OverflowError:
            return EARLIEST if value.year == dt.MINYEAR else LATEST


#: The undo window of a message scheduled through the API, in seconds.
DEFAULT_UNDO_SECONDS = 10
MAX_UNDO_SECONDS = 3600


@extend_schema_serializer(component_name="SchedulerJob")
class JobSerializer(serializers.Serializer):
    """A job as its owner sees it (no errors or results: those stay with operators)."""

    # Declared, not a ModelSerializer: that one inspects the model on every
    # instantiation, which costs the undo endpoint about as much as a query.
    id = serializers.IntegerField(read_only=True)
    task = serializers.CharField(source="task_name", read_only=True)
    queue = serializers.CharField(read_only=True)
    status = serializers.ChoiceField(choices=Job.Status.choices, read_only=True)
    payload = serializers.JSONField(read_only=True)
    payload_version = serializers.IntegerField(read_only=True)
    priority = serializers.IntegerField(read_only=True, help_text="Lower runs first.")
    owner = serializers.IntegerField(source="owner_id", read_only=True, allow_null=True)
    created_at = serializers.DateTimeField(read_only=True)
    scheduled_for = serializers.DateTimeField(read_only=True)
    run_at = serializers.DateTimeField(read_only=True, help_text="When the next attempt may start.")
    undo_deadline = serializers.DateTimeField(
        read_only=True,
        allow_null=True,
        help_text="Undo (POST .../undo/) works only before this time; null: no undo window.",
    )
    started_at = serializers.DateTimeField(read_only=True, allow_null=True)
    finished_at = serializers.DateTimeField(read_only=True, allow_null=True)
    cancelled_at = serializers.DateTimeField(read_only=True, allow_null=True)
    attempts = serializers.IntegerField(read_only=True)
    max_attempts = serializers.IntegerField(read_only=True)


#: Renders jobs for job_data(): its fields are built once, on first use, and only read after.
_JOB_FIELDS = JobSerializer()


def job_data(job: Job) -> dict[str, Any]:
    """Return JobSerializer(job).data, without building the serializer's fields again.

    A serializer deep-copies its declared fields on each instantiation, which
    costs the cancel and undo endpoints more than the rendering itself.
    """
    return _JOB_FIELDS.to_representation(job)


@extend_schema_serializer(component_name="SchedulerJobFilters")
class JobFilterSerializer(serializers.Serializer):
    """Query parameters of the job list; times are ISO 8601 (without an offset, UTC)."""

    status = serializers.MultipleChoiceField(
        choices=Job.Status.choices,
        required=False,
        help_text="Only jobs in this status; repeat it for several.",
    )
    task = serializers.CharField(
        max_length=200,
        required=False,
        validators=[NO_NUL],
        help_text="Only jobs of this task (exact name).",
    )
    created_after = FilterDateTimeField(
        required=False, help_text="Only jobs created at or after this time."
    )
    created_before = FilterDateTimeField(
        required=False,
        help_text="Only jobs created before this time; a range holding no time lists nothing.",
    )
    scheduled_after = FilterDateTimeField(
        required=False, help_text="Only jobs scheduled for this time or later."
    )
    scheduled_before = FilterDateTimeField(
        required=False, help_text="Only jobs scheduled for before this time."
    )

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        # DRF skips an empty optional field ("?task="); a filter given empty is a mistake.
        getlist = getattr(data, "getlist", lambda name: [data[name]])
        blank = {
            name: ["This field may not be blank."]
            for name in self.fields
            if name in data and "" in getlist(name)
        }
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            raise serializers.ValidationError({**exc.detail, **blank}) from exc
        if blank:
            raise serializers.ValidationError(blank)
        return value

    def filter(self, queryset: Any) -> Any:
        """Return ``queryset`` narrowed by the validated filters."""
        data = self.validated_data
        lookups = {
            "status__in": sorted(data["status"]) if data.get("status") else None,
            "task_name": data.get("task"),
            "created_at__gte": data.get("created_after"),
            "created_at__lt": data.get("created_before"),
            "scheduled_for__gte": data.get("scheduled_after"),
            "scheduled_for__lt": data.get("scheduled_before"),
        }
        queryset = queryset.filter(
            **{key: value for key, value in lookups.items() if value is not None}
        )
        if data.get("task"):
            # Every status, said as the two halves two indexes on the task name serve
            # (scheduler_job_task_ends, scheduler_job_unique_key_unfinished), so that a
            # task with few jobs is not looked for among every job kept.
            queryset = queryset.filter(Q(status__in=Job.FINISHED) | Q(status__in=Job.UNFINISHED))
        return queryset


@extend_schema_serializer(component_name="SchedulerJobCancelResult")
class JobCancelResultSerializer(serializers.Serializer):
    """What a cancel or undo did: cancelled it now, or found it cancelled already."""

    outcome = serializers.ChoiceField(
        choices=[CancelOutcome.CANCELLED.value, CancelOutcome.ALREADY_CANCELLED.value]
    )
    job = JobSerializer()


@extend_schema_serializer(component_name="SchedulerErrorDetail")
class ErrorDetailSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="Stable, machine-readable error code.")
    message = serializers.CharField(help_text="What went wrong, for people.")
    fields = serializers.DictField(
        child=serializers.JSONField(),
        help_text="Each invalid field (body or query parameter) and its messages.",
    )


@extend_schema_serializer(component_name="SchedulerError")
class ErrorSerializer(serializers.Serializer):
    """The body of every error response."""

    error = ErrorDetailSerializer()


@extend_schema_serializer(component_name="SchedulerJobConflict")
class JobConflictSerializer(ErrorSerializer):
    """A 409: the job's state does not allow the action; ``job`` is its current state."""

    job = JobSerializer()


@extend_schema_serializer(component_name="SchedulerBatch")
class BatchSerializer(serializers.Serializer):
    """A send batch: its state and how far the send got."""

    id = serializers.IntegerField(read_only=True)
    name = serializers.CharField(read_only=True)
    status = serializers.ChoiceField(choices=SendBatch.Status.choices, read_only=True)
    status_reason = serializers.CharField(
        read_only=True, help_text="Why it was last paused or cancelled; empty otherwise."
    )
    owner = serializers.IntegerField(source="owner_id", read_only=True, allow_null=True)
    total = serializers.IntegerField(
        read_only=True, allow_null=True, help_text="Recipients; null until the audience is frozen."
    )
    sent = serializers.IntegerField(read_only=True)
    failed = serializers.IntegerField(read_only=True)
    skipped = serializers.IntegerField(read_only=True)
    remaining = serializers.IntegerField(
        read_only=True, allow_null=True, help_text="Neither sent, failed nor skipped yet."
    )
    percent = serializers.SerializerMethodField(help_text="Share done (sent, failed, skipped).")
    scheduled_at = serializers.DateTimeField(read_only=True, allow_null=True)
    undo_deadline = serializers.DateTimeField(
        read_only=True,
        allow_null=True,
        help_text="The end of the undo window; null: scheduled without one, or not yet.",
    )
    created_at = serializers.DateTimeField(read_only=True)
    started_at = serializers.DateTimeField(read_only=True, allow_null=True)
    finished_at = serializers.DateTimeField(read_only=True, allow_null=True)

    @extend_schema_field(OpenApiTypes.DOUBLE)
    def get_percent(self, batch: SendBatch) -> float:
        return batch_progress(batch)["percent"]


@extend_schema_serializer(component_name="SchedulerBatchPause")
class BatchPauseSerializer(serializers.Serializer):
    """The body of a pause: why (kept on the batch and in the audit log)."""

    reason = StrictCharField(
        min_length=1, validators=[NOT_BLANK], help_text="Why the send is paused."
    )

    def validate_reason(self, value: str) -> str:
        try:
            return check_pause_reason(value)
        except SchedulerValidationError as exc:
            raise serializers.ValidationError(exc.message) from exc


@extend_schema_serializer(component_name="SchedulerBatchResult")
class BatchResultSerializer(serializers.Serializer):
    """What a batch action did, and the batch afterwards."""

    outcome = serializers.ChoiceField(
        choices=["paused", "already_paused", "resumed", "cancelled", "already_cancelled"]
    )
    batch = BatchSerializer()


@extend_schema_serializer(component_name="SchedulerBatchConflict")
class BatchConflictSerializer(ErrorSerializer):
    """A 409: the batch's state does not allow the action; ``batch`` is its current state."""

    batch = BatchSerializer()


@extend_schema_serializer(component_name="SchedulerBatchUndoConflict")
class BatchUndoConflictSerializer(BatchConflictSerializer):
    """A 409 of undo: too late, and how far the send got."""

    sent = serializers.IntegerField(help_text="Recipients sent so far.")
    total = serializers.IntegerField(
        allow_null=True, help_text="Recipients in all; null until the audience is frozen."
    )


@extend_schema_serializer(component_name="SchedulerMessage")
class MessageSerializer(serializers.Serializer):
    """One email to schedule, sent after an undo window unless undone."""

    # No maxLength on the texts: JSON Schema counts UTF-16 units, DRF code points,
    # so a limit would disagree with the schema (the request size limit bounds them).
    to = StrictEmailField(max_length=320, help_text="The recipient's address.")
    subject = StrictCharField(min_length=1, validators=[ONE_LINE], help_text="One line.")
    text = StrictCharField(min_length=1, validators=[NOT_BLANK], help_text="The plain-text body.")
    html = StrictCharField(required=False, allow_blank=True, default="", help_text="Optional.")
    undo_seconds = StrictIntegerField(
        min_value=0,
        max_value=MAX_UNDO_SECONDS,
        default=DEFAULT_UNDO_SECONDS,
        help_text="How long POST jobs/{id}/undo/ can stop it, in seconds.",
    )


@extend_schema_serializer(component_name="SchedulerMessageScheduled")
class MessageScheduledSerializer(serializers.Serializer):
    """A scheduled message: its job, and until when it can be undone."""

    job = serializers.IntegerField(help_text="The job that sends it; see jobs/{id}/.")
    undo_deadline = serializers.DateTimeField(help_text="Undo works only before this time.")
    undo_url = serializers.URLField(help_text="POST here to undo it.")


@extend_schema_serializer(component_name="SchedulerSuppression")
class SuppressionSerializer(serializers.ModelSerializer):
    """An address that batches of its scope (or all mail) skip."""

    class Meta:
        model = Suppression
        fields = ["address", "scope", "reason", "source", "created_at"]
        read_only_fields = fields


class SuppressionCreateSerializer(serializers.Serializer):
    """Suppress an address in one of your audiences."""

    address = StrictEmailField(max_length=320, help_text="Stored lower-cased.")
    scope = StrictCharField(
        max_length=100,
        help_text="The audience name of one of your send batches (staff with "
        "scheduler_app.add_suppression may also give '' for all mail).",
        allow_blank=True,
        validators=[NO_NUL],
    )
    reason = serializers.ChoiceField(
        choices=Suppression.Reason.choices, default=Suppression.Reason.MANUAL
    )
    detail = StrictCharField(required=False, allow_blank=True, default="", validators=[NO_NUL])

    def validate_address(self, value: str) -> str:
        try:
            storable_address(value)  # DRF's email check does not know the list's limit
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.messages) from exc
        return value
