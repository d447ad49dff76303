"""Stable links between pages: where one hold or booking is shown, for any page that mentions it (an
approval, the drawer's own "open in calendar")."""

from __future__ import annotations

from django.urls import reverse
from django.utils.http import urlencode

from bookings.models import Reservation
from bookings.selectors import hold_primary
from dashboard.timeline import WORKING_HOURS, calendar_zone
from workspaces.models import Workspace


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
    params = {"view": "day", "date": day.isoformat(), **({"hours": "24"} if outside else {})}
    base = reverse("dashboard:calendar", args=[workspace.slug, calendar.public_id])
    return f"{base}?{urlencode(params)}"


def hold_url(workspace: Workspace, hold_id: str) -> str | None:
    """reservation_url() of a hold (or the booking it became) by its id; None if there is none here."""
    reservation = hold_primary(workspace, hold_id)
    return None if reservation is None else reservation_url(workspace, reservation)
