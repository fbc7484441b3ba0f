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
the database, de-duplicated by recipient key, before anything is sent (or,
when the queryset reads another database than the scheduler's tables live on,
in chunks through this process: see freeze()). The
context is frozen as JSON, which has no dates or decimals: the freeze records
their types on the batch and thaw_context() gives them back, to the send and
to the dry-run alike.
"""

from __future__ import annotations

import dataclasses
import decimal
import functools
import json
import logging
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from django.conf import settings
from django.db.models import F, QuerySet, TextField
from django.db.models.functions import Cast, JSONObject
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime, parse_time

from scheduler_app import database
from scheduler_app.database import connection
from scheduler_app.db import backend, stored_time_zone
from scheduler_app.exceptions import ValidationError
from scheduler_app.models import Recipient
from scheduler_app.sends.rendering import RenderError

logger = logging.getLogger("scheduler_app.sends")


#: The recipient's own values: a context field of the same name would stand in for them.
RESERVED_CONTEXT_NAMES = frozenset({"key", "address", "timezone", "to"})


@dataclasses.dataclass(frozen=True, kw_only=True)
class AudienceQuery:
    """A queryset and which of its fields are the recipient's key, address, zone and context."""

    queryset: QuerySet
    key: str
    address: str
    timezone: str | None = None
    context: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in self.context:
            if name in RESERVED_CONTEXT_NAMES:
                raise ValidationError(
                    "Context name %r is reserved: key, address, timezone and to are the "
                    "recipient's own; give the context field another name, e.g. %r."
                    % (name, "customer_%s" % name)
                )
            if name.startswith("_"):
                raise ValidationError("Context names must not start with '_': %r." % name)

    @functools.cached_property
    def context_types(self) -> dict[str, str]:
        """Return {context name: type} for the context fields JSON would flatten to strings."""
        aliases = {"sa_ctx_%s" % i: name for i, name in enumerate(self.context)}
        resolved = self.queryset.values(
            **{alias: F(self.context[name]) for alias, name in aliases.items()}
        ).query.annotations
        types = {}
        for alias, name in aliases.items():
            field = resolved[alias].output_field
            kind = THAWED_TYPES.get(field.get_internal_type())
            if kind == "decimal" and field.decimal_places is not None:
                kind = "decimal:%s" % field.decimal_places
            if kind:
                types[name] = kind
        return types

    def frozen_rows(self) -> QuerySet:
        """Return the rows as the freeze copies them: sa_key, sa_address, sa_timezone and
        sa_context, the context as one JSON object built by the database."""
        selected: dict[str, Any] = {"sa_key": F(self.key), "sa_address": F(self.address)}
        if self.timezone:
            selected["sa_timezone"] = F(self.timezone)
        selected["sa_context"] = JSONObject(
            **{name: self._frozen_value(name, field) for name, field in self.context.items()}
        )
        return self.queryset.values(**selected)

    def rows(self) -> Iterator[dict[str, Any]]:
        """Yield each audience row as {key, address, timezone, context} (for dry-runs).

        The context goes through the same JSON and thaw as a frozen recipient's,
        so a dry-run renders exactly what the send will.
        """
        for row in self.frozen_rows().iterator(chunk_size=2000):
            yield {
                "key": str(row["sa_key"]),
                "address": row["sa_address"] or "",
                "timezone": row.get("sa_timezone") or "",
                "context": thaw_context(self.context_types, row["sa_context"]),
            }

    def _frozen_value(self, name: str, field: str) -> Any:
        # A decimal as JSON text, not a JSON number: "12.50" keeps its digits.
        if self.context_types.get(name, "").startswith("decimal"):
            return Cast(F(field), output_field=TextField())
        return F(field)


#: Model field types whose values JSON turns into strings (or numbers), and back.
THAWED_TYPES = {
    "DateField": "date",
    "DateTimeField": "datetime",
    "TimeField": "time",
    "DecimalField": "decimal",
    "UUIDField": "uuid",
    "BooleanField": "bool",
}


def thaw_context(types: Mapping[str, str] | None, raw: str | Mapping[str, Any] | None) -> dict:
    """Return a frozen context (JSON text or dict) with its values in their Python types.

    ``types`` is the batch's ``context_types`` (recorded at the freeze). Raise
    RenderError if a value does not parse as its type (hand-typed data).
    """
    context = json.loads(raw) if isinstance(raw, str) else dict(raw or {})
    for name, kind in (types or {}).items():
        value = context.get(name)
        if value is not None:
            context[name] = _thaw_value(name, kind, value)
    return context


def _thaw_value(name: str, kind: str, value: Any) -> Any:
    kind, _, places = kind.partition(":")
    try:
        if kind == "date":
            thawed = parse_date(value)
        elif kind == "datetime":
            thawed = parse_datetime(value)
            # SQLite stores datetimes without an offset, and the freeze copies them as stored.
            if thawed is not None and settings.USE_TZ and timezone.is_naive(thawed):
                thawed = thawed.replace(tzinfo=stored_time_zone())
        elif kind == "time":
            thawed = parse_time(value)
        elif kind == "decimal":
            thawed = decimal.Decimal(str(value))
            if places:
                thawed = thawed.quantize(decimal.Decimal(1).scaleb(-int(places)))
        elif kind == "uuid":
            thawed = uuid.UUID(str(value))
        elif kind == "bool":
            thawed = bool(value)
        else:
            return value
    except (TypeError, ValueError, ArithmeticError):
        thawed = None
    if thawed is None:
        raise RenderError("The recipient's %r is not a valid %s: %r." % (name, kind, value))
    return thawed


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
    except ValidationError as exc:  # e.g. a reserved context name
        raise ValidationError("Audience %r: %s" % (name, exc.message)) from exc
    except (KeyError, TypeError, ValueError) as exc:
        raise ValidationError("Audience %r rejected its parameters: %s" % (name, exc)) from exc
    if not isinstance(query, AudienceQuery):
        raise ValidationError("Audience %r must return an AudienceQuery." % name)
    return query


def registered_audiences() -> list[str]:
    return sorted(_sources)


def freeze(batch_id: int, query: AudienceQuery, *, next_attempt_at: Any) -> int:
    """Snapshot the audience into Recipient rows for ``batch_id``; return how many rows.

    One INSERT ... SELECT, de-duplicated by recipient key (one row of a key
    wins; the unique constraint refuses a second). A batch that already has
    recipients gets none. Rows without an address are copied too and skipped
    at send time, so the count says what the query saw.
    The caller records ``query.context_types`` on the batch: thaw_context() needs them.

    An audience on another database than the scheduler's (SCHEDULER_APP['DATABASE']) is
    read there and written here in chunks, in the caller's transaction: the same rows,
    through this process instead of inside the database.
    """
    if query.queryset.db != database.alias():
        inserted = _copy_across_databases(batch_id, query, next_attempt_at=next_attempt_at)
        logger.info(
            "audience frozen batch=%s recipients=%s vendor=%s from=%s",
            batch_id,
            inserted,
            connection.vendor,
            query.queryset.db,
        )
        return inserted
    select_sql, params = query.frozen_rows().order_by().query.sql_with_params()
    inserted = backend().freeze_recipients(
        batch_id=batch_id,
        select_sql=select_sql,
        select_params=params,
        has_timezone=bool(query.timezone),
        next_attempt_at=next_attempt_at,
    )
    logger.info(
        "audience frozen batch=%s recipients=%s vendor=%s", batch_id, inserted, connection.vendor
    )
    return inserted


#: Audience rows read and Recipient rows written at once by a freeze across databases.
COPY_CHUNK = 2000


def _copy_across_databases(batch_id: int, query: AudienceQuery, *, next_attempt_at: Any) -> int:
    """Copy the audience into Recipient rows as FREEZE_RECIPIENTS does (one row per key,
    sorted by key, nothing if the batch has recipients already), reading it on its own
    database and writing on the scheduler's; return how many rows."""
    if Recipient.objects.filter(batch_id=batch_id, is_seed=False).exists():
        return 0
    inserted = 0
    chunk: list[Recipient] = []
    previous = None
    for row in query.frozen_rows().order_by("sa_key").iterator(chunk_size=COPY_CHUNK):
        key = str(row["sa_key"])
        if key == previous:
            continue  # the same key again: the first row wins
        previous = key
        context = row["sa_context"]
        chunk.append(
            Recipient(
                batch_id=batch_id,
                recipient_key=key,
                address=row["sa_address"] or "",
                timezone=row.get("sa_timezone") or "",
                context=json.loads(context) if isinstance(context, str) else context,
                next_attempt_at=next_attempt_at,
            )
        )
        if len(chunk) == COPY_CHUNK:
            inserted += len(Recipient.objects.bulk_create(chunk))
            chunk = []
    return inserted + len(Recipient.objects.bulk_create(chunk))
