"""Stable links between pages: where a calendar's day, or one hold or booking, is shown, for any page that
mentions it (an approval, an invite in an inbox, the guide, the drawer's own "open in calendar")."""

from __future__ import annotations

from datetime import date

from django.urls import reverse
from django.utils.http import urlencode

from bookings.models import Calendar, Reservation
from bookings.selectors import hold_primary
from dashboard.timeline import WORKING_HOURS, calendar_zone
from workspaces.models import Workspace


def approval_url(workspace: Workspace, approval_id: str) -> str:
    """An approval's own page (an unknown id answers its 404)."""
    return reverse("dashboard:approval", args=[workspace.slug, approval_id])


def reservation_url(workspace: Workspace, reservation: Reservation) -> str:
    """The stable link to one hold or booking from other pages (an approval): its calendar's day view on
    its day (all 24 hours when it falls outside working hours), its drawer open (app.js opens `#<id>`;
    a hold's id still finds the booking it became)."""
    return f"{reservation_day_url(workspace, reservation)}#{reservation.hold_id}"


def reservation_day_url(workspace: Workspace, reservation: Reservation) -> str:
    """Its calendar's day view on its day, all 24 hours when it falls outside working hours."""
    calendar = reservation.calendar
    zone = calendar_zone(calendar)
    starts, ends = reservation.start_time.astimezone(zone), reservation.end_time.astimezone(zone)
    day = starts.date()
    first, last = WORKING_HOURS
    outside = starts.hour < first or ends.date() > day or ends.hour * 60 + ends.minute > last * 60
    return calendar_day_url(workspace, calendar, day, full_day=outside)


def calendar_day_url(workspace: Workspace, calendar: Calendar, day: date, *, full_day: bool = False) -> str:
    """The calendar's day view of `day` (a date in its own zone), working hours or `full_day`."""
    params = {"view": "day", "date": day.isoformat(), **({"hours": "24"} if full_day else {})}
    base = reverse("dashboard:calendar", args=[workspace.slug, calendar.public_id])
    return f"{base}?{urlencode(params)}"


def guide_reservation_url(workspace: Workspace, reservation: Reservation) -> str:
    """The getting-started guide's link to the booking its script made: the calendar's page on the week of
    its (UTC) date, its drawer open (app.js reads the #id)."""
    page = reverse("dashboard:calendar", args=[workspace.slug, reservation.calendar.public_id])
    day = reservation.start_time.date().isoformat()
    return f"{page}?date={day}#{reservation.booking_id or reservation.hold_id}"


def hold_url(workspace: Workspace, hold_id: str) -> str | None:
    """reservation_url() of a hold (or the booking it became) by its id; None if there is none here."""
    reservation = hold_primary(workspace, hold_id)
    return None if reservation is None else reservation_url(workspace, reservation)
