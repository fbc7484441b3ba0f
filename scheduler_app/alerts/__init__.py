"""Alerts: rules that find breaches of targets, an evaluator, and notifiers.

The functions other code calls (imported lazily, so that low layers such as
sends can open an alert without importing the rules)::

    open_alert(kind=..., subject=..., summary=..., numbers=..., admin_url=...) -> (Alert, opened)
    resolve_alert(alert) -> bool
    acknowledge(alert_ids, by=user) -> int
    evaluate() -> Evaluation
"""

from __future__ import annotations

from typing import Any

__all__ = ["acknowledge", "evaluate", "open_alert", "resolve_alert"]


def __getattr__(name: str) -> Any:
    if name == "evaluate":
        from scheduler_app.alerts.evaluator import evaluate

        return evaluate
    if name in ("open_alert", "resolve_alert", "acknowledge"):
        from scheduler_app.alerts import store

        return getattr(store, name)
    raise AttributeError(name)
