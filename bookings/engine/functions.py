"""The SQL functions the engine's statements call, created (or replaced) from this code by every
`migrate` (post_migrate), so the database's copy is always the one this code describes.

`agentcal_span_empty_now()`: statements.span_empty() in a statement of its own. A statement's snapshot
is taken when it starts; a VOLATILE PL/pgSQL function's queries each take a new one (READ COMMITTED).
So a write that waited for a calendar's lock inside its statement calls it once the lock is granted,
and sees what committed during the wait, which its own snapshot cannot.
"""

from __future__ import annotations

import re
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections

from bookings.engine.statements import span_empty

SPAN_EMPTY_NOW = "agentcal_span_empty_now(%(calendar)s, %(earliest)s, %(start)s, %(end)s)"

# The fragment's named parameters become the function's arguments: %(start)s → p_start.
_EMPTY = re.sub(r"%\((\w+)\)s", r"p_\1", span_empty(calendar="%(calendar)s"))

CREATE_SPAN_EMPTY_NOW_SQL = f"""
CREATE OR REPLACE FUNCTION agentcal_span_empty_now(
    p_calendar bigint, p_earliest timestamptz, p_start timestamptz, p_end timestamptz
) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $body$
BEGIN
    RETURN {_EMPTY};
END
$body$
"""


def create_functions(using: str = DEFAULT_DB_ALIAS, **_: Any) -> None:
    """post_migrate's receiver: (re)create every function above on the migrated database."""
    with connections[using].cursor() as cursor:
        cursor.execute(CREATE_SPAN_EMPTY_NOW_SQL)
