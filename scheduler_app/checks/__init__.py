"""System checks with stable ids (scheduler_app.E001 ...), one module per subject, as
django.core.checks keeps its own:

    settings        SCHEDULER_APP as a whole: known keys, queues, numbers (E001-E005, E007)
    tasks           @task's defaults and each task's queue (E004, E008, E010)
    schedules       declared schedules and their version (E006, E020)
    tasks_backend   Django's Tasks framework backends (E070-E072)
    celery          the Celery executor (E060-E064)
    database        the connection: no transaction pooling (E080)
    routing         the scheduler's database, its router, the outbox mode (E120-E123, W120)
    operability     alerts, heartbeats, stale sends, notifiers (E040-E044, W040)
    metrics         the Prometheus metrics (E050-E053, W050)
    retention       retention, the prune, relations to Job (E054-E056, E059)
    sends           Message-IDs, lanes, providers, checklist, dry-runs (E030, E085, E086,
                    E110-E115)
    feedback        unsubscribe links, bounces and complaints (W100, W101, E100-E105)
    urls            the pages the URLconf routes (W090, E106)

Each module registers its checks when imported; importing this package (AppConfig.ready()
does) imports them all.
"""

from scheduler_app.checks import (  # noqa: F401  (each registers its checks)
    celery,
    database,
    feedback,
    metrics,
    operability,
    retention,
    routing,
    schedules,
    sends,
    settings,
    tasks,
    tasks_backend,
    urls,
)
