"""Cursor pagination by keyset, for the API's lists (`{"results": [...], "next_cursor": ...}`) and the
dashboard's tables alike.

A cursor is the public id of the last row returned, signed (django.core.signing) so it cannot be
forged into another position; internal integer keys never appear in it.
"""

from __future__ import annotations

from typing import Any

from django.core import signing
from django.db.models import QuerySet, Subquery

from agentcal.errors import InvalidRequest

_SALT = "agentcal.api.cursor"
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 200


def paginate(
    queryset: QuerySet[Any],
    *,
    cursor: str | None,
    limit: int,
    descending: bool,
    scope: str,
    key_field: str,
) -> tuple[list[Any], str | None]:
    """One page of `queryset` in primary-key order, and the cursor for the next page (or None).

    `key_field` is the row's public id (unique within `queryset`); `scope` binds a cursor to one
    listing and filter set.
    """
    if cursor:
        try:
            position = signing.loads(cursor, salt=_SALT)
        except signing.BadSignature:
            raise InvalidRequest("The cursor is not valid.", errors={"cursor": ["Invalid cursor."]}) from None
        if position.get("s") != scope:
            raise InvalidRequest(
                "The cursor belongs to a different listing or filter.",
                errors={"cursor": ["Cursor mismatch."]},
            )
        after_pk = Subquery(queryset.filter(**{key_field: position["after"]}).values("pk")[:1])
        queryset = queryset.filter(pk__lt=after_pk) if descending else queryset.filter(pk__gt=after_pk)
    rows = list(queryset.order_by("-pk" if descending else "pk")[: limit + 1])
    next_cursor = None
    if len(rows) > limit:
        rows = rows[:limit]
        next_cursor = signing.dumps({"after": getattr(rows[-1], key_field), "s": scope}, salt=_SALT)
    return rows, next_cursor
