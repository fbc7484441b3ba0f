"""Recurring schedules: recurrence rules, policy decisions, the occurrence enqueuer."""
