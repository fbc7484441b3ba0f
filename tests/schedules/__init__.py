"""Recurring schedules (DESIGN.md guarantee 10): DST, policies, exactly-once, validation."""
