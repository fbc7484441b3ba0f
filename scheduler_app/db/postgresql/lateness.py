"""Lateness: percentiles of started_at - due_at per task, computed in the database."""

from __future__ import annotations

from django.db.models import QuerySet

from scheduler_app.database import connection

LATENESS = """
SELECT task_name, count(*),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY lateness),
       percentile_cont(0.95) WITHIN GROUP (ORDER BY lateness),
       max(lateness)
FROM (SELECT task_name, EXTRACT(EPOCH FROM started_at - due_at)::float8 AS lateness
      FROM ({attempts}) AS a) AS l
GROUP BY task_name
ORDER BY task_name
"""
"""Lateness percentiles per task over the attempts the inner query selects."""


def lateness_percentiles(attempts: QuerySet) -> list[tuple]:
    """Return (task, count, p50, p95, max) rows for a (task_name, due_at, started_at) queryset."""
    sql, params = attempts.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(LATENESS.format(attempts=sql), params)
        return cursor.fetchall()
