"""The task registry: ``@task`` names a function and sets its defaults."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from typing import Any

from scheduler_app.conf import DEFAULTS, app_settings, is_integer
from scheduler_app.cursors import Cursor, Cursors
from scheduler_app.exceptions import (
    UnknownQueue,
    UnknownTask,
    UnsupportedPayloadVersion,
    ValidationError,
)
from scheduler_app.hooks import Hook
from scheduler_app.retry import DEFAULT_RETRY_POLICY, RetryPolicy
from scheduler_app.targets import NO_TARGETS, Targets, as_duration, build_targets


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobContext:
    """What a handler receives: the job and the facts it needs to be idempotent."""

    job_id: int
    task_name: str
    payload: Any
    payload_version: int
    attempt: int
    #: The occurrence time the job was scheduled for (not "now"); reruns see the same value.
    scheduled_for: dt.datetime
    #: Stable across reruns: the caller's unique key if it gave one, else the job id.
    idempotency_key: str
    #: Returns True once the worker is shutting down: a long handler should
    #: stop at a safe point (raise RetryLater to continue elsewhere).
    should_stop: Callable[[], bool] = lambda: False
    #: The cursors this attempt opened (see ``cursor()``); the worker saves their proposals.
    cursors: Cursors = dataclasses.field(default_factory=Cursors)

    def cursor(self, name: str) -> Cursor:
        """Return the named sync cursor; ``advance()`` it to move it if this job succeeds."""
        return self.cursors.open(name)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TaskSpec:
    """A registered task: its handler and the defaults its jobs are scheduled with."""

    name: str
    func: Callable[[JobContext], Any]
    queue: str = "default"
    priority: int = 0
    max_attempts: int = 3
    retry: RetryPolicy = DEFAULT_RETRY_POLICY
    timeout: dt.timedelta | None = None
    payload_versions: frozenset[int] = frozenset({1})
    #: Targets of every job of this task; a schedule's own targets win over these.
    targets: Targets = NO_TARGETS

    def __call__(self, ctx: JobContext) -> Any:
        return self.func(ctx)

    @property
    def current_payload_version(self) -> int:
        """Return the version new jobs are scheduled with: the highest accepted one."""
        return max(self.payload_versions)

    def check_payload_version(self, version: int) -> None:
        """Raise UnsupportedPayloadVersion unless this task accepts ``version``."""
        if version not in self.payload_versions:
            raise UnsupportedPayloadVersion(
                "Task %r does not accept payload version %s (accepted: %s)."
                % (self.name, version, ", ".join(map(str, sorted(self.payload_versions))))
            )

    def schedule(self, payload: Any = None, **kwargs: Any):  # type: ignore[no-untyped-def]
        """Shortcut for ``scheduler_app.schedule(this_task, payload, ...)``."""
        return schedule_job(self, payload, **kwargs)


#: ``schedule_job(task, payload, **options)``: scheduler_app.scheduling.schedule, which
#: needs the models (the registry loads before them).
schedule_job: Hook[..., Any] = Hook("registry.schedule_job")

_registry: dict[str, TaskSpec] = {}


def task(
    func: Callable[[JobContext], Any] | None = None,
    *,
    name: str | None = None,
    queue: str = "default",
    priority: int = 0,
    max_attempts: int | None = None,
    retry: RetryPolicy = DEFAULT_RETRY_POLICY,
    timeout: float | dt.timedelta | None = None,
    payload_versions: tuple[int, ...] | frozenset[int] = (1,),
    lateness_target: float | dt.timedelta | None = None,
    max_runtime: float | dt.timedelta | None = None,
    expected_every: float | dt.timedelta | None = None,
    count_key: str = "",
    zero_runs_alert: int | None = None,
) -> Any:
    """Register ``func`` as a task; use bare (``@task``) or with options.

    The name defaults to ``module.qualname``; the other options are the
    defaults every job of this task is scheduled with. ``priority``: lower
    runs first. The targets (durations in seconds or timedeltas; see
    scheduler_app.targets) drive the alerts. Returns the TaskSpec, which is
    still callable with a JobContext.
    """
    try:
        targets = build_targets(
            lateness_target=lateness_target,
            max_runtime=max_runtime,
            expected_every=expected_every,
            count_key=count_key,
            zero_runs_alert=zero_runs_alert,
        )
    except ValueError as exc:
        raise ValidationError("Task %r: %s." % (name or func, exc)) from exc

    def register(f: Callable[[JobContext], Any]) -> TaskSpec:
        spec = TaskSpec(
            name=name or "%s.%s" % (f.__module__, f.__qualname__),
            func=f,
            queue=queue,
            priority=priority,
            max_attempts=max_attempts if max_attempts is not None else default_max_attempts(),
            retry=retry,
            timeout=_as_timeout(timeout) if timeout is not None else default_timeout(),
            payload_versions=frozenset(payload_versions),
            targets=targets,
        )
        _validate(spec)
        existing = _registry.get(spec.name)
        if existing is not None and existing.func.__code__ is not f.__code__:
            raise ValidationError("Another function is already registered as task %r." % spec.name)
        _registry[spec.name] = spec
        return spec

    return register(func) if func is not None else register


def get_task(name: str) -> TaskSpec:
    """Return the TaskSpec registered as ``name``, or raise UnknownTask."""
    try:
        return _registry[name]
    except KeyError:
        raise UnknownTask("No task is registered as %r." % name) from None


def check_queue(name: str) -> None:
    """Raise UnknownQueue unless ``name`` is one of SCHEDULER_APP['QUEUES']."""
    if name not in app_settings.QUEUES:
        raise UnknownQueue(
            "Unknown queue %r; SCHEDULER_APP['QUEUES'] lists: %s."
            % (name, ", ".join(map(str, app_settings.QUEUES)))
        )


def default_max_attempts() -> int:
    """Return DEFAULT_MAX_ATTEMPTS, or the built-in default while it is invalid.

    Tasks are registered at import (the built-in ones too), before check E004 can
    report the setting: a crash there would hide the check.
    """
    value = app_settings.DEFAULT_MAX_ATTEMPTS
    return value if is_integer(value, 1) else DEFAULTS["DEFAULT_MAX_ATTEMPTS"]


def default_timeout() -> dt.timedelta | None:
    """Return DEFAULT_TIMEOUT as a timedelta (None: no limit), or the built-in default
    (None) while it is invalid, which check E008 reports (see default_max_attempts)."""
    try:
        return as_duration(app_settings.DEFAULT_TIMEOUT, "DEFAULT_TIMEOUT")
    except ValueError:
        return as_duration(DEFAULTS["DEFAULT_TIMEOUT"], "DEFAULT_TIMEOUT")


def all_tasks() -> dict[str, TaskSpec]:
    """Return a copy of the registry, by task name."""
    return dict(_registry)


def _as_timeout(value: float | dt.timedelta | None) -> dt.timedelta | None:
    if value is None or isinstance(value, dt.timedelta):
        return value
    return dt.timedelta(seconds=value)


def _validate(spec: TaskSpec) -> None:
    if spec.max_attempts < 1:
        raise ValidationError("Task %r: max_attempts must be at least 1." % spec.name)
    if not spec.payload_versions or any(
        not isinstance(v, int) or v < 1 for v in spec.payload_versions
    ):
        raise ValidationError("Task %r: payload_versions must be positive integers." % spec.name)
    if spec.timeout is not None and spec.timeout <= dt.timedelta(0):
        raise ValidationError("Task %r: timeout must be positive." % spec.name)
    if len(spec.name) > 200:
        raise ValidationError("Task name %r is longer than 200 characters." % spec.name)
