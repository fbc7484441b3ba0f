from scheduler_app.models.jobs import Job, JobAttempt

__all__ = ["Job", "JobAttempt"]
