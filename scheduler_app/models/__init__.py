from scheduler_app.models.alerts import Alert, AlertMemory
from scheduler_app.models.controls import Control, ControlEvent
from scheduler_app.models.cursors import SyncCursor
from scheduler_app.models.jobs import Job, JobAttempt, LatenessOverview, OperationsOverview
from scheduler_app.models.retention import PruneRun
from scheduler_app.models.schedules import Schedule, ScheduleOccurrence
from scheduler_app.models.sends import LaneProgress, RateLimit, Recipient, SendBatch
from scheduler_app.models.suppressions import FeedbackEvent, Suppression, SuppressionRemoval
from scheduler_app.models.workers import WorkerHeartbeat

__all__ = [
    "Alert",
    "AlertMemory",
    "Control",
    "ControlEvent",
    "FeedbackEvent",
    "Job",
    "JobAttempt",
    "LaneProgress",
    "LatenessOverview",
    "OperationsOverview",
    "PruneRun",
    "RateLimit",
    "Recipient",
    "Schedule",
    "ScheduleOccurrence",
    "SendBatch",
    "Suppression",
    "SuppressionRemoval",
    "SyncCursor",
    "WorkerHeartbeat",
]
