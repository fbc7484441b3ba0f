"""Hook: a callable that a lower layer calls and a higher layer provides.

A module the models import, or one that loads before them (the registry, cursors,
DatabaseNow), cannot import what it must call back (scheduling, a model's queryset, db/'s
SQL) without an import cycle. It declares a Hook instead, and AppConfig.ready() connects
the higher layer's callable, once the models are loaded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, ParamSpec, TypeVar

from django.core.exceptions import ImproperlyConfigured

P = ParamSpec("P")
R = TypeVar("R")


class Hook(Generic[P, R]):
    """A named callable slot: ``connect()`` it once, then call it like the callable."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._target: Callable[P, R] | None = None

    def __repr__(self) -> str:
        return "<Hook %s -> %r>" % (self.name, self._target)

    def connect(self, target: Callable[P, R]) -> None:
        """Make calls go to ``target`` (a second connect replaces the first)."""
        self._target = target

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        if self._target is None:
            raise ImproperlyConfigured(
                "%s is not connected: scheduler_app's AppConfig.ready() connects it "
                "(is scheduler_app in INSTALLED_APPS?)." % self.name
            )
        return self._target(*args, **kwargs)
