"""Representations of jobs, query filters and outcomes; all read-only except filters."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from scheduler_app.cancellation import CancelOutcome
from scheduler_app.models import Job


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


@extend_schema_serializer(component_name="SchedulerJobFilters")
class JobFilterSerializer(serializers.Serializer):
    """Query parameters of the job list; times are ISO 8601 (without an offset, UTC)."""

    status = serializers.MultipleChoiceField(
        choices=Job.Status.choices,
        required=False,
        help_text="Only jobs in this status; repeat it for several.",
    )
    task = serializers.CharField(
        max_length=200, required=False, help_text="Only jobs of this task (exact name)."
    )
    created_after = serializers.DateTimeField(
        required=False, help_text="Only jobs created at or after this time."
    )
    created_before = serializers.DateTimeField(
        required=False, help_text="Only jobs created before this time."
    )
    scheduled_after = serializers.DateTimeField(
        required=False, help_text="Only jobs scheduled for this time or later."
    )
    scheduled_before = serializers.DateTimeField(
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

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        for field in ("created", "scheduled"):
            after, before = attrs.get(field + "_after"), attrs.get(field + "_before")
            if after is not None and before is not None and before <= after:
                raise serializers.ValidationError(
                    {field + "_before": ["Must be later than %s_after." % field]}
                )
        return attrs

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
        return queryset.filter(
            **{key: value for key, value in lookups.items() if value is not None}
        )


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
