"""Audience sources and the freeze that snapshots one into the Recipient table.

A project registers a source in code::

    @audience("active-customers")
    def active_customers(params):
        return AudienceQuery(
            queryset=Customer.objects.filter(active=True, plan=params["plan"]),
            key="id", address="email", timezone="tz",
            context={"first_name": "first_name", "plan": "plan"},
        )

Each value names a field (or lookup, e.g. "profile__tz") of the queryset's
rows. The freeze copies them into Recipient with one INSERT ... SELECT in
the database, de-duplicated by recipient key, before anything is sent.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from django.db import connection
from django.db.models import QuerySet

from scheduler_app.exceptions import ValidationError

logger = logging.getLogger("scheduler_app.sends")


@dataclasses.dataclass(frozen=True, kw_only=True)
class AudienceQuery:
    """A queryset and which of its fields are the recipient's key, address, zone and context."""

    queryset: QuerySet
    key: str
    address: str
    timezone: str | None = None
    context: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def rows(self) -> Iterator[dict[str, Any]]:
        """Yield each audience row as {key, address, timezone, context} (for dry-runs)."""
        fields = self._fields()
        names = list(fields)
        for values in self.queryset.values_list(*fields.values()).iterator(chunk_size=2000):
            row = dict(zip(names, values, strict=True))
            yield {
                "key": str(row.pop("_key")),
                "address": row.pop("_address") or "",
                "timezone": row.pop("_timezone", None) or "",
                "context": row,
            }

    def _fields(self) -> dict[str, str]:
        fields = {"_key": self.key, "_address": self.address}
        if self.timezone:
            fields["_timezone"] = self.timezone
        for name, field in self.context.items():
            if name.startswith("_"):
                raise ValidationError("Context names must not start with '_': %r." % name)
            fields[name] = field
        return fields


AudienceSource = Callable[[Mapping[str, Any]], AudienceQuery]
_sources: dict[str, AudienceSource] = {}


def audience(name: str) -> Callable[[AudienceSource], AudienceSource]:
    """Register an audience source under ``name``."""

    def register(func: AudienceSource) -> AudienceSource:
        _sources[name] = func
        return func

    return register


def get_audience(name: str, params: Mapping[str, Any]) -> AudienceQuery:
    """Return the AudienceQuery of source ``name`` for ``params``; ValidationError if unknown."""
    try:
        source = _sources[name]
    except KeyError:
        raise ValidationError(
            "Unknown audience %r; registered: %s." % (name, ", ".join(sorted(_sources)) or "none")
        ) from None
    if not isinstance(params, Mapping):
        raise ValidationError(
            "Audience %r needs its parameters as a JSON object, not %s."
            % (name, type(params).__name__)
        )
    try:
        query = source(params)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValidationError("Audience %r rejected its parameters: %s" % (name, exc)) from exc
    if not isinstance(query, AudienceQuery):
        raise ValidationError("Audience %r must return an AudienceQuery." % name)
    return query


def registered_audiences() -> list[str]:
    return sorted(_sources)


def freeze(batch_id: int, query: AudienceQuery, *, next_attempt_at: Any) -> int:
    """Snapshot the audience into Recipient rows for ``batch_id``; return how many rows.

    One INSERT ... SELECT, de-duplicated by recipient key (the first row of a
    key wins; the database refuses a second). Rows without an address are
    copied too and skipped at send time, so the count says what the query saw.
    """
    from scheduler_app.db import backend

    fields = query._fields()
    values = query.queryset.order_by().values(**_aliases(fields))
    select_sql, params = values.query.sql_with_params()
    inserted = backend().freeze_recipients(
        batch_id=batch_id,
        select_sql=select_sql,
        select_params=params,
        context_names=[name for name in fields if not name.startswith("_")],
        has_timezone="_timezone" in fields,
        next_attempt_at=next_attempt_at,
    )
    logger.info(
        "audience frozen batch=%s recipients=%s vendor=%s", batch_id, inserted, connection.vendor
    )
    return inserted


def _aliases(fields: dict[str, str]) -> dict[str, Any]:
    """Return values() keyword arguments that select each field under a fixed alias."""
    from django.db.models import F

    return {"sa_" + name.lstrip("_"): F(field) for name, field in fields.items()}
