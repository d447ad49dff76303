"""Moving a booking from its drawer: the form (a day and two wall-clock times in the calendar's zone), the
spans offered instead of a taken one, and the booking's times over its life in words."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, tzinfo
from typing import Any

from django import forms

from audit.events import AuditEvent
from audit.models import AuditRecord, Outcome
from bookings.models import Reservation
from bookings.spans import Span
from dashboard.wording import local_range


def span_words(span: Span, zone: tzinfo) -> str:
    """ "Thu 3 Dec 15:00–15:30", or both days when it ends on another day, in `zone`."""
    return local_range(span.start, span.end, zone, year=False)


def wall_clock(day: date, at: time, zone: tzinfo) -> datetime | None:
    """`at` on `day` in `zone`, or None when that wall-clock time does not exist there (skipped by a DST
    change): a time that does not survive the round trip through UTC was never on the clock."""
    local = datetime.combine(day, at, tzinfo=zone)
    if local.astimezone(UTC).astimezone(zone).replace(tzinfo=None) != local.replace(tzinfo=None):
        return None
    return local


class MoveForm(forms.Form):
    """The new span, as the calendar's people read time: a day, a start and an end on that day."""

    date = forms.DateField(widget=forms.DateInput(attrs={"type": "date"}))
    start = forms.TimeField(widget=forms.TimeInput(attrs={"type": "time"}, format="%H:%M"))
    end = forms.TimeField(widget=forms.TimeInput(attrs={"type": "time"}, format="%H:%M"))

    def __init__(self, *args: Any, zone: tzinfo, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.zone = zone

    @classmethod
    def for_span(cls, span: Span, zone: tzinfo) -> MoveForm:
        start, end = span.start.astimezone(zone), span.end.astimezone(zone)
        return cls(initial={"date": start.date(), "start": start.time(), "end": end.time()}, zone=zone)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        day, start, end = data.get("date"), data.get("start"), data.get("end")
        if day is None or start is None or end is None:
            return data
        try:
            begins, ends = wall_clock(day, start, self.zone), wall_clock(day, end, self.zone)
        except OverflowError:  # a day in year 1 or 9999 whose time in UTC falls outside them
            raise forms.ValidationError("Pick a day a booking can be moved to.") from None
        if begins is None or ends is None:
            raise forms.ValidationError(
                f"That time does not exist in {self.zone} (the clocks change that day)."
            )
        # One day's start and end: a booking across midnight is moved by its agent through the API.
        if ends <= begins:
            raise forms.ValidationError("The end must be after the start, on the same day.")
        data["span"] = Span(begins.astimezone(UTC), ends.astimezone(UTC))
        return data


def offered_spans(alternatives: list[dict[str, str]], zone: tzinfo) -> list[dict[str, str]]:
    """The engine's alternatives to a taken span, as words and as the move form's fields."""
    offers = []
    for offer in alternatives:
        span = Span(datetime.fromisoformat(offer["start_time"]), datetime.fromisoformat(offer["end_time"]))
        start, end = span.start.astimezone(zone), span.end.astimezone(zone)
        offers.append(
            {
                "words": span_words(span, zone),
                "date": start.date().isoformat(),
                "start": f"{start:%H:%M}",
                "end": f"{end:%H:%M}",
            }
        )
    return offers


def span_history(
    reservation: Reservation, history: list[dict[str, Any]], zone: tzinfo
) -> list[dict[str, Any]]:
    """Where the booking has been, oldest first: the span it was booked for, then each move with who made
    it and when, from its `calendar.booking.moved` audit rows (`history`: the drawer's audit rows)."""
    if reservation.booking_id is None:
        return []
    moves = [
        row
        for row in history
        if row["record"].event_type == AuditEvent.BOOKING_MOVED and row["record"].outcome == Outcome.SUCCESS
    ]
    booked = next((row for row in history if row["record"].event_type == AuditEvent.COMMIT_CREATED), None)
    first = (
        _span_of(moves[0]["record"], "from") if moves else Span(reservation.start_time, reservation.end_time)
    )
    steps = [
        {
            "label": "Booked for",
            "words": span_words(first, zone),
            "who": booked["who"] if booked else "",
            "at": booked["record"].timestamp if booked else None,
        }
    ]
    steps += [
        {
            "label": "Moved to",
            "words": span_words(_span_of(row["record"], "to"), zone),
            "who": row["who"],
            "at": row["record"].timestamp,
        }
        for row in moves
    ]
    return steps


def _span_of(record: AuditRecord, side: str) -> Span:
    times = record.details[side]
    return Span(datetime.fromisoformat(times["start_time"]), datetime.fromisoformat(times["end_time"]))
