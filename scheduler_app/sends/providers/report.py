"""The report provider: records messages instead of sending them (dry-runs, previews)."""

from __future__ import annotations

from scheduler_app.sends.rendering import Message


class ReportProvider:
    """Keeps every message it is given; sends nothing."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, Message]] = []

    def send(self, message: Message, idempotency_key: str) -> str:
        self.messages.append((idempotency_key, message))
        return "report:%s" % idempotency_key
