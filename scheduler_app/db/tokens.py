"""The API's token look-up: a DRF token and its user in one statement compiled once.

``Token.objects.select_related("user").get(key=key)`` (what DRF's
TokenAuthentication runs) compiles the same SQL on every request, which costs
the undo endpoint more CPU than its own UPDATE. The statement here is that
query's SQL (an INNER JOIN on the user's primary key, all concrete columns of
both), built once per database; its rows go through the same converters the
ORM applies (field.from_db_value, the backend's), so a custom user model gets
the values the ORM would give it. It works on both vendors.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from django.db import connections, router


@dataclass(frozen=True)
class _Statement:
    sql: str
    token_names: list[str]
    user_names: list[str]
    converters: list[tuple[int, list[Any], Any]]


@functools.cache
def _statement(token_model: Any, alias: str) -> _Statement:
    connection = connections[alias]
    qn = connection.ops.quote_name
    user_model = token_model._meta.get_field("user").related_model
    token_fields = token_model._meta.concrete_fields
    user_fields = user_model._meta.concrete_fields
    token_table, user_table = token_model._meta.db_table, user_model._meta.db_table
    columns = [(token_table, f) for f in token_fields] + [(user_table, f) for f in user_fields]
    user_fk = token_model._meta.get_field("user")
    sql = "SELECT %s FROM %s INNER JOIN %s ON (%s.%s = %s.%s) WHERE %s.%s = %%s" % (
        ", ".join("%s.%s" % (qn(table), qn(f.column)) for table, f in columns),
        qn(token_table),
        qn(user_table),
        qn(token_table),
        qn(user_fk.column),
        qn(user_table),
        qn(user_fk.target_field.column),
        qn(token_table),
        qn(token_model._meta.get_field("key").column),
    )
    converters = []
    for position, (table, field) in enumerate(columns):
        col = field.get_col(table)
        found = connection.ops.get_db_converters(col) + col.get_db_converters(connection)
        if found:
            converters.append((position, found, col))
    return _Statement(
        sql=sql,
        token_names=[f.attname for f in token_fields],
        user_names=[f.attname for f in user_fields],
        converters=converters,
    )


def token_with_user(token_model: Any, key: str) -> Any | None:
    """Return the ``token_model`` instance with ``key``, its user loaded; None if there is none.

    The same row and values as ``token_model.objects.select_related("user").get(key=key)``.
    """
    alias = router.db_for_read(token_model)
    statement = _statement(token_model, alias)
    connection = connections[alias]
    with connection.cursor() as cursor:
        cursor.execute(statement.sql, [key])
        row = cursor.fetchone()
    if row is None:
        return None
    values = list(row)
    for position, converters, col in statement.converters:
        for converter in converters:
            values[position] = converter(values[position], col, connection)
    split = len(statement.token_names)
    user_model = token_model._meta.get_field("user").related_model
    user = user_model.from_db(alias, statement.user_names, values[split:])
    token = token_model.from_db(alias, statement.token_names, values[:split])
    token.user = user
    return token
