"""The arguments several tools share, each with the description and bounds the model reads."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AwareDatetime, Field


def id_field(description: str) -> Any:
    return Field(description=description, min_length=1, max_length=32)


CalendarId = Annotated[str, id_field("A calendar id (cal_…), as list_calendars shows.")]
HoldId = Annotated[str, id_field("The hold's id (hld_…) from hold_slot.")]
HoldToken = Annotated[
    str, Field(description="The hold_token hold_slot returned.", min_length=1, max_length=100)
]
BookingId = Annotated[str, id_field("The booking's id (bk_…).")]
Time = Annotated[AwareDatetime, Field(description="RFC 3339 with an offset, e.g. 2026-10-05T14:00:00Z.")]
OptionalTime = Annotated[AwareDatetime | None, Field(description="RFC 3339 with an offset.")]
AlsoCalendars = Annotated[
    list[str] | None,
    Field(
        description="Other calendars the same span must hold on too (a meeting of several people): "
        "all of them or none.",
        max_length=20,
    ),
]
Priority = Annotated[
    int | None,
    Field(
        ge=0,
        le=1000,
        description="Omit to use your agent's own priority. Higher may take over lower-priority holds.",
    ),
]
Title = Annotated[
    str | None, Field(description="What the meeting is, shown in the calendar.", max_length=500)
]
Attendees = Annotated[list[str] | None, Field(description="Attendees' email addresses.", max_length=100)]
Limit = Annotated[int, Field(ge=1, le=100, description="At most this many results.")]
