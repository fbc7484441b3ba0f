from scheduler_app.models.controls import Control, ControlEvent
from scheduler_app.models.jobs import Job, JobAttempt, LatenessOverview
from scheduler_app.models.schedules import Schedule, ScheduleOccurrence
from scheduler_app.models.sends import RateLimit, Recipient, SendBatch
from scheduler_app.models.suppressions import FeedbackEvent, Suppression, SuppressionRemoval

__all__ = [
    "Control",
    "ControlEvent",
    "FeedbackEvent",
    "Job",
    "JobAttempt",
    "LatenessOverview",
    "RateLimit",
    "Recipient",
    "Schedule",
    "ScheduleOccurrence",
    "SendBatch",
    "Suppression",
    "SuppressionRemoval",
]
