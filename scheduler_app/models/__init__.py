from scheduler_app.models.jobs import Job, JobAttempt
from scheduler_app.models.schedules import Schedule, ScheduleOccurrence

__all__ = ["Job", "JobAttempt", "Schedule", "ScheduleOccurrence"]
